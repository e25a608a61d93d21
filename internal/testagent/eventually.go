package testagent

import (
	"testing"
	"time"
)

// Eventually polls cond every 250ms until it returns nil, and fails the test
// if that has not happened within timeout, naming what it waited for and the
// last error. Tests against a real agent wait on eventually consistent state
// (allocations placed, deployments done), so they share this one loop.
func Eventually(t testing.TB, timeout time.Duration, what string, cond func() error) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		err := cond()
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %s waiting for %s: %v", timeout, what, err)
		}
		time.Sleep(250 * time.Millisecond)
	}
}
