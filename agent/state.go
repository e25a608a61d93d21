package agent

import (
	"sync"
	"time"

	"github.com/nomad-statefulset/nomad-statefulset/backend"
	"github.com/nomad-statefulset/nomad-statefulset/client"
	"github.com/nomad-statefulset/nomad-statefulset/reconciler"
)

// setState is everything the agent keeps for one set during a leadership
// term. It is made in one place (setStates.of) and dropped in one place
// (setStates.drop); losing leadership drops them all with the controller.
//
// The work queue hands a set to one worker at a time, and only that worker
// touches the fields above viewMu. The view is also read by the HTTP API,
// so it has a lock of its own.
type setState struct {
	// spec is the set's last valid spec, so that a parent purged from
	// Nomad is still torn down by its own retention policy; nil until one
	// parsed.
	spec *reconciler.Spec
	// revData caches the revision data by the parent's JobModifyIndex:
	// computing it is half of a steady-state reconcile, and it changes only
	// when the parent job does.
	revData cachedRevisionData
	// rendered caches the digest of each revision rendered for each
	// ordinal that has a pod: what hand edits are found against.
	rendered renderedDigests
	// children holds what is remembered per child job, by job ID.
	children map[string]*childMemo
	// detached says this term has announced the set as detached (an
	// event and a warning), so that it is announced once per term, and
	// its adoption when it is annotated again.
	detached bool
	// memory is the set's decision memory (reconciler.Memory): the
	// reconciler's last Output.Memory, with the result of every action
	// carried out since folded in.
	memory reconciler.Memory
	// expect are the writes not yet seen in the cache.
	expect []expectation
	// unexpandable are the classes whose Capabilities said they cannot
	// expand, each reported once in an event this term.
	unexpandable []string

	viewMu sync.Mutex
	// view is what the HTTP API shows for the set.
	view client.SetDetail
	// podStates are the pod states last published as metrics, so that a
	// state no pod is in any more is removed.
	podStates map[string]bool
	// rolloutSince is when this term first saw the set rolling out to
	// rolloutTo (its update revision differing from its current one); zero
	// while it is not. hasLeaderCheck says the set declares a leader check.
	// Both are for the metrics.
	rolloutSince   time.Time
	rolloutTo      string
	hasLeaderCheck bool
}

// childMemo is what the agent remembers of one child job, each as the Nomad
// index it concerns.
type childMemo struct {
	// own is the JobModifyIndex of the daemon's last registration of the
	// child: the child Nomad holds at that index is what Nomad made of the
	// daemon's own rendering, never a hand edit.
	own uint64
	// edited is the JobModifyIndex of the hand edit last reported, so that
	// it is reported once.
	edited uint64
}

// child returns the memo of child job id, creating it.
func (st *setState) child(id string) *childMemo {
	if st.children == nil {
		st.children = map[string]*childMemo{}
	}
	m := st.children[id]
	if m == nil {
		m = &childMemo{}
		st.children[id] = m
	}
	return m
}

// setStates is the one map of per-set state of a leadership term.
type setStates struct {
	mu sync.RWMutex
	m  map[backend.SetKey]*setState
	// onPods publishes a set's pod counts by state as metrics, given the
	// states it published last, and returns the states now published (nil
	// counts remove them all). Nil in tests that need no metrics.
	onPods func(key backend.SetKey, prev map[string]bool, counts map[string]int) map[string]bool
}

func newSetStates(onPods func(backend.SetKey, map[string]bool, map[string]int) map[string]bool) *setStates {
	return &setStates{m: map[backend.SetKey]*setState{}, onPods: onPods}
}

// of returns the state of key, creating it: the one place a set's state is
// made.
func (s *setStates) of(key backend.SetKey) *setState {
	s.mu.RLock()
	st := s.m[key]
	s.mu.RUnlock()
	if st != nil {
		return st
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if st = s.m[key]; st == nil {
		st = &setState{view: client.SetDetail{Namespace: key.Namespace, Name: key.Name}}
		s.m[key] = st
	}
	return st
}

// peek returns the state of key without creating it.
func (s *setStates) peek(key backend.SetKey) (*setState, bool) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	st, ok := s.m[key]
	return st, ok
}

// drop forgets everything kept of key: the one place a set's state goes. A
// set of the same name seen later starts afresh.
func (s *setStates) drop(key backend.SetKey) {
	s.mu.Lock()
	st, ok := s.m[key]
	delete(s.m, key)
	s.mu.Unlock()
	if ok && s.onPods != nil {
		st.viewMu.Lock()
		st.podStates = s.onPods(key, st.podStates, nil)
		st.viewMu.Unlock()
	}
}

// dropAll forgets every set, at the end of a leadership term.
func (s *setStates) dropAll() {
	s.mu.RLock()
	keys := make([]backend.SetKey, 0, len(s.m))
	for k := range s.m {
		keys = append(keys, k)
	}
	s.mu.RUnlock()
	for _, k := range keys {
		s.drop(k)
	}
}
