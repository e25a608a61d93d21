//go:build realagents

package nomad_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/nomad-statefulset/nomad-statefulset/backend/nomad"
	"github.com/nomad-statefulset/nomad-statefulset/internal/testagent"
)

// TestRealNomadExecWithoutShell: what real Nomad (1.10, the exec driver)
// does with a command for a task that has no /bin/sh, which every command
// of a set runs under (a distroless or scratch image). It reports nothing:
// no error frame, no exit code; the exec session never ends, and the call
// returns only at its deadline, as a command still running. (Seen once
// the test goes on to stop the job, but not asserted here, as that would
// mean waiting for something not to happen: the task then ignores its
// stop for minutes, its executor hung on the exec; docs/leaders.md says so.) The agent
// holds the step on that (statefulset_exec_timeout), saying a task without
// /bin/sh is one cause; the simulator plays it the same way
// (agent/noshell_test.go).
func TestRealNomadExecWithoutShell(t *testing.T) {
	n := testagent.Nomad(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	client := nomad.NewAPI(n.Client)
	if _, err := client.RegisterJob(ctx, leaderJob("no-shell", n.HTTPPort), false, 0); err != nil {
		t.Fatal(err)
	}
	allocID, nodeID := runningAlloc(t, n, "no-shell")
	if res, err := client.ExecAlloc(ctx, "default", nodeID, allocID, "main", []string{"true"}, nil); err != nil || res.ExitCode != 0 {
		t.Fatalf("with its shell: %+v, %v; want exit 0", res, err)
	}
	// The exec driver's chroot is the task's directory on the host:
	// taking its /bin/sh away makes it an image without a shell.
	if err := os.Remove(filepath.Join(n.DataDir, "alloc", allocID, "main", "bin", "sh")); err != nil {
		t.Fatalf("removing the task's shell: %v", err)
	}
	cctx, ccancel := context.WithTimeout(ctx, 10*time.Second)
	defer ccancel()
	res, err := client.ExecAlloc(cctx, "default", nodeID, allocID, "main", []string{"true"}, nil)
	if !errors.Is(err, context.DeadlineExceeded) || res.ExitCode != -1 || res.Output != "" {
		t.Fatalf("without a shell: %+v, %v; want no exit code, no output, and the deadline's error", res, err)
	}
	t.Logf("without a shell, Nomad answered: %v", err)
}
