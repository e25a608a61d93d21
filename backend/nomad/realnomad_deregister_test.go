//go:build realagents

package nomad_test

import (
	"context"
	"fmt"
	"slices"
	"strings"
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
	counted, cache, key := watchRealSet(ctx, t, n, "web", 2)

	// Nomad's own stream, read beside the watcher's, from now on.
	deregisters := readDeregisters(ctx, t, n.Client)
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
	got := deregisters.wait(t, 3)
	if want := "[JobDeregistered web-0 stopped JobDeregistered web-0 purged JobDeregistered web-1 purged]"; fmt.Sprint(got) != want {
		t.Errorf("Nomad's deregister events read as %v, want %s", got, want)
	}
	if calls := counted.snapshot(); calls["GetJob"] != 0 {
		t.Errorf("the watcher made %d GetJob calls to follow three deregisters, want none (all: %v)", calls["GetJob"], calls)
	}
}

// TestRealNomadJobGCIsReadAsAPurge checks, on a real Nomad, the other way a
// child leaves: Nomad's job GC (`nomad system gc`, or job_gc_threshold)
// reaps stopped jobs with one JobBatchDeregister for many
// (nomad/core_sched.go, jobReap), whose JobBatchDeregistered events carry
// each job as it was before. db-0 and db-1 are stopped, then collected
// together: both events read as purges, at one index, and the watcher drops
// both children without a GetJob or a re-list, while db-2 runs on.
func TestRealNomadJobGCIsReadAsAPurge(t *testing.T) {
	n := testagent.Nomad(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	counted, cache, key := watchRealSet(ctx, t, n, "db", 3)

	for _, id := range []string{"db-0", "db-1"} {
		if _, _, err := n.Client.Jobs().Deregister(id, false, nil); err != nil {
			t.Fatal(err)
		}
	}
	// The GC takes only a dead job: a stopped one whose allocations have
	// all ended (nomad/state/schema.go, jobIsGCable).
	testagent.Eventually(t, 2*time.Minute, "db-0 and db-1 dead in Nomad and stopped in the cache", func() error {
		for _, id := range []string{"db-0", "db-1"} {
			job, _, err := n.Client.Jobs().Info(id, nil)
			if err != nil {
				return fmt.Errorf("reading %s: %w", id, err)
			}
			if job.Status == nil || *job.Status != "dead" {
				return fmt.Errorf("%s is %v, not dead yet", id, job.Status)
			}
		}
		if obs := cache.Observe(key, nil, time.Now()); len(obs.Stopped) != 2 || len(obs.Pods) != 1 {
			return fmt.Errorf("the cache has %d pods and %d stopped children, want 1 and 2", len(obs.Pods), len(obs.Stopped))
		}
		return nil
	})

	deregisters := readDeregisters(ctx, t, n.Client)
	counted.reset()
	if err := n.Client.System().GarbageCollect(); err != nil {
		t.Fatalf("nomad system gc: %v", err)
	}
	got := deregisters.wait(t, 2)
	if want := "[JobBatchDeregistered db-0 purged JobBatchDeregistered db-1 purged]"; fmt.Sprint(sortedByKey(got)) != want {
		t.Errorf("Nomad's job GC events read as %v, want %s", got, want)
	}
	if got[0].index != got[1].index {
		t.Errorf("the job GC reaped db-0 and db-1 at indexes %d and %d, want one batch", got[0].index, got[1].index)
	}
	testagent.Eventually(t, 30*time.Second, "db-0 and db-1 gone from the cache", func() error {
		obs := cache.Observe(key, nil, time.Now().Add(time.Hour))
		if len(obs.Stopped) != 0 {
			return fmt.Errorf("%d stopped children left", len(obs.Stopped))
		}
		if len(obs.Pods) != 1 || obs.Pods[0].Pod.Ordinal != 2 || !obs.Pods[0].Pod.Ready {
			return fmt.Errorf("pods %+v, want db-2 alone and ready", obs.Pods)
		}
		return nil
	})
	if calls := counted.snapshot(); calls["GetJob"] != 0 || calls["ListJobs"] != 0 {
		t.Errorf("the watcher made %d GetJob and %d ListJobs calls to follow a job GC, want none (all: %v)", calls["GetJob"], calls["ListJobs"], calls)
	}
}

// watchRealSet registers set's parent and count children on the real Nomad n,
// starts a watcher over them through a counting API, and waits until the
// cache has them all ready.
func watchRealSet(ctx context.Context, t *testing.T, n *testagent.NomadAgent, set string, count int) (*counting, *nomad.Cache, backend.SetKey) {
	t.Helper()
	client := nomad.NewAPI(n.Client)
	all := []*api.Job{parentOf(set)}
	for o := 0; o < count; o++ {
		all = append(all, childOf(set, o, "r1"))
	}
	for _, j := range all {
		if _, err := client.RegisterJob(ctx, realJob(j, "default"), false, 0); err != nil {
			t.Fatal(err)
		}
	}
	counted := &counting{API: client, calls: map[string]int{}}
	cache := nomad.NewCache()
	w := nomad.NewWatcher(counted, cache, nomad.WatcherConfig{ResyncInterval: time.Hour}, hclog.NewNullLogger(), func(backend.SetKey) {})
	go func() { _ = w.Run(ctx) }()
	key := backend.SetKey{Namespace: "default", Name: set}
	testagent.Eventually(t, 2*time.Minute, fmt.Sprintf("%d pods ready in the cache", count), func() error {
		ready := 0
		for _, p := range cache.Observe(key, nil, time.Now()).Pods {
			if p.Pod.Ready {
				ready++
			}
		}
		if ready != count {
			return fmt.Errorf("%d of %d pods ready", ready, count)
		}
		return nil
	})
	return counted, cache, key
}

// deregisterEvent is one deregister event from Nomad's own stream, read as
// the watcher reads it.
type deregisterEvent struct {
	typ, key, kind string
	index          uint64
}

func (e deregisterEvent) String() string { return e.typ + " " + e.key + " " + e.kind }

// deregisterLog collects the deregister events of a stream.
type deregisterLog struct {
	mu     sync.Mutex
	events []deregisterEvent
}

// readDeregisters reads Nomad's job events from now on, beside the
// watcher, and keeps each deregister with its kind by DeregisterKindOf.
func readDeregisters(ctx context.Context, t *testing.T, c *api.Client) *deregisterLog {
	t.Helper()
	_, meta, err := c.Jobs().List(nil)
	if err != nil {
		t.Fatal(err)
	}
	stream, err := c.EventStream().Stream(ctx, map[api.Topic][]string{api.TopicJob: {"*"}}, meta.LastIndex, nil)
	if err != nil {
		t.Fatalf("subscribing to Nomad's events: %v", err)
	}
	l := &deregisterLog{}
	go func() {
		for evs := range stream {
			if evs.Err != nil {
				return
			}
			for _, e := range evs.Events {
				if e.Type != "JobDeregistered" && e.Type != "JobBatchDeregistered" {
					continue
				}
				kind := ""
				if job, err := e.Job(); err != nil {
					kind = err.Error()
				} else {
					kind = nomad.DeregisterKindOf(job, e.Index)
				}
				l.mu.Lock()
				l.events = append(l.events, deregisterEvent{typ: e.Type, key: e.Key, kind: kind, index: e.Index})
				l.mu.Unlock()
			}
		}
	}()
	return l
}

// wait returns the events once there are at least n.
func (l *deregisterLog) wait(t *testing.T, n int) []deregisterEvent {
	t.Helper()
	var got []deregisterEvent
	testagent.Eventually(t, 30*time.Second, fmt.Sprintf("%d deregister events from Nomad", n), func() error {
		l.mu.Lock()
		defer l.mu.Unlock()
		if len(l.events) < n {
			return fmt.Errorf("events so far: %v", l.events)
		}
		got = slices.Clone(l.events)
		return nil
	})
	return got
}

// sortedByKey orders events of one batch, which Nomad sends in no set order.
func sortedByKey(evs []deregisterEvent) []deregisterEvent {
	out := slices.Clone(evs)
	slices.SortFunc(out, func(a, b deregisterEvent) int { return strings.Compare(a.key, b.key) })
	return out
}
