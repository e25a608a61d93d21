//go:build realagents

package consul

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/consul/api"

	"github.com/nomad-statefulset/nomad-statefulset/backend"
	"github.com/nomad-statefulset/nomad-statefulset/internal/testagent"
	"github.com/nomad-statefulset/nomad-statefulset/reconciler"
)

// testElectorConfig uses Consul's shortest TTL and a shortish lock-delay so
// a takeover is quick, yet leaves room for a loaded test machine:
// lease = min(10s, 8s-2s) = 6s, renewals every 2s, monitor budget
// 3 x 1s = 3s < 6s, and 6s lease + 2s stop timeout = 8s lock-delay.
func testElectorConfig(key string) ElectorConfig {
	return ElectorConfig{
		LockKey:          key,
		SessionTTL:       10 * time.Second,
		LockDelay:        8 * time.Second,
		StopTimeout:      2 * time.Second,
		MonitorRetries:   3,
		MonitorRetryTime: time.Second,
	}
}

// leadLog records every lead call of every elector in a test, and catches
// two leaders acting at once.
type leadLog struct {
	mu       sync.Mutex
	active   map[string]bool
	overlaps []string
	events   []string
	starts   map[string]int
	stops    map[string]int
}

func newLeadLog() *leadLog {
	return &leadLog{active: map[string]bool{}, starts: map[string]int{}, stops: map[string]int{}}
}

func (l *leadLog) lead(name string) func(ctx context.Context) error {
	return func(ctx context.Context) error {
		l.mu.Lock()
		for other := range l.active {
			l.overlaps = append(l.overlaps, fmt.Sprintf("%s started leading while %s still was", name, other))
		}
		l.active[name] = true
		l.starts[name]++
		l.events = append(l.events, name+" start")
		l.mu.Unlock()
		<-ctx.Done()
		l.mu.Lock()
		delete(l.active, name)
		l.stops[name]++
		l.events = append(l.events, name+" stop")
		l.mu.Unlock()
		return ctx.Err()
	}
}

func (l *leadLog) count(m map[string]int, name string) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return m[name]
}

func (l *leadLog) check(t *testing.T) {
	t.Helper()
	l.mu.Lock()
	defer l.mu.Unlock()
	t.Logf("lead events: %v", l.events)
	for _, o := range l.overlaps {
		t.Errorf("two leaders: %s", o)
	}
}

type runningElector struct {
	name   string
	e      *Elector
	cancel context.CancelFunc
	done   chan error
	once   sync.Once
	err    error
}

func startElector(t *testing.T, c *api.Client, cfg ElectorConfig, name string, log *leadLog) *runningElector {
	t.Helper()
	e := NewElector(c, cfg, testLogger(t).Named(name))
	ctx, cancel := context.WithCancel(context.Background())
	r := &runningElector{name: name, e: e, cancel: cancel, done: make(chan error, 1)}
	go func() { r.done <- e.Run(ctx, log.lead(name)) }()
	t.Cleanup(func() { r.stop(t) })
	return r
}

// stop cancels Run and waits for it to return.
func (r *runningElector) stop(t *testing.T) error {
	r.once.Do(func() {
		r.cancel()
		select {
		case r.err = <-r.done:
		case <-time.After(60 * time.Second):
			r.err = errors.New("Run did not return within 60s of cancellation")
			t.Errorf("%s: %v", r.name, r.err)
		}
	})
	return r.err
}

func leaders(rs ...*runningElector) []*runningElector {
	var out []*runningElector
	for _, r := range rs {
		if r.e.IsLeader() {
			out = append(out, r)
		}
	}
	return out
}

// TestTwoElectorsOneLeaderAndTakeover: two electors on one Consul. Only one
// leads; destroying the leader's session cancels its lead context; the
// other takes over only after that; the deposed leader's late writes fail
// with ErrNotLeader, both through its own elector's fence and through a
// fence that still names its old session.
func TestTwoElectorsOneLeaderAndTakeover(t *testing.T) {
	agent := testagent.Consul(t)
	ctx := ctxFor(t, 5*time.Minute)
	prefix := testPrefix(t)
	key := DefaultLockKey(prefix)
	cfg := testElectorConfig(key)
	log := newLeadLog()
	a := startElector(t, agent.Client, cfg, "a", log)
	b := startElector(t, agent.Client, cfg, "b", log)

	waitFor(t, 60*time.Second, "one elector to lead", func() bool { return len(leaders(a, b)) == 1 })
	// For a few renewal intervals, never two.
	for i := 0; i < 30; i++ {
		if n := len(leaders(a, b)); n > 1 {
			t.Fatalf("%d electors lead at once", n)
		}
		time.Sleep(100 * time.Millisecond)
	}
	old, next := a, b
	if b.e.IsLeader() {
		old, next = b, a
	}
	if next.e.IsLeader() || log.count(log.starts, next.name) != 0 {
		t.Fatalf("the follower %s has led", next.name)
	}
	_, oldSession, ok := old.e.FenceToken()
	if !ok {
		t.Fatalf("the leader %s has no fence token", old.name)
	}
	oldStore := NewStore(agent.Client, prefix, old.e.Fence(), testLogger(t))
	set := backend.SetKey{Namespace: "default", Name: "web"}
	if err := oldStore.PutStatus(ctx, set, reconciler.Status{ObservedGeneration: 1}); err != nil {
		t.Fatalf("the leader's fenced write: %v", err)
	}
	if pair, _, err := agent.Client.KV().Get(key, nil); err != nil || pair == nil || pair.Session != oldSession {
		t.Fatalf("lock key = %+v, %v; want it held by %s", pair, err, oldSession)
	}

	// Kill the leader's session, as an operator or a failed health check would.
	if _, err := agent.Client.Session().Destroy(oldSession, nil); err != nil {
		t.Fatalf("destroying the leader's session: %v", err)
	}
	waitFor(t, 30*time.Second, "the old leader's lead context to be cancelled", func() bool {
		return log.count(log.stops, old.name) == 1 && !old.e.IsLeader()
	})
	// The old process is gone for good: stop it before it can campaign again.
	if err := old.stop(t); err != nil {
		t.Fatalf("stopping %s: %v", old.name, err)
	}
	// IsLeader turns true just before the elector calls lead, which logs
	// the start: wait for both, or the count below can race the call.
	waitFor(t, 90*time.Second, "the follower to take over", func() bool {
		return next.e.IsLeader() && log.count(log.starts, next.name) > 0
	})
	log.check(t)
	if log.count(log.starts, next.name) != 1 {
		t.Fatalf("%s started leading %d times, want 1", next.name, log.count(log.starts, next.name))
	}

	// The deposed leader's late writes fail. Its own elector's fence is closed:
	staleErr := oldStore.PutStatus(ctx, set, reconciler.Status{ObservedGeneration: 99})
	if !errors.Is(staleErr, backend.ErrNotLeader) {
		t.Fatalf("deposed leader's write through its elector's fence: %v, want ErrNotLeader", staleErr)
	}
	t.Logf("deposed leader's late write (own fence): %v", staleErr)
	// and a fence that had not noticed yet is refused by Consul itself:
	unaware := NewStore(agent.Client, prefix, StaticFence{Key: key, Session: oldSession}, testLogger(t))
	staleErr = unaware.PutStatus(ctx, set, reconciler.Status{ObservedGeneration: 99})
	if !errors.Is(staleErr, backend.ErrNotLeader) {
		t.Fatalf("deposed leader's write with its old session: %v, want ErrNotLeader", staleErr)
	}
	t.Logf("deposed leader's late write (old session in Consul's check): %v", staleErr)
	// The new leader writes.
	newStore := NewStore(agent.Client, prefix, next.e.Fence(), testLogger(t))
	if st, _, err := newStore.GetStatus(ctx, set); err != nil || st.ObservedGeneration != 1 {
		t.Fatalf("new leader reads %+v, %v; want generation 1 (the fenced writes changed nothing)", st, err)
	}
	if err := newStore.PutStatus(ctx, set, reconciler.Status{ObservedGeneration: 2}); err != nil {
		t.Fatalf("new leader's write: %v", err)
	}
}

// TestFollowerTakesOverFromDeadLeader: a leader that died without a word (its
// session is simply no longer renewed, as after SIGKILL) is replaced once
// Consul expires the session and the lock-delay has passed, and not before.
func TestFollowerTakesOverFromDeadLeader(t *testing.T) {
	agent := testagent.Consul(t)
	key := DefaultLockKey(testPrefix(t))
	cfg := testElectorConfig(key)
	dead, _, err := agent.Client.Session().Create(&api.SessionEntry{
		Name: "dead leader", TTL: cfg.SessionTTL.String(), LockDelay: cfg.LockDelay,
	}, nil)
	if err != nil {
		t.Fatalf("creating the dead leader's session: %v", err)
	}
	if ok, _, err := agent.Client.KV().Acquire(&api.KVPair{Key: key, Session: dead}, nil); err != nil || !ok {
		t.Fatalf("the dead leader acquiring %s: %v %v", key, ok, err)
	}
	lastRenewal := time.Now() // the create and acquire happened before this

	log := newLeadLog()
	f := startElector(t, agent.Client, cfg, "follower", log)
	// Consul expires a session between TTL and 2 x TTL after its last
	// renewal; then the lock-delay runs. Allow plenty.
	limit := 2*cfg.SessionTTL + cfg.LockDelay + 60*time.Second
	waitFor(t, limit, "the follower to take over from the dead leader", f.e.IsLeader)
	took := time.Since(lastRenewal)
	t.Logf("takeover after %s (session_ttl %s, lock_delay %s)", took.Round(time.Millisecond), cfg.SessionTTL, cfg.LockDelay)
	// Consul's guarantee, not a timing guess: no takeover before TTL + lock-delay.
	if took < cfg.SessionTTL+cfg.LockDelay {
		t.Fatalf("took over after %s, before session_ttl + lock_delay = %s", took, cfg.SessionTTL+cfg.LockDelay)
	}
	log.check(t)
}

// TestGracefulShutdownReleasesTheLock: a leader that is stopped releases the
// lock (no lock-delay for the next one) only after its lead has returned.
func TestGracefulShutdownReleasesTheLock(t *testing.T) {
	agent := testagent.Consul(t)
	key := DefaultLockKey(testPrefix(t))
	log := newLeadLog()
	a := startElector(t, agent.Client, testElectorConfig(key), "a", log)
	waitFor(t, 60*time.Second, "a to lead", a.e.IsLeader)
	if err := a.stop(t); err != nil {
		t.Fatalf("Run returned %v on shutdown, want nil", err)
	}
	if log.count(log.stops, "a") != 1 || a.e.IsLeader() {
		t.Fatal("lead was not stopped before Run returned")
	}
	pair, _, err := agent.Client.KV().Get(key, &api.QueryOptions{RequireConsistent: true})
	if err != nil || pair == nil || pair.Session != "" {
		t.Fatalf("lock key after shutdown = %+v, %v; want it present and released", pair, err)
	}
	sessions, _, err := agent.Client.Session().List(nil)
	if err != nil || len(sessions) != 0 {
		t.Fatalf("sessions left after shutdown: %+v, %v", sessions, err)
	}
	b := startElector(t, agent.Client, testElectorConfig(key), "b", log)
	waitFor(t, 60*time.Second, "b to lead after a's release", b.e.IsLeader)
	log.check(t)
}

// TestLeadReturningEarlyStepsDown: when lead returns while still leader, the
// elector gives the lock up and campaigns again.
func TestLeadReturningEarlyStepsDown(t *testing.T) {
	agent := testagent.Consul(t)
	key := DefaultLockKey(testPrefix(t))
	e := NewElector(agent.Client, testElectorConfig(key), testLogger(t))
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var mu sync.Mutex
	calls := 0
	done := make(chan error, 1)
	go func() {
		done <- e.Run(ctx, func(ctx context.Context) error {
			mu.Lock()
			calls++
			n := calls
			mu.Unlock()
			if n == 1 {
				return errors.New("boom")
			}
			<-ctx.Done()
			return nil
		})
	}()
	waitFor(t, 60*time.Second, "lead to be called a second time", func() bool {
		mu.Lock()
		defer mu.Unlock()
		return calls >= 2
	})
	if !e.IsLeader() || e.Terms() < 2 {
		t.Fatalf("after lead returned early: leader=%v terms=%d, want leading in term 2", e.IsLeader(), e.Terms())
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatalf("Run: %v", err)
	}
}

// TestConsulOutage: Consul stops; the leader stops acting (its context is
// cancelled, its store refuses writes); Consul comes back with its data; the
// leader leads again and nothing stored was lost. Then the same through
// testagent's Restart.
func TestConsulOutage(t *testing.T) {
	agent := testagent.Consul(t)
	ctx := ctxFor(t, 10*time.Minute)
	prefix := testPrefix(t)
	key := DefaultLockKey(prefix)
	log := newLeadLog()
	a := startElector(t, agent.Client, testElectorConfig(key), "a", log)
	store := NewStore(agent.Client, prefix, a.e.Fence(), testLogger(t))
	waitFor(t, 60*time.Second, "a to lead", a.e.IsLeader)

	set := backend.SetKey{Namespace: "default", Name: "web"}
	revs := []reconciler.Revision{{Name: "web-1", Number: 1, Data: []byte("one")}, {Name: "web-2", Number: 2, Data: []byte("two")}}
	for _, r := range revs {
		if err := store.PutRevision(ctx, set, r); err != nil {
			t.Fatalf("PutRevision: %v", err)
		}
	}
	if err := store.PutStatus(ctx, set, reconciler.Status{ObservedGeneration: 5, CurrentRevision: "web-2"}); err != nil {
		t.Fatalf("PutStatus: %v", err)
	}
	checkData := func(when string) {
		t.Helper()
		got, err := store.ListRevisions(ctx, set)
		if err != nil || len(got) != 2 {
			t.Fatalf("%s: revisions = %+v, %v; want web-1 and web-2", when, got, err)
		}
		st, found, err := store.GetStatus(ctx, set)
		if err != nil || !found || st.ObservedGeneration != 5 || st.CurrentRevision != "web-2" {
			t.Fatalf("%s: status = %+v, %v, %v", when, st, found, err)
		}
	}

	agent.Stop()
	waitFor(t, 60*time.Second, "a to stop leading while Consul is down", func() bool {
		return !a.e.IsLeader() && log.count(log.stops, "a") == 1
	})
	if err := store.PutStatus(ctx, set, reconciler.Status{ObservedGeneration: 6}); !errors.Is(err, backend.ErrNotLeader) {
		t.Fatalf("write while Consul is down and leadership lost: %v, want ErrNotLeader", err)
	}
	agent.Start()
	waitFor(t, 120*time.Second, "a to lead again after Consul came back", func() bool {
		return a.e.IsLeader() && log.count(log.starts, "a") == 2
	})
	checkData("after Consul came back")

	// testagent's Restart: stop and start at once. Leadership may or may
	// not lapse during the short gap; either way it must be held again
	// afterwards and the data must be intact.
	agent.Restart()
	waitFor(t, 120*time.Second, "a to lead after Restart", a.e.IsLeader)
	checkData("after Restart")
	// A write lands once leadership is settled again (a term may end and
	// restart just after Restart returns; callers retry the same way).
	var lastErr error
	waitFor(t, 60*time.Second, "a fenced write to succeed after Restart", func() bool {
		if _, _, err := store.GetStatus(ctx, set); err != nil {
			lastErr = err
			return false
		}
		lastErr = store.PutStatus(ctx, set, reconciler.Status{ObservedGeneration: 5, CurrentRevision: "web-2", Replicas: 1})
		return lastErr == nil
	})
	if lastErr != nil {
		t.Fatal(lastErr)
	}
	log.check(t)
}
