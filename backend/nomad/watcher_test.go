package nomad_test

import (
	"context"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/nomad/api"

	"github.com/nomad-statefulset/nomad-statefulset/backend"
	"github.com/nomad-statefulset/nomad-statefulset/backend/memory"
	"github.com/nomad-statefulset/nomad-statefulset/backend/nomad"
)

func ptr[T any](v T) *T { return &v }

func child(rev string) *api.Job {
	return &api.Job{
		ID: ptr("web-0"), Namespace: ptr("default"), Type: ptr("service"), Datacenters: []string{"*"},
		Meta: map[string]string{"statefulset_parent": "web", "statefulset_ordinal": "0", "statefulset_revision": rev},
		TaskGroups: []*api.TaskGroup{{
			Name: ptr("app"), Count: ptr(1),
			Update:           &api.UpdateStrategy{MaxParallel: ptr(1)},
			ReschedulePolicy: &api.ReschedulePolicy{Attempts: ptr(0), Unlimited: ptr(false)},
			Disconnect:       &api.DisconnectStrategy{StopOnClientAfter: ptr(time.Minute), Replace: ptr(false)},
			Tasks:            []*api.Task{{Name: "app", Driver: "exec", Config: map[string]any{"command": rev}}},
		}},
	}
}

func waitPod(t *testing.T, c *nomad.Cache, what string, ok func(nomad.Observation) bool) {
	t.Helper()
	key := backend.SetKey{Namespace: "default", Name: "web"}
	deadline := time.Now().Add(10 * time.Second)
	var obs nomad.Observation
	for time.Now().Before(deadline) {
		obs = c.Observe(key, nil, time.Now())
		if ok(obs) {
			return
		}
		time.Sleep(2 * time.Millisecond)
	}
	t.Fatalf("timed out waiting for %s; pods %+v stopped %+v", what, obs.Pods, obs.Stopped)
}

// TestWatcherFollowsAChildThroughStopAndReRegister drives a child through
// the cycle a rolling update makes, on the simulated Nomad, and checks what
// the cache shows at each step.
func TestWatcherFollowsAChildThroughStopAndReRegister(t *testing.T) {
	sim := memory.NewNomad(memory.NomadConfig{JSONPayloads: true, PlaceDelay: time.Millisecond, StartDelay: time.Millisecond, HealthyDelay: time.Millisecond, StopDelay: time.Millisecond})
	defer sim.Close()
	cache := nomad.NewCache()
	w := nomad.NewWatcher(sim, cache, nomad.WatcherConfig{}, hclog.NewNullLogger(), func(backend.SetKey) {})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() { _ = w.Run(ctx) }()

	if _, err := sim.RegisterJob(ctx, child("r1"), true, 0); err != nil {
		t.Fatal(err)
	}
	waitPod(t, cache, "r1 ready", func(o nomad.Observation) bool {
		return len(o.Pods) == 1 && o.Pods[0].Pod.Ready && o.Pods[0].Pod.Revision == "r1"
	})
	// Event payloads are JSON with Go field names: decoded with the api's
	// mapstructure helpers these settings came out nil, so every child
	// looked hand-edited and was recreated forever on a real cluster.
	g := cache.Observe(backend.SetKey{Namespace: "default", Name: "web"}, nil, time.Now()).Pods[0].Job.TaskGroups[0]
	if g.Update == nil || g.Update.MaxParallel == nil || *g.Update.MaxParallel != 1 ||
		g.Disconnect == nil || g.Disconnect.StopOnClientAfter == nil || *g.Disconnect.StopOnClientAfter != time.Minute ||
		g.ReschedulePolicy == nil || g.ReschedulePolicy.Attempts == nil {
		t.Fatalf("the cached child lost fields in event decoding: update %+v disconnect %+v reschedule %+v", g.Update, g.Disconnect, g.ReschedulePolicy)
	}
	if err := sim.DeregisterJob(ctx, "default", "web-0", false); err != nil {
		t.Fatal(err)
	}
	waitPod(t, cache, "the stopped child to be gone", func(o nomad.Observation) bool {
		return len(o.Pods) == 0 && len(o.Stopped) == 1
	})
	obs := cache.Observe(backend.SetKey{Namespace: "default", Name: "web"}, nil, time.Now())
	if _, err := sim.RegisterJob(ctx, child("r2"), true, obs.Stopped[0].JobModifyIndex); err != nil {
		t.Fatal(err)
	}
	waitPod(t, cache, "r2 ready", func(o nomad.Observation) bool {
		if len(o.Pods) != 1 {
			return false
		}
		p := o.Pods[0]
		if p.Pod.Phase == "Succeeded" {
			t.Errorf("the re-registered child read as Succeeded from its old allocation: %+v", p)
		}
		return p.Pod.Ready && p.Pod.Revision == "r2"
	})
	if n := sim.MaxConcurrentAllocsPerJob(); n > 1 {
		t.Fatalf("%d allocations ran at once", n)
	}
}
