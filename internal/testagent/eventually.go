package testagent

import (
	"errors"
	"testing"
	"time"
)

// ErrGiveUp, wrapped in a condition's error, makes Eventually fail at once
// instead of waiting for the deadline: for a state that can no longer turn
// good (a process that exited, an allocation that failed).
var ErrGiveUp = errors.New("giving up")

// Eventually polls cond every 250ms until it returns nil, and fails the test
// if that has not happened within timeout, naming what it waited for and the
// last error. Tests against a real agent wait on eventually consistent state
// (allocations placed, deployments done), so they share this one loop.
func Eventually(t testing.TB, timeout time.Duration, what string, cond func() error) {
	t.Helper()
	start := time.Now()
	deadline := start.Add(timeout)
	for {
		err := cond()
		if err == nil {
			return
		}
		if errors.Is(err, ErrGiveUp) {
			t.Fatalf("gave up waiting for %s after %s: %v", what, time.Since(start).Round(time.Millisecond), err)
		}
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %s waiting for %s: %v", timeout, what, err)
		}
		time.Sleep(250 * time.Millisecond)
	}
}
