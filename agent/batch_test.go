package agent

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/nomad/api"

	"github.com/nomad-statefulset/nomad-statefulset/backend/nomad"
	"github.com/nomad-statefulset/nomad-statefulset/internal/nomadsim"
)

// gatedRegisters is a Nomad whose job registrations wait at a gate: the
// test sees which are in flight at once before it lets them go.
type gatedRegisters struct {
	nomad.API
	arrived chan string
	release chan struct{}
	// fail answers the registration of a job ID with an error.
	fail map[string]error
}

func (g *gatedRegisters) RegisterJob(ctx context.Context, job *api.Job, enforce bool, modifyIndex uint64) (*api.JobRegisterResponse, error) {
	g.arrived <- *job.ID
	select {
	case <-g.release:
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	if err := g.fail[*job.ID]; err != nil {
		return nil, err
	}
	return g.API.RegisterJob(ctx, job, enforce, modifyIndex)
}

// parallelRig is a controller whose effects really happen, through the
// agent's podControl, against a simulated Nomad behind a gate: a set of
// five pods, Parallel, without claims, so that one pass creates them all.
func parallelRig(t *testing.T, policy string) (*syncRig, *gatedRegisters, *nomadsim.Nomad) {
	t.Helper()
	parent := parentJob("web", map[string]string{"statefulset_replicas": "5", "statefulset_pod_management_policy": policy}, "v1")
	delete(parent.Meta, "statefulset_volume_claims")
	parent.TaskGroups[0].Volumes, parent.TaskGroups[0].Tasks[0].VolumeMounts = nil, nil
	r := newSyncRig(t, parent)
	sim := nomadsim.NewNomad(fastSim())
	t.Cleanup(sim.Close)
	gate := &gatedRegisters{API: sim, arrived: make(chan string, 100), release: make(chan struct{}), fail: map[string]error{}}
	r.c.effector = &podControl{log: hclog.NewNullLogger(), nomad: nomad.NewCluster(gate), store: r.c.store, nodes: r.cache,
		clock: r.c.clock, expectTTL: r.c.expectTTL, event: r.c.sets.event, requestResync: r.c.requestResync}
	return r, gate, sim
}

// inFlight waits until n registrations are at the gate at once and
// returns their job IDs, sorted. A controller that registers one child
// after another never gets there: the guard then fails the test, saying
// so. It is not a measure of speed.
func inFlight(t *testing.T, g *gatedRegisters, n int) []string {
	t.Helper()
	var ids []string
	guard := time.After(30 * time.Second)
	for len(ids) < n {
		select {
		case id := <-g.arrived:
			ids = append(ids, id)
		case <-guard:
			t.Fatalf("%d registrations in flight (%v), want %d at once", len(ids), ids, n)
		}
	}
	select {
	case id := <-g.arrived:
		t.Fatalf("registrations in flight: %v and %s, want only %d at once", ids, id, n)
	default:
	}
	slices.Sort(ids)
	return ids
}

// syncInBackground runs one pass of r's set while the test works the gate,
// and returns where its error arrives.
func syncInBackground(r *syncRig) chan error {
	done := make(chan error, 1)
	go func() { done <- r.c.sync(context.Background(), r.key) }()
	return done
}

// letGo releases n registrations at the gate.
func letGo(g *gatedRegisters, n int) {
	for range n {
		g.release <- struct{}{}
	}
}

// TestParallelSetRegistersItsPodsInBatches ports the creation side of
// Kubernetes' runForAll: a set that allows bursts (Parallel) has its pods
// created by slowStartBatch, in batches that double from one, each batch
// at once and all of it finished before the next. Five pods go out as 1, 2
// and 2; a set of OrderedReady creates one pod a pass.
func TestParallelSetRegistersItsPodsInBatches(t *testing.T) {
	r, gate, sim := parallelRig(t, "Parallel")
	done := syncInBackground(r)
	for _, want := range [][]string{{"web-0"}, {"web-1", "web-2"}, {"web-3", "web-4"}} {
		if got := inFlight(t, gate, len(want)); !slices.Equal(got, want) {
			t.Fatalf("in flight at once: %v, want %v", got, want)
		}
		letGo(gate, len(want))
	}
	if err := <-done; err != nil {
		t.Fatalf("sync: %v", err)
	}
	for o := range 5 {
		if _, err := sim.GetJob(context.Background(), "default", fmt.Sprintf("web-%d", o)); err != nil {
			t.Errorf("web-%d was not registered: %v", o, err)
		}
	}
	// Every registration is a write to wait for: the next pass makes none
	// until the watcher has seen them.
	if err := r.c.sync(context.Background(), r.key); err != nil {
		t.Fatalf("second sync: %v", err)
	}
	select {
	case id := <-gate.arrived:
		t.Fatalf("the second pass registered %s again before the first pass's writes were seen", id)
	default:
	}

	ordered, gate, _ := parallelRig(t, "OrderedReady")
	done = syncInBackground(ordered)
	if got := inFlight(t, gate, 1); !slices.Equal(got, []string{"web-0"}) {
		t.Fatalf("OrderedReady registered %v first, want web-0 alone", got)
	}
	letGo(gate, 1)
	if err := <-done; err != nil {
		t.Fatalf("sync: %v", err)
	}
}

// TestParallelBatchStopsAfterAFailedBatch: as in upstream's slowStartBatch,
// a batch with an error is the last of the pass. A pod registered beside
// the failed one is counted and announced, and waited for like any other;
// the pods after the batch are not tried; the pass fails naming the
// ordinal that failed.
func TestParallelBatchStopsAfterAFailedBatch(t *testing.T) {
	t.Run("the first registration fails", func(t *testing.T) {
		r, gate, sim := parallelRig(t, "Parallel")
		gate.fail["web-0"] = errors.New("nomad is down")
		done := syncInBackground(r)
		inFlight(t, gate, 1)
		letGo(gate, 1)
		err := <-done
		if err == nil || !strings.Contains(err.Error(), "CreatePod for ordinal 0") || !strings.Contains(err.Error(), "nomad is down") {
			t.Fatalf("sync: %v, want the failure of CreatePod for ordinal 0", err)
		}
		if n := sim.Calls()[nomad.VerbRegisterJob]; n != 0 {
			t.Fatalf("%d registrations reached Nomad after the first failed, want none", n)
		}
	})
	t.Run("one of a batch fails", func(t *testing.T) {
		r, gate, sim := parallelRig(t, "Parallel")
		gate.fail["web-1"] = errors.New("nomad is down")
		done := syncInBackground(r)
		inFlight(t, gate, 1)
		letGo(gate, 1)
		inFlight(t, gate, 2)
		letGo(gate, 2)
		err := <-done
		if err == nil || !strings.Contains(err.Error(), "CreatePod for ordinal 1") {
			t.Fatalf("sync: %v, want the failure of CreatePod for ordinal 1", err)
		}
		select {
		case id := <-gate.arrived:
			t.Fatalf("%s was tried after its batch failed", id)
		default:
		}
		for o, want := range []bool{true, false, true, false, false} {
			_, err := sim.GetJob(context.Background(), "default", fmt.Sprintf("web-%d", o))
			if got := err == nil; got != want {
				t.Errorf("web-%d registered: %v, want %v", o, got, want)
			}
		}
		d, ok := r.c.sets.get(r.key)
		if !ok {
			t.Fatal("the set has no view")
		}
		var created []string
		for _, e := range d.Events {
			if e.Type == "CreatePod" {
				created = append(created, e.Message)
			}
		}
		if len(created) != 2 || !strings.Contains(strings.Join(created, " "), "web-2") {
			t.Fatalf("CreatePod events %q, want web-0's and web-2's", created)
		}
		// web-2 is a write to wait for, like web-0: until the watcher has
		// seen them, no pass decides again on a cache without them.
		var waiting []string
		for _, x := range r.c.sets.of(r.key).expect {
			waiting = append(waiting, x.what)
		}
		slices.Sort(waiting)
		if want := []string{"child web-0 registered", "child web-2 registered"}; !slices.Equal(waiting, want) {
			t.Fatalf("writes waited for: %q, want %q", waiting, want)
		}
	})
}
