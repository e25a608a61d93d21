//go:build realagents

package nomad_test

import (
	"context"
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
	g := cache.Observe(sets[1], nil, time.Now()).Pods[0].Job.TaskGroups[0]
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
	_, meta, err := n.Client.Jobs().List(&api.QueryOptions{Namespace: "*"})
	if err != nil {
		t.Fatal(err)
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
