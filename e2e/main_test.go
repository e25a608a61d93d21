package e2e

import (
	"os"
	"testing"
)

// TestMain removes this process's daemon build (see DaemonBinary) after the
// tests, so that per-process builds do not pile up in .cache/e2e.
func TestMain(m *testing.M) {
	code := m.Run()
	if builtDir != "" {
		_ = os.RemoveAll(builtDir)
	}
	os.Exit(code)
}
