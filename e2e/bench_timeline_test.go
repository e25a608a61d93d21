package e2e

import (
	"fmt"
	"sort"
	"strings"
	"testing"
	"time"

	nomadapi "github.com/hashicorp/nomad/api"
)

// timelineStage is one step of a pod's way through a phase, as Nomad
// recorded it: the time each job took from the step's start to its end.
type timelineStage struct {
	name  string
	times []time.Duration
}

// phaseTimeline reads from Nomad, after a phase that started at start with
// Nomad at index, where the time of each job in ids went: when its first
// evaluation was made (the daemon's stop, or the register), how long Nomad
// took to finish the allocation it replaces, how long after that the
// daemon registered the new child (a set's rollout only), how long its
// registration's evaluation waited and ran in Nomad's scheduler (made →
// done), and how long Nomad then took to create, start and judge the new
// allocation healthy. It also counts the phase's evaluations by trigger. Two list calls, made
// after the phase, so in no figure.
func phaseTimeline(b *testing.B, c *nomadapi.Client, ids map[string]bool, index uint64, start time.Time) string {
	b.Helper()
	evals, _, err := c.Evaluations().List(nil)
	if err != nil {
		b.Fatalf("listing evaluations: %v", err)
	}
	allocs, _, err := c.Allocations().List(nil)
	if err != nil {
		b.Fatalf("listing allocations: %v", err)
	}
	type jobTrace struct {
		stopEval, registerEval *nomadapi.Evaluation
		old, fresh             *nomadapi.AllocationListStub
	}
	traces := map[string]*jobTrace{}
	trace := func(id string) *jobTrace {
		if traces[id] == nil {
			traces[id] = &jobTrace{}
		}
		return traces[id]
	}
	triggers := map[string]uint64{}
	sort.Slice(evals, func(i, j int) bool { return evals[i].CreateIndex < evals[j].CreateIndex })
	for _, e := range evals {
		if !ids[e.JobID] || e.CreateIndex <= index {
			continue
		}
		triggers[e.TriggeredBy]++
		t := trace(e.JobID)
		switch {
		case e.TriggeredBy == "job-deregister" && t.stopEval == nil:
			t.stopEval = e
		case e.TriggeredBy == "job-register" && t.registerEval == nil:
			t.registerEval = e
		}
	}
	for _, a := range allocs {
		if !ids[a.JobID] {
			continue
		}
		t := trace(a.JobID)
		if a.CreateIndex > index {
			if t.fresh == nil || a.CreateIndex > t.fresh.CreateIndex {
				t.fresh = a
			}
		} else if t.old == nil || a.CreateIndex > t.old.CreateIndex {
			t.old = a
		}
	}
	stages := []*timelineStage{
		{name: "phase start → first evaluation"},
		{name: "stop evaluation made → done"},
		{name: "first evaluation → old allocation finished"},
		{name: "old allocation finished → new registration"},
		{name: "registration evaluation made → done"},
		{name: "registration → allocation created"},
		{name: "created → started"},
		{name: "started → healthy"},
	}
	add := func(s *timelineStage, from, to time.Time) {
		if !from.IsZero() && !to.IsZero() {
			s.times = append(s.times, to.Sub(from))
		}
	}
	for _, t := range traces {
		first := t.registerEval
		if t.stopEval != nil {
			first = t.stopEval
			add(stages[1], nanos(t.stopEval.CreateTime), nanos(t.stopEval.ModifyTime))
		}
		var firstAt, finished, registered, created, started, healthy time.Time
		if first != nil {
			firstAt = nanos(first.CreateTime)
		}
		if t.registerEval != nil {
			registered = nanos(t.registerEval.CreateTime)
		}
		if t.old != nil {
			finished = taskTime(t.old, false)
		}
		if t.fresh != nil {
			created = nanos(t.fresh.CreateTime)
			started = taskTime(t.fresh, true)
			if ds := t.fresh.DeploymentStatus; ds != nil && ds.Healthy != nil && *ds.Healthy {
				healthy = ds.Timestamp
			}
		}
		add(stages[0], start, firstAt)
		add(stages[2], firstAt, finished)
		if t.stopEval != nil {
			add(stages[3], finished, registered)
		}
		if t.registerEval != nil {
			add(stages[4], registered, nanos(t.registerEval.ModifyTime))
		}
		add(stages[5], registered, created)
		add(stages[6], created, started)
		add(stages[7], started, healthy)
	}
	var out strings.Builder
	for _, s := range stages {
		if len(s.times) == 0 {
			continue
		}
		sort.Slice(s.times, func(i, j int) bool { return s.times[i] < s.times[j] })
		q := func(p float64) float64 { return s.times[int(p*float64(len(s.times)-1))].Seconds() }
		fmt.Fprintf(&out, "\n    %s: p10 %.1f s, p50 %.1f s, p90 %.1f s, max %.1f s (%d jobs)", s.name, q(0.1), q(0.5), q(0.9), q(1), len(s.times))
	}
	fmt.Fprintf(&out, "\n    evaluations: %s", fmtCounts(triggers))
	return out.String()
}

func nanos(ns int64) time.Time {
	if ns == 0 {
		return time.Time{}
	}
	return time.Unix(0, ns)
}

// taskTime is the latest task start (started) or finish of allocation a,
// zero when a task has none.
func taskTime(a *nomadapi.AllocationListStub, started bool) time.Time {
	var latest time.Time
	for _, ts := range a.TaskStates {
		if ts == nil {
			return time.Time{}
		}
		t := ts.FinishedAt
		if started {
			t = ts.StartedAt
		}
		if t.IsZero() {
			return time.Time{}
		}
		if t.After(latest) {
			latest = t
		}
	}
	return latest
}
