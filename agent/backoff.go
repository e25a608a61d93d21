package agent

import (
	"fmt"
	"sync"
	"time"

	"github.com/nomad-statefulset/nomad-statefulset/backend"
)

// Crash-loop backoff for pods that end Failed again and again. Kubernetes
// leaves this to the kubelet's CrashLoopBackOff; with Nomad the controller
// recreates the child job itself, so it must not do that in a hot loop.
const (
	crashBackoffBase = time.Second
	crashBackoffMax  = 5 * time.Minute
	// crashBackoffReset forgets past failures of an ordinal that has not
	// failed for this long.
	crashBackoffReset = 10 * time.Minute
)

type crashRecord struct {
	count int
	last  time.Time
}

// crashBackoff tracks, per set and ordinal, how often a pod ended Failed.
type crashBackoff struct {
	mu sync.Mutex
	m  map[string]crashRecord
}

func newCrashBackoff() *crashBackoff { return &crashBackoff{m: map[string]crashRecord{}} }

func crashKey(key backend.SetKey, ordinal int) string { return fmt.Sprintf("%s/%d", key, ordinal) }

// failed records that the ordinal's pod ended Failed at now.
func (b *crashBackoff) failed(key backend.SetKey, ordinal int, now time.Time) {
	b.mu.Lock()
	defer b.mu.Unlock()
	k := crashKey(key, ordinal)
	r := b.m[k]
	if now.Sub(r.last) > crashBackoffReset {
		r.count = 0
	}
	r.count++
	r.last = now
	b.m[k] = r
}

// remaining is how long the ordinal must still wait before it is recreated.
// The first failure is recreated at once, as Kubernetes does.
func (b *crashBackoff) remaining(key backend.SetKey, ordinal int, now time.Time) time.Duration {
	b.mu.Lock()
	defer b.mu.Unlock()
	r, ok := b.m[crashKey(key, ordinal)]
	if !ok || r.count < 2 || now.Sub(r.last) > crashBackoffReset {
		return 0
	}
	return r.last.Add(exponential(crashBackoffBase, crashBackoffMax, r.count-2)).Sub(now)
}

// deferError defers an action: a crash-loop backoff, a lifecycle hook that
// holds the step, or a plugin that is down. The set is looked at again
// after wait; nothing failed, so it is not retried with error backoff.
type deferError struct {
	wait   time.Duration
	kind   string // the event type shown on the set: BackOff, HookWaiting, PluginUnavailable
	reason string
}

func (e *deferError) Error() string {
	return fmt.Sprintf("%s; trying again in %s", e.reason, e.wait.Round(time.Second))
}

// forget drops every ordinal's record of a set that is gone.
func (b *crashBackoff) forget(key backend.SetKey) {
	b.mu.Lock()
	defer b.mu.Unlock()
	prefix := key.String() + "/"
	for k := range b.m {
		if len(k) > len(prefix) && k[:len(prefix)] == prefix {
			delete(b.m, k)
		}
	}
}
