package nomad

import (
	"fmt"
	"maps"
	"slices"
	"strings"

	"github.com/hashicorp/nomad/api"

	"github.com/nomad-statefulset/nomad-statefulset/backend"
)

// evalPayload is what the watcher reads of an evaluation event: whether the
// scheduler could place the job's allocations, and for which version.
type evalPayload struct {
	Namespace, JobID string
	Status           string
	JobModifyIndex   uint64
	ModifyIndex      uint64
	FailedTGAllocs   map[string]*api.AllocationMetric
}

// placement is the cache's record of a child's last placement failure.
type placement struct {
	// failure is Nomad's reason, as PlacementFailure words it.
	failure string
	// evalIndex is the evaluation's ModifyIndex, and jobModifyIndex the
	// child version it evaluated: an allocation created after the
	// evaluation, or a newer version of the child, makes it stale.
	evalIndex, jobModifyIndex uint64
}

// notePlacement records what evaluation e says of a child's placement: a
// failure, or (a completed evaluation with none) that it was placed. A
// blocked or pending evaluation says nothing new: the failure that blocked
// it was reported by the evaluation before it.
func (c *Cache) notePlacement(e *evalPayload, index uint64) (backend.SetKey, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.advanceLocked(index)
	k, ok := c.owner[e.Namespace+"/"+e.JobID]
	if !ok {
		return backend.SetKey{}, false
	}
	ch := c.children[k][e.JobID]
	if ch == nil || ch.job == nil || e.JobModifyIndex < ch.job.JobModifyIndex() || e.ModifyIndex <= ch.evalIndex {
		return k, false
	}
	failure := PlacementFailure(e.FailedTGAllocs)
	if failure == "" && e.Status != api.EvalStatusComplete {
		return k, false
	}
	ch.evalIndex = e.ModifyIndex
	was := ch.placement
	ch.placement = nil
	if failure != "" {
		ch.placement = &placement{failure: failure, evalIndex: e.ModifyIndex, jobModifyIndex: e.JobModifyIndex}
	}
	return k, was != nil || ch.placement != nil
}

// blockedReason is the child's placement failure while it still holds: no
// allocation was created after it, and the child was not registered again.
func (ch *child) blockedReason() string {
	p := ch.placement
	if p == nil || ch.job == nil || ch.job.JobModifyIndex() > p.jobModifyIndex {
		return ""
	}
	for _, a := range ch.allocs {
		if a.createIndex > p.evalIndex {
			return ""
		}
	}
	return p.failure
}

// PlacementFailure words Nomad's placement metrics the way `nomad job
// status` does, one group at a time: how many nodes were filtered out and
// why, and how many ran out of which resource. "" when no group failed.
func PlacementFailure(failed map[string]*api.AllocationMetric) string {
	var groups []string
	for _, g := range slices.Sorted(maps.Keys(failed)) {
		m := failed[g]
		if m == nil {
			continue
		}
		var parts []string
		if m.NodesEvaluated == 0 && m.NodesInPool == 0 {
			parts = append(parts, "no nodes were eligible for evaluation")
		}
		if m.NodesFiltered > 0 {
			parts = append(parts, fmt.Sprintf("%d of %d nodes filtered%s", m.NodesFiltered, m.NodesEvaluated, counts(m.ClassFiltered, m.ConstraintFiltered)))
		}
		if m.NodesExhausted > 0 {
			parts = append(parts, fmt.Sprintf("%d nodes exhausted%s", m.NodesExhausted, counts(m.ClassExhausted, m.DimensionExhausted)))
		}
		for _, q := range m.QuotaExhausted {
			parts = append(parts, "quota exhausted: "+q)
		}
		if len(parts) == 0 {
			parts = append(parts, fmt.Sprintf("%d nodes evaluated, none fit", m.NodesEvaluated))
		}
		groups = append(groups, fmt.Sprintf("group %q: %s", g, strings.Join(parts, "; ")))
	}
	if len(groups) == 0 {
		return ""
	}
	return "Nomad could not place it: " + strings.Join(groups, "; ")
}

// counts words reason→count maps as " (reason: n, ...)", reasons sorted.
func counts(ms ...map[string]int) string {
	all := map[string]int{}
	for _, m := range ms {
		for k, v := range m {
			all[k] += v
		}
	}
	if len(all) == 0 {
		return ""
	}
	var parts []string
	for _, k := range slices.Sorted(maps.Keys(all)) {
		parts = append(parts, fmt.Sprintf("%s: %d", k, all[k]))
	}
	return " (" + strings.Join(parts, ", ") + ")"
}
