package agent

import (
	"errors"
	"time"

	"github.com/nomad-statefulset/nomad-statefulset/reconciler"
)

// waitError is a step an effect could not take now, and that must wait: a
// hook that said wait, a plugin that is down, a spread no node meets. It
// becomes the Wait of the action's Result; how long the step then waits is
// the reconciler's wait policy for the reason (reconciler.Fold), unless the
// world said (a hook's retry_after).
type waitError struct {
	reason string // a reconciler.Hold* reason
	msg    string
	// retryAfter is how long the world asked to wait; zero leaves it to
	// the policy.
	retryAfter time.Duration
}

func (e *waitError) Error() string { return e.msg }

// resultOf is the Result of an effect that returned err: a success, a wait
// (a *waitError), or a failure.
func resultOf(err error) reconciler.Result {
	var w *waitError
	switch {
	case err == nil:
		return reconciler.Result{}
	case errors.As(err, &w):
		return reconciler.Result{Wait: &reconciler.Wait{Reason: w.reason, Message: w.msg, RetryAfter: w.retryAfter}}
	}
	return reconciler.Result{Err: err}
}
