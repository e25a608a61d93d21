package e2e

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"reflect"
	"slices"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	nomadapi "github.com/hashicorp/nomad/api"

	"github.com/nomad-statefulset/nomad-statefulset/internal/testagent"
)

// agentPolicy is the minimal Nomad ACL policy docs/operations.md documents.
const agentPolicy = `
namespace "default" {
  capabilities = ["list-jobs", "read-job", "submit-job", "host-volume-write"]
}
host_volume "*" {
  policy = "write"
}
node {
  policy = "read"
}
`

func createToken(t *testing.T, c *Cluster, name, rules string) string {
	t.Helper()
	if _, err := c.Nomad.Client.ACLPolicies().Upsert(&nomadapi.ACLPolicy{Name: name, Rules: rules}, nil); err != nil {
		t.Fatalf("creating ACL policy %s: %v", name, err)
	}
	tok, _, err := c.Nomad.Client.ACLTokens().Create(&nomadapi.ACLToken{Name: name, Type: "client", Policies: []string{name}}, nil)
	if err != nil {
		t.Fatalf("creating ACL token %s: %v", name, err)
	}
	return tok.SecretID
}

// daemonWithToken starts the daemon with a token of its own, not the
// management token the cluster was bootstrapped with.
func daemonWithToken(t *testing.T, c *Cluster, token string) *Daemon {
	t.Helper()
	n := *c.Nomad
	n.Token = token
	return StartDaemon(t, &n, c.Consul)
}

// With Nomad ACLs on, a token holding exactly the documented policy runs a
// set with volumes; a token lacking a capability gets an error that names
// it, and the agent keeps running (no crash loop) and reports degraded.
func TestNomadACLPolicy(t *testing.T) {
	c := NewCluster(t, testagent.WithACL())
	t.Run("documented policy works", func(t *testing.T) {
		d := daemonWithToken(t, c, createToken(t, c, "nomad-statefulset", agentPolicy))
		RegisterHCL(t, c.Nomad.Client, setSpec{name: "acl", meta: map[string]string{"statefulset_replicas": "2"}}.hcl())
		waitConverged(t, c, d, "acl", 2, nil)
		d.Stop()
	})
	t.Run("alloc-exec runs the disruption check", func(t *testing.T) {
		// DESIGN §3b: a set that declares a disruption check needs
		// alloc-exec in its namespace, and nothing more. Without it the
		// rollout holds, naming the capability; with it the check runs in
		// the pods through Nomad's alloc exec API and the rollout ends.
		meta := map[string]string{"statefulset_replicas": "2", "statefulset_disruption_check": "test -d /alloc"}
		d := daemonWithToken(t, c, createToken(t, c, "no-exec", agentPolicy))
		RegisterHCL(t, c.Nomad.Client, setSpec{name: "aclexec", noVolume: true, meta: meta}.hcl())
		old := waitConverged(t, c, d, "aclexec", 2, nil)[0]
		updateParent(t, c, "aclexec", changeTemplate("v2"))
		Eventually(t, time.Minute, "the rollout to hold for want of alloc-exec", func() error {
			st, err := setStatus(d, "aclexec")
			if err != nil {
				return err
			}
			for _, e := range st.Events {
				if e.Type == "DisruptionCheckFailed" && strings.Contains(e.Message, "alloc-exec") {
					return nil
				}
			}
			return fmt.Errorf("events: %+v", st.Events)
		})
		d.Stop()
		withExec := strings.Replace(agentPolicy, `"host-volume-write"]`, `"host-volume-write", "alloc-exec"]`, 1)
		d = daemonWithToken(t, c, createToken(t, c, "with-exec", withExec))
		waitConverged(t, c, d, "aclexec", 2, func(o int, r string) error {
			if r == old {
				return fmt.Errorf("ordinal %d still at the old revision", o)
			}
			return nil
		})
		d.Stop()
	})
	t.Run("missing capability is named", func(t *testing.T) {
		weak := strings.Replace(agentPolicy, `"submit-job",`, "", 1)
		d := daemonWithToken(t, c, createToken(t, c, "weak", weak))
		RegisterHCL(t, c.Nomad.Client, setSpec{name: "aclweak", noVolume: true, meta: map[string]string{"statefulset_replicas": "1"}}.hcl())
		Eventually(t, time.Minute, "the set to report the missing capability", func() error {
			st, err := setStatus(d, "aclweak")
			if err != nil {
				return err
			}
			for _, e := range st.Events {
				if e.Type == "Error" && strings.Contains(e.Message, `"submit-job"`) {
					return nil
				}
			}
			return fmt.Errorf("events: %+v", st.Events)
		})
		Eventually(t, time.Minute, "/v1/health to report degraded, naming the capability", func() error {
			h, err := daemonHealth(d)
			if err != nil {
				return err
			}
			if h.Status != "degraded" || !strings.Contains(h.Checks["nomad"], "submit-job") {
				return fmt.Errorf("health %+v", h)
			}
			return nil
		})
		if !strings.Contains(d.Proc.LogTail(200), "submit-job") {
			t.Fatalf("the log does not name the missing capability:\n%s", d.Proc.LogTail(40))
		}
		time.Sleep(3 * time.Second)
		if !d.Proc.Running() {
			t.Fatalf("the agent exited instead of retrying: %v", d.Proc.ExitErr())
		}
		if kids := ChildJobs(t, c.Nomad.Client, "default", "aclweak"); len(kids) != 0 {
			t.Fatalf("a child was registered without submit-job: %d", len(kids))
		}
	})
}

// steadyStateWindow is how long a converged set is watched for Nomad writes:
// 2 minutes in `make test` (CI), which covers several periodic resyncs of the
// test daemon; `make bench-cluster` runs the 10-minute soak by setting
// NSS_STEADY_STATE=10m, and any duration can be given for a local run.
var steadyStateWindow = func() time.Duration {
	if d, err := time.ParseDuration(os.Getenv("NSS_STEADY_STATE")); err == nil && d > 0 {
		return d
	}
	return 2 * time.Minute
}()

// metricValue sums the samples of one metric whose labels contain match
// (match "" takes every sample). A metric missing from /v1/metrics fails
// the test: a renamed metric must not read as 0 and pass an "is 0" check.
func metricValue(t *testing.T, addr, name, match string) float64 {
	t.Helper()
	total, found := readMetric(t, addr, name, match)
	if !found {
		t.Fatalf("no metric %s in %s/v1/metrics", name, addr)
	}
	return total
}

// readMetric is metricValue for a metric that may be absent (found false),
// such as a follower's Nomad calls: it has made none.
func readMetric(t *testing.T, addr, name, match string) (total float64, found bool) {
	t.Helper()
	resp, err := http.Get(addr + "/v1/metrics")
	if err != nil {
		t.Fatalf("reading metrics: %v", err)
	}
	defer resp.Body.Close()
	total, found, err = metricSum(resp.Body, name, match)
	if err != nil {
		t.Fatalf("reading %s/v1/metrics: %v", addr, err)
	}
	return total, found
}

// metricSum sums, from a Prometheus text exposition, the samples of metric
// name (with or without labels) whose line contains match. found says
// whether the metric has any sample at all, whatever its labels: a counter
// vector shows only the label values it has counted.
func metricSum(r io.Reader, name, match string) (total float64, found bool, err error) {
	err = eachSample(r, name, func(line string, v float64) {
		found = true
		if strings.Contains(line, match) {
			total += v
		}
	})
	return total, found, err
}

// metricByLabel sums, from a Prometheus text exposition, the samples of
// metric name by the value of their label (a sample without it counts
// under "").
func metricByLabel(r io.Reader, name, label string) (map[string]float64, error) {
	out := map[string]float64{}
	err := eachSample(r, name, func(line string, v float64) {
		value := ""
		if _, rest, ok := strings.Cut(line, label+`="`); ok {
			value, _, _ = strings.Cut(rest, `"`)
		}
		out[value] += v
	})
	return out, err
}

// eachSample calls fn with each sample line of metric name (with or
// without labels) and its value.
func eachSample(r io.Reader, name string, fn func(line string, v float64)) error {
	sc := bufio.NewScanner(r)
	for sc.Scan() {
		line := sc.Text()
		if !strings.HasPrefix(line, name+"{") && !strings.HasPrefix(line, name+" ") {
			continue
		}
		f := strings.Fields(line)
		v, err := strconv.ParseFloat(f[len(f)-1], 64)
		if err != nil {
			return fmt.Errorf("metric line %q: %w", line, err)
		}
		fn(line, v)
	}
	if err := sc.Err(); err != nil {
		return fmt.Errorf("reading the metrics: %w", err)
	}
	return nil
}

func TestMetricSum(t *testing.T) {
	const body = `# HELP calls_total Nomad API calls.
# TYPE calls_total counter
calls_total{op="list",write="false"} 7
calls_total{op="register",write="true"} 2
calls_total{op="deregister",write="true"} 1
calls_total_extra{write="true"} 100
reconciles_count 12
`
	for _, tc := range []struct {
		name, metric, match string
		want                float64
		found               bool
	}{
		{"labelled samples that match", "calls_total", `write="true"`, 3, true},
		{"every sample", "calls_total", "", 10, true},
		{"no sample matches, the metric is there", "calls_total", `write="maybe"`, 0, true},
		{"without labels", "reconciles_count", "", 12, true},
		{"absent", "calls", "", 0, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, found, err := metricSum(strings.NewReader(body), tc.metric, tc.match)
			if err != nil || got != tc.want || found != tc.found {
				t.Fatalf("metricSum(%s, %s) = %v, %v, %v; want %v, %v", tc.metric, tc.match, got, found, err, tc.want, tc.found)
			}
		})
	}
	byOp, err := metricByLabel(strings.NewReader(body+`calls_total{op="list",write="true"} 3`+"\n"), "calls_total", "op")
	if want := map[string]float64{"list": 10, "register": 2, "deregister": 1}; err != nil || !reflect.DeepEqual(byOp, want) {
		t.Fatalf("metricByLabel(calls_total, op) = %v, %v; want %v", byOp, err, want)
	}
	if _, _, err := metricSum(strings.NewReader("calls_total{op=\"list\"} seven\n"), "calls_total", ""); err == nil {
		t.Fatal("metricSum read a sample whose value is not a number")
	}
}

// An ordered set of 5 converges; the latency from one pod becoming healthy
// to the next one's registration is measured; then, for the steady-state
// window with a periodic resync, the agent makes no Nomad write at all.
func TestSteadyStateMakesNoWrites(t *testing.T) {
	c := NewCluster(t)
	// Several resyncs fall in the window, so the window also proves that a
	// resync of a converged set writes nothing.
	resync := min(time.Minute, steadyStateWindow/4)
	d := c.StartDaemon(fmt.Sprintf("resync_interval = %q", resync))
	// A Consul service with a check: live readiness's blocking health
	// query runs through the window too.
	RegisterHCL(t, c.Nomad.Client, setSpec{name: "steady", noVolume: true, meta: map[string]string{"statefulset_replicas": "5"},
		script: `touch /tmp/healthy; while true; do sleep 1; done`,
		group:  strings.ReplaceAll(fmt.Sprintf(checkedService, "steady-web"), "/data/", "/tmp/")}.hcl())
	waitConverged(t, c, d, "steady", 5, nil)

	if err := c.Watchdog.RegisteredAfterHealthy("default", "steady-0", "steady-1", "steady-2", "steady-3", "steady-4"); err != nil {
		t.Fatal(err)
	}
	recs := map[int]ChildRecord{}
	for _, r := range c.Watchdog.Children("steady") {
		recs[r.Ordinal] = r
	}
	// End to end, from the Nomad client's health stamp to the next child's
	// registration; and the daemon's own share, from the moment the healthy
	// allocation appeared on the event stream to the moment the next
	// registration did. The difference is the Nomad client's batching of
	// allocation updates (BENCHMARKS.md, "Real cluster").
	var lat, own []time.Duration
	for i := 1; i < 5; i++ {
		lat = append(lat, recs[i].RegisteredAt.Sub(recs[i-1].HealthyAt))
		own = append(own, recs[i].RegisteredSeenAt.Sub(recs[i-1].HealthySeenAt))
	}
	sortDurations(lat)
	sortDurations(own)
	t.Logf("healthy → next registration latency over %d steps: client health stamp → registration: min %v, p50 %v, max %v (all %v); "+
		"healthy seen on the event stream → registration seen (the daemon's share): min %v, p50 %v, max %v (all %v)",
		len(lat), lat[0], lat[len(lat)/2], lat[len(lat)-1], lat, own[0], own[len(own)/2], own[len(own)-1], own)

	time.Sleep(5 * time.Second) // let the last status write land
	writes := metricValue(t, d.Addr, "nomad_statefulset_nomad_api_calls_total", `write="true"`)
	reads := metricValue(t, d.Addr, "nomad_statefulset_nomad_api_calls_total", `write="false"`)
	consulQueries := metricValue(t, d.Addr, "nomad_statefulset_consul_health_queries_total", "")
	t.Logf("watching %v of steady state from %v writes and %v reads", steadyStateWindow, writes, reads)
	time.Sleep(steadyStateWindow)
	// One service watched: an idle blocking query returns once per 5 min
	// wait, so the window costs about one query per 5 minutes begun.
	cq := metricValue(t, d.Addr, "nomad_statefulset_consul_health_queries_total", "") - consulQueries
	t.Logf("Consul health queries in the window: %v (one service watched)", cq)
	if maxQ := float64(2 + steadyStateWindow/(5*time.Minute)); cq > maxQ {
		t.Fatalf("%v Consul health queries in %v of steady state; want at most %v", cq, steadyStateWindow, maxQ)
	}
	w2 := metricValue(t, d.Addr, "nomad_statefulset_nomad_api_calls_total", `write="true"`)
	r2 := metricValue(t, d.Addr, "nomad_statefulset_nomad_api_calls_total", `write="false"`)
	t.Logf("after %v: %v writes, %v reads (%v reads in the window, from the periodic resyncs)", steadyStateWindow, w2, r2, r2-reads)
	if w2 != writes {
		t.Fatalf("steady state made %v Nomad writes in %v", w2-writes, steadyStateWindow)
	}
	if r2 <= reads {
		t.Fatalf("no resync happened in the window (reads %v → %v): the test proved nothing", reads, r2)
	}
}

func sortDurations(d []time.Duration) {
	sort.Slice(d, func(i, j int) bool { return d[i] < d[j] })
}

// subsystemLoggers are the named loggers of the daemon, one per subsystem
// (hclog's Named under the root "nomad-statefulset"). A plugin's logger is
// named after the plugin, under plugin_manager.
var subsystemLoggers = []string{"controller", "watcher", "consul_checks", "consul_store", "leader", "plugin_manager", "http"}

// TestLoggerNamesPerSubsystem is issue 17's "one named logger per
// subsystem", checked on the real daemon: with JSON logs at trace level,
// every line's @module is the root or the root plus one known subsystem
// (a plugin's, one level under plugin_manager), no name is doubled
// ("controller.controller"), and every subsystem logs under its name while
// a set with a Consul-checked service converges through a Consul lock.
func TestLoggerNamesPerSubsystem(t *testing.T) {
	c := NewCluster(t)
	d := c.StartDaemon(`log_level = "trace"`, `log_json = true`, haConfig)
	RegisterHCL(t, c.Nomad.Client, setSpec{name: "lg", noVolume: true, meta: map[string]string{"statefulset_replicas": "1"},
		script: `touch /tmp/healthy; while true; do sleep 1; done`,
		group:  strings.ReplaceAll(fmt.Sprintf(checkedService, "lg-web"), "/data/", "/tmp/")}.hcl())
	waitConverged(t, c, d, "lg", 1, nil)
	d.Stop()

	f, err := os.Open(d.Proc.LogPath())
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	const root = "nomad-statefulset"
	seen := map[string]int{}
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	lines := 0
	for sc.Scan() {
		var line struct {
			Module string `json:"@module"`
		}
		if json.Unmarshal(sc.Bytes(), &line) != nil {
			continue // the harness's own header lines
		}
		lines++
		parts := strings.Split(line.Module, ".")
		if parts[0] != root || len(parts) > 3 {
			t.Errorf("log line of module %q: want %s or %s.<subsystem>", line.Module, root, root)
			continue
		}
		if len(parts) == 1 {
			continue
		}
		if !slices.Contains(subsystemLoggers, parts[1]) {
			t.Errorf("log line of module %q: %q is no known subsystem %v", line.Module, parts[1], subsystemLoggers)
		}
		if len(parts) == 3 && (parts[1] != "plugin_manager" || parts[2] == parts[1]) {
			t.Errorf("log line of module %q: only a plugin is named under a subsystem (plugin_manager.<plugin>)", line.Module)
		}
		seen[parts[1]]++
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	if lines == 0 {
		t.Fatalf("no JSON log line in %s", d.Proc.LogPath())
	}
	t.Logf("%d JSON log lines; by subsystem: %v", lines, seen)
	for _, s := range subsystemLoggers {
		if seen[s] == 0 {
			t.Errorf("subsystem %s logged nothing under its name (lines by subsystem: %v)", s, seen)
		}
	}
}
