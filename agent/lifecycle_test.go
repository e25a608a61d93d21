package agent

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hashicorp/nomad/api"

	"github.com/nomad-statefulset/nomad-statefulset/backend"
	"github.com/nomad-statefulset/nomad-statefulset/backend/memory"
	"github.com/nomad-statefulset/nomad-statefulset/internal/nomadsim"
	"github.com/nomad-statefulset/nomad-statefulset/reconciler"
)

// A set whose children already run in Nomad, with no state stored anywhere
// (a new store, a lost KV prefix), is adopted: the agent records the
// revision and status and makes no Nomad write at all. Recreating or
// re-registering the children would restart every pod of a healthy set.
func TestAgentAdoptsExistingChildrenWithoutTouchingThem(t *testing.T) {
	sim := nomadsim.NewNomad(fastSim())
	t.Cleanup(sim.Close)
	_, stopFirst := runAgent(t, testOptions(t, sim, memory.NewStore()))
	h := &harness{t: t, sim: sim}
	h.register(parentJob("adopt", map[string]string{"statefulset_replicas": "3"}, "v1"))
	h.waitConverged("adopt", 3, nil)
	stopFirst()

	indexes := map[string]uint64{}
	revisions := map[string]bool{}
	for ord := 0; ord < 3; ord++ {
		j := sim.Job("default", fmt.Sprintf("adopt-%d", ord))
		indexes[*j.ID] = *j.JobModifyIndex
		revisions[j.Meta["statefulset_revision"]] = true
	}
	writes := sim.Writes()

	store := memory.NewStore()
	runAgent(t, testOptions(t, sim, store))
	key := backend.SetKey{Namespace: "default", Name: "adopt"}
	h.waitFor("the new agent to adopt the set", 10*time.Second, func() (bool, string) {
		st, found, err := store.GetStatus(context.Background(), key)
		if err != nil || !found {
			return false, fmt.Sprint(found, err)
		}
		return st.ReadyReplicas == 3 && st.UpdatedReplicas == 3, fmt.Sprintf("%+v", st)
	})
	if got := sim.Writes(); got != writes {
		t.Fatalf("adopting made %d Nomad writes (calls %v); want none", got-writes, sim.Calls())
	}
	for id, idx := range indexes {
		if got := *sim.Job("default", id).JobModifyIndex; got != idx {
			t.Fatalf("%s was re-registered: JobModifyIndex %d → %d", id, idx, got)
		}
	}
	revs, err := store.ListRevisions(context.Background(), key)
	if err != nil || len(revs) != 1 || !revisions[revs[0].Name] || len(revisions) != 1 {
		t.Fatalf("adopted revisions %+v (%v); the children run %v", revs, err, revisions)
	}
}

// A new leader knows no set's spec until it parses the parent, so its first
// look at a set must still find the volumes of the claims that spec names.
// Here a pod went missing while no agent ran: the new leader recreates it on
// its existing volume and does not ask for the volume again.
func TestAgentNewLeaderRecreatesAMissingPodOnItsVolume(t *testing.T) {
	sim := nomadsim.NewNomad(fastSim())
	t.Cleanup(sim.Close)
	store := memory.NewStore()
	_, stopFirst := runAgent(t, testOptions(t, sim, store))
	h := &harness{t: t, sim: sim}
	h.register(parentJob("keep", map[string]string{"statefulset_replicas": "3"}, "v1"))
	h.waitConverged("keep", 3, nil)
	stopFirst()
	if err := sim.DeregisterJob(context.Background(), "default", "keep-2", true); err != nil {
		t.Fatal(err)
	}

	h.agent, _ = runAgent(t, testOptions(t, sim, store))
	h.waitConverged("keep", 3, nil)
	d := h.view("keep")
	if hasEvent(d, string(reconciler.ActionCreateVolume)) {
		t.Fatalf("the new leader asked for a volume that exists; events: %+v", d.Events)
	}
	if !hasEvent(d, string(reconciler.ActionCreatePod), "keep-2") {
		t.Fatalf("keep-2 was not recreated by the new leader; events: %+v", d.Events)
	}
}

// blockingNomad holds the first child registration until released, to catch
// the agent with a write in flight.
type blockingNomad struct {
	*nomadsim.Nomad
	entered  chan struct{}
	release  chan struct{}
	once     atomic.Bool
	ctxError atomic.Value // error, the held call's context error on release
}

func (b *blockingNomad) RegisterJob(ctx context.Context, job *api.Job, enforce bool, idx uint64) (*api.JobRegisterResponse, error) {
	if job.Meta["statefulset_parent"] != "" && b.once.CompareAndSwap(false, true) {
		close(b.entered)
		<-b.release
		b.ctxError.Store(fmt.Sprint(ctx.Err()))
	}
	return b.Nomad.RegisterJob(ctx, job, enforce, idx)
}

// On shutdown the agent finishes the write it has in flight, on a context
// the shutdown does not cancel, then stops before its next action: nothing
// is left half-done and nothing more is written.
func TestAgentShutdownFinishesTheEffectInFlight(t *testing.T) {
	sim := nomadsim.NewNomad(fastSim())
	t.Cleanup(sim.Close)
	b := &blockingNomad{Nomad: sim, entered: make(chan struct{}), release: make(chan struct{})}
	_, stop := runAgent(t, testOptions(t, b, memory.NewStore()))
	if _, err := sim.RegisterJob(context.Background(),
		parentJob("inflight", map[string]string{"statefulset_replicas": "3", "statefulset_pod_management_policy": "Parallel"}, "v1"), false, 0); err != nil {
		t.Fatal(err)
	}
	select {
	case <-b.entered:
	case <-time.After(10 * time.Second):
		t.Fatal("the agent never registered a child")
	}
	writes := sim.Writes()
	stopped := make(chan struct{})
	go func() { stop(); close(stopped) }()
	select {
	case <-stopped:
		t.Fatal("the agent stopped with a write still in flight")
	case <-time.After(200 * time.Millisecond):
	}
	close(b.release)
	<-stopped
	if got := b.ctxError.Load(); got != "<nil>" {
		t.Fatalf("the write in flight ran on a cancelled context: %v", got)
	}
	if got := sim.Writes(); got != writes+1 {
		t.Fatalf("%d writes after the shutdown began, want exactly the one in flight (calls %v)", got-writes, sim.Calls())
	}
	registered := 0
	for ord := 0; ord < 3; ord++ {
		if sim.Job("default", fmt.Sprintf("inflight-%d", ord)) != nil {
			registered++
		}
	}
	if registered != 1 {
		t.Fatalf("%d children registered, want the one in flight", registered)
	}
}
