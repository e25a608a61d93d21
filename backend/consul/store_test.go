//go:build realagents

package consul

import (
	"context"
	"errors"
	"regexp"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hashicorp/consul/api"
	"github.com/hashicorp/go-hclog"

	"github.com/nomad-statefulset/nomad-statefulset/backend"
	"github.com/nomad-statefulset/nomad-statefulset/backend/storetest"
	"github.com/nomad-statefulset/nomad-statefulset/internal/testagent"
	"github.com/nomad-statefulset/nomad-statefulset/reconciler"
)

// These tests run against a real Consul agent (internal/testagent). A
// missing consul binary fails them with testagent's message; run
// `make tools` first.

// testLogger logs through t.Log until the test's cleanups have run, and
// drops what stray goroutines log after that.
func testLogger(t *testing.T) hclog.Logger {
	w := &testWriter{t: t}
	t.Cleanup(func() { w.done.Store(true) })
	return hclog.New(&hclog.LoggerOptions{Name: "test", Level: hclog.Debug, Output: w})
}

type testWriter struct {
	t    *testing.T
	done atomic.Bool
}

func (w *testWriter) Write(p []byte) (int, error) {
	if !w.done.Load() {
		w.t.Log(strings.TrimRight(string(p), "\n"))
	}
	return len(p), nil
}

var unsafeChars = regexp.MustCompile(`[^A-Za-z0-9_-]+`)

// testPrefix gives each (sub)test its own empty KV prefix on a shared agent.
func testPrefix(t *testing.T) string {
	return "t/" + unsafeChars.ReplaceAllString(t.Name(), "_")
}

func ctxFor(t *testing.T, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

func TestStoreContract(t *testing.T) {
	agent := testagent.Consul(t)
	t.Run("Unfenced", func(t *testing.T) {
		storetest.Run(t, func(t *testing.T) backend.Store {
			return NewStore(agent.Client, testPrefix(t), nil, testLogger(t))
		})
	})
	t.Run("Fenced", func(t *testing.T) {
		storetest.Run(t, func(t *testing.T) backend.Store {
			prefix := testPrefix(t)
			key := DefaultLockKey(prefix)
			return NewStore(agent.Client, prefix, StaticFence{Key: key, Session: agent.HoldLock(t, key)}, testLogger(t))
		})
	})
}

func TestStoreLayoutAndFormat(t *testing.T) {
	agent := testagent.Consul(t)
	ctx := ctxFor(t, time.Minute)
	s := NewStore(agent.Client, "/custom/prefix/", nil, testLogger(t))
	set := backend.SetKey{Namespace: "prod", Name: "web"}
	if err := s.PutRevision(ctx, set, reconciler.Revision{Name: "web-abc", Number: 1, Data: []byte("d")}); err != nil {
		t.Fatalf("PutRevision: %v", err)
	}
	if err := s.PutStatus(ctx, set, reconciler.Status{Replicas: 2}); err != nil {
		t.Fatalf("PutStatus: %v", err)
	}
	keys, _, err := agent.Client.KV().Keys("custom/", "", nil)
	if err != nil {
		t.Fatalf("listing keys: %v", err)
	}
	want := []string{"custom/prefix/prod/web/revisions/web-abc", "custom/prefix/prod/web/status"}
	if strings.Join(keys, " ") != strings.Join(want, " ") {
		t.Fatalf("keys = %v, want %v", keys, want)
	}
	p, _, err := agent.Client.KV().Get(want[1], nil)
	if err != nil || p == nil || !strings.HasPrefix(string(p.Value), `{"v":1,"status":{`) {
		t.Fatalf("status value = %v, %v; want a versioned JSON document", p, err)
	}
}

// TestStoreCASConflict: a write based on a stale read loses to the write
// that came between, with backend.ErrConflict, and succeeds after a re-read.
func TestStoreCASConflict(t *testing.T) {
	agent := testagent.Consul(t)
	ctx := ctxFor(t, time.Minute)
	prefix := testPrefix(t)
	set := backend.SetKey{Namespace: "default", Name: "web"}
	a := NewStore(agent.Client, prefix, nil, testLogger(t))
	b := NewStore(agent.Client, prefix, nil, testLogger(t))
	if err := a.PutStatus(ctx, set, reconciler.Status{ObservedGeneration: 1}); err != nil {
		t.Fatalf("a.PutStatus: %v", err)
	}
	if _, _, err := b.GetStatus(ctx, set); err != nil {
		t.Fatalf("b.GetStatus: %v", err)
	}
	if err := a.PutStatus(ctx, set, reconciler.Status{ObservedGeneration: 2}); err != nil {
		t.Fatalf("a.PutStatus: %v", err)
	}
	// b read generation 1 and did not see generation 2.
	err := b.PutStatus(ctx, set, reconciler.Status{ObservedGeneration: 3})
	if !errors.Is(err, backend.ErrConflict) {
		t.Fatalf("write from a stale read: error %v, want ErrConflict", err)
	}
	st, _, err := b.GetStatus(ctx, set)
	if err != nil || st.ObservedGeneration != 2 {
		t.Fatalf("after the lost race the stored generation is %d (%v), want 2", st.ObservedGeneration, err)
	}
	if err := b.PutStatus(ctx, set, reconciler.Status{ObservedGeneration: 3}); err != nil {
		t.Fatalf("write after a re-read: %v", err)
	}
	// Deleting a revision someone else renumbered since it was read conflicts too.
	if err := a.PutRevision(ctx, set, reconciler.Revision{Name: "web-1", Number: 1}); err != nil {
		t.Fatal(err)
	}
	if _, err := b.ListRevisions(ctx, set); err != nil {
		t.Fatal(err)
	}
	if err := a.PutRevision(ctx, set, reconciler.Revision{Name: "web-1", Number: 5}); err != nil {
		t.Fatal(err)
	}
	if err := b.DeleteRevision(ctx, set, "web-1"); !errors.Is(err, backend.ErrConflict) {
		t.Fatalf("deleting a revision renumbered since it was read: %v, want ErrConflict", err)
	}
}

// TestCorruptValueReportedOnThatSetOnly corrupts stored values by hand.
func TestCorruptValueReportedOnThatSetOnly(t *testing.T) {
	agent := testagent.Consul(t)
	ctx := ctxFor(t, time.Minute)
	prefix := testPrefix(t)
	s := NewStore(agent.Client, prefix, nil, testLogger(t))
	bad := backend.SetKey{Namespace: "default", Name: "bad"}
	good := backend.SetKey{Namespace: "default", Name: "good"}
	for _, set := range []backend.SetKey{bad, good} {
		if err := s.PutRevision(ctx, set, reconciler.Revision{Name: set.Name + "-1", Number: 1}); err != nil {
			t.Fatalf("PutRevision(%s): %v", set, err)
		}
		if err := s.PutStatus(ctx, set, reconciler.Status{Replicas: 3}); err != nil {
			t.Fatalf("PutStatus(%s): %v", set, err)
		}
	}
	revKey := s.SetPrefix(bad) + "revisions/bad-1"
	statusKey := s.SetPrefix(bad) + "status"
	for key, value := range map[string]string{revKey: "{truncated", statusKey: `{"v":7,"status":{}}`} {
		if _, err := agent.Client.KV().Put(&api.KVPair{Key: key, Value: []byte(value)}, nil); err != nil {
			t.Fatalf("corrupting %s: %v", key, err)
		}
	}

	var cve *backend.CorruptValueError
	_, err := s.ListRevisions(ctx, bad)
	if !errors.As(err, &cve) || cve.Key != revKey {
		t.Fatalf("ListRevisions(%s) error = %v; want a *backend.CorruptValueError for %s", bad, err, revKey)
	}
	_, _, err = s.GetStatus(ctx, bad)
	if !errors.As(err, &cve) || cve.Key != statusKey || !strings.Contains(err.Error(), "format version 7") {
		t.Fatalf("GetStatus(%s) error = %v; want a *backend.CorruptValueError for %s about format version 7", bad, err, statusKey)
	}
	t.Logf("the corrupt set reports: %v", err)
	if _, _, _, err := s.ReadSet(ctx, bad); !errors.As(err, &cve) || (cve.Key != revKey && cve.Key != statusKey) {
		t.Fatalf("ReadSet(%s) error = %v; want a *backend.CorruptValueError for one of its keys", bad, err)
	}
	if revs, st, found, err := s.ReadSet(ctx, good); err != nil || len(revs) != 1 || !found || st.Replicas != 3 {
		t.Fatalf("ReadSet(%s) = %v, %+v, %v, %v", good, revs, st, found, err)
	}

	// The other set reads and writes as before, and both sets are listed.
	if revs, err := s.ListRevisions(ctx, good); err != nil || len(revs) != 1 {
		t.Fatalf("ListRevisions(%s) = %v, %v", good, revs, err)
	}
	if st, found, err := s.GetStatus(ctx, good); err != nil || !found || st.Replicas != 3 {
		t.Fatalf("GetStatus(%s) = %+v, %v, %v", good, st, found, err)
	}
	if err := s.PutStatus(ctx, good, reconciler.Status{Replicas: 4}); err != nil {
		t.Fatalf("PutStatus(%s): %v", good, err)
	}
	if sets, err := s.ListSets(ctx); err != nil || len(sets) != 2 {
		t.Fatalf("ListSets = %v, %v; want both sets", sets, err)
	}
	// Overwriting the corrupt status repairs it; DeleteSet clears the rest.
	if err := s.PutStatus(ctx, bad, reconciler.Status{Replicas: 1}); err != nil {
		t.Fatalf("overwriting the corrupt status: %v", err)
	}
	if _, _, err := s.GetStatus(ctx, bad); err != nil {
		t.Fatalf("GetStatus after the overwrite: %v", err)
	}
	if err := s.DeleteSet(ctx, bad); err != nil {
		t.Fatalf("DeleteSet(%s): %v", bad, err)
	}
	if revs, err := s.ListRevisions(ctx, bad); err != nil || len(revs) != 0 {
		t.Fatalf("ListRevisions(%s) after DeleteSet = %v, %v", bad, revs, err)
	}
}

// TestStaleFenceWriteFails plays a deposed leader that has not noticed yet:
// its fence still names the old session, and Consul's check-session op
// refuses every kind of write, leaving the data as it was.
func TestStaleFenceWriteFails(t *testing.T) {
	agent := testagent.Consul(t)
	ctx := ctxFor(t, time.Minute)
	prefix := testPrefix(t)
	key := DefaultLockKey(prefix)
	set := backend.SetKey{Namespace: "default", Name: "web"}

	oldSession := agent.HoldLock(t, key)
	old := NewStore(agent.Client, prefix, StaticFence{Key: key, Session: oldSession}, testLogger(t))
	if err := old.PutRevision(ctx, set, reconciler.Revision{Name: "web-1", Number: 1}); err != nil {
		t.Fatalf("write while holding the lock: %v", err)
	}
	if err := old.PutStatus(ctx, set, reconciler.Status{ObservedGeneration: 1}); err != nil {
		t.Fatalf("write while holding the lock: %v", err)
	}
	// The old leader's session is destroyed; a new leader takes the lock.
	if _, err := agent.Client.Session().Destroy(oldSession, nil); err != nil {
		t.Fatalf("destroying the old session: %v", err)
	}
	var newSession string
	waitFor(t, 30*time.Second, "a new session to acquire the lock after the lock-delay", func() bool {
		id, _, err := agent.Client.Session().Create(&api.SessionEntry{TTL: "60s"}, nil)
		if err != nil {
			return false
		}
		if ok, _, err := agent.Client.KV().Acquire(&api.KVPair{Key: key, Session: id}, nil); err == nil && ok {
			newSession = id
			return true
		}
		_, _ = agent.Client.Session().Destroy(id, nil)
		return false
	})
	t.Cleanup(func() { _, _ = agent.Client.Session().Destroy(newSession, nil) })

	checks := map[string]func() error{
		"PutRevision":    func() error { return old.PutRevision(ctx, set, reconciler.Revision{Name: "web-2", Number: 2}) },
		"PutRevision(r)": func() error { return old.PutRevision(ctx, set, reconciler.Revision{Name: "web-1", Number: 9}) },
		"PutStatus":      func() error { return old.PutStatus(ctx, set, reconciler.Status{ObservedGeneration: 99}) },
		"DeleteRevision": func() error { return old.DeleteRevision(ctx, set, "web-1") },
		"DeleteSet":      func() error { return old.DeleteSet(ctx, set) },
	}
	for name, write := range checks {
		err := write()
		if !errors.Is(err, backend.ErrNotLeader) {
			t.Errorf("deposed leader's late %s: error %v, want backend.ErrNotLeader", name, err)
		} else {
			t.Logf("deposed leader's late %s fails: %v", name, err)
		}
	}
	// Nothing changed.
	reader := NewStore(agent.Client, prefix, nil, testLogger(t))
	revs, err := reader.ListRevisions(ctx, set)
	if err != nil || len(revs) != 1 || revs[0].Name != "web-1" || revs[0].Number != 1 {
		t.Fatalf("revisions after the fenced writes = %+v, %v; want only web-1 #1", revs, err)
	}
	st, _, err := reader.GetStatus(ctx, set)
	if err != nil || st.ObservedGeneration != 1 {
		t.Fatalf("status after the fenced writes = %+v, %v; want generation 1", st, err)
	}
	// The new leader's writes go through.
	cur := NewStore(agent.Client, prefix, StaticFence{Key: key, Session: newSession}, testLogger(t))
	if err := cur.PutStatus(ctx, set, reconciler.Status{ObservedGeneration: 2}); err != nil {
		t.Fatalf("new leader's write: %v", err)
	}
}

// waitFor polls cond until it is true, failing the test after timeout.
func waitFor(t *testing.T, timeout time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %s waiting for %s", timeout, what)
		}
		time.Sleep(100 * time.Millisecond)
	}
}
