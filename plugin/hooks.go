package plugin

import (
	"errors"
	"time"
)

// DefaultHookTimeout bounds one lifecycle-hook call when its hook block
// sets no timeout.
const DefaultHookTimeout = 30 * time.Second

// FailurePolicy says what a failed or timed-out hook does to the pod's step
// (a hook block's failure_policy).
type FailurePolicy string

// The failure policies.
const (
	// FailureBlock holds the pod's step until the hook succeeds. It is the
	// default, because a skipped decommission can lose data.
	FailureBlock FailurePolicy = "block"
	// FailureIgnore logs the failure and carries on.
	FailureIgnore FailurePolicy = "ignore"
)

// HookResult is what the hooks of one event say about one pod's step.
type HookResult struct {
	// Proceed lets the step go ahead: every hook said done, or failed with
	// failure_policy "ignore".
	Proceed bool
	// RetryAfter is when to run the hooks again if the step is held.
	RetryAfter time.Duration
	// Hook is the hook block holding the step, if any.
	Hook string
	// Failed is set when the step is held by a failure (a fail answer, an
	// error, a timeout or a plugin that is down) rather than a wait.
	Failed bool
	// Reason says why the step is held, for the log and the set's
	// conditions: it names the hook, the pod and the plugin's message.
	Reason string
}

// ErrPluginUnavailable is returned (wrapped, with the plugin's name and the
// reason) by calls to a plugin that is down: crashed and not yet restarted,
// or failing to restart. The caller should hold the affected step and try
// again later; nothing was done.
var ErrPluginUnavailable = errors.New("plugin unavailable")
