// Package backend holds the small interfaces through which nomad-statefulset
// reaches the outside world: the state store for revisions and status,
// leader election, and the Nomad cluster as the agent sees it (Cluster,
// Observation; cluster.go), declared without Nomad's own types. The
// implementations live in the sub-packages:
// backend/consul (Consul KV and locks), backend/memory (the in-memory
// store), backend/bolt (the embedded store) and backend/nomad (the real
// Nomad). The simulated Nomad of the tests and benchmarks is test tooling,
// in internal/nomadsim.
//
// backend never imports agent.
package backend

import (
	"context"
	"errors"
	"fmt"

	"github.com/nomad-statefulset/nomad-statefulset/reconciler"
)

// SetKey identifies one set: the parent job's namespace and ID.
type SetKey struct {
	Namespace string
	Name      string
}

// String renders the key as "namespace/name", the form used in logs and
// work-queue keys.
func (k SetKey) String() string { return k.Namespace + "/" + k.Name }

// Validate reports a key with an empty namespace or name. Every Store
// refuses such a key, so that no store files state under a set that no
// parent job can name.
func (k SetKey) Validate() error {
	if k.Namespace == "" || k.Name == "" {
		return fmt.Errorf("invalid set key %q: namespace and name must not be empty", k.String())
	}
	return nil
}

// ErrNotLeader is returned by a fenced write made by an agent that no longer
// holds leadership. Callers must stop acting when they see it.
var ErrNotLeader = errors.New("not the leader: write fenced off")

// ErrConflict is returned when a check-and-set write lost a race with another
// writer. The caller re-reads and decides again.
var ErrConflict = errors.New("check-and-set conflict: the value changed since it was read")

// CorruptValueError reports a stored value that cannot be decoded or has an
// unknown format version. It names the key so the operator can find it.
type CorruptValueError struct {
	Key string
	Err error
}

// Error implements error.
func (e *CorruptValueError) Error() string {
	return fmt.Sprintf("stored value at %q is corrupt or of an unknown format: %v", e.Key, e.Err)
}

// Unwrap returns the decode error.
func (e *CorruptValueError) Unwrap() error { return e.Err }

// Store keeps each set's revision history and status. Every implementation
// passes the same contract test suite (backend/storetest).
type Store interface {
	// ListRevisions returns the set's revisions, in any order. A set with no
	// history returns an empty slice and no error.
	ListRevisions(ctx context.Context, set SetKey) ([]reconciler.Revision, error)
	// PutRevision creates a revision or replaces the one with the same Name
	// (a rollback bumps its Number).
	PutRevision(ctx context.Context, set SetKey, rev reconciler.Revision) error
	// DeleteRevision removes one revision; removing a missing one is not an error.
	DeleteRevision(ctx context.Context, set SetKey, name string) error
	// GetStatus returns the last written status; found is false if there is none.
	GetStatus(ctx context.Context, set SetKey) (status reconciler.Status, found bool, err error)
	// PutStatus records the set's status.
	PutStatus(ctx context.Context, set SetKey, status reconciler.Status) error
	// DeleteSet removes the set's whole history and status. It is called only
	// after a cascading delete has finished.
	DeleteSet(ctx context.Context, set SetKey) error
	// ListSets returns every set with stored state.
	ListSets(ctx context.Context) ([]SetKey, error)
	// Close releases the store's resources.
	Close() error
}

// SetReader is a Store that can read one set's revisions and status in a
// single request. storecache's Confirm, which runs before every pass that
// acts, uses it when the store has it: one read of the store per acting
// pass instead of two.
type SetReader interface {
	// ReadSet returns what ListRevisions and GetStatus would, read together.
	ReadSet(ctx context.Context, set SetKey) (revs []reconciler.Revision, status reconciler.Status, found bool, err error)
}

// Elector decides which of several agents acts.
type Elector interface {
	// Run blocks until ctx is done. Each time this agent gains leadership it
	// calls lead with a context that is cancelled the moment leadership is
	// lost; lead must then stop all work and make no further write.
	Run(ctx context.Context, lead func(ctx context.Context) error) error
	// IsLeader reports whether this agent holds leadership right now.
	IsLeader() bool
}

// AlwaysLeader is the Elector of a single agent with no election (-dev, or
// high_availability disabled).
type AlwaysLeader struct{}

// Run calls lead once with ctx and returns when it returns.
func (AlwaysLeader) Run(ctx context.Context, lead func(ctx context.Context) error) error {
	return lead(ctx)
}

// IsLeader always reports true.
func (AlwaysLeader) IsLeader() bool { return true }
