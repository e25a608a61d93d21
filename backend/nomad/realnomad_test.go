//go:build realagents

package nomad_test

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/nomad/api"

	"github.com/nomad-statefulset/nomad-statefulset/backend"
	"github.com/nomad-statefulset/nomad-statefulset/backend/nomad"
	"github.com/nomad-statefulset/nomad-statefulset/internal/testagent"
	"github.com/nomad-statefulset/nomad-statefulset/jobs"
)

// counting wraps an API and counts the list and read calls the watcher
// makes.
type counting struct {
	nomad.API
	mu    sync.Mutex
	calls map[string]int
}

func (c *counting) count(verb string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.calls[verb]++
}

func (c *counting) snapshot() map[string]int {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := make(map[string]int, len(c.calls))
	for k, v := range c.calls {
		out[k] = v
	}
	return out
}

func (c *counting) reset() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.calls = map[string]int{}
}

func (c *counting) ListJobs(ctx context.Context, ns string) ([]*api.JobListStub, uint64, error) {
	c.count("ListJobs")
	return c.API.ListJobs(ctx, ns)
}

func (c *counting) GetJob(ctx context.Context, ns, id string) (*api.Job, error) {
	c.count("GetJob")
	return c.API.GetJob(ctx, ns, id)
}

func (c *counting) ListAllocations(ctx context.Context, ns string) ([]*api.AllocationListStub, error) {
	c.count("ListAllocations")
	return c.API.ListAllocations(ctx, ns)
}

func (c *counting) ListHostVolumes(ctx context.Context, ns, prefix string) ([]*api.HostVolumeStub, error) {
	c.count("ListHostVolumes")
	return c.API.ListHostVolumes(ctx, ns, prefix)
}

func (c *counting) Events(ctx context.Context, index uint64) (<-chan *api.Events, error) {
	c.count("Events")
	return c.API.Events(ctx, index)
}

// realJob makes a test job runnable on the test agent's mock driver, healthy
// one second after it starts.
func realJob(j *api.Job, ns string) *api.Job {
	j.Namespace = ptr(ns)
	g := j.TaskGroups[0]
	g.Update.MinHealthyTime = ptr(time.Second)
	t := g.Tasks[0]
	t.Driver = "mock_driver"
	t.Config = map[string]any{"run_for": "1h"}
	t.Resources = &api.Resources{CPU: ptr(10), MemoryMB: ptr(10)}
	return j
}

// TestRealNomadListsAndWatchesAcrossNamespaces runs the watcher against a
// real Nomad agent (NOMAD_BIN, see internal/testagent) with sets in two
// namespaces. It checks that ListAllocations lists every namespace's
// allocations in one call, that events read by Client.Events keep the
// fields drift detection compares, and that a steady-state re-list reads
// no job: the ModifyIndex of Nomad's job stubs matches that of the jobs
// its events carried.
func TestRealNomadListsAndWatchesAcrossNamespaces(t *testing.T) {
	n := testagent.Nomad(t)
	if _, err := n.Client.Namespaces().Register(&api.Namespace{Name: "other"}, nil); err != nil {
		t.Fatalf("creating namespace other: %v", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	client := nomad.NewAPI(n.Client)
	type jobRef struct{ ns, id string }
	var children []jobRef
	for _, set := range []struct {
		ns, name string
		replicas int
	}{{"default", "web", 2}, {"other", "db", 1}} {
		if _, err := client.RegisterJob(ctx, realJob(parentOf(set.name), set.ns), false, 0); err != nil {
			t.Fatal(err)
		}
		for o := 0; o < set.replicas; o++ {
			c := realJob(childOf(set.name, o, "r1"), set.ns)
			if _, err := client.RegisterJob(ctx, c, false, 0); err != nil {
				t.Fatal(err)
			}
			children = append(children, jobRef{set.ns, *c.ID})
		}
	}
	// Each child as Nomad holds it before it is placed: what a cache held
	// if the stream was lost right after the registration.
	early := map[jobRef]*jobs.ChildRecord{}
	for _, c := range children {
		j, err := client.GetJob(ctx, c.ns, c.id)
		if err != nil {
			t.Fatal(err)
		}
		early[c] = jobs.NewChildRecord(j)
	}

	api0 := &counting{API: client, calls: map[string]int{}}
	cache := nomad.NewCache()
	w := nomad.NewWatcher(api0, cache, nomad.WatcherConfig{ResyncInterval: time.Hour}, hclog.NewNullLogger(), func(backend.SetKey) {})
	go func() { _ = w.Run(ctx) }()
	sets := []backend.SetKey{{Namespace: "default", Name: "web"}, {Namespace: "other", Name: "db"}}
	testagent.Eventually(t, 2*time.Minute, "every pod ready in the cache", func() error {
		for i, k := range sets {
			obs := cache.Observe(k, nil, time.Now())
			if obs.Parent == nil || len(obs.Pods) != 2-i {
				return fmt.Errorf("%s: parent %v, %d pods", k, obs.Parent != nil, len(obs.Pods))
			}
			for _, p := range obs.Pods {
				if !p.Pod.Ready {
					return fmt.Errorf("%s: %s not ready (%s)", k, p.JobID, p.ClientStatus)
				}
			}
		}
		return nil
	})
	g := cache.Observe(sets[1], nil, time.Now()).Pods[0].Job.(*jobs.ChildRecord).Job().TaskGroups[0]
	if g.Update == nil || g.Update.MaxParallel == nil || *g.Update.MaxParallel != 1 ||
		g.Disconnect == nil || g.Disconnect.StopOnClientAfter == nil || *g.Disconnect.StopOnClientAfter != time.Minute ||
		g.ReschedulePolicy == nil || g.ReschedulePolicy.Attempts == nil {
		t.Fatalf("the cached child lost fields: update %+v disconnect %+v reschedule %+v", g.Update, g.Disconnect, g.ReschedulePolicy)
	}

	// One call lists the allocations of both namespaces, as the job by job
	// listing does, with task states (readiness reads them) but without
	// their events.
	all, err := client.ListAllocations(ctx, "*")
	if err != nil {
		t.Fatal(err)
	}
	listed := map[string]string{}
	for _, a := range all {
		if len(a.TaskStates) == 0 {
			t.Errorf("allocation %s lists no task states", a.ID)
		}
		for name, ts := range a.TaskStates {
			if ts.State == "" || len(ts.Events) != 0 {
				t.Errorf("allocation %s task %s: state %q with %d events; want the state and no events", a.ID, name, ts.State, len(ts.Events))
			}
		}
		listed[a.ID] = a.Namespace + "/" + a.JobID
	}
	var want []string
	for _, c := range children {
		allocs, _, err := n.Client.Jobs().Allocations(c.id, true, &api.QueryOptions{Namespace: c.ns})
		if err != nil {
			t.Fatal(err)
		}
		for _, a := range allocs {
			want = append(want, a.ID)
			if listed[a.ID] != c.ns+"/"+c.id {
				t.Errorf("allocation %s of %s/%s: listed as %q", a.ID, c.ns, c.id, listed[a.ID])
			}
		}
	}
	if len(want) != len(children) {
		t.Fatalf("the children have %d allocations, want %d", len(want), len(children))
	}
	other, err := client.ListAllocations(ctx, "other")
	if err != nil || len(other) != 1 || other[0].JobID != "db-0" {
		var ids []string
		for _, a := range other {
			ids = append(ids, a.Namespace+"/"+a.JobID)
		}
		sort.Strings(ids)
		t.Fatalf("namespace other lists %s, %v; want db-0 alone", strings.Join(ids, ","), err)
	}

	// Once every deployment is done, nothing changes: the cache catches up
	// with Nomad's index, and a re-list then reads no job.
	testagent.Eventually(t, 2*time.Minute, "every child's deployment to succeed", func() error {
		for _, c := range children {
			d, _, err := n.Client.Jobs().LatestDeployment(c.id, &api.QueryOptions{Namespace: c.ns})
			if err != nil || d == nil || d.Status != api.DeploymentStatusSuccessful {
				return fmt.Errorf("%s/%s: deployment %+v, %v", c.ns, c.id, d, err)
			}
		}
		return nil
	})
	stubs, meta, err := n.Client.Jobs().List(&api.QueryOptions{Namespace: "*"})
	if err != nil {
		t.Fatal(err)
	}
	// Placing a child and its deployment's success move its job's status,
	// stability and ModifyIndex, never its JobModifyIndex: the listing
	// alone brings the early record up to date, and a re-list after a lost
	// stream need not read the job (Cache.jobAt).
	checked := 0
	for _, s := range stubs {
		rec := early[jobRef{s.Namespace, s.ID}]
		if rec == nil {
			continue
		}
		checked++
		if s.ModifyIndex <= rec.ModifyIndex() {
			t.Errorf("%s/%s: ModifyIndex %d after its deployment, %d when registered; want it moved", s.Namespace, s.ID, s.ModifyIndex, rec.ModifyIndex())
		}
		if got, ok := rec.WithListing(s); !ok || got.ModifyIndex() != s.ModifyIndex {
			t.Errorf("%s/%s: its stub (JobModifyIndex %d, CreateIndex %d, SubmitTime %d) does not bring the record of its registration (%d, %d) up to date",
				s.Namespace, s.ID, s.JobModifyIndex, s.CreateIndex, s.SubmitTime, rec.JobModifyIndex(), rec.CreateIndex())
		}
	}
	if checked != len(children) {
		t.Errorf("the listing holds %d of the %d children", checked, len(children))
	}
	testagent.Eventually(t, time.Minute, "the cache to reach Nomad's index", func() error {
		if cache.Index() < meta.LastIndex {
			return fmt.Errorf("cache at %d, Nomad at %d", cache.Index(), meta.LastIndex)
		}
		return nil
	})
	api0.reset()
	before := w.Relists()
	w.RequestResync()
	testagent.Eventually(t, time.Minute, "the re-list and the new subscription", func() error {
		if w.Relists() == before || api0.snapshot()["Events"] != 1 {
			return fmt.Errorf("relists %d, calls %v", w.Relists(), api0.snapshot())
		}
		return nil
	})
	calls := api0.snapshot()
	wantCalls := map[string]int{"ListJobs": 1, "ListAllocations": 1, "ListHostVolumes": 2, "Events": 1}
	for verb, n := range calls {
		if wantCalls[verb] != n {
			t.Errorf("a steady-state re-list made %d %s calls, want %d (all: %v)", n, verb, wantCalls[verb], calls)
		}
	}
	for i, k := range sets {
		if obs := cache.Observe(k, nil, time.Now()); len(obs.Pods) != 2-i || !obs.Pods[0].Pod.Ready {
			t.Errorf("%s after the re-list: %+v", k, obs.Pods)
		}
	}
}

// execJob is a job whose task the exec driver runs (mock_driver cannot
// exec), with a provider = "nomad" service of two checks: "agent-up" asks
// the agent's own HTTP port for its health, through a static port of the
// same number (the scheduler does not know the agent holds it), and
// passes; "closed-port" dials a port nothing listens on, and fails.
func execJob(id string, agentPort int) *api.Job {
	return &api.Job{
		ID: ptr(id), Name: ptr(id), Namespace: ptr("default"), Type: ptr("service"), Datacenters: []string{"dc1"},
		TaskGroups: []*api.TaskGroup{{
			Name:  ptr("db"),
			Count: ptr(1),
			Networks: []*api.NetworkResource{{
				ReservedPorts: []api.Port{{Label: "agent", Value: agentPort}},
				DynamicPorts:  []api.Port{{Label: "closed"}},
			}},
			Services: []*api.Service{{
				Name: id, Provider: "nomad", PortLabel: "agent",
				Checks: []api.ServiceCheck{
					{Name: "agent-up", Type: "http", Path: "/v1/agent/health", Interval: time.Second, Timeout: time.Second},
					{Name: "closed-port", Type: "tcp", PortLabel: "closed", Interval: time.Second, Timeout: time.Second},
				},
			}},
			Tasks: []*api.Task{{
				Name:      "main",
				Driver:    "exec",
				Config:    map[string]any{"command": "/bin/sleep", "args": []string{"3600"}},
				Resources: &api.Resources{CPU: ptr(20), MemoryMB: ptr(32)},
			}},
		}},
	}
}

// TestRealNomadExecAndChecks runs ExecAlloc and AllocChecks against a real
// Nomad agent with ACLs on: a command sees its NSS_ variables, quoted
// values intact, and its exit code and output come back, by the node or
// through the server; a command that outlives its deadline fails at the
// deadline; Nomad's refusals are errors, and a token without alloc-exec
// gets a PermissionError naming it; the checks of a provider = "nomad"
// service are read by name, and a stopped allocation has none.
func TestRealNomadExecAndChecks(t *testing.T) {
	n := testagent.Nomad(t, testagent.WithACL())
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	client := nomad.NewAPI(n.Client)
	if _, err := client.RegisterJob(ctx, execJob("exec-test", n.HTTPPort), false, 0); err != nil {
		t.Fatal(err)
	}
	var allocID, nodeID string
	testagent.Eventually(t, 2*time.Minute, "the exec task to run", func() error {
		allocs, _, err := n.Client.Jobs().Allocations("exec-test", false, nil)
		if err != nil {
			return err
		}
		for _, a := range allocs {
			if ts := a.TaskStates["main"]; a.ClientStatus == api.AllocClientStatusRunning && ts != nil && ts.State == "running" {
				allocID, nodeID = a.ID, a.NodeID
				return nil
			}
		}
		return fmt.Errorf("allocations %d, none running", len(allocs))
	})
	env := map[string]string{
		"NSS_SET": "db", "NSS_POD": "db-2", "NSS_ORDINAL": "2",
		"NSS_TARGET_POD": `it's a "db" $HOME ` + "`true`; \\n \n end",
	}
	exec := func(ctx context.Context, impl nomad.API, command string) (nomad.ExecResult, error) {
		return impl.ExecAlloc(ctx, "default", nodeID, allocID, "main", []string{"/bin/sh", "-c", command}, env)
	}

	t.Run("ExitCodeAndOutput", func(t *testing.T) {
		res, err := exec(ctx, client, "echo $NSS_POD; exit 3")
		if err != nil || res.ExitCode != 3 || res.Output != "db-2\n" || res.Truncated {
			t.Fatalf("got %+v, %v; want exit 3 and output %q", res, err, "db-2\n")
		}
	})
	t.Run("EnvQuoting", func(t *testing.T) {
		res, err := exec(ctx, client, `printf '%s|%s|%s' "$NSS_SET" "$NSS_ORDINAL" "$NSS_TARGET_POD"`)
		want := "db|2|" + env["NSS_TARGET_POD"]
		if err != nil || res.ExitCode != 0 || res.Output != want {
			t.Fatalf("got %+v, %v; want exit 0 and output %q", res, err, want)
		}
	})
	t.Run("Stderr", func(t *testing.T) {
		res, err := exec(ctx, client, "echo to stderr >&2; exit 1")
		if err != nil || res.ExitCode != 1 || res.Output != "to stderr\n" {
			t.Fatalf("got %+v, %v; want exit 1 and output %q", res, err, "to stderr\n")
		}
	})
	t.Run("ThroughTheServer", func(t *testing.T) {
		// Without the node's ID the api client cannot try the node, and
		// the agent at n.Addr forwards the exec.
		res, err := client.ExecAlloc(ctx, "default", "", allocID, "main", []string{"/bin/sh", "-c", "echo $NSS_ORDINAL"}, env)
		if err != nil || res.ExitCode != 0 || res.Output != "2\n" {
			t.Fatalf("got %+v, %v; want exit 0 and output %q", res, err, "2\n")
		}
	})
	t.Run("OutputKeepsItsEnd", func(t *testing.T) {
		res, err := exec(ctx, client, `i=0; while [ $i -lt 1000 ]; do echo line-$i; i=$((i+1)); done`)
		if err != nil || res.ExitCode != 0 || !res.Truncated || len(res.Output) > nomad.ExecOutputLimit ||
			!strings.HasSuffix(res.Output, "line-998\nline-999\n") {
			t.Fatalf("got exit %d, %d bytes (truncated %v) ending %q, %v; want the last %d bytes",
				res.ExitCode, len(res.Output), res.Truncated, res.Output[max(0, len(res.Output)-30):], err, nomad.ExecOutputLimit)
		}
	})
	t.Run("DeadlineEndsTheCall", func(t *testing.T) {
		ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		defer cancel()
		start := time.Now()
		res, err := exec(ctx, client, "echo started; exec sleep 47")
		took := time.Since(start)
		if !errors.Is(err, context.DeadlineExceeded) || took > 5*time.Second || res.ExitCode != -1 || res.Output != "started\n" {
			t.Fatalf("a command past its deadline returned %+v, %v after %s; want a deadline error at 2s, with the output so far", res, err, took)
		}
	})
	t.Run("Refused", func(t *testing.T) {
		for name, call := range map[string]func() (nomad.ExecResult, error){
			"unknown task": func() (nomad.ExecResult, error) {
				return client.ExecAlloc(ctx, "default", nodeID, allocID, "nope", []string{"true"}, nil)
			},
			"unknown allocation": func() (nomad.ExecResult, error) {
				return client.ExecAlloc(ctx, "default", nodeID, "4e4c1b5e-0000-4000-8000-000000000000", "main", []string{"true"}, nil)
			},
		} {
			if res, err := call(); err == nil || res.ExitCode != -1 {
				t.Errorf("%s: got %+v, %v; want an error", name, res, err)
			}
		}
	})

	// Tokens with one capability each: what each verb needs, and the
	// error that names it when it is missing.
	token := func(name, rules string) nomad.API {
		if _, err := n.Client.ACLPolicies().Upsert(&api.ACLPolicy{Name: name, Rules: rules}, nil); err != nil {
			t.Fatal(err)
		}
		tok, _, err := n.Client.ACLTokens().Create(&api.ACLToken{Name: name, Type: "client", Policies: []string{name}}, nil)
		if err != nil {
			t.Fatal(err)
		}
		c, err := api.NewClient(&api.Config{Address: n.Addr, SecretID: tok.SecretID})
		if err != nil {
			t.Fatal(err)
		}
		return nomad.NewAPI(c)
	}
	readOnly := token("read-only", `namespace "default" { capabilities = ["read-job"] }`)
	execOnly := token("exec-only", `namespace "default" { capabilities = ["alloc-exec"] }`)
	t.Run("PermissionDenied", func(t *testing.T) {
		_, err := exec(ctx, readOnly, "true")
		var perm *nomad.PermissionError
		if !errors.As(err, &perm) || perm.Capability != "alloc-exec" {
			t.Fatalf("an exec without alloc-exec returned %v; want a PermissionError naming alloc-exec", err)
		}
		if res, err := exec(ctx, execOnly, "exit 0"); err != nil || res.ExitCode != 0 {
			t.Fatalf("alloc-exec alone: %+v, %v; want exit 0", res, err)
		}
		_, err = execOnly.AllocChecks(ctx, "default", allocID)
		if !errors.As(err, &perm) || perm.Capability != "read-job" {
			t.Fatalf("checks without read-job returned %v; want a PermissionError naming read-job", err)
		}
	})

	t.Run("Checks", func(t *testing.T) {
		testagent.Eventually(t, time.Minute, "both checks to have run", func() error {
			checks, err := readOnly.AllocChecks(ctx, "default", allocID)
			if err != nil {
				return err
			}
			up, down := checks["agent-up"], checks["closed-port"]
			if len(checks) != 2 || !up.Passing || down.Passing || down.Output == "" {
				return fmt.Errorf("checks %+v", checks)
			}
			return nil
		})
		if _, err := client.AllocChecks(ctx, "default", "4e4c1b5e-0000-4000-8000-000000000000"); !errors.Is(err, nomad.ErrNotFound) {
			t.Fatalf("checks of an unknown allocation: %v; want ErrNotFound", err)
		}
	})
	t.Run("AfterStop", func(t *testing.T) {
		if err := client.DeregisterJob(ctx, "default", "exec-test", false); err != nil {
			t.Fatal(err)
		}
		testagent.Eventually(t, time.Minute, "the allocation to stop", func() error {
			a, _, err := n.Client.Allocations().Info(allocID, nil)
			if err != nil {
				return err
			}
			if a.ClientStatus == api.AllocClientStatusRunning {
				return errors.New("still running")
			}
			return nil
		})
		if res, err := exec(ctx, client, "true"); err == nil || res.ExitCode != -1 {
			t.Errorf("exec into a stopped allocation: %+v, %v; want an error", res, err)
		}
		// Nomad's client drops a stopped allocation's check results.
		if checks, err := client.AllocChecks(ctx, "default", allocID); err != nil || len(checks) != 0 {
			t.Errorf("checks of a stopped allocation: %+v, %v; want none", checks, err)
		}
	})
}
