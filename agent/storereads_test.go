package agent

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nomad-statefulset/nomad-statefulset/backend"
	"github.com/nomad-statefulset/nomad-statefulset/backend/nomad"
	"github.com/nomad-statefulset/nomad-statefulset/reconciler"
)

// readCountingStore counts the reads of revisions and status that reach
// the store.
type readCountingStore struct {
	backend.Store
	mu    sync.Mutex
	reads map[string]int
}

func (s *readCountingStore) count(what string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.reads[what]++
}

func (s *readCountingStore) ListRevisions(ctx context.Context, set backend.SetKey) ([]reconciler.Revision, error) {
	s.count("ListRevisions")
	return s.Store.ListRevisions(ctx, set)
}

func (s *readCountingStore) GetStatus(ctx context.Context, set backend.SetKey) (reconciler.Status, bool, error) {
	s.count("GetStatus")
	return s.Store.GetStatus(ctx, set)
}

func (s *readCountingStore) PutStatus(ctx context.Context, set backend.SetKey, st reconciler.Status) error {
	s.count("PutStatus")
	return s.Store.PutStatus(ctx, set, st)
}

func (s *readCountingStore) writes() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.reads["PutStatus"]
}

func (s *readCountingStore) snapshot() map[string]int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return map[string]int{"ListRevisions": s.reads["ListRevisions"], "GetStatus": s.reads["GetStatus"]}
}

// settledWithCountingStore starts an agent over a counting store and
// waits until its set "web" (3 replicas) is settled: Progressing, reason
// Complete, and nothing left to do.
func settledWithCountingStore(t *testing.T) (*harness, *readCountingStore, backend.SetKey) {
	t.Helper()
	var store *readCountingStore
	h := startAgentWith(t, fastSim(), func(o *Options) {
		store = &readCountingStore{Store: o.Store, reads: map[string]int{}}
		o.Store = store
	})
	h.register(parentJob("web", map[string]string{"statefulset_replicas": "3"}, "v1"))
	h.waitConverged("web", 3, nil)
	key := backend.SetKey{Namespace: "default", Name: "web"}
	h.waitFor("the set to settle", 5*time.Second, func() (bool, string) {
		d, ok := h.agent.view(key)
		if !ok {
			return false, "no view yet"
		}
		for _, c := range d.Status.Conditions {
			if c.Type == string(reconciler.ConditionProgressing) && c.Reason == reconciler.ReasonComplete {
				return d.Status.ReadyReplicas == 3, fmt.Sprintf("%+v", d.Status)
			}
		}
		return false, fmt.Sprintf("%+v", d.Status.Conditions)
	})
	h.settle()
	return h, store, key
}

// queuePasses queues n passes of key, one after another, and fails unless
// at least n ran.
func queuePasses(t *testing.T, h *harness, key backend.SetKey, n int) {
	t.Helper()
	passes := reconciles(h.agent)
	for i := 0; i < n; i++ {
		h.queue().Add(key.String())
		h.settle()
	}
	if got := reconciles(h.agent) - passes; got < uint64(n) {
		t.Fatalf("%d passes, want %d or more", got, n)
	}
}

// TestAgentReadsTheStoreOncePerSetPerRelist: a leader reads a set's
// revisions and status from the store once, then from memory, as
// upstream's StatefulSet controller reads its informers' caches
// (ssc.revListerSynced, setLister); every pass read them from Consul
// before, two consistent reads per pass, 2 × 17 per set created at scale
// (issue 28). A re-list of Nomad (the resync) reads the store again, so an
// edit by hand is still seen at the next resync.
func TestAgentReadsTheStoreOncePerSetPerRelist(t *testing.T) {
	h, store, key := settledWithCountingStore(t)

	// Passes of a known set read nothing from the store.
	before := store.snapshot()
	queuePasses(t, h, key, 5)
	if after := store.snapshot(); after["ListRevisions"] != before["ListRevisions"] || after["GetStatus"] != before["GetStatus"] {
		t.Fatalf("passes of a known set read the store: %v before, %v after", before, after)
	}

	// A re-list reads each of them once more.
	c := h.term()
	relists, passes := c.watcher().Relists(), reconciles(h.agent)
	c.watcher().RequestResync()
	h.waitFor("a resync", 5*time.Second, func() (bool, string) {
		return c.watcher().Relists() > relists, "no re-list yet"
	})
	h.settle()
	h.queue().Add(key.String())
	h.settle()
	if reconciles(h.agent)-passes < 2 {
		t.Fatalf("%d passes after the re-list, want 2 or more", reconciles(h.agent)-passes)
	}
	after := store.snapshot()
	if after["ListRevisions"] != before["ListRevisions"]+1 || after["GetStatus"] != before["GetStatus"]+1 {
		t.Fatalf("a re-list and passes after it read the store %v times; before it, %v: want one more of each", after, before)
	}
}

// TestSettledSetPassesWriteNoStatus: once a set is settled, its passes
// (Nomad's later events about its pods queue them: a deployment that
// finishes, a job that turns running) store nothing. Each wrote the status
// again with a new progress time: about a fifth of the Consul writes of a
// 1,000-child create (issue 28).
func TestSettledSetPassesWriteNoStatus(t *testing.T) {
	h, store, key := settledWithCountingStore(t)

	before := store.writes()
	queuePasses(t, h, key, 5)
	if after := store.writes(); after != before {
		t.Fatalf("5 passes of a settled set wrote its status %d times, want none", after-before)
	}
}

// failingReads is a store whose reads fail while down is set, as Consul's
// do while it is unreachable.
type failingReads struct {
	backend.Store
	down atomic.Bool
}

func (s *failingReads) ListRevisions(ctx context.Context, set backend.SetKey) ([]reconciler.Revision, error) {
	if s.down.Load() {
		return nil, errors.New("connection refused")
	}
	return s.Store.ListRevisions(ctx, set)
}

func (s *failingReads) GetStatus(ctx context.Context, set backend.SetKey) (reconciler.Status, bool, error) {
	if s.down.Load() {
		return reconciler.Status{}, false, errors.New("connection refused")
	}
	return s.Store.GetStatus(ctx, set)
}

// TestAgentActsOnlyAfterTheStoreAnswers: the passes decide on the state
// kept in memory, but one that acts reads the store first, so a leader cut
// off from its store makes no Nomad write, as before the cache (e2e
// TestConsulRestart); once the store answers, the rollout goes on.
func TestAgentActsOnlyAfterTheStoreAnswers(t *testing.T) {
	var store *failingReads
	var rec *takedowns
	h := startAgentWith(t, fastSim(), func(o *Options) {
		store = &failingReads{Store: o.Store}
		o.Store = store
		wrapNomad(o, func(api nomad.API) nomad.API {
			rec = &takedowns{API: api}
			return rec
		})
	})
	h.register(parentJob("web", map[string]string{"statefulset_replicas": "3"}, "v1"))
	h.waitConverged("web", 3, nil)
	h.settle()
	first := h.healthyChildren("web")[0]

	store.down.Store(true)
	passes := reconciles(h.agent)
	job := h.sim.Job("default", "web")
	job.TaskGroups[0].Tasks[0].Config["args"] = []string{"-c", "v2"}
	h.register(job)
	h.waitFor("passes with the store down", 10*time.Second, func() (bool, string) {
		return reconciles(h.agent)-passes >= 3, fmt.Sprint(reconciles(h.agent) - passes)
	})
	// The rollout's first write is a stop.
	if got := rec.order(); len(got) != 0 {
		t.Fatalf("with the store unreachable the agent stopped %v", got)
	}
	store.down.Store(false)
	h.waitConverged("web", 3, func(r string) bool { return r != first })
	if got := rec.order(); len(got) != 3 {
		t.Fatalf("once the store answered the rollout stopped %v, want the 3 children", got)
	}
}
