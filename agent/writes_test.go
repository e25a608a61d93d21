package agent

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"testing"

	"github.com/nomad-statefulset/nomad-statefulset/backend/nomad"
	"github.com/nomad-statefulset/nomad-statefulset/reconciler"
)

// writeVerbFor names, for each Nomad write verb, the actions that may make
// it: what the effector does to carry each action out.
var writeVerbFor = map[string][]reconciler.ActionType{
	nomad.VerbRegisterJob:      {reconciler.ActionCreatePod, reconciler.ActionRestoreCount},
	nomad.VerbDeregisterJob:    {reconciler.ActionDeletePod, reconciler.ActionDeleteSetState},
	nomad.VerbCreateHostVolume: {reconciler.ActionCreateVolume},
	nomad.VerbDeleteHostVolume: {reconciler.ActionDeleteVolume},
	nomad.VerbEvaluateJob:      {reconciler.ActionEvaluatePod},
	nomad.VerbExecAlloc:        {reconciler.ActionCheckDisruption, reconciler.ActionSwitchover},
}

// writeAudit records every Nomad write the agent makes, and the ones that
// do not trace back to an action of the reconciler's output that makes
// such a write.
type writeAudit struct {
	mu     sync.Mutex
	writes map[string]int
	stray  []string
	// traced counts every write the agent's trace saw, stray or not.
	traced map[string]int
}

func (w *writeAudit) trace(ctx context.Context, verb string, _ error) {
	if !nomad.Verbs[verb].Write {
		return
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	w.traced[verb]++
	call, ok := ActionOf(ctx)
	switch {
	case !ok:
		w.stray = append(w.stray, verb+" made outside any action")
	case !slices.Contains(writeVerbFor[verb], call.Action.Type):
		w.stray = append(w.stray, fmt.Sprintf("%s made for %s of ordinal %d", verb, call.Action.Type, call.Action.Ordinal))
	default:
		w.writes[verb]++
	}
}

// check fails on stray writes, and on writes Nomad received that neither
// the test nor the agent's trace made (a call on a context without the
// agent's trace, which the trace cannot see). testWrites are the test's
// own writes to the simulator, by verb.
func (w *writeAudit) check(t *testing.T, sim map[string]int, testWrites map[string]int, wantVerbs ...string) {
	t.Helper()
	w.mu.Lock()
	defer w.mu.Unlock()
	for verb, v := range nomad.Verbs {
		if v.Write && sim[verb] != testWrites[verb]+w.traced[verb] {
			t.Errorf("Nomad received %d %s calls: %d from the test and %d traced from the agent; the rest bypassed the trace",
				sim[verb], verb, testWrites[verb], w.traced[verb])
		}
	}
	if len(w.stray) > 0 {
		t.Fatalf("writes that trace back to no action of the reconciler's output: %q", w.stray)
	}
	for _, v := range wantVerbs {
		if w.writes[v] == 0 {
			t.Fatalf("no %s seen (writes %v): the scenario did not exercise it", v, w.writes)
		}
	}
}

// TestEveryWriteIsAnAction drives the agent against the simulated Nomad
// through a set's life (creation, a rollout, a child scaled by hand, a
// scale-down, the set's deletion), with a disruption check asked before
// each Ready pod goes, and checks that every Nomad write the
// agent makes was made while carrying out an action of the reconciler's
// output, one that makes that kind of write. The safety promises are
// proven for the reconciler's actions only (the randomized drivers), so a
// write made anywhere else would be unproven: this test fails on it.
func TestEveryWriteIsAnAction(t *testing.T) {
	audit := &writeAudit{writes: map[string]int{}, traced: map[string]int{}}
	h := startAgentWith(t, fastSim(), func(o *Options) { o.CallTrace = audit.trace })
	ctx := context.Background()
	meta := map[string]string{"statefulset_replicas": "3", "statefulset_disruption_check": "/bin/true",
		"statefulset_volume_retention_when_deleted": "Delete", "statefulset_volume_retention_when_scaled": "Delete"}
	h.register(parentJob("w", meta, "v1"))
	h.waitConverged("w", 3, nil)
	first := h.healthyChildren("w")[0]

	h.register(parentJob("w", meta, "v2"))
	h.waitConverged("w", 3, func(rev string) bool { return rev != first })

	// `nomad job scale w-1 w 3`: the daemon puts the count back in place.
	child, err := h.sim.GetJob(ctx, "default", "w-1")
	if err != nil {
		t.Fatal(err)
	}
	child.TaskGroups[0].Count = ptr(3)
	if _, err := h.sim.RegisterJob(ctx, child, true, *child.JobModifyIndex); err != nil {
		t.Fatal(err)
	}
	h.waitFor("w-1's count back at 1", 20e9, func() (bool, string) {
		j, err := h.sim.GetJob(ctx, "default", "w-1")
		if err != nil {
			return false, err.Error()
		}
		return *j.TaskGroups[0].Count == 1, fmt.Sprint("count ", *j.TaskGroups[0].Count)
	})

	meta["statefulset_replicas"] = "1"
	h.register(parentJob("w", meta, "v2"))
	h.waitConverged("w", 1, nil)

	if err := h.sim.DeregisterJob(ctx, "default", "w", false); err != nil {
		t.Fatal(err)
	}
	h.waitFor("the set's children and volumes to be gone", 20e9, func() (bool, string) {
		return h.liveChildren("w") == 0 && len(h.sim.HostVolumes()) == 0,
			fmt.Sprintf("%d children, %d volumes", h.liveChildren("w"), len(h.sim.HostVolumes()))
	})
	// The test's own writes: four registrations (the set, its new
	// template, the hand scale, the scale-down) and the parent's stop.
	testWrites := map[string]int{nomad.VerbRegisterJob: 4, nomad.VerbDeregisterJob: 1}
	audit.check(t, h.sim.Calls(), testWrites, nomad.VerbRegisterJob, nomad.VerbDeregisterJob, nomad.VerbCreateHostVolume,
		nomad.VerbDeleteHostVolume, nomad.VerbExecAlloc)
}
