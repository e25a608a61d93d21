// Package storecache keeps one leadership term's copy of the sets' stored
// revisions and status in memory, so that a reconcile pass reads them
// without a round trip to the store.
//
// Upstream's StatefulSet controller does the same: it reads its
// ControllerRevisions and the StatefulSet from its informers' caches and
// writes through the API server, whose resourceVersion check refuses a write
// made from a stale read. Here the one writer is the leader, and every
// write of a persistent store is a check-and-set (fenced by the leader lock
// in Consul). A write therefore either succeeds, and then the store holds
// exactly what was written, which the cache keeps, or fails, and then the
// cache drops everything it knows of that set, so that the next pass reads
// the store afresh and retries from there.
//
// What the cache cannot see is an edit made by hand in the store, such as a
// value an operator corrupted. Forget drops everything; the agent calls it at
// every full re-list of Nomad (the resync), which reconciles every set
// again, so such an edit is seen at the next resync, as it was when every
// pass read the store.
//
// Values are kept decoded, as the store's reads return them, and every
// read returns its own deep copy (cloneRevision, cloneStatus): the profile
// of issue 28 showed decoding the stored JSON, not the round trip alone, to
// be most of what a read cost. A written value is kept as the store would
// return it, through the stores' own encoding (backend/internal/codec).
package storecache

import (
	"bytes"
	"context"
	"slices"
	"strings"
	"sync"

	"github.com/nomad-statefulset/nomad-statefulset/backend"
	"github.com/nomad-statefulset/nomad-statefulset/backend/internal/codec"
	"github.com/nomad-statefulset/nomad-statefulset/reconciler"
)

// Store is a backend.Store that serves repeated reads of a set from memory
// and writes through to the store it wraps. It is safe for concurrent use.
// One set is meant to be read and written by one goroutine at a time, as
// the agent's work queue has it: a read of the store that overlaps a write
// of the same set may keep the older value, which the next Confirm finds.
type Store struct {
	inner backend.Store

	mu   sync.Mutex
	sets map[backend.SetKey]*stored
	// generation changes at every Forget. A read that went to the store
	// is kept only if no Forget happened while it was in flight: its value
	// may predate the edit that Forget is there to reveal.
	generation uint64
}

// stored is what the cache knows of one set. Nothing in it is ever handed
// out: reads get copies.
type stored struct {
	// revisions are the set's revisions sorted by name, when
	// revisionsKnown.
	revisions      []reconciler.Revision
	revisionsKnown bool
	// status is the stored status, when statusKnown and statusFound.
	status      reconciler.Status
	statusFound bool
	statusKnown bool
}

var _ backend.Store = (*Store)(nil)

// New returns a cache in front of inner, empty: each set's first read goes
// to inner.
func New(inner backend.Store) *Store {
	return &Store{inner: inner, sets: map[backend.SetKey]*stored{}}
}

// Forget drops everything the cache holds: every set's next read goes to
// the store. The agent calls it at each full re-list of Nomad.
func (s *Store) Forget() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.generation++
	clear(s.sets)
}

// ListRevisions implements backend.Store.
func (s *Store) ListRevisions(ctx context.Context, set backend.SetKey) ([]reconciler.Revision, error) {
	s.mu.Lock()
	if st, ok := s.sets[set]; ok && st.revisionsKnown {
		defer s.mu.Unlock()
		return cloneRevisions(st.revisions), nil
	}
	gen := s.generation
	s.mu.Unlock()

	revs, err := s.inner.ListRevisions(ctx, set)
	if err != nil {
		return nil, err
	}
	kept := cloneRevisions(revs)
	sortRevisions(kept)
	s.mu.Lock()
	defer s.mu.Unlock()
	if gen == s.generation {
		st := s.entry(set)
		st.revisions, st.revisionsKnown = kept, true
	}
	// In the order a read from memory returns them.
	return cloneRevisions(kept), nil
}

// GetStatus implements backend.Store.
func (s *Store) GetStatus(ctx context.Context, set backend.SetKey) (reconciler.Status, bool, error) {
	s.mu.Lock()
	if st, ok := s.sets[set]; ok && st.statusKnown {
		defer s.mu.Unlock()
		return cloneStatus(st.status), st.statusFound, nil
	}
	gen := s.generation
	s.mu.Unlock()

	status, found, err := s.inner.GetStatus(ctx, set)
	if err != nil {
		return status, found, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if gen == s.generation {
		st := s.entry(set)
		st.status, st.statusFound, st.statusKnown = cloneStatus(status), found, true
	}
	return status, found, nil
}

// Confirm reads the set's revisions and status from the store and reports
// whether they are what the cache holds. The agent calls it before a pass
// acts, so that a pass acts only once the store has answered for its set,
// as when every pass read it: a leader cut off from Consul makes no Nomad
// write (TestConsulRestart), and an edit by hand is seen before the next
// action rather than at the next resync. When they differ, the cache keeps
// what the store answered and Confirm returns false: the pass must decide
// again. A read that fails drops the set and returns the error.
func (s *Store) Confirm(ctx context.Context, set backend.SetKey) (bool, error) {
	s.mu.Lock()
	gen := s.generation
	s.mu.Unlock()
	revs, status, found, err := s.readSet(ctx, set)
	if err != nil {
		s.drop(set)
		return false, err
	}
	fresh := cloneRevisions(revs)
	sortRevisions(fresh)
	s.mu.Lock()
	defer s.mu.Unlock()
	if st, ok := s.sets[set]; ok && st.revisionsKnown && st.statusKnown &&
		sameRevisions(st.revisions, fresh) && st.statusFound == found && (!found || reconciler.StatusEqual(st.status, status)) {
		return true, nil
	}
	delete(s.sets, set)
	if gen == s.generation {
		st := s.entry(set)
		st.revisions, st.revisionsKnown = fresh, true
		st.status, st.statusFound, st.statusKnown = cloneStatus(status), found, true
	}
	return false, nil
}

// readSet reads the set's revisions and status from the store: in one
// request when it can (backend.SetReader), else in two.
func (s *Store) readSet(ctx context.Context, set backend.SetKey) ([]reconciler.Revision, reconciler.Status, bool, error) {
	if r, ok := s.inner.(backend.SetReader); ok {
		return r.ReadSet(ctx, set)
	}
	revs, err := s.inner.ListRevisions(ctx, set)
	if err != nil {
		return nil, reconciler.Status{}, false, err
	}
	status, found, err := s.inner.GetStatus(ctx, set)
	return revs, status, found, err
}

// sameRevisions compares two lists of revisions sorted by name, by meaning
// (times with Equal), as reconciler.StatusEqual compares statuses.
func sameRevisions(a, b []reconciler.Revision) bool {
	return slices.EqualFunc(a, b, func(x, y reconciler.Revision) bool {
		return x.Name == y.Name && x.Hash == y.Hash && x.Number == y.Number && bytes.Equal(x.Data, y.Data) &&
			x.CreatedAt.Equal(y.CreatedAt) && x.JobVersion == y.JobVersion
	})
}

// PutRevision implements backend.Store: the revision is kept once the store
// has it.
func (s *Store) PutRevision(ctx context.Context, set backend.SetKey, rev reconciler.Revision) error {
	if err := s.inner.PutRevision(ctx, set, rev); err != nil {
		s.drop(set)
		return err
	}
	stored, ok := asStoredRevision(rev)
	s.mu.Lock()
	defer s.mu.Unlock()
	st, known := s.sets[set]
	if !known || !st.revisionsKnown {
		return nil
	}
	if !ok {
		st.revisionsKnown = false
		return nil
	}
	if i := slices.IndexFunc(st.revisions, func(r reconciler.Revision) bool { return r.Name == rev.Name }); i >= 0 {
		st.revisions[i] = stored
		return nil
	}
	st.revisions = append(st.revisions, stored)
	sortRevisions(st.revisions)
	return nil
}

// DeleteRevision implements backend.Store.
func (s *Store) DeleteRevision(ctx context.Context, set backend.SetKey, name string) error {
	if err := s.inner.DeleteRevision(ctx, set, name); err != nil {
		s.drop(set)
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if st, ok := s.sets[set]; ok && st.revisionsKnown {
		st.revisions = slices.DeleteFunc(st.revisions, func(r reconciler.Revision) bool { return r.Name == name })
	}
	return nil
}

// PutStatus implements backend.Store: the status is kept once the store has
// it.
func (s *Store) PutStatus(ctx context.Context, set backend.SetKey, status reconciler.Status) error {
	if err := s.inner.PutStatus(ctx, set, status); err != nil {
		s.drop(set)
		return err
	}
	stored, ok := asStoredStatus(status)
	s.mu.Lock()
	defer s.mu.Unlock()
	st := s.entry(set)
	st.status, st.statusFound, st.statusKnown = stored, true, ok
	return nil
}

// DeleteSet implements backend.Store. The set's next read goes to the store
// whatever the outcome.
func (s *Store) DeleteSet(ctx context.Context, set backend.SetKey) error {
	err := s.inner.DeleteSet(ctx, set)
	s.drop(set)
	return err
}

// ListSets implements backend.Store; it is not cached: it asks which sets
// the store holds, which only the store knows.
func (s *Store) ListSets(ctx context.Context) ([]backend.SetKey, error) {
	return s.inner.ListSets(ctx)
}

// Close implements backend.Store. The wrapped store belongs to the caller,
// which outlives a leadership term, and is left open.
func (s *Store) Close() error {
	s.Forget()
	return nil
}

// entry returns the set's entry, made empty if there is none. The caller
// holds mu.
func (s *Store) entry(set backend.SetKey) *stored {
	st, ok := s.sets[set]
	if !ok {
		st = &stored{}
		s.sets[set] = st
	}
	return st
}

// drop forgets one set: after a failed write the store may hold anything
// (a check-and-set lost to someone else, or a write that timed out after it
// was applied), so the next read must ask it.
func (s *Store) drop(set backend.SetKey) {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.sets, set)
}

// asStoredRevision is rev as a read of the store returns it once written:
// through the stores' encoding, which, for one, keeps no monotonic clock
// reading. ok is false when it does not encode, and then nothing is kept.
func asStoredRevision(rev reconciler.Revision) (reconciler.Revision, bool) {
	raw, err := codec.EncodeRevision(rev)
	if err != nil {
		return reconciler.Revision{}, false
	}
	out, err := codec.DecodeRevision(raw, rev.Name)
	return out, err == nil
}

// asStoredStatus is status as a read of the store returns it once
// written, as asStoredRevision.
func asStoredStatus(status reconciler.Status) (reconciler.Status, bool) {
	raw, err := codec.EncodeStatus(status)
	if err != nil {
		return reconciler.Status{}, false
	}
	out, err := codec.DecodeStatus(raw)
	return out, err == nil
}

// cloneRevisions deep-copies revisions.
func cloneRevisions(revs []reconciler.Revision) []reconciler.Revision {
	out := make([]reconciler.Revision, len(revs))
	for i, r := range revs {
		out[i] = cloneRevision(r)
	}
	return out
}

// cloneRevision deep-copies a revision: Data is its one reference field
// (TestClonesCoverEveryReferenceField).
func cloneRevision(r reconciler.Revision) reconciler.Revision {
	r.Data = slices.Clone(r.Data)
	return r
}

// cloneStatus deep-copies a status: Conditions and Ordinals are its only
// reference fields, and their elements hold none
// (TestClonesCoverEveryReferenceField).
func cloneStatus(st reconciler.Status) reconciler.Status {
	st.Conditions = slices.Clone(st.Conditions)
	st.Ordinals = slices.Clone(st.Ordinals)
	return st
}

// sortRevisions orders revisions by name, so that reads from memory return
// them in one order whatever the order they were written in.
func sortRevisions(revs []reconciler.Revision) {
	slices.SortFunc(revs, func(a, b reconciler.Revision) int { return strings.Compare(a.Name, b.Name) })
}
