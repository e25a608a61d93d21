package e2e

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nomad-statefulset/nomad-statefulset/internal/testagent"
)

// TestDemo runs scripts/demo.sh up as `make demo` does (after `make tools
// build`), in a directory of its own, and checks what a newcomer is
// promised: the set becomes ready, the daemon's status says every replica
// is, and demo.sh down stops what up started. EXAMPLE=nats is run, step by
// step, by TestNATSTutorial. EXAMPLE=postgres is not run here: on this
// machine its first member never became ready within 6 minutes (see the
// closing note of 2026-11-26); TestPostgres runs the example itself on the
// test harness.
func TestDemo(t *testing.T) {
	root, err := testagent.ModuleRoot()
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		example, set, need, install string
		replicas                    string
	}{
		{example: "web", set: "web", replicas: "3"},
	} {
		t.Run(tc.example, func(t *testing.T) {
			if tc.need != "" {
				if _, err := os.Stat(tc.need); err != nil {
					t.Fatalf("EXAMPLE=%s needs %s (%v): %s", tc.example, tc.need, err, tc.install)
				}
			}
			dir := t.TempDir()
			demo := filepath.Join(dir, "demo")
			env := append(os.Environ(),
				"DEMO_DIR="+demo, "EXAMPLE="+tc.example,
				"NOMAD_BIN="+tutorialBinary(t, root, "NOMAD_BIN", "nomad"),
				"CONSUL_BIN="+tutorialBinary(t, root, "CONSUL_BIN", "consul"),
				"NSS_BIN="+DaemonBinary(t))
			env = tutorialEnvWithout(env, "AWS_CA_BUNDLE", "NOMAD_ADDR", "NOMAD_TOKEN", "NOMAD_NAMESPACE", "NOMAD_REGION", "CONSUL_HTTP_ADDR", "CONSUL_HTTP_TOKEN")
			run := func(timeout time.Duration, name string, args ...string) (string, error) {
				ctx, cancel := context.WithTimeout(context.Background(), timeout)
				defer cancel()
				cmd := exec.CommandContext(ctx, name, args...)
				cmd.Dir, cmd.Env = root, env
				cmd.WaitDelay = 10 * time.Second
				out, err := cmd.CombinedOutput()
				return string(out), err
			}
			downed := false
			t.Cleanup(func() {
				if !downed {
					if out, err := run(2*time.Minute, "bash", "scripts/demo.sh", "down"); err != nil {
						t.Logf("demo down: %v\n%s", err, out)
					}
				}
			})
			start := time.Now()
			out, err := run(6*time.Minute, "bash", "scripts/demo.sh", "up")
			if err != nil {
				t.Fatalf("EXAMPLE=%s scripts/demo.sh up: %v\n%s", tc.example, err, out)
			}
			if !strings.Contains(out, "==> "+tc.set+" is ready") {
				t.Fatalf("EXAMPLE=%s scripts/demo.sh up did not say %q:\n%s", tc.example, tc.set+" is ready", out)
			}
			t.Logf("EXAMPLE=%s: up and ready in %v", tc.example, time.Since(start).Round(time.Second))
			status, err := run(time.Minute, "bash", "-c", "source "+filepath.Join(demo, "env.sh")+" && nomad-statefulset status "+tc.set)
			want := "Replicas          = " + tc.replicas + " desired, " + tc.replicas + " ready"
			if err != nil || !strings.Contains(status, want) {
				t.Fatalf("EXAMPLE=%s: nomad-statefulset status %s (%v) lacks %q:\n%s", tc.example, tc.set, err, want, status)
			}
			// The exec tasks' executors and logmons keep their sockets in the
			// demo's directory, so that down removes them and /tmp keeps none.
			socks, _ := filepath.Glob(filepath.Join(demo, "nomad", "plugins", "plugin*"))
			nodeSocks, _ := filepath.Glob(filepath.Join(demo, "node-*", "nomad", "plugins", "plugin*"))
			if len(socks)+len(nodeSocks) == 0 {
				t.Errorf("EXAMPLE=%s: no plugin socket under %s/**/nomad/plugins while the set runs: demo.sh does not give Nomad PLUGIN_UNIX_SOCKET_DIR", tc.example, demo)
			}
			out, err = run(5*time.Minute, "bash", "scripts/demo.sh", "down")
			downed = true
			if err != nil {
				t.Fatalf("EXAMPLE=%s scripts/demo.sh down: %v\n%s", tc.example, err, out)
			}
			pids, _ := filepath.Glob(filepath.Join(demo, "*", "*.pid"))
			more, _ := filepath.Glob(filepath.Join(demo, "*", "*", "*.pid"))
			if left := append(pids, more...); len(left) > 0 {
				t.Fatalf("EXAMPLE=%s: demo.sh down left pid files %v", tc.example, left)
			}
		})
	}
}
