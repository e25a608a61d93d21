package e2e

import (
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/nomad-statefulset/nomad-statefulset/client"
)

// daemonHealth reads GET /v1/health.
func daemonHealth(d *Daemon) (client.Health, error) {
	var h client.Health
	resp, err := http.Get(d.Addr + "/v1/health")
	if err != nil {
		return h, err
	}
	defer resp.Body.Close()
	return h, json.NewDecoder(resp.Body).Decode(&h)
}

// A daemon that finds a set's children already running, with no state of
// its own (here: a fresh KV prefix, as after losing the stored state),
// adopts them: it records the revision and status and makes no Nomad write.
func TestAdoptsRunningChildren(t *testing.T) {
	c := NewCluster(t)
	first := StartDaemon(t, c.Nomad, nil, fmt.Sprintf("consul {\n  address = %q\n  kv_prefix = \"first\"\n}", c.Consul.HostPort))
	RegisterHCL(t, c.Nomad.Client, setSpec{name: "adopt", meta: map[string]string{"statefulset_replicas": "2"}}.hcl())
	waitConverged(t, c, first, "adopt", 2, nil)
	first.Kill()
	before := map[string]uint64{}
	for _, j := range ChildJobs(t, c.Nomad.Client, "default", "adopt") {
		before[j.ID] = j.JobModifyIndex
	}

	second := StartDaemon(t, c.Nomad, nil, fmt.Sprintf("consul {\n  address = %q\n  kv_prefix = \"second\"\n}", c.Consul.HostPort))
	waitConverged(t, c, second, "adopt", 2, nil)
	Eventually(t, time.Minute, "the second daemon to record the adopted set in its own KV prefix", func() error {
		keys, _, err := c.Consul.Client.KV().Keys("second/", "", nil)
		if err != nil {
			return err
		}
		for _, k := range keys {
			if strings.Contains(k, "adopt") && strings.Contains(k, "revisions") {
				return nil
			}
		}
		return fmt.Errorf("keys under second/: %v", keys)
	})
	if w := metricValue(t, second.Addr, "nomad_statefulset_nomad_api_calls_total", `write="true"`); w != 0 {
		t.Fatalf("adopting made %v Nomad writes, want none", w)
	}
	for _, j := range ChildJobs(t, c.Nomad.Client, "default", "adopt") {
		if before[j.ID] != j.JobModifyIndex {
			t.Fatalf("%s was re-registered: JobModifyIndex %d → %d", j.ID, before[j.ID], j.JobModifyIndex)
		}
	}
}

// SIGHUP reloads the configuration: a new log level takes effect at once,
// and an invalid file is refused while the daemon keeps running on the old
// one.
func TestSIGHUPReloadsTheConfig(t *testing.T) {
	c := NewCluster(t)
	d := c.StartDaemon(`log_level = "info"`)
	orig, err := os.ReadFile(d.ConfigPath)
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(d.Proc.LogTail(500), "[TRACE]") {
		t.Fatal("trace lines at log_level info")
	}

	write := func(content string) {
		t.Helper()
		if err := os.WriteFile(d.ConfigPath, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write(strings.Replace(string(orig), `log_level = "info"`, `log_level = "trace"`, 1))
	d.Proc.Signal(syscall.SIGHUP)
	Eventually(t, 30*time.Second, "the reload to be logged", func() error {
		if !strings.Contains(d.Proc.LogTail(500), "configuration reloaded: log_level=trace") {
			return fmt.Errorf("not yet")
		}
		return nil
	})
	RegisterHCL(t, c.Nomad.Client, setSpec{name: "hup", noVolume: true, meta: map[string]string{"statefulset_replicas": "1"}}.hcl())
	waitConverged(t, c, d, "hup", 1, nil)
	if !strings.Contains(d.Proc.LogTail(2000), "[TRACE]") {
		t.Fatalf("no trace line after reloading with log_level trace:\n%s", d.Proc.LogTail(30))
	}

	write(string(orig) + "\nworkers = \"many\"\n")
	d.Proc.Signal(syscall.SIGHUP)
	Eventually(t, 30*time.Second, "the invalid config to be refused", func() error {
		tail := d.Proc.LogTail(500)
		if !strings.Contains(tail, "not reloading: the new configuration is invalid; keeping the old one") {
			return fmt.Errorf("not yet")
		}
		if !strings.Contains(tail, "workers") {
			return fmt.Errorf("%w: the refusal does not name the culprit:\n%s", ErrGiveUp, tail)
		}
		return nil
	})
	if !d.Proc.Running() {
		t.Fatalf("the daemon exited on an invalid reload: %v", d.Proc.ExitErr())
	}
	if h, err := daemonHealth(d); err != nil || h.Status != "ok" {
		t.Fatalf("after a refused reload: %+v, %v", h, err)
	}
}

// reconcileCount is the metric counting the daemon's reconciles: its
// reconcile-latency histogram's count.
const reconcileCount = "nomad_statefulset_reconcile_duration_seconds_count"

// assertIdle checks that the daemon runs no reconcile for a few seconds,
// when nothing in Nomad changes.
func assertIdle(t *testing.T, d *Daemon, when string) {
	t.Helper()
	time.Sleep(2 * time.Second) // the last events of what just happened
	before := metricValue(t, d.Addr, reconcileCount, "")
	time.Sleep(3 * time.Second)
	if after := metricValue(t, d.Addr, reconcileCount, ""); after != before {
		t.Fatalf("%s: the daemon ran %v reconciles in 3s with nothing changing", when, after-before)
	}
}

// After a cascading delete the daemon is idle, whether the stopped parent
// stays in Nomad or is purged. It used to reconcile such a set in a hot
// loop (thousands of passes a second, each reading the store) once its
// stopped children were purged.
func TestIdleAfterCascadingDelete(t *testing.T) {
	c := NewCluster(t)
	d := c.StartDaemon()
	RegisterHCL(t, c.Nomad.Client, setSpec{name: "idle", noVolume: true, meta: map[string]string{"statefulset_replicas": "2"}}.hcl())
	waitConverged(t, c, d, "idle", 2, nil)
	if _, _, err := c.Nomad.Client.Jobs().Deregister("idle", false, nil); err != nil {
		t.Fatal(err)
	}
	Eventually(t, convergeTimeout, "the cascade to finish", func() error {
		if _, err := setStatus(d, "idle"); err == nil {
			return fmt.Errorf("the daemon still shows the set")
		}
		if kids := ChildJobs(t, c.Nomad.Client, "default", "idle"); len(kids) != 0 {
			return fmt.Errorf("%d child jobs left", len(kids))
		}
		return nil
	})
	assertIdle(t, d, "after the cascade, the stopped parent kept")
	if _, _, err := c.Nomad.Client.Jobs().Deregister("idle", true, nil); err != nil {
		t.Fatal(err)
	}
	assertIdle(t, d, "after the parent was purged")
}
