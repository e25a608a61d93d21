package agent

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/nomad-statefulset/nomad-statefulset/agent/config"
	"github.com/nomad-statefulset/nomad-statefulset/backend"
	"github.com/nomad-statefulset/nomad-statefulset/backend/nomad"
	"github.com/nomad-statefulset/nomad-statefulset/plugin/manager"
	"github.com/nomad-statefulset/nomad-statefulset/reconciler"
)

// writeVerbFor names, for each Nomad write verb, the actions that may make
// it: what the effector does to carry each action out. A growth is a
// CreateHostVolume of the volume's ID with the new size (the built-in
// provisioner's ExpandVolume, as `nomad volume create` of a spec with an
// ID).
var writeVerbFor = map[string][]reconciler.ActionType{
	nomad.VerbRegisterJob:      {reconciler.ActionCreatePod, reconciler.ActionRestoreCount},
	nomad.VerbDeregisterJob:    {reconciler.ActionDeletePod, reconciler.ActionDeleteSetState},
	nomad.VerbCreateHostVolume: {reconciler.ActionCreateVolume, reconciler.ActionExpandVolume},
	nomad.VerbDeleteHostVolume: {reconciler.ActionDeleteVolume},
	nomad.VerbEvaluateJob:      {reconciler.ActionEvaluatePod},
	nomad.VerbExecAlloc:        {reconciler.ActionCheckDisruption, reconciler.ActionSwitchover},
}

// storeWriteFor names, for each write to the daemon's store, the actions
// that may make it. RecordStatus is the decision's last action, its status
// (or, for a spec that does not parse, reconciler.InvalidDecision's one).
var storeWriteFor = map[string][]reconciler.ActionType{
	"store.PutStatus":      {reconciler.ActionRecordOrdinals, reconciler.ActionRecordStatus},
	"store.PutRevision":    {reconciler.ActionCreateRevision, reconciler.ActionUpdateRevision},
	"store.DeleteRevision": {reconciler.ActionDeleteRevision},
	"store.DeleteSet":      {reconciler.ActionDeleteSetState},
}

// auditedStore traces every write to the store to the action it is made
// for, as the Nomad trace does for Nomad's writes.
type auditedStore struct {
	backend.Store
	audit *writeAudit
}

func (s auditedStore) PutStatus(ctx context.Context, set backend.SetKey, st reconciler.Status) error {
	s.audit.storeWrite(ctx, "store.PutStatus")
	return s.Store.PutStatus(ctx, set, st)
}

func (s auditedStore) PutRevision(ctx context.Context, set backend.SetKey, rev reconciler.Revision) error {
	s.audit.storeWrite(ctx, "store.PutRevision")
	return s.Store.PutRevision(ctx, set, rev)
}

func (s auditedStore) DeleteRevision(ctx context.Context, set backend.SetKey, name string) error {
	s.audit.storeWrite(ctx, "store.DeleteRevision")
	return s.Store.DeleteRevision(ctx, set, name)
}

func (s auditedStore) DeleteSet(ctx context.Context, set backend.SetKey) error {
	s.audit.storeWrite(ctx, "store.DeleteSet")
	return s.Store.DeleteSet(ctx, set)
}

// storeWrite records one store write and whether it traces back to an
// action that makes it.
func (w *writeAudit) storeWrite(ctx context.Context, verb string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.record(ctx, verb, storeWriteFor[verb])
}

// record counts one write of verb, made for the action ctx carries, or
// notes it as stray when no action, or one that makes no such write
// (allowed), is behind it. The caller holds mu.
func (w *writeAudit) record(ctx context.Context, verb string, allowed []reconciler.ActionType) {
	call, ok := ActionOf(ctx)
	switch {
	case !ok:
		w.stray = append(w.stray, verb+" made outside any action")
	case !slices.Contains(allowed, call.Action.Type):
		w.stray = append(w.stray, fmt.Sprintf("%s made for %s of ordinal %d", verb, call.Action.Type, call.Action.Ordinal))
	default:
		w.writes[actionWrite{verb, call.Action.Type}]++
	}
}

// actionWrite is one kind of traced write: a verb made for an action.
type actionWrite struct {
	verb   string
	action reconciler.ActionType
}

// writeAudit records every Nomad write the agent makes, and the ones that
// do not trace back to an action of the reconciler's output that makes
// such a write.
type writeAudit struct {
	mu     sync.Mutex
	writes map[actionWrite]int
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
	w.record(ctx, verb, writeVerbFor[verb])
}

// check fails on stray writes, and on writes Nomad received that neither
// the test nor the agent's trace made (a call on a context without the
// agent's trace, which the trace cannot see). testWrites are the test's
// own writes to the simulator, by verb; want are the writes the scenario
// must have made, each for its action.
func (w *writeAudit) check(t *testing.T, sim map[string]int, testWrites map[string]int, want ...actionWrite) {
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
	for _, aw := range want {
		if w.writes[aw] == 0 {
			t.Fatalf("no %s for %s seen (writes %v): the scenario did not exercise it", aw.verb, aw.action, w.writes)
		}
	}
}

// TestEveryWriteIsAnAction drives the agent against the simulated Nomad
// through a set's life (creation; a rollout during which the node of the
// volumes is ineligible, so that a re-created child is blocked and must be
// evaluated once the node is back; a claim grown in place; a child scaled
// by hand; a scale-down; the set's deletion), with a disruption check
// asked before each Ready pod goes, and checks that every Nomad write the
// agent makes, and every write to its store, was made while carrying out
// an action of the reconciler's output, one that makes that kind of write. The safety promises are
// proven for the reconciler's actions only (the randomized drivers), so a
// write made anywhere else would be unproven: this test fails on it.
func TestEveryWriteIsAnAction(t *testing.T) {
	audit := &writeAudit{writes: map[actionWrite]int{}, traced: map[string]int{}}
	h := startAgentWith(t, fastSim(), func(o *Options) {
		o.CallTrace = audit.trace
		o.Store = auditedStore{Store: o.Store, audit: audit}
		// A host volume plugin that can grow volumes (mkdir cannot).
		o.Plugins = manager.ConfigOf(config.Default())
		o.Plugins.VolumeProvisioner.Config = map[string]string{"plugin_id": "lvm"}
	})
	ctx := context.Background()
	meta := map[string]string{"statefulset_replicas": "3", "statefulset_disruption_check": "/bin/true",
		"statefulset_volume_retention_when_deleted": "Delete", "statefulset_volume_retention_when_scaled": "Delete",
		"statefulset_claim_data_capacity": "10MiB"}
	h.register(parentJob("w", meta, "v1"))
	h.waitConverged("w", 3, nil)
	first := h.healthyChildren("w")[0]

	// Every volume is on node-1 (the simulation places a volume on the
	// first node without one of its name). With node-1 ineligible, the
	// rollout's first re-created child is blocked; once the node is back,
	// the daemon asks Nomad to evaluate it.
	if err := h.sim.SetNodeEligibility("node-1", false); err != nil {
		t.Fatal(err)
	}
	h.register(parentJob("w", meta, "v2"))
	h.waitFor("a re-created child blocked on the ineligible node", 20*time.Second, func() (bool, string) {
		for i := range 3 {
			if id := fmt.Sprintf("w-%d", i); h.sim.Blocked("default", id) {
				return true, ""
			}
		}
		return false, "none blocked"
	})
	if err := h.sim.SetNodeEligibility("node-1", true); err != nil {
		t.Fatal(err)
	}
	h.waitConverged("w", 3, func(rev string) bool { return rev != first })

	// The claim grows: each volume is expanded in place before its pod
	// comes back on it.
	meta["statefulset_claim_data_capacity"] = "20MiB"
	h.register(parentJob("w", meta, "v2"))
	h.waitFor("every volume to grow", 20*time.Second, func() (bool, string) {
		vols := h.sim.HostVolumes()
		for _, v := range vols {
			if v.CapacityBytes < 20<<20 {
				return false, fmt.Sprintf("%s at %d", v.Name, v.CapacityBytes)
			}
		}
		return len(vols) == 3, fmt.Sprint(len(vols), " volumes")
	})
	h.waitConverged("w", 3, nil)

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
	// The sets' last writes are seen by Nomad before their calls return
	// to the agent and reach its trace: let the agent finish first.
	h.settle()
	// The test's own writes: five registrations (the set, its new
	// template, its grown claim, the hand scale, the scale-down) and the
	// parent's stop.
	testWrites := map[string]int{nomad.VerbRegisterJob: 5, nomad.VerbDeregisterJob: 1}
	t.Logf("writes: %v", audit.writes)
	audit.check(t, h.sim.Calls(), testWrites,
		actionWrite{nomad.VerbRegisterJob, reconciler.ActionCreatePod},
		actionWrite{nomad.VerbRegisterJob, reconciler.ActionRestoreCount},
		actionWrite{nomad.VerbDeregisterJob, reconciler.ActionDeletePod},
		actionWrite{nomad.VerbCreateHostVolume, reconciler.ActionCreateVolume},
		actionWrite{nomad.VerbCreateHostVolume, reconciler.ActionExpandVolume},
		actionWrite{nomad.VerbDeleteHostVolume, reconciler.ActionDeleteVolume},
		actionWrite{nomad.VerbEvaluateJob, reconciler.ActionEvaluatePod},
		actionWrite{nomad.VerbExecAlloc, reconciler.ActionCheckDisruption},
		actionWrite{"store.PutStatus", reconciler.ActionRecordOrdinals},
		actionWrite{"store.PutStatus", reconciler.ActionRecordStatus},
		actionWrite{"store.PutRevision", reconciler.ActionCreateRevision},
		actionWrite{"store.DeleteSet", reconciler.ActionDeleteSetState})
}
