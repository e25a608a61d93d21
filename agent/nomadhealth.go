package agent

import (
	"fmt"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/nomad-statefulset/nomad-statefulset/backend"
)

// callFailureMemory is how long a failed Nomad call keeps /v1/health
// degraded when the verb is not called again. A set that keeps failing is
// retried at most RetryMaxDelay (1 minute by default) apart, so a lasting
// fault is seen again well within it, and a one-off failure of a verb that
// is not called again stops counting.
const callFailureMemory = 2 * time.Minute

// callHealth remembers, per Nomad verb, whether the last call failed. The
// event stream can stay healthy while Nomad refuses every write (5xx, a
// missing ACL capability); health must say so as well as the log.
type callHealth struct {
	mu     sync.Mutex
	failed map[string]callFailure
}

type callFailure struct {
	err string
	// since is the first failure of the current run of failures, which is
	// what health reports; last, the latest, is what is forgotten.
	since, last time.Time
}

// observe records the outcome of one call made at now. Not-found and
// check-and-set conflicts are answers, not faults: the agent acts on them.
func (h *callHealth) observe(verb string, err error, now time.Time) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if err == nil || backend.IsNotFound(err) || backend.IsConflict(err) {
		delete(h.failed, verb)
		return
	}
	if h.failed == nil {
		h.failed = map[string]callFailure{}
	}
	since := now
	if prev, ok := h.failed[verb]; ok && now.Sub(prev.last) <= callFailureMemory {
		since = prev.since
	}
	h.failed[verb] = callFailure{err: err.Error(), since: since, last: now}
}

// problem describes the verbs whose last call failed within
// callFailureMemory of now, or "" when there are none.
func (h *callHealth) problem(now time.Time) string {
	h.mu.Lock()
	defer h.mu.Unlock()
	var out []string
	for verb, f := range h.failed {
		if now.Sub(f.last) > callFailureMemory {
			continue
		}
		out = append(out, fmt.Sprintf("%s failing since %s: %s", verb, f.since.UTC().Format(time.RFC3339), f.err))
	}
	sort.Strings(out)
	return strings.Join(out, "; ")
}
