// Package memory is the in-memory state store: the backend.Store of tests
// and of anything that needs no persistence.
package memory

import (
	"context"
	"errors"
	"fmt"
	"sync"

	"github.com/nomad-statefulset/nomad-statefulset/backend"
	"github.com/nomad-statefulset/nomad-statefulset/reconciler"
)

// Store is an in-memory backend.Store. It keeps nothing across restarts and
// is meant for tests, benchmarks and the simulated cluster; -dev uses the
// persistent embedded store in backend/bolt instead. It is safe for
// concurrent use, and it never returns backend.ErrConflict or
// backend.ErrNotLeader.
type Store struct {
	mu     sync.RWMutex
	sets   map[backend.SetKey]*memSet
	closed bool
}

type memSet struct {
	revisions map[string]reconciler.Revision
	status    *reconciler.Status
}

var _ backend.Store = (*Store)(nil)

// errClosed is returned by every call on a closed Store.
var errClosed = errors.New("memory store is closed")

// NewStore returns an empty in-memory store.
func NewStore() *Store {
	return &Store{sets: make(map[backend.SetKey]*memSet)}
}

// begin checks the call's arguments and the store's state. The caller holds mu.
func (s *Store) begin(ctx context.Context, set *backend.SetKey) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	if s.closed {
		return errClosed
	}
	if set != nil {
		return set.Validate()
	}
	return nil
}

// ListRevisions implements backend.Store.
func (s *Store) ListRevisions(ctx context.Context, set backend.SetKey) ([]reconciler.Revision, error) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	if err := s.begin(ctx, &set); err != nil {
		return nil, fmt.Errorf("listing revisions of %s: %w", set, err)
	}
	out := []reconciler.Revision{}
	if ms := s.sets[set]; ms != nil {
		for _, r := range ms.revisions {
			out = append(out, copyRevision(r))
		}
	}
	return out, nil
}

// PutRevision implements backend.Store.
func (s *Store) PutRevision(ctx context.Context, set backend.SetKey, rev reconciler.Revision) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := s.begin(ctx, &set); err != nil {
		return fmt.Errorf("storing revision %q of %s: %w", rev.Name, set, err)
	}
	if rev.Name == "" {
		return fmt.Errorf("storing a revision of %s: the revision has no name", set)
	}
	ms := s.sets[set]
	if ms == nil {
		ms = &memSet{revisions: make(map[string]reconciler.Revision)}
		s.sets[set] = ms
	}
	ms.revisions[rev.Name] = copyRevision(rev)
	return nil
}

// DeleteRevision implements backend.Store.
func (s *Store) DeleteRevision(ctx context.Context, set backend.SetKey, name string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := s.begin(ctx, &set); err != nil {
		return fmt.Errorf("deleting revision %q of %s: %w", name, set, err)
	}
	if ms := s.sets[set]; ms != nil {
		delete(ms.revisions, name)
		s.dropIfEmpty(set, ms)
	}
	return nil
}

// GetStatus implements backend.Store.
func (s *Store) GetStatus(ctx context.Context, set backend.SetKey) (reconciler.Status, bool, error) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	if err := s.begin(ctx, &set); err != nil {
		return reconciler.Status{}, false, fmt.Errorf("reading status of %s: %w", set, err)
	}
	ms := s.sets[set]
	if ms == nil || ms.status == nil {
		return reconciler.Status{}, false, nil
	}
	return copyStatus(*ms.status), true, nil
}

// PutStatus implements backend.Store.
func (s *Store) PutStatus(ctx context.Context, set backend.SetKey, status reconciler.Status) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := s.begin(ctx, &set); err != nil {
		return fmt.Errorf("storing status of %s: %w", set, err)
	}
	ms := s.sets[set]
	if ms == nil {
		ms = &memSet{revisions: make(map[string]reconciler.Revision)}
		s.sets[set] = ms
	}
	st := copyStatus(status)
	ms.status = &st
	return nil
}

// DeleteSet implements backend.Store.
func (s *Store) DeleteSet(ctx context.Context, set backend.SetKey) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := s.begin(ctx, &set); err != nil {
		return fmt.Errorf("deleting state of %s: %w", set, err)
	}
	delete(s.sets, set)
	return nil
}

// ListSets implements backend.Store.
func (s *Store) ListSets(ctx context.Context) ([]backend.SetKey, error) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	if err := s.begin(ctx, nil); err != nil {
		return nil, fmt.Errorf("listing sets: %w", err)
	}
	out := make([]backend.SetKey, 0, len(s.sets))
	for k := range s.sets {
		out = append(out, k)
	}
	return out, nil
}

// Close implements backend.Store. Later calls fail.
func (s *Store) Close() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.closed = true
	s.sets = nil
	return nil
}

func (s *Store) dropIfEmpty(set backend.SetKey, ms *memSet) {
	if len(ms.revisions) == 0 && ms.status == nil {
		delete(s.sets, set)
	}
}

func copyRevision(r reconciler.Revision) reconciler.Revision {
	if r.Data != nil {
		r.Data = append([]byte{}, r.Data...)
	}
	return r
}

func copyStatus(st reconciler.Status) reconciler.Status {
	if st.Conditions != nil {
		st.Conditions = append([]reconciler.Condition{}, st.Conditions...)
	}
	return st
}
