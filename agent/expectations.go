package agent

import (
	"sync"
	"time"

	"github.com/nomad-statefulset/nomad-statefulset/backend"
	"github.com/nomad-statefulset/nomad-statefulset/backend/nomad"
)

// expectation is a write the cache has not shown yet. Until it has, acting
// on the set again would decide from stale observations: the classic way a
// controller creates a duplicate child (Kubernetes #129795).
type expectation struct {
	what     string
	met      func(nomad.Observation) bool
	deadline time.Time
}

// expectations tracks, per set, the writes that must be observed before the
// set is reconciled again. This is the "read your own writes" rule.
type expectations struct {
	mu  sync.Mutex
	m   map[backend.SetKey][]expectation
	ttl time.Duration
}

func newExpectations(ttl time.Duration) *expectations {
	return &expectations{m: map[backend.SetKey][]expectation{}, ttl: ttl}
}

// expect records that the cache must come to satisfy met.
func (e *expectations) expect(key backend.SetKey, what string, now time.Time, met func(nomad.Observation) bool) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.m[key] = append(e.m[key], expectation{what: what, met: met, deadline: now.Add(e.ttl)})
}

// pending drops the expectations obs satisfies and returns what is still
// awaited, and whether any expectation expired. An expired expectation means
// an event was missed: the caller re-lists instead of trusting the cache.
func (e *expectations) pending(key backend.SetKey, obs nomad.Observation, now time.Time) (waiting []string, expired bool) {
	e.mu.Lock()
	defer e.mu.Unlock()
	list := e.m[key]
	keep := list[:0]
	for _, x := range list {
		switch {
		case x.met(obs):
		case now.After(x.deadline):
			expired = true
		default:
			keep = append(keep, x)
			waiting = append(waiting, x.what)
		}
	}
	if len(keep) == 0 {
		delete(e.m, key)
	} else {
		e.m[key] = keep
	}
	return waiting, expired
}

// forget drops the expectations of a set that is gone.
func (e *expectations) forget(key backend.SetKey) {
	e.mu.Lock()
	defer e.mu.Unlock()
	delete(e.m, key)
}
