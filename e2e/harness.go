// Package e2e holds the end-to-end scenarios of nomad-statefulset: real
// Consul and Nomad agents (internal/testagent), the nomad-statefulset binary
// built from this repository and run as a user runs it, and a watchdog that
// fails a test whenever two allocations of one ordinal run at once.
//
// Run them with `make test-e2e` (which builds the nomad and consul binaries
// first) or `go test ./e2e/...` once `make tools` has run.
package e2e

import (
	"errors"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	nomadapi "github.com/hashicorp/nomad/api"

	"github.com/nomad-statefulset/nomad-statefulset/internal/testagent"
)

// Cluster is one test's Consul and Nomad, wired together, with a watchdog
// on Nomad.
type Cluster struct {
	// Consul is the Consul agent.
	Consul *testagent.ConsulAgent
	// Nomad is the Nomad agent, registering services with Consul.
	Nomad *testagent.NomadAgent
	// Watchdog watches every child job's allocations.
	Watchdog *Watchdog

	t testing.TB
}

// NewCluster starts Consul, then Nomad pointed at it (with opts), then a
// watchdog. Everything is torn down at cleanup.
func NewCluster(t testing.TB, opts ...testagent.NomadOption) *Cluster {
	t.Helper()
	c := &Cluster{t: t}
	c.Consul = testagent.Consul(t)
	c.Nomad = testagent.Nomad(t, append([]testagent.NomadOption{testagent.WithConsul(c.Consul)}, opts...)...)
	c.Watchdog = StartWatchdog(t, c.Nomad.Client)
	return c
}

// StartDaemon starts nomad-statefulset against this cluster; see StartDaemon.
func (c *Cluster) StartDaemon(extraHCL ...string) *Daemon {
	c.t.Helper()
	return StartDaemon(c.t, c.Nomad, c.Consul, extraHCL...)
}

var (
	buildOnce sync.Once
	buildPath string // the daemon the tests run
	builtDir  string // the directory this process built it in, removed by TestMain
	buildErr  error
)

// prebuiltDaemonEnv names a nomad-statefulset already built from this
// repository. scripts/e2e.sh runs every test in a process of its own and
// passes make's bin/nomad-statefulset, so that each process need not build
// one.
const prebuiltDaemonEnv = "NSS_E2E_DAEMON"

// DaemonBinary builds ./cmd/nomad-statefulset from this repository (once
// per test binary) into .cache/e2e/<pid>/ and returns its path, or returns
// the binary that $NSS_E2E_DAEMON names. The directory is per process so
// that two test binaries running at once never replace each other's
// daemon. A build failure fails the test with the compiler's output.
func DaemonBinary(t testing.TB) string {
	t.Helper()
	buildOnce.Do(func() {
		if p := os.Getenv(prebuiltDaemonEnv); p != "" {
			fi, err := os.Stat(p)
			if err == nil && fi.IsDir() {
				err = errors.New("it is a directory")
			}
			if err != nil {
				buildErr = fmt.Errorf("%s=%s: not a built nomad-statefulset (make build makes bin/nomad-statefulset): %w", prebuiltDaemonEnv, p, err)
				return
			}
			buildPath = p
			return
		}
		root, err := testagent.ModuleRoot()
		if err != nil {
			buildErr = err
			return
		}
		if _, err := os.Stat(filepath.Join(root, "cmd", "nomad-statefulset")); err != nil {
			buildErr = fmt.Errorf("./cmd/nomad-statefulset does not exist: %w", err)
			return
		}
		out := filepath.Join(root, ".cache", "e2e", strconv.Itoa(os.Getpid()), "nomad-statefulset")
		cmd := exec.Command("go", "build", "-o", out, "./cmd/nomad-statefulset")
		cmd.Dir = root
		if b, err := cmd.CombinedOutput(); err != nil {
			buildErr = fmt.Errorf("go build ./cmd/nomad-statefulset: %v\n%s", err, b)
			return
		}
		buildPath, builtDir = out, filepath.Dir(out)
	})
	if buildErr != nil {
		t.Fatalf("e2e: cannot build nomad-statefulset: %v", buildErr)
	}
	return buildPath
}

// Daemon is a nomad-statefulset agent process, run as a user runs it:
// `nomad-statefulset agent -config <file>`.
type Daemon struct {
	// Addr is the agent's HTTP address, "http://127.0.0.1:<port>".
	Addr string
	// ConfigPath is the config file it was started with.
	ConfigPath string
	// Bin is the nomad-statefulset binary.
	Bin string
	// Proc is the process; Kill, Stop, Start and LogTail are on it too.
	Proc *testagent.Process
	// HTTP is the client the harness reads the daemon's API with (nil:
	// http.DefaultClient); a daemon with http { tls {} } needs one that
	// trusts its CA.
	HTTP *http.Client

	nomad *testagent.NomadAgent
	t     testing.TB
}

// StartDaemon prepares a daemon (NewDaemon), starts
// `nomad-statefulset agent -config <file>` and waits until GET /v1/health
// answers 200.
func StartDaemon(t testing.TB, nomad *testagent.NomadAgent, consul *testagent.ConsulAgent, extraHCL ...string) *Daemon {
	t.Helper()
	d := NewDaemon(t, nomad, consul, extraHCL...)
	d.Start()
	return d
}

// NewDaemon writes a config file with data_dir (in the process's own
// directory) and the `nomad`, `consul` (when consul is not nil) and `http`
// blocks, appends extraHCL, and returns the daemon, not yet started.
func NewDaemon(t testing.TB, nomad *testagent.NomadAgent, consul *testagent.ConsulAgent, extraHCL ...string) *Daemon {
	t.Helper()
	bin := DaemonBinary(t)
	port := testagent.FreePorts(t, 1)[0]
	d := &Daemon{Addr: fmt.Sprintf("http://127.0.0.1:%d", port), Bin: bin, nomad: nomad, t: t}
	d.Proc = testagent.NewProcess(t, "nomad-statefulset", bin, nil, d.env())
	var b strings.Builder
	fmt.Fprintf(&b, "data_dir = %q\n", filepath.Join(d.Proc.Dir(), "data"))
	fmt.Fprintf(&b, "nomad {\n  address = %q\n", nomad.Addr)
	if nomad.Token != "" {
		fmt.Fprintf(&b, "  token = %q\n", nomad.Token)
	}
	b.WriteString("}\n")
	if consul != nil {
		fmt.Fprintf(&b, "consul {\n  address = %q\n}\n", consul.HostPort)
	}
	fmt.Fprintf(&b, "http {\n  address = \"127.0.0.1:%d\"\n}\n", port)
	for _, x := range extraHCL {
		b.WriteString(x + "\n")
	}
	d.ConfigPath = filepath.Join(d.Proc.Dir(), "agent.hcl")
	if err := os.WriteFile(d.ConfigPath, []byte(b.String()), 0o644); err != nil {
		t.Fatalf("e2e: %v", err)
	}
	d.Proc.SetArgs("agent", "-config", d.ConfigPath)
	return d
}

// env is the daemon's and the CLI's environment: no AWS_CA_BUNDLE, the
// Nomad address and token, and the agent address.
func (d *Daemon) env() []string {
	return append(d.nomad.Env(), "NOMAD_STATEFULSET_ADDR="+d.Addr)
}

// Start starts the daemon (again) and waits until /v1/health answers 200.
func (d *Daemon) Start() {
	d.t.Helper()
	d.start(true)
}

// StartDegraded starts the daemon (again) and waits until /v1/health
// answers at all: an agent that cannot act (its election denied, say)
// answers 503.
func (d *Daemon) StartDegraded() {
	d.t.Helper()
	d.start(false)
}

func (d *Daemon) start(wantOK bool) {
	d.t.Helper()
	if err := d.Proc.Start(); err != nil {
		d.t.Fatalf("e2e: start nomad-statefulset: %v", err)
	}
	Eventually(d.t, 30*time.Second, "nomad-statefulset to answer GET /v1/health", func() error {
		if !d.Proc.Running() {
			return fmt.Errorf("%w: it exited: %v\n%s", ErrGiveUp, d.Proc.ExitErr(), d.Proc.LogTail(40))
		}
		resp, err := d.Get("/v1/health", "")
		if err != nil {
			return err
		}
		resp.Body.Close()
		if wantOK && resp.StatusCode != http.StatusOK {
			return fmt.Errorf("status %s", resp.Status)
		}
		return nil
	})
}

// Get reads path from the daemon's HTTP API with token, or, when token is
// "", with the token of the Nomad the daemon watches (its management
// token, when Nomad's ACLs are on, which the API then asks for).
func (d *Daemon) Get(path, token string) (*http.Response, error) {
	req, err := http.NewRequest(http.MethodGet, d.Addr+path, nil)
	if err != nil {
		return nil, err
	}
	if token == "" && d.nomad != nil {
		token = d.nomad.Token
	}
	if token != "" {
		req.Header.Set("X-Nomad-Token", token)
	}
	hc := d.HTTP
	if hc == nil {
		hc = http.DefaultClient
	}
	return hc.Do(req)
}

// Kill kills the daemon with SIGKILL.
func (d *Daemon) Kill() { d.Proc.Kill() }

// Stop stops the daemon with SIGINT (SIGKILL after 30s).
func (d *Daemon) Stop() { d.Proc.Stop(30 * time.Second) }

// Restart stops and starts the daemon.
func (d *Daemon) Restart() {
	d.t.Helper()
	d.Stop()
	d.Start()
}

// CLI runs `nomad-statefulset <args>` with the daemon's environment
// (NOMAD_ADDR, NOMAD_TOKEN, NOMAD_STATEFULSET_ADDR) and returns its combined
// output.
func (d *Daemon) CLI(args ...string) (string, error) {
	cmd := exec.Command(d.Bin, args...)
	cmd.Env = d.env()
	out, err := cmd.CombinedOutput()
	return string(out), err
}

// ErrGiveUp, wrapped in a condition's error, makes Eventually fail at once
// instead of waiting for the deadline.
var ErrGiveUp = testagent.ErrGiveUp

// Eventually polls cond every 250ms until it returns nil, and fails the test
// if that has not happened within timeout, or at once when cond's error
// wraps ErrGiveUp, naming what it waited for and the last error. It is
// testagent.Eventually, re-exported for the scenarios.
func Eventually(t testing.TB, timeout time.Duration, what string, cond func() error) {
	t.Helper()
	testagent.Eventually(t, timeout, what, cond)
}

// ParseHCL parses an HCL jobspec with Nomad's /v1/jobs/parse, canonicalized.
func ParseHCL(t testing.TB, client *nomadapi.Client, src string) *nomadapi.Job {
	t.Helper()
	job, err := client.Jobs().ParseHCLOpts(&nomadapi.JobsParseRequest{JobHCL: src, Canonicalize: true})
	if err != nil {
		t.Fatalf("e2e: parse jobspec: %v", err)
	}
	return job
}

// RegisterHCL parses an HCL jobspec through Nomad and registers it, and
// returns the job as parsed.
func RegisterHCL(t testing.TB, client *nomadapi.Client, src string) *nomadapi.Job {
	t.Helper()
	job := ParseHCL(t, client, src)
	if _, _, err := client.Jobs().Register(job, nil); err != nil {
		t.Fatalf("e2e: register job %s: %v", deref(job.ID), err)
	}
	return job
}

// RegisterFile is RegisterHCL for a jobspec file.
func RegisterFile(t testing.TB, client *nomadapi.Client, path string) *nomadapi.Job {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("e2e: %v", err)
	}
	return RegisterHCL(t, client, string(b))
}

// ChildJobs lists a set's child jobs (meta statefulset_parent=<set>) in a
// namespace, sorted by ID. Stopped (but not yet purged) jobs are included.
func ChildJobs(t testing.TB, client *nomadapi.Client, namespace, set string) []*nomadapi.JobListStub {
	t.Helper()
	// Nomad leaves Meta out of job stubs unless the Meta field is asked for.
	jobs, _, err := client.Jobs().ListOptions(&nomadapi.JobListOptions{Fields: &nomadapi.JobListFields{Meta: true}}, &nomadapi.QueryOptions{
		Namespace: namespace,
		Filter:    fmt.Sprintf("Meta.%s == %q", MetaParent, set),
	})
	if err != nil {
		t.Fatalf("e2e: list child jobs of %s: %v", set, err)
	}
	sort.Slice(jobs, func(i, j int) bool { return jobs[i].ID < jobs[j].ID })
	return jobs
}

// Allocations lists one job's allocations, old ones included, newest first.
func Allocations(t testing.TB, client *nomadapi.Client, namespace, jobID string) []*nomadapi.AllocationListStub {
	t.Helper()
	allocs, _, err := client.Jobs().Allocations(jobID, true, &nomadapi.QueryOptions{Namespace: namespace})
	if err != nil {
		t.Fatalf("e2e: list allocations of %s: %v", jobID, err)
	}
	sort.Slice(allocs, func(i, j int) bool { return allocs[i].CreateIndex > allocs[j].CreateIndex })
	return allocs
}

// SetAllocations lists the allocations of every child job of a set, keyed by
// child job ID, newest first.
func SetAllocations(t testing.TB, client *nomadapi.Client, namespace, set string) map[string][]*nomadapi.AllocationListStub {
	t.Helper()
	out := map[string][]*nomadapi.AllocationListStub{}
	for _, j := range ChildJobs(t, client, namespace, set) {
		out[j.ID] = Allocations(t, client, namespace, j.ID)
	}
	return out
}

// HostVolumes lists the host volumes of a namespace whose name starts with
// prefix (for a set's claims: "<claim>-<set>-"), sorted by name.
func HostVolumes(t testing.TB, client *nomadapi.Client, namespace, prefix string) []*nomadapi.HostVolumeStub {
	t.Helper()
	vols, _, err := client.HostVolumes().List(nil, &nomadapi.QueryOptions{Namespace: namespace, Prefix: prefix})
	if err != nil {
		t.Fatalf("e2e: list host volumes %s*: %v", prefix, err)
	}
	var out []*nomadapi.HostVolumeStub
	for _, v := range vols {
		if strings.HasPrefix(v.Name, prefix) {
			out = append(out, v)
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out
}

// Healthy reports whether an allocation is running and healthy by its
// deployment status, the DESIGN's "Running and Ready".
func Healthy(a *nomadapi.AllocationListStub) bool {
	return a.ClientStatus == "running" && a.DesiredStatus == "run" &&
		a.DeploymentStatus != nil && a.DeploymentStatus.Healthy != nil && *a.DeploymentStatus.Healthy
}

// WaitJobHealthy waits until the newest allocation of a job is healthy.
func WaitJobHealthy(t testing.TB, client *nomadapi.Client, namespace, jobID string, timeout time.Duration) *nomadapi.AllocationListStub {
	t.Helper()
	var got *nomadapi.AllocationListStub
	Eventually(t, timeout, "job "+jobID+" to have a healthy allocation", func() error {
		allocs, _, err := client.Jobs().Allocations(jobID, true, &nomadapi.QueryOptions{Namespace: namespace})
		if err != nil {
			return err
		}
		var states []string
		for _, a := range allocs {
			if Healthy(a) {
				got = a
				return nil
			}
			states = append(states, fmt.Sprintf("%s %s/%s", a.ID[:8], a.ClientStatus, a.DesiredStatus))
		}
		return fmt.Errorf("allocations: %v", states)
	})
	return got
}
