package agent

import (
	"fmt"
	"time"

	"github.com/nomad-statefulset/nomad-statefulset/reconciler"
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

// crashRecord counts an ordinal's recent failures.
type crashRecord struct {
	count int
	last  time.Time
}

// crashed records that the ordinal's failed pod was removed at now, to be
// recreated.
func (st *setState) crashed(ordinal int, now time.Time) {
	if st.crashes == nil {
		st.crashes = map[int]crashRecord{}
	}
	r := st.crashes[ordinal]
	if now.Sub(r.last) > crashBackoffReset {
		r.count = 0
	}
	r.count++
	r.last = now
	st.crashes[ordinal] = r
}

// backoffHolds are the holds the crash-loop backoff puts on creating pods:
// the first failure is recreated at once, as Kubernetes does, and each
// later one waits twice as long, up to crashBackoffMax.
func (st *setState) backoffHolds(now time.Time) []reconciler.Hold {
	var out []reconciler.Hold
	for ord, r := range st.crashes {
		if now.Sub(r.last) > crashBackoffReset {
			delete(st.crashes, ord)
			continue
		}
		if r.count < 2 {
			continue
		}
		wait := exponential(crashBackoffBase, crashBackoffMax, r.count-2)
		if until := r.last.Add(wait); until.After(now) {
			out = append(out, reconciler.Hold{Ordinal: ord, Step: reconciler.StepCreate, Until: until, Reason: reconciler.HoldBackOff,
				Message: fmt.Sprintf("the pod failed %d times in a row; it is created again after a backoff of %s", r.count, wait)})
		}
	}
	return out
}

// holdError is a step the effector could not take now, and that must wait:
// a hook that said wait, a plugin that is down, a spread no node meets. The
// controller records it as a hold for the reconciler's next decisions.
type holdError struct {
	step   reconciler.HoldStep
	reason string // a reconciler.Hold* reason
	wait   time.Duration
	msg    string
}

func (e *holdError) Error() string {
	return fmt.Sprintf("%s; trying again in %s", e.msg, e.wait.Round(time.Second))
}
