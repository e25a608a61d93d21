package bolt

import (
	"context"
	"errors"
	"path/filepath"
	"strings"
	"testing"
	"time"

	bbolt "go.etcd.io/bbolt"

	"github.com/nomad-statefulset/nomad-statefulset/backend"
	"github.com/nomad-statefulset/nomad-statefulset/backend/storetest"
	"github.com/nomad-statefulset/nomad-statefulset/reconciler"
)

func TestStoreContract(t *testing.T) {
	storetest.Run(t, func(t *testing.T) backend.Store {
		s, err := Open(filepath.Join(t.TempDir(), "state.db"))
		if err != nil {
			t.Fatalf("Open: %v", err)
		}
		return s
	})
}

func TestHistorySurvivesReopen(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "sub", "dir", "state.db")
	set := backend.SetKey{Namespace: "default", Name: "web"}
	created := time.Date(2026, 1, 2, 3, 4, 5, 6, time.UTC)
	rev := reconciler.Revision{Name: "web-abc", Hash: "abc", Number: 3, Data: []byte("tmpl"), CreatedAt: created, JobVersion: 4}
	st := reconciler.Status{ObservedGeneration: 9, Replicas: 3, CurrentRevision: "web-abc",
		Conditions: []reconciler.Condition{{Type: reconciler.ConditionAvailable, Status: true, LastTransitionTime: created}}}

	s, err := Open(path)
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	if err := s.PutRevision(ctx, set, rev); err != nil {
		t.Fatalf("PutRevision: %v", err)
	}
	if err := s.PutStatus(ctx, set, st); err != nil {
		t.Fatalf("PutStatus: %v", err)
	}
	if err := s.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}

	s, err = Open(path)
	if err != nil {
		t.Fatalf("reopening: %v", err)
	}
	defer s.Close()
	revs, err := s.ListRevisions(ctx, set)
	if err != nil {
		t.Fatalf("ListRevisions after reopen: %v", err)
	}
	if len(revs) != 1 || revs[0].Name != rev.Name || revs[0].Number != 3 || string(revs[0].Data) != "tmpl" || !revs[0].CreatedAt.Equal(created) {
		t.Fatalf("revisions after reopen = %+v, want [%+v]", revs, rev)
	}
	got, found, err := s.GetStatus(ctx, set)
	if err != nil || !found {
		t.Fatalf("GetStatus after reopen: found=%v err=%v", found, err)
	}
	if got.ObservedGeneration != 9 || len(got.Conditions) != 1 || !got.Conditions[0].LastTransitionTime.Equal(created) {
		t.Fatalf("status after reopen = %+v, want %+v", got, st)
	}
	sets, err := s.ListSets(ctx)
	if err != nil || len(sets) != 1 || sets[0] != set {
		t.Fatalf("ListSets after reopen = %v, %v; want [%v]", sets, err, set)
	}
}

func TestLockedFileGivesClearError(t *testing.T) {
	path := filepath.Join(t.TempDir(), "state.db")
	s, err := Open(path)
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	defer s.Close()
	// bbolt takes an flock on the file; a second open, even from this
	// process, is refused as another agent's would be.
	start := time.Now()
	s2, err := Open(path)
	if err == nil {
		s2.Close()
		t.Fatal("second Open of a locked file succeeded")
	}
	if !strings.Contains(err.Error(), "locked by another process") || !strings.Contains(err.Error(), path) {
		t.Fatalf("second Open error = %q; want it to name the file and say it is locked by another process", err)
	}
	if d := time.Since(start); d < LockTimeout/2 {
		t.Fatalf("second Open gave up after %s, before its lock timeout %s", d, LockTimeout)
	}
}

// corrupt writes raw bytes under a bucket path of the store's file.
func corrupt(t *testing.T, path string, value []byte, buckets ...string) {
	t.Helper()
	db, err := bbolt.Open(path, 0o600, &bbolt.Options{Timeout: time.Second})
	if err != nil {
		t.Fatalf("opening %s to corrupt it: %v", path, err)
	}
	defer db.Close()
	err = db.Update(func(tx *bbolt.Tx) error {
		b := tx.Bucket([]byte(buckets[0]))
		for _, name := range buckets[1 : len(buckets)-1] {
			b = b.Bucket([]byte(name))
		}
		return b.Put([]byte(buckets[len(buckets)-1]), value)
	})
	if err != nil {
		t.Fatalf("corrupting %v: %v", buckets, err)
	}
}

func TestCorruptValueIsReportedForThatSetOnly(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "state.db")
	bad := backend.SetKey{Namespace: "default", Name: "bad"}
	good := backend.SetKey{Namespace: "default", Name: "good"}
	s, err := Open(path)
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	for _, set := range []backend.SetKey{bad, good} {
		if err := s.PutRevision(ctx, set, reconciler.Revision{Name: set.Name + "-1", Number: 1}); err != nil {
			t.Fatalf("PutRevision: %v", err)
		}
		if err := s.PutStatus(ctx, set, reconciler.Status{Replicas: 1}); err != nil {
			t.Fatalf("PutStatus: %v", err)
		}
	}
	s.Close()
	corrupt(t, path, []byte("{not json"), "sets", "default", "bad", "revisions", "bad-1")
	corrupt(t, path, []byte(`{"v":2,"status":{}}`), "sets", "default", "bad", "status")

	s, err = Open(path)
	if err != nil {
		t.Fatalf("reopening a file with one corrupt set: %v", err)
	}
	defer s.Close()
	var cve *backend.CorruptValueError
	_, err = s.ListRevisions(ctx, bad)
	if !errors.As(err, &cve) || !strings.Contains(cve.Key, "bad-1") {
		t.Fatalf("ListRevisions(corrupt set) error = %v; want a *backend.CorruptValueError naming bad-1", err)
	}
	_, _, err = s.GetStatus(ctx, bad)
	if !errors.As(err, &cve) || !strings.Contains(err.Error(), "format version 2") {
		t.Fatalf("GetStatus(unknown version) error = %v; want a *backend.CorruptValueError about format version 2", err)
	}
	if revs, err := s.ListRevisions(ctx, good); err != nil || len(revs) != 1 {
		t.Fatalf("ListRevisions(good set) = %v, %v; the corrupt set must not affect it", revs, err)
	}
	if _, found, err := s.GetStatus(ctx, good); err != nil || !found {
		t.Fatalf("GetStatus(good set) = found %v, %v; the corrupt set must not affect it", found, err)
	}
	if sets, err := s.ListSets(ctx); err != nil || len(sets) != 2 {
		t.Fatalf("ListSets = %v, %v; want both sets", sets, err)
	}
	// The set recovers once its state is rewritten or removed.
	if err := s.DeleteSet(ctx, bad); err != nil {
		t.Fatalf("DeleteSet(corrupt set): %v", err)
	}
	if revs, err := s.ListRevisions(ctx, bad); err != nil || len(revs) != 0 {
		t.Fatalf("ListRevisions after DeleteSet = %v, %v", revs, err)
	}
}

func TestUnknownFileFormatRefused(t *testing.T) {
	path := filepath.Join(t.TempDir(), "state.db")
	s, err := Open(path)
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	s.Close()
	corrupt(t, path, []byte("7"), "meta", "format")
	if s, err := Open(path); err == nil {
		s.Close()
		t.Fatal("Open of a file with format 7 succeeded")
	} else if !strings.Contains(err.Error(), `format "7"`) {
		t.Fatalf("Open error = %q; want it to name the unknown format", err)
	}
}
