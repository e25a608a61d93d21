package jobs

import (
	"encoding/json"
	"fmt"
	"hash/fnv"
	"sync"
	"sync/atomic"

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
	var fields []specdigest.Field
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
		fields = append(fields, specdigest.Field{Path: internPath(path), Sum: h.Sum64()})
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
	return specdigest.New(fields), nil
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
