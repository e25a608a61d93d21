package jobs

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"sync"

	"github.com/hashicorp/nomad/api"

	"github.com/nomad-statefulset/nomad-statefulset/jobs/specdigest"
)

// SpecDigest is a child job's spec reduced to one checksum per field; see
// specdigest.Digest, where the type lives so that the agent can compare
// digests without importing Nomad's types.
type SpecDigest = specdigest.Digest

// operandNotEqual is the operand of the constraints and affinities the
// daemon adds to a child without volumes to spread it (SpreadChild).
const operandNotEqual = "!="

// DigestChild computes the SpecDigest of a child job, as rendered or as
// read back from Nomad. Left out, besides what RevisionData leaves out:
// the count (`nomad job scale` is put back in place, not replaced), the
// statefulset meta (ParseChild and ChildMatches read it), and the group's
// "!=" constraints and affinities that spreading added (SpreadChild, as
// recorded in MetaSpreadAvoid) from where its set's other ordinals run, so
// its revision alone cannot say them.
func DigestChild(job *api.Job) (SpecDigest, error) {
	c, err := copyJob(job)
	if err != nil {
		return SpecDigest{}, fmt.Errorf("digest of child: %w", err)
	}
	return digestOwned(c)
}

// DigestChildJSON is DigestChild of a job's JSON (an event payload, as
// Nomad sent it). It decodes the whole job, which is most of its cost: a
// watcher calls it only when a child's spec changed (a new
// JobModifyIndex), and carries the digest over otherwise.
func DigestChildJSON(data []byte) (SpecDigest, error) {
	var j api.Job
	if err := json.Unmarshal(data, &j); err != nil {
		return SpecDigest{}, fmt.Errorf("digest of child: %w", err)
	}
	return digestOwned(&j)
}

// DecodeChild decodes a child job's JSON (an event payload) whole: its
// record, as DecodeChildRecord gives it, without a digest, and the job,
// which the record shares nothing with that a digest changes. It is for a
// child whose spec is new, whose digest must be computed anyway
// (DigestDecoded of job): one decoding instead of DecodeChildRecord's and
// DigestChildJSON's. The job is also what DecodePayload would give of a
// parent.
func DecodeChild(data []byte) (*ChildRecord, *api.Job, error) {
	var j api.Job
	if err := json.Unmarshal(data, &j); err != nil {
		return nil, nil, fmt.Errorf("decoding a child job: %w", err)
	}
	return newChildRecord(&j), &j, nil
}

// DigestDecoded is DigestChild of a job the caller gives up, as DecodeChild
// returns it: the job is changed, and so is not copied first.
func DigestDecoded(job *api.Job) (SpecDigest, error) { return digestOwned(job) }

// digestOwned is DigestChild of a job the caller owns (just decoded, or
// just rendered): it changes c, and so needs no copy.
func digestOwned(c *api.Job) (SpecDigest, error) {
	spread := spreadRulesOf(c.Meta)
	doc, err := revisionDocOf(c)
	if err != nil {
		return SpecDigest{}, fmt.Errorf("digest of child: %w", err)
	}
	return digestDoc(doc, spread)
}

// digestDoc digests a child's revision document, leaving out the group's
// "!=" rules that spread says spreading added. A field's checksum is of its
// JSON as json.Marshal writes it (compact, keys sorted). The document is
// encoded once and walked once, each field hashed where the walk finds it
// at one of three levels (the job, the group, each task), rather than each
// level encoded on its own and each field again, or each level split
// again from the bytes of the one above: the digest of every new child
// spec is on the watcher's path (BenchmarkWatcherEvents/job-spec).
func digestDoc(doc *revisionDoc, spread func(attr, value string) bool) (SpecDigest, error) {
	g := doc.Group
	dropSpreadRules(g, spread)
	w := digestWalkers.Get().(*digestWalker)
	defer w.release()
	w.reset()
	if err := w.enc.Encode(doc); err != nil {
		return SpecDigest{}, fmt.Errorf("digest of child: %w", err)
	}
	// Encode is json.Marshal's output and a newline.
	b := bytes.TrimSuffix(w.buf.Bytes(), []byte("\n"))
	if err := w.walk(b, g); err != nil {
		return SpecDigest{}, fmt.Errorf("digest of child: %w", err)
	}
	// The paths were written into one buffer, made a string once: the
	// fields' paths are its substrings, and New keeps none of them.
	paths := string(w.paths)
	for i, f := range w.spans {
		w.fields = append(w.fields, specdigest.Field{Path: paths[f.from:f.to], Sum: w.sums[i]})
	}
	return specdigest.New(w.fields), nil
}

// digestWalker is the state of one digestDoc, kept in a pool: the
// encoding's buffer and the fields found are as large for every child of a
// template, and would otherwise be allocated, and grown, for each.
type digestWalker struct {
	buf bytes.Buffer
	enc *json.Encoder
	// paths holds every field's path, one after another; spans are where
	// each is in it, and sums each field's checksum. prefix is the path
	// of the task being walked.
	paths  []byte
	prefix []byte
	spans  []span
	sums   []uint64
	fields []specdigest.Field
}

type span struct{ from, to int }

var digestWalkers = sync.Pool{New: func() any {
	w := &digestWalker{}
	w.enc = json.NewEncoder(&w.buf)
	return w
}}

// release puts w back in the pool, unless an unusually large document
// grew it: the pool is to save the common child's allocations, not to keep
// the largest one's.
func (w *digestWalker) release() {
	if w.buf.Cap() <= 1<<20 {
		digestWalkers.Put(w)
	}
}

func (w *digestWalker) reset() {
	w.buf.Reset()
	w.paths, w.spans, w.sums, w.fields = w.paths[:0], w.spans[:0], w.sums[:0], w.fields[:0]
}

// walk finds the fields of the encoded document b: each member of the
// job but its Group, each of the group's but its Tasks, and each of every
// task's but its Name, the task named as g names it.
func (w *digestWalker) walk(b []byte, g *api.TaskGroup) error {
	if len(b) == 0 || b[0] != '{' {
		return fmt.Errorf("not a JSON object: %.20q", b)
	}
	sawGroup := false
	_, err := eachMember(b, 0, func(k []byte, i int) (int, error) {
		if string(k) != "Group" {
			return w.field(b, i, nil, k)
		}
		sawGroup = true
		return w.group(b, i, g)
	})
	if err == nil && !sawGroup {
		err = errors.New("the document has no group")
	}
	return err
}

// group walks the group's object at b[i], and returns where it ends.
func (w *digestWalker) group(b []byte, i int, g *api.TaskGroup) (int, error) {
	if i >= len(b) || (b[i] != '{' && b[i] != '[') {
		return 0, fmt.Errorf("the group is not a JSON object: %.20q", b[i:])
	}
	return eachMember(b, i, func(k []byte, i int) (int, error) {
		if string(k) != "Tasks" {
			return w.field(b, i, []byte("Group."), k)
		}
		if b[i] != '{' && b[i] != '[' {
			// null: no tasks, as encoded.
			end, err := endOfValue(b, i)
			if err == nil && len(g.Tasks) != 0 {
				err = fmt.Errorf("%d tasks encoded as none", len(g.Tasks))
			}
			return end, err
		}
		n := 0
		end, err := eachMember(b, i, func(_ []byte, i int) (int, error) {
			k := n
			n++
			if k >= len(g.Tasks) {
				return 0, fmt.Errorf("%d tasks encoded as more", len(g.Tasks))
			}
			if g.Tasks[k] == nil {
				return endOfValue(b, i)
			}
			return w.task(b, i, g.Tasks[k], k)
		})
		if err == nil && n != len(g.Tasks) {
			err = fmt.Errorf("%d tasks encoded as %d", len(g.Tasks), n)
		}
		return end, err
	})
}

// task walks task k's object at b[i], and returns where it ends.
func (w *digestWalker) task(b []byte, i int, t *api.Task, k int) (int, error) {
	if b[i] != '{' && b[i] != '[' {
		return 0, fmt.Errorf("task %d is not a JSON object: %.20q", k, b[i:])
	}
	// The path's prefix, "Group.Tasks[name].", is written once a task and
	// copied for each of its fields.
	w.prefix = append(w.prefix[:0], "Group.Tasks["...)
	if t.Name != "" {
		w.prefix = append(w.prefix, t.Name...)
	} else {
		w.prefix = strconv.AppendInt(w.prefix, int64(k), 10)
	}
	w.prefix = append(w.prefix, "]."...)
	prefix := w.prefix
	return eachMember(b, i, func(key []byte, i int) (int, error) {
		if string(key) == "Name" {
			return endOfValue(b, i)
		}
		return w.field(b, i, prefix, key)
	})
}

// field hashes the value at b[i] as the field prefix+key, unless it is
// absent ("null", "{}", "[]": prune leaves an empty value), and returns
// where the value ends.
func (w *digestWalker) field(b []byte, i int, prefix, key []byte) (int, error) {
	end, err := endOfValue(b, i)
	if err != nil {
		return 0, err
	}
	switch string(b[i:end]) {
	case "null", "{}", "[]":
		return end, nil
	}
	from := len(w.paths)
	w.paths = append(append(w.paths, prefix...), key...)
	w.spans = append(w.spans, span{from, len(w.paths)})
	w.sums = append(w.sums, fnv64a(b[i:end]))
	return end, nil
}

// fnv64a is hash/fnv's New64a sum of b, without a hash.Hash to allocate.
func fnv64a(b []byte) uint64 {
	const (
		offset64 = 14695981039346656037
		prime64  = 1099511628211
	)
	h := uint64(offset64)
	for _, c := range b {
		h ^= uint64(c)
		h *= prime64
	}
	return h
}

// splitJSON calls fn with each member of a JSON object (its key and its
// value's bytes) or each element of an array (an empty key), in order.
// It is for json.Marshal's own output, which is valid and compact, and so
// only follows strings and nesting to find where each value ends: unlike
// json.Unmarshal into raw messages, it neither validates nor copies.
func splitJSON(b []byte, fn func(key string, value []byte)) error {
	if len(b) < 2 || (b[0] != '{' && b[0] != '[') {
		return fmt.Errorf("not a JSON object or array: %.20q", b)
	}
	_, err := eachMember(b, 0, func(k []byte, i int) (int, error) {
		end, err := endOfValue(b, i)
		if err != nil {
			return 0, err
		}
		fn(string(k), b[i:end])
		return end, nil
	})
	return err
}

// eachMember calls fn with each member of the JSON object that starts at
// b[i] (its key, unescaped, and where its value starts) or each element of
// the array there (a nil key), in order; fn returns where the value ends,
// found by walking into it or by endOfValue. eachMember returns where the
// object or array ends. It is for json.Marshal's own output (see
// splitJSON). A key is a subslice of b unless it holds an escape.
func eachMember(b []byte, i int, fn func(key []byte, value int) (int, error)) (int, error) {
	object := b[i] == '{'
	i++
	if i < len(b) && (b[i] == '}' || b[i] == ']') {
		return i + 1, nil
	}
	for i < len(b) {
		var key []byte
		if object {
			end, err := endOfValue(b, i)
			if err != nil {
				return 0, err
			}
			if name := b[i:end]; len(name) >= 2 && bytes.IndexByte(name, '\\') < 0 {
				key = name[1 : len(name)-1] // a Go field name: no escapes
			} else {
				var k string
				if err := json.Unmarshal(name, &k); err != nil {
					return 0, fmt.Errorf("member name at %d: %w", i, err)
				}
				key = []byte(k)
			}
			if end >= len(b) || b[end] != ':' {
				return 0, fmt.Errorf("no colon after member name at %d", i)
			}
			i = end + 1
		}
		if i >= len(b) {
			break
		}
		end, err := fn(key, i)
		if err != nil {
			return 0, err
		}
		i = end
		if i >= len(b) {
			break
		}
		switch b[i] {
		case ',':
			i++
		case '}', ']':
			return i + 1, nil
		default:
			return 0, fmt.Errorf("no comma after the value at %d", i)
		}
	}
	return 0, errors.New("JSON object or array does not end")
}

// endOfValue returns where the compact JSON value that starts at b[i]
// ends.
func endOfValue(b []byte, i int) (int, error) {
	depth, inString := 0, false
	for j := i; j < len(b); j++ {
		c := b[j]
		switch {
		case inString:
			switch c {
			case '\\':
				j++
			case '"':
				inString = false
				if depth == 0 {
					return j + 1, nil
				}
			}
		case c == '"':
			inString = true
		case c == '{' || c == '[':
			depth++
		case c == '}' || c == ']':
			depth--
			if depth == 0 {
				return j + 1, nil
			}
			if depth < 0 {
				return j, nil // the enclosing value's end: a scalar ends here
			}
		case depth == 0 && c == ',', depth == 0 && c == ':':
			return j, nil
		}
	}
	return 0, fmt.Errorf("JSON value at %d does not end", i)
}

// dropSpreadRules removes the group's "!=" constraints and affinities
// that spread says spreading added.
func dropSpreadRules(g *api.TaskGroup, spread func(attr, value string) bool) {
	g.Constraints = without(g.Constraints, func(c *api.Constraint) bool {
		return c != nil && c.Operand == operandNotEqual && spread(c.LTarget, c.RTarget)
	})
	g.Affinities = without(g.Affinities, func(a *api.Affinity) bool {
		return a != nil && a.Operand == operandNotEqual && spread(a.LTarget, a.RTarget)
	})
}

func without[T any](in []T, drop func(T) bool) []T {
	var out []T
	for _, v := range in {
		if !drop(v) {
			out = append(out, v)
		}
	}
	return out
}
