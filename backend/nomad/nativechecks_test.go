package nomad

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/nomad-statefulset/nomad-statefulset/backend"
)

// scriptedChecks answers AllocChecks from a map the test edits, and
// counts the reads per allocation.
type scriptedChecks struct {
	mu     sync.Mutex
	checks map[string]map[string]CheckStatus
	errs   map[string]error
	reads  map[string]int
	// read is signalled after every read.
	read chan string
}

func (s *scriptedChecks) AllocChecks(_ context.Context, _, allocID string) (map[string]CheckStatus, error) {
	s.mu.Lock()
	s.reads[allocID]++
	c, err := s.checks[allocID], s.errs[allocID]
	s.mu.Unlock()
	defer func() { s.read <- allocID }()
	if err != nil {
		return nil, err
	}
	if c == nil {
		return nil, ErrNotFound
	}
	return c, nil
}

func (s *scriptedChecks) set(allocID string, leads bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.checks[allocID] = map[string]CheckStatus{"primary": {Passing: leads}, "alive": {Passing: true}}
}

// tickRig is a watcher whose pacing the test drives: every wait the loop
// asks for is sent on waits, and the loop goes on only when the test sends
// on tick.
type tickRig struct {
	w       *NativeCheckWatcher
	api     *scriptedChecks
	waits   chan time.Duration
	tick    chan time.Time
	changes chan backend.SetKey
}

func newTickRig(t *testing.T) *tickRig {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	r := &tickRig{
		api: &scriptedChecks{checks: map[string]map[string]CheckStatus{}, errs: map[string]error{}, reads: map[string]int{},
			read: make(chan string, 100)},
		waits: make(chan time.Duration, 100), tick: make(chan time.Time), changes: make(chan backend.SetKey, 100),
	}
	r.w = NewNativeCheckWatcher(ctx, NativeCheckWatcherConfig{
		API:      r.api,
		OnChange: func(k backend.SetKey) { r.changes <- k },
		After: func(d time.Duration) <-chan time.Time {
			r.waits <- d
			return r.tick
		},
	})
	t.Cleanup(func() {
		cancel()
		r.w.Wait()
	})
	return r
}

// round waits for the loop to read the allocations given, in order, and to
// ask for its next wait, which it returns. The loop then blocks on that
// wait, so nothing more can have been read: a read or a wait beyond those
// is a round nobody asked for (a busy loop, a spurious wake-up).
func (r *tickRig) round(t *testing.T, allocs ...string) time.Duration {
	t.Helper()
	for _, want := range allocs {
		if got := <-r.api.read; got != want {
			t.Fatalf("read %s, want %s", got, want)
		}
	}
	wait := <-r.waits
	if len(r.api.read) != 0 || len(r.waits) != 0 {
		t.Fatalf("%d more reads and %d more waits than the round's", len(r.api.read), len(r.waits))
	}
	return wait
}

// TestNativeCheckWatcherPacesReadsByTheCheck: a set's live allocations are
// read once at once, then once per check interval, never faster; a pod
// that joins is read at once; the leader is the allocation whose check
// passes, and the set is queued when that changes, not on every read;
// an allocation Nomad no longer knows leads nowhere; a failed read keeps
// the allocation unread and backs off; Watch with no check stops the
// reads.
func TestNativeCheckWatcherPacesReadsByTheCheck(t *testing.T) {
	r := newTickRig(t)
	key := backend.SetKey{Namespace: "db", Name: "pg"}
	r.api.set("a0", false)
	r.api.set("a1", true)

	if _, read := r.w.Leader(key, "a0"); read {
		t.Fatal("read before any Watch")
	}
	r.w.Watch(key, "primary", 5*time.Second, []string{"a0", "a1"})
	if wait := r.round(t, "a0", "a1"); wait != 5*time.Second {
		t.Fatalf("the loop waits %s after a round, want the check's interval 5s", wait)
	}
	if k := <-r.changes; k != key {
		t.Fatalf("queued %v", k)
	}
	for id, want := range map[string]bool{"a0": false, "a1": true} {
		if leads, read := r.w.Leader(key, id); !read || leads != want {
			t.Fatalf("%s: leads %v read %v; want leads %v, read", id, leads, read, want)
		}
	}
	// The same Watch again changes nothing and wakes nothing: the loop
	// still waits for its tick (a wake-up would be a round more, which
	// the next round's count would see).
	r.w.Watch(key, "primary", 5*time.Second, []string{"a0", "a1"})

	// A tick with nothing new: read again, nothing queued.
	r.tick <- time.Time{}
	r.round(t, "a0", "a1")
	// Leadership moves: seen on the next tick, and queued once.
	r.api.set("a0", true)
	r.api.set("a1", false)
	r.tick <- time.Time{}
	r.round(t, "a0", "a1")
	if leads, _ := r.w.Leader(key, "a0"); !leads {
		t.Fatal("a0 does not lead after its check passed")
	}
	if len(r.changes) != 1 {
		t.Fatalf("%d sets queued for one change of leader, want 1", len(r.changes))
	}
	<-r.changes

	// A pod joins: read at once, without waiting for the tick.
	r.api.set("a2", false)
	r.w.Watch(key, "primary", 5*time.Second, []string{"a0", "a1", "a2"})
	r.round(t, "a0", "a1", "a2")
	if _, read := r.w.Leader(key, "a2"); !read {
		t.Fatal("a2 not read after it joined")
	}
	<-r.changes

	// a1 is gone from Nomad; a2's read fails: a1 leads nowhere, a2 keeps
	// its last answer, and the loop backs off beyond the interval.
	r.api.mu.Lock()
	delete(r.api.checks, "a1")
	r.api.errs["a2"] = errors.New("Unexpected response code: 500 (no path to node)")
	r.api.mu.Unlock()
	r.tick <- time.Time{}
	if wait := r.round(t, "a0", "a1", "a2"); wait <= 5*time.Second || wait > nativeCheckMaxBackoff {
		t.Fatalf("after a failed read the loop waits %s; want more than the interval, at most %s", wait, nativeCheckMaxBackoff)
	}
	if leads, read := r.w.Leader(key, "a1"); leads || !read {
		t.Fatalf("a1, unknown to Nomad: leads %v read %v; want read, not leading", leads, read)
	}

	// Another check name: what was read says nothing about it. a0's
	// first read for it fails, so it stays unread.
	r.api.mu.Lock()
	r.api.errs["a0"] = errors.New("Unexpected response code: 500 (no path to node)")
	r.api.mu.Unlock()
	r.w.Watch(key, "alive", 5*time.Second, []string{"a0"})
	r.round(t, "a0")
	if _, read := r.w.Leader(key, "a0"); read {
		t.Fatal("a0 counts as read for a check never read")
	}
	r.api.mu.Lock()
	delete(r.api.errs, "a0")
	r.api.mu.Unlock()
	r.tick <- time.Time{}
	r.round(t, "a0")
	if leads, _ := r.w.Leader(key, "a0"); !leads {
		t.Fatal("a0's check alive passes, and a0 does not lead by it")
	}

	// No check: the set is forgotten and its loop ends.
	r.w.Watch(key, "", 0, nil)
	if _, read := r.w.Leader(key, "a0"); read {
		t.Fatal("a forgotten set still answers")
	}
}

// TestNativeCheckWatcherIntervalFloor: an interval under a second (a job
// Nomad never validated) is read once a second, not in a busy loop.
func TestNativeCheckWatcherIntervalFloor(t *testing.T) {
	r := newTickRig(t)
	key := backend.SetKey{Namespace: "default", Name: "pg"}
	r.api.set("a0", true)
	r.w.Watch(key, "primary", 0, []string{"a0"})
	if wait := r.round(t, "a0"); wait != time.Second {
		t.Fatalf("the loop waits %s with no interval, want 1s", wait)
	}
}
