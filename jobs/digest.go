package jobs

import (
	"encoding/json"
	"fmt"
	"hash/fnv"
	"sort"
	"sync"
	"sync/atomic"

	"github.com/hashicorp/nomad/api"
)

// SpecDigest is a child job's spec reduced to one checksum per field, in
// the normal form of RevisionData: Nomad's defaults filled in and what the
// server adds on its own (implicit constraints, the default workload
// identity) left out, so that a child as rendered and the same child read
// back from Nomad give equal digests. Comparing the digest of the child
// Nomad has with that of its revision rendered for its ordinal finds any
// hand edit (`nomad job run` of a changed child, `nomad job revert`), and
// names the fields it changed, while the cache keeps a few hundred bytes
// per child rather than the job. The zero SpecDigest is unknown: it matches
// everything, so a child whose spec could not be read is never replaced for
// it.
type SpecDigest struct {
	fields []fieldSum
	// all sums every field's path and checksum: equal digests have equal
	// sums, so a steady comparison is one test.
	all uint64
}

// fieldSum is the checksum of one field of the normal form. path is
// interned: children share a handful of paths.
type fieldSum struct {
	path string
	sum  uint64
}

// Known reports whether the digest was computed.
func (d SpecDigest) Known() bool { return d.fields != nil }

// Equal reports whether d and other are known and equal.
func (d SpecDigest) Equal(other SpecDigest) bool {
	if !d.Known() || !other.Known() || d.all != other.all || len(d.fields) != len(other.fields) {
		return false
	}
	for i := range d.fields {
		if d.fields[i] != other.fields[i] {
			return false
		}
	}
	return true
}

// Changed returns the fields whose values differ between d and other,
// sorted ("Group.Tasks[app].Env", "Meta", …); nil when either is unknown
// or they are equal.
func (d SpecDigest) Changed(other SpecDigest) []string {
	if !d.Known() || !other.Known() {
		return nil
	}
	var out []string
	i, j := 0, 0
	for i < len(d.fields) || j < len(other.fields) {
		switch {
		case j == len(other.fields) || (i < len(d.fields) && d.fields[i].path < other.fields[j].path):
			out = append(out, d.fields[i].path)
			i++
		case i == len(d.fields) || other.fields[j].path < d.fields[i].path:
			out = append(out, other.fields[j].path)
			j++
		default:
			if d.fields[i].sum != other.fields[j].sum {
				out = append(out, d.fields[i].path)
			}
			i++
			j++
		}
	}
	return out
}

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
	doc, err := newRevisionDoc(job)
	if err != nil {
		return SpecDigest{}, fmt.Errorf("digest of child: %w", err)
	}
	return digestDoc(doc, spreadRulesOf(job.Meta))
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
	doc, err := revisionDocOf(&j)
	if err != nil {
		return SpecDigest{}, fmt.Errorf("digest of child: %w", err)
	}
	return digestDoc(doc, spreadRulesOf(j.Meta))
}

// digestDoc digests a child's revision document, leaving out the group's
// "!=" rules that spread says spreading added.
func digestDoc(doc *revisionDoc, spread func(attr, value string) bool) (SpecDigest, error) {
	g := doc.Group
	g.Constraints = without(g.Constraints, func(c *api.Constraint) bool {
		return c != nil && c.Operand == operandNotEqual && spread(c.LTarget, c.RTarget)
	})
	g.Affinities = without(g.Affinities, func(a *api.Affinity) bool {
		return a != nil && a.Operand == operandNotEqual && spread(a.LTarget, a.RTarget)
	})
	var d SpecDigest
	add := func(path string, v any) error {
		b, err := json.Marshal(v)
		if err != nil {
			return fmt.Errorf("digest of child: %s: %w", path, err)
		}
		if string(b) == "null" || string(b) == "{}" || string(b) == "[]" {
			return nil // absent, as prune leaves an empty value
		}
		h := fnv.New64a()
		h.Write(b)
		d.fields = append(d.fields, fieldSum{path: internPath(path), sum: h.Sum64()})
		return nil
	}
	var top map[string]json.RawMessage
	if err := remarshal(doc, &top); err != nil {
		return SpecDigest{}, err
	}
	delete(top, "Group")
	var group map[string]json.RawMessage
	if err := remarshal(g, &group); err != nil {
		return SpecDigest{}, err
	}
	delete(group, "Tasks")
	for k, v := range top {
		if err := add(k, v); err != nil {
			return SpecDigest{}, err
		}
	}
	for k, v := range group {
		if err := add("Group."+k, v); err != nil {
			return SpecDigest{}, err
		}
	}
	for i, t := range g.Tasks {
		if t == nil {
			continue
		}
		var task map[string]json.RawMessage
		if err := remarshal(t, &task); err != nil {
			return SpecDigest{}, err
		}
		delete(task, "Name")
		name := t.Name
		if name == "" {
			name = fmt.Sprint(i)
		}
		for k, v := range task {
			if err := add("Group.Tasks["+name+"]."+k, v); err != nil {
				return SpecDigest{}, err
			}
		}
	}
	if d.fields == nil {
		d.fields = []fieldSum{}
	}
	sort.Slice(d.fields, func(i, j int) bool { return d.fields[i].path < d.fields[j].path })
	h := fnv.New64a()
	for _, f := range d.fields {
		h.Write([]byte(f.path))
		var b [8]byte
		for i := range b {
			b[i] = byte(f.sum >> (8 * i))
		}
		h.Write(b[:])
	}
	d.all = h.Sum64()
	return d, nil
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

func remarshal(in, out any) error {
	b, err := json.Marshal(in)
	if err != nil {
		return fmt.Errorf("digest of child: %w", err)
	}
	if err := json.Unmarshal(b, out); err != nil {
		return fmt.Errorf("digest of child: %w", err)
	}
	return nil
}

// paths interns field paths: every child of every set shares them. Paths
// hold user-chosen names (tasks, services), so the table is bounded: past
// maxInternedPaths a path is kept as it is, which costs memory per child
// rather than growing a table every set shares for the daemon's lifetime.
var (
	paths     sync.Map
	pathCount atomic.Int64
)

// maxInternedPaths bounds the paths table. A set's template has tens of
// paths, so thousands leave room for many templates.
const maxInternedPaths = 4096

func internPath(p string) string {
	if v, ok := paths.Load(p); ok {
		return v.(string)
	}
	if pathCount.Load() >= maxInternedPaths {
		return p
	}
	v, loaded := paths.LoadOrStore(p, p)
	if !loaded {
		pathCount.Add(1)
	}
	return v.(string)
}
