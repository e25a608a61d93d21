package jobs

import (
	"bytes"
	"encoding/json"
	"fmt"
	"hash/fnv"

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
// encoded once and split into fields at three levels (the job, the group,
// each task), rather than each level encoded on its own and each field
// again: the digest of every new child spec is on the watcher's path.
func digestDoc(doc *revisionDoc, spread func(attr, value string) bool) (SpecDigest, error) {
	g := doc.Group
	dropSpreadRules(g, spread)
	b, err := json.Marshal(doc)
	if err != nil {
		return SpecDigest{}, fmt.Errorf("digest of child: %w", err)
	}
	// About forty fields a child: sized once, not grown by doubling.
	fields := make([]specdigest.Field, 0, 64)
	add := func(path string, raw []byte) {
		switch string(raw) {
		case "null", "{}", "[]":
			return // absent, as prune leaves an empty value
		}
		h := fnv.New64a()
		h.Write(raw)
		fields = append(fields, specdigest.Field{Path: path, Sum: h.Sum64()})
	}
	var group, tasks []byte
	err = splitJSON(b, func(k string, v []byte) {
		if k == "Group" {
			group = v
			return
		}
		add(k, v)
	})
	if err == nil {
		err = splitJSON(group, func(k string, v []byte) {
			if k == "Tasks" {
				tasks = v
				return
			}
			add("Group."+k, v)
		})
	}
	var taskDocs [][]byte
	if err == nil && tasks != nil && string(tasks) != "null" {
		err = splitJSON(tasks, func(_ string, task []byte) { taskDocs = append(taskDocs, task) })
	}
	if err == nil && len(taskDocs) != len(g.Tasks) {
		err = fmt.Errorf("%d tasks encoded as %d", len(g.Tasks), len(taskDocs))
	}
	for i := 0; err == nil && i < len(taskDocs); i++ {
		if g.Tasks[i] == nil {
			continue
		}
		name := g.Tasks[i].Name
		if name == "" {
			name = fmt.Sprint(i)
		}
		err = splitJSON(taskDocs[i], func(k string, v []byte) {
			if k != "Name" {
				add("Group.Tasks["+name+"]."+k, v)
			}
		})
	}
	if err != nil {
		return SpecDigest{}, fmt.Errorf("digest of child: %w", err)
	}
	return specdigest.New(fields), nil
}

// splitJSON calls fn with each member of a JSON object (its key and its
// value's bytes) or each element of an array (an empty key), in order.
// It is for json.Marshal's own output, which is valid and compact, and so
// only follows strings and nesting to find where each value ends: unlike
// json.Unmarshal into raw messages, it neither validates nor copies, and
// a digest splits three levels of one document.
func splitJSON(b []byte, fn func(key string, value []byte)) error {
	if len(b) < 2 || (b[0] != '{' && b[0] != '[') {
		return fmt.Errorf("not a JSON object or array: %.20q", b)
	}
	object := b[0] == '{'
	i := 1
	for i < len(b)-1 {
		var key string
		if object {
			end, err := endOfValue(b, i)
			if err != nil {
				return err
			}
			if name := b[i:end]; len(name) >= 2 && bytes.IndexByte(name, '\\') < 0 {
				key = string(name[1 : len(name)-1]) // a Go field name: no escapes
			} else if err := json.Unmarshal(name, &key); err != nil {
				return fmt.Errorf("member name at %d: %w", i, err)
			}
			if end >= len(b) || b[end] != ':' {
				return fmt.Errorf("no colon after member name at %d", i)
			}
			i = end + 1
		}
		end, err := endOfValue(b, i)
		if err != nil {
			return err
		}
		fn(key, b[i:end])
		i = end
		if i < len(b)-1 {
			if b[i] != ',' {
				return fmt.Errorf("no comma after the value at %d", i)
			}
			i++
		}
	}
	return nil
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
