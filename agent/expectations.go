package agent

import (
	"time"

	"github.com/nomad-statefulset/nomad-statefulset/backend"
)

// expectation is one write the set waits to see in the cache, as the
// Kubernetes controllers' expectations: until the watcher has folded the
// write in, a decision would be made on a cache that does not have it, and
// could repeat it (a second child for one ordinal).
type expectation struct {
	what     string
	met      func(backend.Observation) bool
	deadline time.Time
}

// expectWrite records that the set waits until met holds of its
// observation, for at most ttl.
func (st *setState) expectWrite(what string, now time.Time, ttl time.Duration, met func(backend.Observation) bool) {
	st.expect = append(st.expect, expectation{what: what, met: met, deadline: now.Add(ttl)})
}

// pendingWrites drops the expectations obs meets, and returns the others;
// expired reports one past its deadline: the cache missed a write and must
// be re-listed.
func (st *setState) pendingWrites(obs backend.Observation, now time.Time) (waiting []string, expired bool) {
	keep := st.expect[:0]
	for _, x := range st.expect {
		switch {
		case x.met(obs):
		case now.After(x.deadline):
			expired = true
		default:
			keep = append(keep, x)
			waiting = append(waiting, x.what)
		}
	}
	st.expect = keep
	return waiting, expired
}

// firstDeadline returns the earliest deadline of the writes the set still
// waits for, and false when it waits for none.
func (st *setState) firstDeadline() (time.Time, bool) {
	var first time.Time
	for _, x := range st.expect {
		if first.IsZero() || x.deadline.Before(first) {
			first = x.deadline
		}
	}
	return first, !first.IsZero()
}
