package e2e

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nomad-statefulset/nomad-statefulset/client"
	"github.com/nomad-statefulset/nomad-statefulset/internal/testagent"
)

// buildExamplePlugin builds examples/plugins/predelete-command into a new
// plugin_dir and returns that directory. The binary's name is the plugin's
// driver name, which the daemon's launch check requires.
func buildExamplePlugin(t *testing.T) string {
	t.Helper()
	root, err := testagent.ModuleRoot()
	if err != nil {
		t.Fatalf("e2e: finding the module root: %v", err)
	}
	dir := t.TempDir()
	cmd := exec.Command("go", "build", "-o", filepath.Join(dir, "predelete-command"), "./examples/plugins/predelete-command")
	cmd.Dir = root
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("e2e: go build ./examples/plugins/predelete-command: %v\n%s", err, out)
	}
	return dir
}

// hookEvents returns the messages of the set's HookWaiting events that
// contain every one of parts.
func hookEvents(st client.SetDetail, parts ...string) []string {
	return eventsOf(st, "HookWaiting", parts...)
}

// eventsOf returns the messages of the set's events of type typ that
// contain every one of parts.
func eventsOf(st client.SetDetail, typ string, parts ...string) []string {
	var out []string
	for _, e := range st.Events {
		if e.Type != typ {
			continue
		}
		all := true
		for _, p := range parts {
			all = all && strings.Contains(e.Message, p)
		}
		if all {
			out = append(out, e.Message)
		}
	}
	return out
}

// liveChild reports whether the set has a child job id that is not stopped.
func liveChild(t *testing.T, c *Cluster, set, id string) bool {
	t.Helper()
	for _, j := range ChildJobs(t, c.Nomad.Client, "default", set) {
		if j.ID == id && !j.Stop {
			return true
		}
	}
	return false
}

// waitDeleteHeld waits until a pre_delete hook (what) has held the deletion
// of pod across several askings, each a HookWaiting event containing every
// one of parts, and then checks that the hold is real: the child is live
// and its allocation healthy.
func waitDeleteHeld(t *testing.T, c *Cluster, d *Daemon, set, pod, what string, parts ...string) {
	t.Helper()
	Eventually(t, convergeTimeout, what+" to hold "+pod+" across several askings", func() error {
		st, err := setStatus(d, set)
		if err != nil {
			return err
		}
		if n := len(hookEvents(st, append([]string{pod}, parts...)...)); n < 3 {
			return fmt.Errorf("%d HookWaiting events for %s's pre_delete; events: %+v", n, pod, st.Events)
		}
		return nil
	})
	if !liveChild(t, c, set, pod) {
		t.Fatalf("%s was stopped while %s held its deletion", pod, what)
	}
	if allocs := Allocations(t, c.Nomad.Client, "default", pod); len(allocs) == 0 || !Healthy(allocs[0]) {
		t.Fatalf("%s's allocation is not running while %s held its deletion", pod, what)
	}
}

// mark creates an empty file in dir: the tests' way of letting a hook
// command succeed.
func mark(t *testing.T, dir, name string) {
	t.Helper()
	if err := os.WriteFile(filepath.Join(dir, name), nil, 0o644); err != nil {
		t.Fatalf("e2e: %v", err)
	}
}

// TestPluginExternalHooks loads the example plugin from plugin_dir into a
// real daemon on a real Nomad, as three hook blocks:
//
//   - post_ready "caught-up" holds ph-1 until the test marks it caught up:
//     ph-2 is not created meanwhile, and the set says why;
//   - pre_delete "drain" (a failed command is a wait) holds the deletion of
//     ph-2 on a scale to 1 until the test marks it drained;
//   - pre_delete "verify" (on_failure = "fail", failure_policy = "block")
//     fails for ph-1, whose deletion then stays blocked, with the failure in
//     the set's view, until the failure is cleared.
//
// Everything is judged by observed state: a hold is shown by the agent
// asking again and again while the child keeps running.
func TestPluginExternalHooks(t *testing.T) {
	pluginDir := buildExamplePlugin(t)
	marks := t.TempDir()
	c := NewCluster(t)
	d := c.StartDaemon(fmt.Sprintf(`
plugin_dir = %[1]q

plugin "caught-up" {
  driver = "predelete-command"
  config = {
    command     = "[ \"$NSS_ORDINAL\" != 1 ] || test -f %[2]s/ready-$NSS_POD"
    retry_after = "1s"
  }
}
hook "caught-up" {
  plugin = "caught-up"
  events = ["post_ready"]
}

plugin "drain" {
  driver = "predelete-command"
  config = {
    command     = "test -f %[2]s/drained-$NSS_POD || { echo $NSS_POD still has data; exit 1; }"
    retry_after = "1s"
  }
}
hook "drain" {
  plugin         = "drain"
  events         = ["pre_delete"]
  timeout        = "20s"
  failure_policy = "block"
}

plugin "verify" {
  driver = "predelete-command"
  config = {
    command     = "test ! -f %[2]s/broken-$NSS_POD || { echo replica $NSS_POD is corrupt; exit 1; }"
    retry_after = "1s"
    on_failure  = "fail"
  }
}
hook "verify" {
  plugin         = "verify"
  events         = ["pre_delete"]
  timeout        = "20s"
  failure_policy = "block"
}
`, pluginDir, marks))
	// The daemon's plugins keep their sockets in its directory, which the
	// test's teardown removes even when it kills them (testagent.NewProcess).
	Eventually(t, 30*time.Second, "a socket per plugin in the daemon's directory", func() error {
		dir := d.Proc.PluginSocketDir()
		if dir == "" {
			return fmt.Errorf("%w: the daemon's directory %s is too long for a plugin socket's path", ErrGiveUp, d.Proc.Dir())
		}
		if socks, _ := filepath.Glob(filepath.Join(dir, "plugin*")); len(socks) < 3 {
			return fmt.Errorf("%d plugin sockets in %s, want one per plugin (3): the daemon's plugins put theirs elsewhere", len(socks), dir)
		}
		return nil
	})
	const set = "ph"
	RegisterHCL(t, c.Nomad.Client, setSpec{name: set, noVolume: true, meta: map[string]string{"statefulset_replicas": "3"}}.hcl())

	// post_ready: ph-1 is healthy in Nomad, but its hook holds it, so the
	// OrderedReady set does not go on to ph-2.
	WaitJobHealthy(t, c.Nomad.Client, "default", "ph-1", convergeTimeout)
	Eventually(t, convergeTimeout, "the post_ready hook to hold ph-1 across several askings", func() error {
		st, err := setStatus(d, set)
		if err != nil {
			return err
		}
		if n := len(hookEvents(st, "ph-1", `hook "caught-up" (post_ready)`, "does not count as ready")); n < 3 {
			return fmt.Errorf("%d HookWaiting events for ph-1's post_ready; events: %+v", n, st.Events)
		}
		if st.Status.ReadyReplicas != 1 {
			return fmt.Errorf("%w: ready_replicas %d while ph-1 is held; want 1 (ph-0)", ErrGiveUp, st.Status.ReadyReplicas)
		}
		for _, p := range st.Pods {
			if p.Name == "ph-1" && p.State != "Running" {
				return fmt.Errorf("%w: ph-1 is %s while held; want Running", ErrGiveUp, p.State)
			}
		}
		return nil
	})
	if jobs := ChildJobs(t, c.Nomad.Client, "default", set); len(jobs) != 2 {
		t.Fatalf("ph-2 was created while ph-1's post_ready hook held it: children %d", len(jobs))
	}
	mark(t, marks, "ready-ph-1")
	waitConverged(t, c, d, set, 3, nil)

	// pre_delete, wait: scale to 1; ph-2 is not deleted until it is drained.
	updateParent(t, c, set, setMeta("statefulset_replicas", "1"))
	waitDeleteHeld(t, c, d, set, "ph-2", "the drain hook", `hook "drain" (pre_delete) on pod ph-2 is waiting`, "ph-2 still has data")
	// ph-1 is let through the drain but fails verify, so that it is blocked
	// as soon as ph-2 is gone.
	mark(t, marks, "drained-ph-1")
	mark(t, marks, "broken-ph-1")
	mark(t, marks, "drained-ph-2")
	Eventually(t, convergeTimeout, "ph-2 to be deleted once drained", func() error {
		if liveChild(t, c, set, "ph-2") {
			return fmt.Errorf("ph-2 is still live")
		}
		return nil
	})

	// pre_delete, fail + block: ph-1 stays, and the view says why.
	waitDeleteHeld(t, c, d, set, "ph-1", "the failing verify hook", `hook "verify" (pre_delete) on pod ph-1 failed`, "replica ph-1 is corrupt")
	if err := os.Remove(filepath.Join(marks, "broken-ph-1")); err != nil {
		t.Fatal(err)
	}
	waitConverged(t, c, d, set, 1, nil)
	st, err := setStatus(d, set)
	if err != nil {
		t.Fatal(err)
	}
	if got := strings.Join(deletedPods(st), ","); got != "ph-2,ph-1" {
		t.Fatalf("deleted %q; want ph-2 then ph-1", got)
	}
}
