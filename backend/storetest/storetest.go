// Package storetest is the contract test suite that every backend.Store
// implementation must pass: the in-memory store, the embedded bbolt store and
// the Consul KV store all run the same Run.
//
// The suite fixes the behaviour callers may rely on:
//   - revisions are created, replaced by Name (a rollback bumps Number) and
//     deleted; deleting a missing one is not an error;
//   - a set with no history lists an empty, non-nil slice and no error;
//   - status round-trips exactly, including conditions and times;
//   - DeleteSet removes all of one set's state and nothing of any other set;
//   - ListSets reports every set with stored state, and namespaces are
//     isolated from one another;
//   - concurrent writers never lose each other's writes to distinct keys;
//     a store may answer a racing write to the same key with
//     backend.ErrConflict, and a retry then succeeds.
package storetest

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"reflect"
	"sort"
	"sync"
	"testing"
	"time"

	"github.com/nomad-statefulset/nomad-statefulset/backend"
	"github.com/nomad-statefulset/nomad-statefulset/reconciler"
)

// Run runs the contract suite as subtests of t. newStore must return a fresh,
// empty store for each call; the suite closes every store it is given.
func Run(t *testing.T, newStore func(t *testing.T) backend.Store) {
	t.Helper()
	cases := []struct {
		name string
		fn   func(t *testing.T, s backend.Store)
	}{
		{"EmptySet", testEmptySet},
		{"RevisionCRUD", testRevisionCRUD},
		{"RollbackRenumber", testRollbackRenumber},
		{"DeleteMissingRevision", testDeleteMissingRevision},
		{"StatusRoundTrip", testStatusRoundTrip},
		{"StatusOverwrite", testStatusOverwrite},
		{"DeleteSetRemovesOnlyThatSet", testDeleteSet},
		{"ListSets", testListSets},
		{"NamespacesIsolated", testNamespacesIsolated},
		{"AwkwardNames", testAwkwardNames},
		{"InvalidKeysRejected", testInvalidKeys},
		{"ReturnedValuesAreCopies", testReturnedValuesAreCopies},
		{"ConcurrentWriters", testConcurrentWriters},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			s := newStore(t)
			if s == nil {
				t.Fatal("newStore returned a nil store")
			}
			t.Cleanup(func() {
				if err := s.Close(); err != nil {
					t.Errorf("closing store: %v", err)
				}
			})
			tc.fn(t, s)
		})
	}
}

func ctxFor(t *testing.T) context.Context {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	t.Cleanup(cancel)
	return ctx
}

// ts is a fixed instant with a non-UTC zone and sub-second precision, so a
// store that loses either is caught.
var ts = time.Date(2026, 3, 14, 15, 9, 26, 535897932, time.FixedZone("X", 3600))

func rev(set string, hash string, number int64, data string) reconciler.Revision {
	return reconciler.Revision{
		Name:       set + "-" + hash,
		Hash:       hash,
		Number:     number,
		Data:       []byte(data),
		CreatedAt:  ts.Add(time.Duration(number) * time.Second),
		JobVersion: uint64(number) + 7,
	}
}

func mustPutRev(t *testing.T, ctx context.Context, s backend.Store, set backend.SetKey, r reconciler.Revision) {
	t.Helper()
	if err := s.PutRevision(ctx, set, r); err != nil {
		t.Fatalf("PutRevision(%s, %s): %v", set, r.Name, err)
	}
}

func mustList(t *testing.T, ctx context.Context, s backend.Store, set backend.SetKey) []reconciler.Revision {
	t.Helper()
	revs, err := s.ListRevisions(ctx, set)
	if err != nil {
		t.Fatalf("ListRevisions(%s): %v", set, err)
	}
	if revs == nil {
		t.Fatalf("ListRevisions(%s) returned a nil slice; want a non-nil (possibly empty) slice", set)
	}
	sort.Slice(revs, func(i, j int) bool { return revs[i].Name < revs[j].Name })
	checkReadSet(t, ctx, s, set)
	return revs
}

func mustStatus(t *testing.T, ctx context.Context, s backend.Store, set backend.SetKey) (reconciler.Status, bool) {
	t.Helper()
	st, found, err := s.GetStatus(ctx, set)
	if err != nil {
		t.Fatalf("GetStatus(%s): %v", set, err)
	}
	checkReadSet(t, ctx, s, set)
	return st, found
}

// checkReadSet holds a store that reads a set in one request
// (backend.SetReader) to answering what ListRevisions and GetStatus answer,
// wherever the suite reads either.
func checkReadSet(t *testing.T, ctx context.Context, s backend.Store, set backend.SetKey) {
	t.Helper()
	r, ok := s.(backend.SetReader)
	if !ok {
		return
	}
	revs, st, found, err := r.ReadSet(ctx, set)
	if err != nil {
		t.Fatalf("ReadSet(%s): %v", set, err)
	}
	wantRevs, err := s.ListRevisions(ctx, set)
	if err != nil {
		t.Fatalf("ListRevisions(%s): %v", set, err)
	}
	wantSt, wantFound, err := s.GetStatus(ctx, set)
	if err != nil {
		t.Fatalf("GetStatus(%s): %v", set, err)
	}
	sort.Slice(revs, func(i, j int) bool { return revs[i].Name < revs[j].Name })
	sort.Slice(wantRevs, func(i, j int) bool { return wantRevs[i].Name < wantRevs[j].Name })
	if len(revs) != len(wantRevs) {
		t.Fatalf("ReadSet(%s) returned revisions %v; ListRevisions returns %v", set, revNames(revs), revNames(wantRevs))
	}
	for i := range revs {
		if d := revDiff(revs[i], wantRevs[i]); d != "" {
			t.Fatalf("ReadSet(%s): revision %s differs from ListRevisions's: %s", set, revs[i].Name, d)
		}
	}
	if found != wantFound {
		t.Fatalf("ReadSet(%s) found a status: %v; GetStatus: %v", set, found, wantFound)
	}
	if d := statusDiff(st, wantSt); found && d != "" {
		t.Fatalf("ReadSet(%s): the status differs from GetStatus's: %s", set, d)
	}
}

func mustSets(t *testing.T, ctx context.Context, s backend.Store) []backend.SetKey {
	t.Helper()
	sets, err := s.ListSets(ctx)
	if err != nil {
		t.Fatalf("ListSets: %v", err)
	}
	sortSets(sets)
	return sets
}

func sortSets(sets []backend.SetKey) {
	sort.Slice(sets, func(i, j int) bool {
		if sets[i].Namespace != sets[j].Namespace {
			return sets[i].Namespace < sets[j].Namespace
		}
		return sets[i].Name < sets[j].Name
	})
}

// revDiff describes how got differs from want, or returns "".
func revDiff(got, want reconciler.Revision) string {
	switch {
	case got.Name != want.Name:
		return fmt.Sprintf("Name %q, want %q", got.Name, want.Name)
	case got.Hash != want.Hash:
		return fmt.Sprintf("Hash %q, want %q", got.Hash, want.Hash)
	case got.Number != want.Number:
		return fmt.Sprintf("Number %d, want %d", got.Number, want.Number)
	case !bytes.Equal(got.Data, want.Data):
		return fmt.Sprintf("Data %q, want %q", got.Data, want.Data)
	case !got.CreatedAt.Equal(want.CreatedAt):
		return fmt.Sprintf("CreatedAt %v, want %v", got.CreatedAt, want.CreatedAt)
	case got.JobVersion != want.JobVersion:
		return fmt.Sprintf("JobVersion %d, want %d", got.JobVersion, want.JobVersion)
	}
	return ""
}

func checkRevs(t *testing.T, got []reconciler.Revision, want ...reconciler.Revision) {
	t.Helper()
	sort.Slice(want, func(i, j int) bool { return want[i].Name < want[j].Name })
	if len(got) != len(want) {
		t.Fatalf("got %d revisions %v, want %d %v", len(got), revNames(got), len(want), revNames(want))
	}
	for i := range want {
		if d := revDiff(got[i], want[i]); d != "" {
			t.Errorf("revision %s: %s", want[i].Name, d)
		}
	}
}

func revNames(revs []reconciler.Revision) []string {
	names := make([]string, len(revs))
	for i, r := range revs {
		names[i] = fmt.Sprintf("%s#%d", r.Name, r.Number)
	}
	return names
}

// statusDiff describes how got differs from want, or returns "".
func statusDiff(got, want reconciler.Status) string {
	a, b := got, want
	a.Conditions, b.Conditions = nil, nil
	a.LastProgressTime, b.LastProgressTime = time.Time{}, time.Time{}
	if !reflect.DeepEqual(a, b) {
		return fmt.Sprintf("scalar fields %+v, want %+v", a, b)
	}
	if !got.LastProgressTime.Equal(want.LastProgressTime) {
		return fmt.Sprintf("LastProgressTime %v, want %v", got.LastProgressTime, want.LastProgressTime)
	}
	if len(got.Conditions) != len(want.Conditions) {
		return fmt.Sprintf("%d conditions %+v, want %d %+v", len(got.Conditions), got.Conditions, len(want.Conditions), want.Conditions)
	}
	for i := range want.Conditions {
		g, w := got.Conditions[i], want.Conditions[i]
		gt, wt := g.LastTransitionTime, w.LastTransitionTime
		g.LastTransitionTime, w.LastTransitionTime = time.Time{}, time.Time{}
		if g != w || !gt.Equal(wt) {
			return fmt.Sprintf("condition %d: %+v (at %v), want %+v (at %v)", i, g, gt, w, wt)
		}
	}
	return ""
}

func sampleStatus(gen uint64) reconciler.Status {
	return reconciler.Status{
		ObservedGeneration: gen,
		Replicas:           5,
		ReadyReplicas:      4,
		AvailableReplicas:  3,
		CurrentReplicas:    2,
		UpdatedReplicas:    3,
		CurrentRevision:    "web-aaaa",
		UpdateRevision:     "web-bbbb",
		CollisionCount:     2,
		Conditions: []reconciler.Condition{
			{Type: reconciler.ConditionProgressing, Status: true, Reason: "RollingUpdate", Message: "updating ordinal 4 to \"web-bbbb\"", LastTransitionTime: ts},
			{Type: reconciler.ConditionAvailable, Status: false, Reason: "NotAllAvailable", Message: "3 of 5 available", LastTransitionTime: ts.Add(-time.Hour)},
			{Type: reconciler.ConditionRolloutStuck, Status: false},
		},
		LastProgressTime: ts.Add(time.Minute).UTC(),
		Ordinals: []reconciler.OrdinalRecord{
			{Ordinal: 0, Revision: "web-aaaa", RevisionNumber: 1},
			{Ordinal: 1, Revision: "web-aaaa", RevisionNumber: 1},
			{Ordinal: 2, Revision: "web-bbbb", RevisionNumber: 2},
			{Ordinal: 4, Revision: "web-bbbb", RevisionNumber: 2, Condemned: true, DeleteVolumes: true},
			{Ordinal: 5, Condemned: true},
		},
	}
}

func testEmptySet(t *testing.T, s backend.Store) {
	ctx := ctxFor(t)
	set := backend.SetKey{Namespace: "default", Name: "web"}
	revs := mustList(t, ctx, s, set)
	if len(revs) != 0 {
		t.Fatalf("ListRevisions on a fresh store: %v, want none", revNames(revs))
	}
	if _, found := mustStatus(t, ctx, s, set); found {
		t.Fatal("GetStatus on a fresh store: found = true, want false")
	}
	sets := mustSets(t, ctx, s)
	if len(sets) != 0 {
		t.Fatalf("ListSets on a fresh store: %v, want none", sets)
	}
	// Deleting state that does not exist is harmless.
	if err := s.DeleteSet(ctx, set); err != nil {
		t.Fatalf("DeleteSet of an unknown set: %v", err)
	}
	if err := s.DeleteRevision(ctx, set, "web-nothere"); err != nil {
		t.Fatalf("DeleteRevision of an unknown set: %v", err)
	}
}

func testRevisionCRUD(t *testing.T, s backend.Store) {
	ctx := ctxFor(t)
	set := backend.SetKey{Namespace: "default", Name: "web"}
	r1 := rev("web", "5d8f9c7b4", 1, `{"group":"v1"}`)
	r2 := rev("web", "6b7c8d9e0", 2, `{"group":"v2"}`)
	r3 := rev("web", "77f1e2d3c", 3, "")
	r3.Data = []byte{0, 1, 2, 0xff, '"', '\\'} // binary data must survive
	mustPutRev(t, ctx, s, set, r1)
	checkRevs(t, mustList(t, ctx, s, set), r1)
	mustPutRev(t, ctx, s, set, r2)
	mustPutRev(t, ctx, s, set, r3)
	checkRevs(t, mustList(t, ctx, s, set), r1, r2, r3)

	// Replacing by name keeps one entry and takes the new content.
	r2b := r2
	r2b.JobVersion = 99
	r2b.Data = []byte(`{"group":"v2","note":"replaced"}`)
	mustPutRev(t, ctx, s, set, r2b)
	checkRevs(t, mustList(t, ctx, s, set), r1, r2b, r3)

	if err := s.DeleteRevision(ctx, set, r1.Name); err != nil {
		t.Fatalf("DeleteRevision(%s): %v", r1.Name, err)
	}
	checkRevs(t, mustList(t, ctx, s, set), r2b, r3)
	if err := s.DeleteRevision(ctx, set, r2.Name); err != nil {
		t.Fatalf("DeleteRevision(%s): %v", r2.Name, err)
	}
	if err := s.DeleteRevision(ctx, set, r3.Name); err != nil {
		t.Fatalf("DeleteRevision(%s): %v", r3.Name, err)
	}
	checkRevs(t, mustList(t, ctx, s, set))
}

func testRollbackRenumber(t *testing.T, s backend.Store) {
	ctx := ctxFor(t)
	set := backend.SetKey{Namespace: "default", Name: "db"}
	r1 := rev("db", "aaa", 1, "v1")
	r2 := rev("db", "bbb", 2, "v2")
	mustPutRev(t, ctx, s, set, r1)
	mustPutRev(t, ctx, s, set, r2)
	// Rollback to r1: same name, same data, new number.
	back := r1
	back.Number = 3
	mustPutRev(t, ctx, s, set, back)
	got := mustList(t, ctx, s, set)
	checkRevs(t, got, back, r2)
	for _, r := range got {
		if r.Name == r1.Name && r.Number != 3 {
			t.Fatalf("after rollback %s has Number %d, want 3", r.Name, r.Number)
		}
	}
}

func testDeleteMissingRevision(t *testing.T, s backend.Store) {
	ctx := ctxFor(t)
	set := backend.SetKey{Namespace: "default", Name: "web"}
	r1 := rev("web", "aaa", 1, "v1")
	mustPutRev(t, ctx, s, set, r1)
	if err := s.DeleteRevision(ctx, set, "web-missing"); err != nil {
		t.Fatalf("DeleteRevision of a missing revision: %v, want nil", err)
	}
	if err := s.DeleteRevision(ctx, set, r1.Name); err != nil {
		t.Fatalf("DeleteRevision(%s): %v", r1.Name, err)
	}
	if err := s.DeleteRevision(ctx, set, r1.Name); err != nil {
		t.Fatalf("DeleteRevision(%s) a second time: %v, want nil", r1.Name, err)
	}
	checkRevs(t, mustList(t, ctx, s, set))
}

func testStatusRoundTrip(t *testing.T, s backend.Store) {
	ctx := ctxFor(t)
	set := backend.SetKey{Namespace: "default", Name: "web"}
	want := sampleStatus(42)
	if err := s.PutStatus(ctx, set, want); err != nil {
		t.Fatalf("PutStatus: %v", err)
	}
	got, found := mustStatus(t, ctx, s, set)
	if !found {
		t.Fatal("GetStatus after PutStatus: found = false")
	}
	if d := statusDiff(got, want); d != "" {
		t.Fatalf("status round trip: %s", d)
	}
	// The zero status (no conditions, zero times) round-trips too.
	other := backend.SetKey{Namespace: "default", Name: "zero"}
	if err := s.PutStatus(ctx, other, reconciler.Status{}); err != nil {
		t.Fatalf("PutStatus(zero): %v", err)
	}
	got, found = mustStatus(t, ctx, s, other)
	if !found {
		t.Fatal("GetStatus after PutStatus(zero): found = false")
	}
	if d := statusDiff(got, reconciler.Status{}); d != "" {
		t.Fatalf("zero status round trip: %s", d)
	}
	if !got.LastProgressTime.IsZero() {
		t.Fatalf("zero LastProgressTime came back as %v", got.LastProgressTime)
	}
	// A status alone makes a set known.
	if sets := mustSets(t, ctx, s); len(sets) != 2 {
		t.Fatalf("ListSets after two PutStatus: %v, want both sets", sets)
	}
}

func testStatusOverwrite(t *testing.T, s backend.Store) {
	ctx := ctxFor(t)
	set := backend.SetKey{Namespace: "default", Name: "web"}
	for gen := uint64(1); gen <= 3; gen++ {
		st := sampleStatus(gen)
		st.Conditions = st.Conditions[:gen] // shrinking and growing lists
		if err := s.PutStatus(ctx, set, st); err != nil {
			t.Fatalf("PutStatus(gen %d): %v", gen, err)
		}
		got, found := mustStatus(t, ctx, s, set)
		if !found {
			t.Fatalf("gen %d: status not found", gen)
		}
		if d := statusDiff(got, st); d != "" {
			t.Fatalf("gen %d: %s", gen, d)
		}
	}
	st := sampleStatus(4)
	st.Conditions = nil
	if err := s.PutStatus(ctx, set, st); err != nil {
		t.Fatalf("PutStatus(no conditions): %v", err)
	}
	got, _ := mustStatus(t, ctx, s, set)
	if len(got.Conditions) != 0 {
		t.Fatalf("conditions survived an overwrite without conditions: %+v", got.Conditions)
	}
}

func testDeleteSet(t *testing.T, s backend.Store) {
	ctx := ctxFor(t)
	web := backend.SetKey{Namespace: "default", Name: "web"}
	// "web-2" shares a prefix with "web": deleting "web" must not touch it.
	web2 := backend.SetKey{Namespace: "default", Name: "web-2"}
	webOther := backend.SetKey{Namespace: "other", Name: "web"}
	for _, set := range []backend.SetKey{web, web2, webOther} {
		mustPutRev(t, ctx, s, set, rev(set.Name, "aaa", 1, "v1"))
		mustPutRev(t, ctx, s, set, rev(set.Name, "bbb", 2, "v2"))
		if err := s.PutStatus(ctx, set, sampleStatus(1)); err != nil {
			t.Fatalf("PutStatus(%s): %v", set, err)
		}
	}
	if err := s.DeleteSet(ctx, web); err != nil {
		t.Fatalf("DeleteSet(%s): %v", web, err)
	}
	checkRevs(t, mustList(t, ctx, s, web))
	if _, found := mustStatus(t, ctx, s, web); found {
		t.Fatalf("status of %s survived DeleteSet", web)
	}
	for _, set := range []backend.SetKey{web2, webOther} {
		checkRevs(t, mustList(t, ctx, s, set), rev(set.Name, "aaa", 1, "v1"), rev(set.Name, "bbb", 2, "v2"))
		st, found := mustStatus(t, ctx, s, set)
		if !found {
			t.Fatalf("status of %s was removed by DeleteSet(%s)", set, web)
		}
		if d := statusDiff(st, sampleStatus(1)); d != "" {
			t.Fatalf("status of %s changed by DeleteSet(%s): %s", set, web, d)
		}
	}
	sets := mustSets(t, ctx, s)
	want := []backend.SetKey{web2, webOther}
	sortSets(want)
	if fmt.Sprint(sets) != fmt.Sprint(want) {
		t.Fatalf("ListSets after DeleteSet(%s) = %v, want %v", web, sets, want)
	}
	// The set can be used again after deletion.
	mustPutRev(t, ctx, s, web, rev("web", "ccc", 1, "v3"))
	checkRevs(t, mustList(t, ctx, s, web), rev("web", "ccc", 1, "v3"))
}

func testListSets(t *testing.T, s backend.Store) {
	ctx := ctxFor(t)
	want := []backend.SetKey{
		{Namespace: "default", Name: "web"},
		{Namespace: "default", Name: "db"},
		{Namespace: "prod", Name: "web"},
		{Namespace: "prod", Name: "cache"},
	}
	for i, set := range want {
		if i%2 == 0 {
			mustPutRev(t, ctx, s, set, rev(set.Name, "aaa", 1, "v1"))
		} else if err := s.PutStatus(ctx, set, sampleStatus(1)); err != nil {
			t.Fatalf("PutStatus(%s): %v", set, err)
		}
	}
	// Revisions and status of the same set make one entry.
	if err := s.PutStatus(ctx, want[0], sampleStatus(1)); err != nil {
		t.Fatalf("PutStatus(%s): %v", want[0], err)
	}
	got := mustSets(t, ctx, s)
	sortSets(want)
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("ListSets = %v, want %v", got, want)
	}
	// A set whose last revision was deleted and which has no status is gone.
	if err := s.DeleteRevision(ctx, backend.SetKey{Namespace: "prod", Name: "web"}, "web-aaa"); err != nil {
		t.Fatalf("DeleteRevision: %v", err)
	}
	got = mustSets(t, ctx, s)
	for _, k := range got {
		if k == (backend.SetKey{Namespace: "prod", Name: "web"}) {
			t.Fatalf("ListSets = %v still lists prod/web with no state left", got)
		}
	}
}

func testNamespacesIsolated(t *testing.T, s backend.Store) {
	ctx := ctxFor(t)
	a := backend.SetKey{Namespace: "team-a", Name: "web"}
	b := backend.SetKey{Namespace: "team-b", Name: "web"}
	ra := rev("web", "aaa", 1, "a")
	rb := rev("web", "aaa", 5, "b") // same revision name, different content
	mustPutRev(t, ctx, s, a, ra)
	mustPutRev(t, ctx, s, b, rb)
	stA, stB := sampleStatus(1), sampleStatus(2)
	if err := s.PutStatus(ctx, a, stA); err != nil {
		t.Fatalf("PutStatus(%s): %v", a, err)
	}
	if err := s.PutStatus(ctx, b, stB); err != nil {
		t.Fatalf("PutStatus(%s): %v", b, err)
	}
	checkRevs(t, mustList(t, ctx, s, a), ra)
	checkRevs(t, mustList(t, ctx, s, b), rb)
	got, _ := mustStatus(t, ctx, s, a)
	if d := statusDiff(got, stA); d != "" {
		t.Fatalf("status of %s: %s", a, d)
	}
	if err := s.DeleteRevision(ctx, a, ra.Name); err != nil {
		t.Fatalf("DeleteRevision: %v", err)
	}
	checkRevs(t, mustList(t, ctx, s, b), rb)
	if err := s.DeleteSet(ctx, b); err != nil {
		t.Fatalf("DeleteSet(%s): %v", b, err)
	}
	got, found := mustStatus(t, ctx, s, a)
	if !found {
		t.Fatalf("DeleteSet(%s) removed the status of %s", b, a)
	}
	if d := statusDiff(got, stA); d != "" {
		t.Fatalf("status of %s after DeleteSet(%s): %s", a, b, d)
	}
}

// testAwkwardNames uses names that would break a store that builds paths or
// composite keys naively.
func testAwkwardNames(t *testing.T, s backend.Store) {
	ctx := ctxFor(t)
	sets := []backend.SetKey{
		{Namespace: "default", Name: "a/b"},
		{Namespace: "default", Name: "a"},
		{Namespace: "default", Name: "a%2Fb"},
		{Namespace: "default", Name: ".."},
		{Namespace: "default", Name: "web.v2_x y"},
		{Namespace: "ns/x", Name: "y"},
		{Namespace: "ns", Name: "x/y"},
	}
	for i, set := range sets {
		r := rev("r", fmt.Sprintf("h%d", i), int64(i+1), set.String())
		r.Name = set.Name + "-" + r.Hash
		mustPutRev(t, ctx, s, set, r)
		if err := s.PutStatus(ctx, set, sampleStatus(uint64(i+1))); err != nil {
			t.Fatalf("PutStatus(%q): %v", set, err)
		}
	}
	for i, set := range sets {
		r := rev("r", fmt.Sprintf("h%d", i), int64(i+1), set.String())
		r.Name = set.Name + "-" + r.Hash
		checkRevs(t, mustList(t, ctx, s, set), r)
		st, found := mustStatus(t, ctx, s, set)
		if !found || st.ObservedGeneration != uint64(i+1) {
			t.Fatalf("status of %q: found=%v generation=%d, want generation %d", set, found, st.ObservedGeneration, i+1)
		}
	}
	got := mustSets(t, ctx, s)
	want := append([]backend.SetKey(nil), sets...)
	sortSets(want)
	if fmt.Sprintf("%q", got) != fmt.Sprintf("%q", want) {
		t.Fatalf("ListSets = %q, want %q", got, want)
	}
	if err := s.DeleteSet(ctx, sets[0]); err != nil {
		t.Fatalf("DeleteSet(%q): %v", sets[0], err)
	}
	if n := len(mustSets(t, ctx, s)); n != len(sets)-1 {
		t.Fatalf("DeleteSet(%q) left %d sets, want %d", sets[0], n, len(sets)-1)
	}
}

func testInvalidKeys(t *testing.T, s backend.Store) {
	ctx := ctxFor(t)
	good := backend.SetKey{Namespace: "default", Name: "web"}
	for _, bad := range []backend.SetKey{{Namespace: "", Name: "web"}, {Namespace: "default", Name: ""}} {
		if err := s.PutRevision(ctx, bad, rev("web", "aaa", 1, "x")); err == nil {
			t.Errorf("PutRevision(%q) with an empty key part: no error", bad)
		}
		if err := s.PutStatus(ctx, bad, sampleStatus(1)); err == nil {
			t.Errorf("PutStatus(%q) with an empty key part: no error", bad)
		}
		if _, err := s.ListRevisions(ctx, bad); err == nil {
			t.Errorf("ListRevisions(%q) with an empty key part: no error", bad)
		}
	}
	if err := s.PutRevision(ctx, good, reconciler.Revision{Number: 1}); err == nil {
		t.Error("PutRevision with an empty revision name: no error")
	}
	if n := len(mustSets(t, ctx, s)); n != 0 {
		t.Fatalf("rejected writes left %d sets behind", n)
	}
}

func testReturnedValuesAreCopies(t *testing.T, s backend.Store) {
	ctx := ctxFor(t)
	set := backend.SetKey{Namespace: "default", Name: "web"}
	r := rev("web", "aaa", 1, "original")
	mustPutRev(t, ctx, s, set, r)
	st := sampleStatus(1)
	if err := s.PutStatus(ctx, set, st); err != nil {
		t.Fatalf("PutStatus: %v", err)
	}
	// Mutating what was passed in or handed out must not change the store.
	r.Data[0] = 'X'
	st.Conditions[0].Reason = "Mutated"
	got := mustList(t, ctx, s, set)
	got[0].Data[0] = 'Y'
	gotSt, _ := mustStatus(t, ctx, s, set)
	gotSt.Conditions[0].Reason = "Mutated"
	checkRevs(t, mustList(t, ctx, s, set), rev("web", "aaa", 1, "original"))
	gotSt, _ = mustStatus(t, ctx, s, set)
	if d := statusDiff(gotSt, sampleStatus(1)); d != "" {
		t.Fatalf("stored status changed by mutating a caller's copy: %s", d)
	}
}

// putWithRetry retries a write that lost a check-and-set race, as callers do.
func putWithRetry(ctx context.Context, put func() error) error {
	for attempt := 0; ; attempt++ {
		err := put()
		if !errors.Is(err, backend.ErrConflict) || attempt >= 50 {
			return err
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(time.Duration(attempt+1) * time.Millisecond):
		}
	}
}

func testConcurrentWriters(t *testing.T, s backend.Store) {
	ctx := ctxFor(t)
	const writers, perWriter = 8, 6
	sets := []backend.SetKey{{Namespace: "default", Name: "web"}, {Namespace: "default", Name: "db"}}
	var wg sync.WaitGroup
	errs := make(chan error, writers*perWriter*3)
	for w := 0; w < writers; w++ {
		wg.Add(1)
		go func(w int) {
			defer wg.Done()
			for i := 0; i < perWriter; i++ {
				set := sets[(w+i)%len(sets)]
				r := rev(set.Name, fmt.Sprintf("w%di%d", w, i), int64(w*perWriter+i+1), fmt.Sprintf("writer %d item %d", w, i))
				// Distinct keys: every write must land.
				if err := s.PutRevision(ctx, set, r); err != nil {
					errs <- fmt.Errorf("PutRevision(%s, %s): %w", set, r.Name, err)
				}
				// The same key from everyone: may conflict, a retry must land.
				st := sampleStatus(uint64(w*perWriter + i + 1))
				if err := putWithRetry(ctx, func() error { return s.PutStatus(ctx, set, st) }); err != nil {
					errs <- fmt.Errorf("PutStatus(%s): %w", set, err)
				}
				// Everyone renumbers one shared revision, as racing rollbacks would.
				shared := rev(set.Name, "shared", int64(w*perWriter+i+1), "shared")
				if err := putWithRetry(ctx, func() error { return s.PutRevision(ctx, set, shared) }); err != nil {
					errs <- fmt.Errorf("PutRevision(%s, shared): %w", set, err)
				}
			}
		}(w)
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	if t.Failed() {
		t.FailNow()
	}
	total := 0
	for _, set := range sets {
		revs := mustList(t, ctx, s, set)
		seen := map[string]bool{}
		for _, r := range revs {
			if seen[r.Name] {
				t.Fatalf("revision %s of %s listed twice", r.Name, set)
			}
			seen[r.Name] = true
			if r.Hash == "shared" {
				if string(r.Data) != "shared" || r.Number < 1 || r.Number > writers*perWriter {
					t.Fatalf("shared revision of %s is torn: %+v", set, r)
				}
				continue
			}
			total++
		}
		if !seen[set.Name+"-shared"] {
			t.Fatalf("shared revision of %s is missing", set)
		}
		st, found := mustStatus(t, ctx, s, set)
		if !found {
			t.Fatalf("status of %s missing after concurrent writes", set)
		}
		// Whatever write won, the value is one whole write, not a mix.
		if d := statusDiff(st, sampleStatus(st.ObservedGeneration)); d != "" || st.ObservedGeneration == 0 {
			t.Fatalf("status of %s is torn (generation %d): %s", set, st.ObservedGeneration, d)
		}
	}
	if total != writers*perWriter {
		t.Fatalf("%d distinct revisions stored, want %d: concurrent writes were lost", total, writers*perWriter)
	}
}
