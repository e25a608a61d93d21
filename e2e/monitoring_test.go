package e2e

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"testing"
	"time"

	nomadapi "github.com/hashicorp/nomad/api"

	"github.com/nomad-statefulset/nomad-statefulset/internal/testagent"
)

// The shipped monitoring files (examples/monitoring), tested with Debian's
// Prometheus, which `make prometheus` installs.
const (
	rulesFile     = "nomad-statefulset.rules.yml"
	rulesTestFile = "nomad-statefulset.rules.test.yml"
	dashboardFile = "nomad-statefulset.dashboard.json"
)

// prometheusTool returns the path of a Prometheus binary (prometheus or
// promtool), from $PROMETHEUS_BIN's directory or /usr/bin, failing the test
// with how to get it.
func prometheusTool(t *testing.T, name string) string {
	t.Helper()
	dir := "/usr/bin"
	if p := os.Getenv("PROMETHEUS_BIN"); p != "" {
		dir = filepath.Dir(p)
	}
	path := filepath.Join(dir, name)
	if _, err := os.Stat(path); err != nil {
		t.Fatalf("%s is missing (%v): `make prometheus` installs Debian's prometheus package, with promtool", path, err)
	}
	return path
}

func monitoringDir(t *testing.T) string {
	t.Helper()
	root, err := testagent.ModuleRoot()
	if err != nil {
		t.Fatal(err)
	}
	return filepath.Join(root, "examples", "monitoring")
}

// The alert rules load, and each fires, and stays silent, when its tests
// on recorded series say (promtool test rules).
func TestMonitoringRulesPassPromtool(t *testing.T) {
	promtool := prometheusTool(t, "promtool")
	dir := monitoringDir(t)
	for _, args := range [][]string{{"check", "rules", rulesFile}, {"test", "rules", rulesTestFile}} {
		cmd := exec.Command(promtool, args...)
		cmd.Dir = dir
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("promtool %s: %v\n%s", strings.Join(args, " "), err, out)
		}
		t.Logf("promtool %s:\n%s", strings.Join(args, " "), out)
	}
}

// A real Prometheus scrapes a real daemon with the shipped rules while a
// rollout is made to stick (a template whose pods never become ready, a
// 15 s progress deadline): NomadStatefulSetRolloutStuck fires. Every metric
// the shipped dashboard and rules query is in the daemon's /v1/metrics.
func TestMonitoringStuckRolloutAlertFires(t *testing.T) {
	prom := prometheusTool(t, "prometheus")
	dir := monitoringDir(t)
	c := NewCluster(t)
	d := c.StartDaemon()
	const set = "mon"
	// Ordinal 0 leads (its check "leader" passes), so that the leader's
	// ordinal is published too.
	RegisterHCL(t, c.Nomad.Client, setSpec{name: set, noVolume: true, meta: map[string]string{
		"statefulset_replicas": "2", "statefulset_progress_deadline": "15s", "statefulset_leader_check": "leader"},
		group: `
    service {
      name = "mon-leader"
      check {
        name     = "leader"
        type     = "script"
        task     = "app"
        command  = "/bin/sh"
        args     = ["-c", "test \"$STATEFULSET_ORDINAL\" = 0"]
        interval = "1s"
        timeout  = "5s"
        # Not a health check: only ordinal 0 passes it.
        on_update = "ignore"
      }
    }`}.hcl())
	waitConverged(t, c, d, set, 2, nil)

	Eventually(t, time.Minute, "ordinal 0 to lead", func() error {
		if m := scrape(t, d); !strings.Contains(m, `nomad_statefulset_leader_ordinal{namespace="default",set="mon"} 0`) {
			return fmt.Errorf("no leader ordinal 0 in /v1/metrics")
		}
		return nil
	})
	metrics := scrape(t, d)
	for _, name := range queriedMetrics(t, filepath.Join(dir, dashboardFile), filepath.Join(dir, rulesFile)) {
		if !strings.Contains(metrics, "# TYPE "+name+" ") {
			t.Errorf("%s is queried by the dashboard or the rules but not in the daemon's /v1/metrics", name)
		}
	}

	port := testagent.FreePorts(t, 1)[0]
	work := t.TempDir()
	rules, err := os.ReadFile(filepath.Join(dir, rulesFile))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(work, rulesFile), rules, 0o644); err != nil {
		t.Fatal(err)
	}
	cfg := fmt.Sprintf(`global:
  scrape_interval: 1s
  evaluation_interval: 1s
rule_files: [%q]
scrape_configs:
  - job_name: nomad-statefulset
    metrics_path: /v1/metrics
    static_configs:
      - targets: [%q]
`, rulesFile, strings.TrimPrefix(d.Addr, "http://"))
	if err := os.WriteFile(filepath.Join(work, "prometheus.yml"), []byte(cfg), 0o644); err != nil {
		t.Fatal(err)
	}
	p := testagent.NewProcess(t, "prometheus", prom, []string{
		"--config.file=" + filepath.Join(work, "prometheus.yml"),
		"--storage.tsdb.path=" + filepath.Join(work, "data"),
		fmt.Sprintf("--web.listen-address=127.0.0.1:%d", port),
	}, nil)
	if err := p.Start(); err != nil {
		t.Fatalf("starting prometheus: %v", err)
	}
	promAddr := fmt.Sprintf("http://127.0.0.1:%d", port)
	Eventually(t, time.Minute, "Prometheus to scrape the daemon", func() error {
		v, err := promQuery(promAddr, fmt.Sprintf(`nomad_statefulset_status_replicas_ready{set=%q}`, set))
		if err != nil {
			return fmt.Errorf("%v\n%s", err, p.LogTail(10))
		}
		if v != "2" {
			return fmt.Errorf("ready = %q", v)
		}
		return nil
	})
	if st := alertState(t, promAddr, "NomadStatefulSetRolloutStuck"); st != "" {
		t.Fatalf("the stuck-rollout alert is %s before any rollout", st)
	}

	// A template no node can place: the new pod is Blocked for good, and
	// nothing moves, as in a rollout stuck on an image that does not pull.
	updateParent(t, c, set, func(j *nomadapi.Job) {
		j.TaskGroups[0].Constraints = append(j.TaskGroups[0].Constraints,
			&nomadapi.Constraint{LTarget: "${attr.kernel.name}", RTarget: "plan9", Operand: "="})
	})
	start := time.Now()
	Eventually(t, 4*time.Minute, "NomadStatefulSetRolloutStuck to fire", func() error {
		if st := alertState(t, promAddr, "NomadStatefulSetRolloutStuck"); st != "firing" {
			return fmt.Errorf("alert state %q", st)
		}
		return nil
	})
	t.Logf("the stuck-rollout alert fired %v after the broken template (deadline 15s, for 1m)", time.Since(start).Round(time.Second))
}

// scrape returns the daemon's /v1/metrics.
func scrape(t *testing.T, d *Daemon) string {
	t.Helper()
	resp, err := http.Get(d.Addr + "/v1/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("GET /v1/metrics: %s %v", resp.Status, err)
	}
	return string(b)
}

// queriedMetrics returns the nomad_statefulset_* metric families the files
// query (a histogram's _bucket, _sum and _count as the family).
func queriedMetrics(t *testing.T, paths ...string) []string {
	t.Helper()
	re := regexp.MustCompile(`nomad_statefulset_[a-z_]+`)
	seen := map[string]bool{}
	for _, path := range paths {
		b, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range re.FindAllString(string(b), -1) {
			for _, suffix := range []string{"_bucket", "_sum", "_count"} {
				m = strings.TrimSuffix(m, suffix)
			}
			seen[m] = true
		}
	}
	if len(seen) < 5 {
		t.Fatalf("only %d metrics found in %v", len(seen), paths)
	}
	out := make([]string, 0, len(seen))
	for m := range seen {
		out = append(out, m)
	}
	sort.Strings(out)
	return out
}

// promQuery returns the value of an instant query's first sample ("" for
// none).
func promQuery(addr, q string) (string, error) {
	resp, err := http.Get(addr + "/api/v1/query?query=" + url.QueryEscape(q))
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	var body struct {
		Status string
		Data   struct {
			Result []struct {
				Value []any
			}
		}
	}
	if err := json.NewDecoder(resp.Body).Decode(&body); err != nil {
		return "", err
	}
	if body.Status != "success" {
		return "", fmt.Errorf("query %s: %s", q, body.Status)
	}
	if len(body.Data.Result) == 0 || len(body.Data.Result[0].Value) < 2 {
		return "", nil
	}
	return fmt.Sprint(body.Data.Result[0].Value[1]), nil
}

// alertState returns the state of alert name in Prometheus ("" when it is
// not pending or firing).
func alertState(t *testing.T, addr, name string) string {
	t.Helper()
	resp, err := http.Get(addr + "/api/v1/alerts")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var body struct {
		Data struct {
			Alerts []struct {
				Labels map[string]string
				State  string
			}
		}
	}
	if err := json.NewDecoder(resp.Body).Decode(&body); err != nil {
		t.Fatal(err)
	}
	for _, a := range body.Data.Alerts {
		if a.Labels["alertname"] == name {
			return a.State
		}
	}
	return ""
}
