//go:build realagents

package nomad_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/nomad/api"

	"github.com/nomad-statefulset/nomad-statefulset/backend"
	"github.com/nomad-statefulset/nomad-statefulset/backend/nomad"
	"github.com/nomad-statefulset/nomad-statefulset/internal/testagent"
)

// TestRealNomadDeregisterEventsTellStopFromPurge checks, on a real Nomad,
// the fact the watcher reads deregisters by (nomad/fsm.go,
// handleJobDeregister): a stop's JobDeregistered event carries the stopped
// job as written at the event's index, a purge's the job as it was before.
// web-0 is stopped and then purged, web-1 purged while it runs. The raw
// events read as "stopped", "purged" and "purged"; the watcher follows all
// three without a single GetJob (before, it asked Nomad about each
// deregister: 1,000 calls in a rollout of 1,000 children).
func TestRealNomadDeregisterEventsTellStopFromPurge(t *testing.T) {
	n := testagent.Nomad(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	client := nomad.NewAPI(n.Client)
	for _, j := range []*api.Job{parentOf("web"), childOf("web", 0, "r1"), childOf("web", 1, "r1")} {
		if _, err := client.RegisterJob(ctx, realJob(j, "default"), false, 0); err != nil {
			t.Fatal(err)
		}
	}
	counted := &counting{API: client, calls: map[string]int{}}
	cache := nomad.NewCache()
	w := nomad.NewWatcher(counted, cache, nomad.WatcherConfig{ResyncInterval: time.Hour}, hclog.NewNullLogger(), func(backend.SetKey) {})
	go func() { _ = w.Run(ctx) }()
	key := backend.SetKey{Namespace: "default", Name: "web"}
	testagent.Eventually(t, 2*time.Minute, "both pods ready in the cache", func() error {
		obs := cache.Observe(key, nil, time.Now())
		ready := 0
		for _, p := range obs.Pods {
			if p.Pod.Ready {
				ready++
			}
		}
		if ready != 2 {
			return fmt.Errorf("%d of 2 pods ready", ready)
		}
		return nil
	})

	// Nomad's own stream, read beside the watcher's, from now on.
	_, meta, err := n.Client.Jobs().List(nil)
	if err != nil {
		t.Fatal(err)
	}
	stream, err := n.Client.EventStream().Stream(ctx, map[api.Topic][]string{api.TopicJob: {"*"}}, meta.LastIndex, nil)
	if err != nil {
		t.Fatalf("subscribing to Nomad's events: %v", err)
	}
	var mu sync.Mutex
	var kinds []string
	go func() {
		for evs := range stream {
			if evs.Err != nil {
				return
			}
			for _, e := range evs.Events {
				if e.Type != "JobDeregistered" {
					continue
				}
				job, err := e.Job()
				mu.Lock()
				if err != nil {
					kinds = append(kinds, fmt.Sprintf("%s: %v", e.Key, err))
				} else {
					kinds = append(kinds, e.Key+" "+nomad.DeregisterKindOf(job, e.Index))
				}
				mu.Unlock()
			}
		}
	}()
	counted.reset()

	if _, _, err := n.Client.Jobs().Deregister("web-0", false, nil); err != nil {
		t.Fatal(err)
	}
	testagent.Eventually(t, 2*time.Minute, "web-0 stopped in the cache", func() error {
		obs := cache.Observe(key, nil, time.Now())
		for _, p := range obs.Pods {
			if p.Pod.Ordinal == 0 {
				return fmt.Errorf("web-0 still a pod (%s)", p.ClientStatus)
			}
		}
		if len(obs.Stopped) != 1 {
			return fmt.Errorf("%d stopped children, want web-0", len(obs.Stopped))
		}
		return nil
	})
	for _, id := range []string{"web-0", "web-1"} {
		if _, _, err := n.Client.Jobs().Deregister(id, true, nil); err != nil {
			t.Fatal(err)
		}
	}
	testagent.Eventually(t, 2*time.Minute, "both children gone from the cache", func() error {
		obs := cache.Observe(key, nil, time.Now().Add(time.Hour))
		if len(obs.Pods) != 0 || len(obs.Stopped) != 0 {
			return fmt.Errorf("%d pods and %d stopped children left", len(obs.Pods), len(obs.Stopped))
		}
		return nil
	})
	testagent.Eventually(t, 30*time.Second, "Nomad's three deregister events", func() error {
		mu.Lock()
		defer mu.Unlock()
		if len(kinds) < 3 {
			return fmt.Errorf("events so far: %v", kinds)
		}
		return nil
	})
	mu.Lock()
	got := fmt.Sprint(kinds)
	mu.Unlock()
	if want := "[web-0 stopped web-0 purged web-1 purged]"; got != want {
		t.Errorf("Nomad's deregister events read as %s, want %s", got, want)
	}
	if calls := counted.snapshot(); calls["GetJob"] != 0 {
		t.Errorf("the watcher made %d GetJob calls to follow three deregisters, want none (all: %v)", calls["GetJob"], calls)
	}
}
