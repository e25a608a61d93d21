package storecache_test

import (
	"context"
	"errors"
	"reflect"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/nomad-statefulset/nomad-statefulset/backend"
	"github.com/nomad-statefulset/nomad-statefulset/backend/memory"
	"github.com/nomad-statefulset/nomad-statefulset/backend/storecache"
	"github.com/nomad-statefulset/nomad-statefulset/backend/storetest"
	"github.com/nomad-statefulset/nomad-statefulset/reconciler"
)

// TestStoreContract runs the store contract on the cache in front of a
// memory store: in front of any store, the cache is a store.
func TestStoreContract(t *testing.T) {
	storetest.Run(t, func(t *testing.T) backend.Store {
		return storecache.New(memory.NewStore())
	})
}

// countingStore is the store behind the cache: a memory store that counts
// the reads that reach it, can fail the next write, and can run a hook in
// the middle of a read.
type countingStore struct {
	*memory.Store
	mu         sync.Mutex
	listReads  int
	statReads  int
	failWrite  error
	corrupt    error
	duringRead func()
}

func (c *countingStore) ListRevisions(ctx context.Context, set backend.SetKey) ([]reconciler.Revision, error) {
	c.mu.Lock()
	c.listReads++
	hook, corrupt := c.duringRead, c.corrupt
	c.mu.Unlock()
	if corrupt != nil {
		return nil, corrupt
	}
	revs, err := c.Store.ListRevisions(ctx, set)
	if hook != nil {
		hook()
	}
	return revs, err
}

func (c *countingStore) GetStatus(ctx context.Context, set backend.SetKey) (reconciler.Status, bool, error) {
	c.mu.Lock()
	c.statReads++
	hook, corrupt := c.duringRead, c.corrupt
	c.mu.Unlock()
	if corrupt != nil {
		return reconciler.Status{}, false, corrupt
	}
	st, found, err := c.Store.GetStatus(ctx, set)
	if hook != nil {
		hook()
	}
	return st, found, err
}

// writeErr returns, and clears, the error the next write must fail with.
func (c *countingStore) writeErr() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	err := c.failWrite
	c.failWrite = nil
	return err
}

func (c *countingStore) PutStatus(ctx context.Context, set backend.SetKey, st reconciler.Status) error {
	if err := c.writeErr(); err != nil {
		return err
	}
	return c.Store.PutStatus(ctx, set, st)
}

func (c *countingStore) PutRevision(ctx context.Context, set backend.SetKey, r reconciler.Revision) error {
	if err := c.writeErr(); err != nil {
		return err
	}
	return c.Store.PutRevision(ctx, set, r)
}

func (c *countingStore) DeleteRevision(ctx context.Context, set backend.SetKey, name string) error {
	if err := c.writeErr(); err != nil {
		return err
	}
	return c.Store.DeleteRevision(ctx, set, name)
}

// reads is how many reads reached the store: revision lists and status
// reads.
func (c *countingStore) reads() (lists, statuses int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.listReads, c.statReads
}

var web = backend.SetKey{Namespace: "default", Name: "web"}

func revision(name string, number int64) reconciler.Revision {
	return reconciler.Revision{
		Name: name, Hash: name, Number: number, Data: []byte(`{"job":"` + name + `"}`),
		CreatedAt: time.Date(2026, 11, 27, 4, 0, 0, 0, time.UTC), JobVersion: uint64(number),
	}
}

func status(replicas int, update string) reconciler.Status {
	return reconciler.Status{
		ObservedGeneration: 3, Replicas: replicas, ReadyReplicas: replicas, CurrentRevision: "web-a", UpdateRevision: update,
		Conditions: []reconciler.Condition{{Type: "Progressing", Status: true, Reason: "Rolling", LastTransitionTime: time.Date(2026, 11, 27, 4, 1, 0, 0, time.UTC)}},
		Ordinals:   []reconciler.OrdinalRecord{{Ordinal: 0, Revision: "web-a", RevisionNumber: 1}},
	}
}

// cached is the cache in front of a counting store that holds revision
// web-a and a status for web.
func cached(t *testing.T) (*storecache.Store, *countingStore) {
	t.Helper()
	inner := &countingStore{Store: memory.NewStore()}
	ctx := context.Background()
	if err := inner.PutRevision(ctx, web, revision("web-a", 1)); err != nil {
		t.Fatal(err)
	}
	if err := inner.PutStatus(ctx, web, status(3, "web-a")); err != nil {
		t.Fatal(err)
	}
	return storecache.New(inner), inner
}

// read reads web's revisions and status through the cache.
func read(t *testing.T, s *storecache.Store) ([]reconciler.Revision, reconciler.Status, bool) {
	t.Helper()
	ctx := context.Background()
	revs, err := s.ListRevisions(ctx, web)
	if err != nil {
		t.Fatalf("listing revisions: %v", err)
	}
	st, found, err := s.GetStatus(ctx, web)
	if err != nil {
		t.Fatalf("reading the status: %v", err)
	}
	return revs, st, found
}

func names(revs []reconciler.Revision) []string {
	out := []string{}
	for _, r := range revs {
		out = append(out, r.Name)
	}
	return out
}

// TestReadsAfterTheFirstComeFromMemory: once read, a set's revisions and
// status are served from memory, equal to what the store returned.
func TestReadsAfterTheFirstComeFromMemory(t *testing.T) {
	s, inner := cached(t)
	revs1, st1, found1 := read(t, s)
	for i := 0; i < 3; i++ {
		revs, st, found := read(t, s)
		if !reflect.DeepEqual(revs, revs1) || !reflect.DeepEqual(st, st1) || found != found1 {
			t.Fatalf("read %d from memory differs from the first:\n%+v %+v %v\n%+v %+v %v", i, revs, st, found, revs1, st1, found1)
		}
	}
	if lists, statuses := inner.reads(); lists != 1 || statuses != 1 {
		t.Fatalf("the store was read %d times for revisions and %d for the status, want once each", lists, statuses)
	}
	if !found1 || st1.Replicas != 3 || !reflect.DeepEqual(names(revs1), []string{"web-a"}) {
		t.Fatalf("first read: %v %+v %v", names(revs1), st1, found1)
	}
	// A set with nothing stored is remembered as such, too.
	other := backend.SetKey{Namespace: "default", Name: "db"}
	for i := 0; i < 2; i++ {
		if _, found, err := s.GetStatus(context.Background(), other); err != nil || found {
			t.Fatalf("status of a set with none: found %v, %v", found, err)
		}
	}
	if _, statuses := inner.reads(); statuses != 2 {
		t.Fatalf("a missing status was read from the store %d times in all, want 2 (once per set)", statuses)
	}
}

// TestReturnedValuesDoNotShareMemory: a caller that changes what it was
// given does not change what the next caller reads.
func TestReturnedValuesDoNotShareMemory(t *testing.T) {
	s, _ := cached(t)
	revs, st, _ := read(t, s)
	revs[0].Data[0] = 'X'
	revs[0].Name = "changed"
	st.Conditions[0].Reason = "changed"
	st.Ordinals[0].Revision = "changed"
	again, st2, _ := read(t, s)
	if again[0].Name != "web-a" || again[0].Data[0] != '{' || st2.Conditions[0].Reason != "Rolling" || st2.Ordinals[0].Revision != "web-a" {
		t.Fatalf("a caller's change reached the cache: %+v %+v", again[0], st2)
	}
}

// TestWritesKeepWhatTheStoreHolds: a write that succeeded is what the next
// read returns, from memory, exactly as the store would return it.
func TestWritesKeepWhatTheStoreHolds(t *testing.T) {
	ctx := context.Background()
	tests := []struct {
		name      string
		write     func(s backend.Store) error
		wantRevs  []string
		wantSt    reconciler.Status
		wantLists int // reads of the store, the first one included
	}{
		{
			name:     "a new revision",
			write:    func(s backend.Store) error { return s.PutRevision(ctx, web, revision("web-b", 2)) },
			wantRevs: []string{"web-a", "web-b"}, wantSt: status(3, "web-a"), wantLists: 1,
		},
		{
			name:     "a revision renumbered",
			write:    func(s backend.Store) error { return s.PutRevision(ctx, web, revision("web-a", 7)) },
			wantRevs: []string{"web-a"}, wantSt: status(3, "web-a"), wantLists: 1,
		},
		{
			name:     "a revision deleted",
			write:    func(s backend.Store) error { return s.DeleteRevision(ctx, web, "web-a") },
			wantRevs: []string{}, wantSt: status(3, "web-a"), wantLists: 1,
		},
		{
			name:     "a status",
			write:    func(s backend.Store) error { return s.PutStatus(ctx, web, status(5, "web-b")) },
			wantRevs: []string{"web-a"}, wantSt: status(5, "web-b"), wantLists: 1,
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			s, inner := cached(t)
			read(t, s)
			if err := tc.write(s); err != nil {
				t.Fatal(err)
			}
			revs, st, found := read(t, s)
			if got := names(revs); !reflect.DeepEqual(got, tc.wantRevs) {
				t.Fatalf("revisions %v, want %v", got, tc.wantRevs)
			}
			if !found || !reflect.DeepEqual(st, tc.wantSt) {
				t.Fatalf("status %+v (found %v), want %+v", st, found, tc.wantSt)
			}
			if lists, statuses := inner.reads(); lists != tc.wantLists || statuses != 1 {
				t.Fatalf("the store was read %d times for revisions and %d for the status, want %d and 1", lists, statuses, tc.wantLists)
			}
			// What the store itself holds agrees with the cache.
			fromStore, _ := inner.Store.ListRevisions(ctx, web)
			if !sameRevisions(fromStore, revs) {
				t.Fatalf("the cache holds %+v, the store %+v", revs, fromStore)
			}
		})
	}
}

// sameRevisions compares two lists of revisions, whatever their order.
func sameRevisions(a, b []reconciler.Revision) bool {
	if len(a) != len(b) {
		return false
	}
	byName := map[string]reconciler.Revision{}
	for _, r := range a {
		byName[r.Name] = r
	}
	for _, r := range b {
		x, ok := byName[r.Name]
		if !ok || x.Number != r.Number || string(x.Data) != string(r.Data) || !x.CreatedAt.Equal(r.CreatedAt) {
			return false
		}
	}
	return true
}

// handEdit changes web's stored state behind the cache's back, as an
// operator editing Consul does.
func handEdit(t *testing.T, inner *countingStore) {
	t.Helper()
	ctx := context.Background()
	if err := inner.Store.PutStatus(ctx, web, status(9, "web-z")); err != nil {
		t.Fatal(err)
	}
	if err := inner.Store.PutRevision(ctx, web, revision("web-z", 9)); err != nil {
		t.Fatal(err)
	}
}

// sawHandEdit reports whether a read through the cache returns the hand
// edit.
func sawHandEdit(t *testing.T, s *storecache.Store) bool {
	t.Helper()
	revs, st, _ := read(t, s)
	gotRev := reflect.DeepEqual(names(revs), []string{"web-a", "web-z"})
	if gotRev != (st.UpdateRevision == "web-z") {
		t.Fatalf("the revisions and the status disagree on the hand edit: %v %+v", names(revs), st)
	}
	return gotRev
}

// TestAFailedWriteMakesTheNextReadAskTheStore: after a write the store
// refused (a check-and-set lost, a write that timed out), the cache cannot
// know what the store holds.
func TestAFailedWriteMakesTheNextReadAskTheStore(t *testing.T) {
	ctx := context.Background()
	writes := map[string]func(s backend.Store) error{
		"PutStatus":      func(s backend.Store) error { return s.PutStatus(ctx, web, status(4, "web-a")) },
		"PutRevision":    func(s backend.Store) error { return s.PutRevision(ctx, web, revision("web-b", 2)) },
		"DeleteRevision": func(s backend.Store) error { return s.DeleteRevision(ctx, web, "web-a") },
	}
	for name, write := range writes {
		t.Run(name, func(t *testing.T) {
			s, inner := cached(t)
			read(t, s)
			handEdit(t, inner)
			if sawHandEdit(t, s) {
				t.Fatal("the cache read the store again without a reason")
			}
			inner.failWrite = backend.ErrConflict
			if err := write(s); !errors.Is(err, backend.ErrConflict) {
				t.Fatalf("the write's error is %v, want the store's", err)
			}
			if !sawHandEdit(t, s) {
				t.Fatal("after a failed write the cache still serves what it read before")
			}
		})
	}
}

// TestForgetRevealsAHandEdit: what the agent does at every re-list.
func TestForgetRevealsAHandEdit(t *testing.T) {
	s, inner := cached(t)
	read(t, s)
	handEdit(t, inner)
	if sawHandEdit(t, s) {
		t.Fatal("the cache read the store again without a reason")
	}
	s.Forget()
	if !sawHandEdit(t, s) {
		t.Fatal("after Forget the cache still serves what it read before")
	}
}

// TestDeleteSetForgetsTheSet: after a cascading delete the set's next read
// asks the store.
func TestDeleteSetForgetsTheSet(t *testing.T) {
	s, inner := cached(t)
	read(t, s)
	if err := s.DeleteSet(context.Background(), web); err != nil {
		t.Fatal(err)
	}
	revs, _, found := read(t, s)
	if len(revs) != 0 || found {
		t.Fatalf("after DeleteSet: revisions %v, status found %v", names(revs), found)
	}
	if lists, statuses := inner.reads(); lists != 2 || statuses != 2 {
		t.Fatalf("the store was read %d and %d times, want twice each", lists, statuses)
	}
}

// TestAReadOverlappingForgetIsNotKept: a read that left for the store
// before a Forget may carry a value older than the edit Forget is there to
// reveal, so it is returned but not kept.
func TestAReadOverlappingForgetIsNotKept(t *testing.T) {
	s, inner := cached(t)
	inner.duringRead = func() {
		handEdit(t, inner)
		s.Forget()
	}
	read(t, s)
	inner.duringRead = nil
	if !sawHandEdit(t, s) {
		t.Fatal("a read that overlapped a Forget was kept")
	}
}

// TestAnErrorIsNotKept: a corrupt value is reported on every read until
// it is fixed, and the fix is seen at once.
func TestAnErrorIsNotKept(t *testing.T) {
	s, inner := cached(t)
	corrupt := &backend.CorruptValueError{Key: "nomad-statefulset/default/web/status", Err: errors.New("garbage")}
	inner.corrupt = corrupt
	for i := 0; i < 2; i++ {
		if _, err := s.ListRevisions(context.Background(), web); !errors.As(err, new(*backend.CorruptValueError)) {
			t.Fatalf("read %d: %v, want the corrupt value", i, err)
		}
		if _, _, err := s.GetStatus(context.Background(), web); !errors.As(err, new(*backend.CorruptValueError)) {
			t.Fatalf("read %d: %v, want the corrupt value", i, err)
		}
	}
	inner.corrupt = nil
	if revs, st, found := read(t, s); !found || st.Replicas != 3 || len(revs) != 1 {
		t.Fatalf("after the fix: %v %+v %v", names(revs), st, found)
	}
}

// referenceFields names the fields of struct type typ that share memory
// when the struct is copied: slices, maps, pointers and the like. time.Time
// is a value (its Location pointer is never written through).
func referenceFields(typ reflect.Type) []string {
	var out []string
	for i := 0; i < typ.NumField(); i++ {
		f := typ.Field(i)
		switch {
		case f.Type == reflect.TypeOf(time.Time{}):
		case f.Type.Kind() == reflect.Struct:
			for _, inner := range referenceFields(f.Type) {
				out = append(out, f.Name+"."+inner)
			}
		case slices.Contains([]reflect.Kind{reflect.Slice, reflect.Map, reflect.Pointer, reflect.Interface, reflect.Chan, reflect.Func, reflect.UnsafePointer}, f.Type.Kind()):
			out = append(out, f.Name)
		}
	}
	return out
}

// TestClonesCoverEveryReferenceField: cloneRevision and cloneStatus copy
// the reference fields they know of, and their elements hold none. A field
// added to reconciler.Revision or reconciler.Status that shares memory
// fails this test until the clone copies it too.
func TestClonesCoverEveryReferenceField(t *testing.T) {
	tests := []struct {
		typ  reflect.Type
		want []string
		// elems are the element types of those fields, which must hold no
		// references: the clones copy them shallowly.
		elems []reflect.Type
	}{
		{reflect.TypeOf(reconciler.Revision{}), []string{"Data"}, nil},
		{reflect.TypeOf(reconciler.Status{}), []string{"Conditions", "Ordinals"},
			[]reflect.Type{reflect.TypeOf(reconciler.Condition{}), reflect.TypeOf(reconciler.OrdinalRecord{})}},
	}
	for _, tc := range tests {
		if got := referenceFields(tc.typ); !reflect.DeepEqual(got, tc.want) {
			t.Errorf("%s has the reference fields %v; the cache's clone copies %v", tc.typ, got, tc.want)
		}
		for _, e := range tc.elems {
			if got := referenceFields(e); len(got) != 0 {
				t.Errorf("%s has the reference fields %v; the cache's clone copies its elements shallowly", e, got)
			}
		}
	}
}

// TestConfirmReadsTheStore: before a pass acts, Confirm asks the store
// itself. It reports true when the store holds what the cache does, false
// (keeping what the store holds) after a hand edit, and the error when the
// store cannot answer, as a leader cut off from Consul must not act.
func TestConfirmReadsTheStore(t *testing.T) {
	ctx := context.Background()
	s, inner := cached(t)
	read(t, s)
	if fresh, err := s.Confirm(ctx, web); err != nil || !fresh {
		t.Fatalf("Confirm of an unchanged set: %v, %v; want true", fresh, err)
	}
	if lists, statuses := inner.reads(); lists != 2 || statuses != 2 {
		t.Fatalf("Confirm read the store %d and %d times, want once each", lists-1, statuses-1)
	}
	// A write through the cache is what the store holds.
	if err := s.PutStatus(ctx, web, status(4, "web-a")); err != nil {
		t.Fatal(err)
	}
	if fresh, err := s.Confirm(ctx, web); err != nil || !fresh {
		t.Fatalf("Confirm after the cache's own write: %v, %v; want true", fresh, err)
	}
	handEdit(t, inner)
	if fresh, err := s.Confirm(ctx, web); err != nil || fresh {
		t.Fatalf("Confirm after a hand edit: %v, %v; want false", fresh, err)
	}
	if !sawHandEdit(t, s) {
		t.Fatal("after a Confirm that found a hand edit the cache still serves what it had")
	}
	inner.corrupt = &backend.CorruptValueError{Key: "k", Err: errors.New("garbage")}
	if _, err := s.Confirm(ctx, web); !errors.As(err, new(*backend.CorruptValueError)) {
		t.Fatalf("Confirm when the store fails: %v, want its error", err)
	}
	inner.corrupt = nil
	before, _ := inner.reads()
	read(t, s)
	if after, _ := inner.reads(); after != before+1 {
		t.Fatal("after a failed Confirm the cache still serves the set from memory")
	}
}

// oneRequestStore is a countingStore that can read a set in one request
// (backend.SetReader), as the Consul store can, and counts those reads.
type oneRequestStore struct {
	*countingStore
	setReads int
}

func (o *oneRequestStore) ReadSet(ctx context.Context, set backend.SetKey) ([]reconciler.Revision, reconciler.Status, bool, error) {
	o.setReads++
	revs, err := o.Store.ListRevisions(ctx, set)
	if err != nil {
		return nil, reconciler.Status{}, false, err
	}
	st, found, err := o.Store.GetStatus(ctx, set)
	return revs, st, found, err
}

// TestConfirmReadsInOneRequestWhenTheStoreCan: with a store that reads a
// set whole, the read before each acting pass is one request, not two, and
// still finds a hand edit.
func TestConfirmReadsInOneRequestWhenTheStoreCan(t *testing.T) {
	ctx := context.Background()
	_, counting := cached(t)
	inner := &oneRequestStore{countingStore: counting}
	s := storecache.New(inner)
	read(t, s)
	lists, statuses := counting.reads()
	if fresh, err := s.Confirm(ctx, web); err != nil || !fresh {
		t.Fatalf("Confirm of an unchanged set: %v, %v; want true", fresh, err)
	}
	if l, st := counting.reads(); inner.setReads != 1 || l != lists || st != statuses {
		t.Fatalf("Confirm made %d whole-set reads, %d revision lists and %d status reads; want 1, 0 and 0",
			inner.setReads, l-lists, st-statuses)
	}
	handEdit(t, counting)
	if fresh, err := s.Confirm(ctx, web); err != nil || fresh {
		t.Fatalf("Confirm after a hand edit: %v, %v; want false", fresh, err)
	}
	if !sawHandEdit(t, s) {
		t.Fatal("after a Confirm that found a hand edit the cache still serves what it had")
	}
}
