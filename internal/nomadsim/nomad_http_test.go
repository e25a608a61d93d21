package nomadsim_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strconv"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/nomad/api"

	"github.com/nomad-statefulset/nomad-statefulset/backend"
	"github.com/nomad-statefulset/nomad-statefulset/backend/nomad"
	"github.com/nomad-statefulset/nomad-statefulset/internal/nomadsim"
	"github.com/nomad-statefulset/nomad-statefulset/jobs"
)

func ptr[T any](v T) *T { return &v }

// httpChild is a child job of set web, ordinal 0.
func httpChild(rev string) *api.Job {
	j := api.NewServiceJob("web-0", "web-0", "global", 50)
	tg := api.NewTaskGroup("pod", 1)
	tg.AddTask(api.NewTask("app", "mock_driver"))
	tg.Update = &api.UpdateStrategy{MaxParallel: ptr(1)}
	j.AddTaskGroup(tg)
	j.Meta = map[string]string{"statefulset_parent": "web", "statefulset_ordinal": "0", "statefulset_revision": rev}
	return j
}

// servedSim is a simulated Nomad served over HTTP at addr, and the daemon's
// own client of it; both end with the test.
func servedSim(t *testing.T, cfg nomadsim.NomadConfig) (sim *nomadsim.Nomad, cl *nomad.Client, addr string) {
	t.Helper()
	sim = nomadsim.NewNomad(cfg)
	t.Cleanup(sim.Close)
	srv := httptest.NewServer(sim.Handler())
	t.Cleanup(srv.Close)
	c, err := api.NewClient(&api.Config{Address: srv.URL})
	if err != nil {
		t.Fatal(err)
	}
	return sim, nomad.NewAPI(c), srv.URL
}

// TestHandlerServesTheDaemonsClient drives the simulation through its HTTP
// handler with the daemon's own nomad.Client: every API verb, Nomad's
// errors as the client classifies them, and a watcher following the event
// stream until the child is ready.
func TestHandlerServesTheDaemonsClient(t *testing.T) {
	sim, cl, _ := servedSim(t, nomadsim.NomadConfig{PlaceDelay: time.Millisecond, StartDelay: time.Millisecond, HealthyDelay: time.Millisecond, StopDelay: time.Millisecond})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()

	cache := nomad.NewCache()
	w := nomad.NewWatcher(cl, cache, nomad.WatcherConfig{ResyncInterval: time.Hour}, hclog.NewNullLogger(), func(backend.SetKey) {})
	go func() { _ = w.Run(ctx) }()

	resp, err := cl.RegisterJob(ctx, httpChild("r1"), true, 0)
	if err != nil || resp.JobModifyIndex == 0 {
		t.Fatalf("register: %+v, %v", resp, err)
	}
	if _, err := cl.RegisterJob(ctx, httpChild("r2"), true, resp.JobModifyIndex+100); !nomad.IsConflict(err) {
		t.Fatalf("a check-and-set conflict reads as %v", err)
	}
	job, err := cl.GetJob(ctx, "default", "web-0")
	if err != nil || *job.JobModifyIndex != resp.JobModifyIndex || *job.TaskGroups[0].Update.MaxParallel != 1 {
		t.Fatalf("get: %+v, %v", job, err)
	}
	if _, err := cl.GetJob(ctx, "default", "nope"); !nomad.IsNotFound(err) {
		t.Fatalf("a missing job reads as %v", err)
	}
	stubs, index, err := cl.ListJobs(ctx, "*")
	if err != nil || len(stubs) != 1 || stubs[0].Meta["statefulset_parent"] != "web" || index < resp.JobModifyIndex {
		t.Fatalf("list jobs: %+v at %d, %v", stubs, index, err)
	}

	deadline := time.Now().Add(30 * time.Second)
	for {
		obs := cache.Observe(backend.SetKey{Namespace: "default", Name: "web"}, nil, time.Now())
		if len(obs.Pods) == 1 && obs.Pods[0].Pod.Ready {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the watcher never saw the child ready over HTTP: %+v", obs.Pods)
		}
		time.Sleep(time.Millisecond)
	}
	byJob := sim.Allocs("default", "web-0")
	if len(byJob) != 1 {
		t.Fatalf("job allocations: %+v", byJob)
	}
	all, err := cl.ListAllocations(ctx, "*")
	if err != nil || len(all) != 1 || all[0].ID != byJob[0].ID || all[0].TaskStates != nil {
		t.Fatalf("list allocations: %+v, %v", all, err)
	}

	vol, err := cl.CreateHostVolume(ctx, &api.HostVolume{Name: "data-web-0", Namespace: "default", PluginID: "mkdir"})
	if err != nil || vol.ID == "" {
		t.Fatalf("create volume: %+v, %v", vol, err)
	}
	vols, err := cl.ListHostVolumes(ctx, "default", "data-web")
	if err != nil || len(vols) != 1 || vols[0].ID != vol.ID {
		t.Fatalf("list volumes: %+v, %v", vols, err)
	}
	if got, err := cl.GetHostVolume(ctx, "default", vol.ID); err != nil || got.ID != vol.ID || got.Name != "data-web-0" {
		t.Fatalf("get volume: %+v, %v", got, err)
	}
	if err := cl.DeleteHostVolume(ctx, "default", vol.ID); err != nil {
		t.Fatalf("delete volume: %v", err)
	}
	if vols, err := cl.ListHostVolumes(ctx, "default", ""); err != nil || len(vols) != 0 {
		t.Fatalf("volumes after the delete: %+v, %v", vols, err)
	}
	if _, err := cl.GetHostVolume(ctx, "default", vol.ID); !nomad.IsNotFound(err) {
		t.Fatalf("the deleted volume reads as %v", err)
	}
	if err := cl.DeregisterJob(ctx, "default", "web-0", true); err != nil {
		t.Fatalf("purge: %v", err)
	}
	if _, err := cl.GetJob(ctx, "default", "web-0"); !nomad.IsNotFound(err) {
		t.Fatalf("the purged job reads as %v", err)
	}
}

// TestListJobsInPages: the daemon's client lists jobs in pages, as Nomad
// paginates them (per_page, next_token), and gets every job once, with
// the index of its first page and without the record of a child's
// rendering in the stubs' meta.
func TestListJobsInPages(t *testing.T) {
	sim, cl, addr := servedSim(t, nomadsim.NomadConfig{PlaceDelay: time.Hour})
	ctx := context.Background()
	const n = 2345 // more than two pages
	for i := 0; i < n; i++ {
		j := httpChild("r1")
		j.ID, j.Name = ptr(fmt.Sprintf("web-%d", i)), ptr(fmt.Sprintf("web-%d", i))
		j.Meta["statefulset_ordinal"] = strconv.Itoa(i)
		j.Meta[jobs.MetaRendered] = "1.AAAA"
		if _, err := sim.RegisterJob(ctx, j, false, 0); err != nil {
			t.Fatal(err)
		}
	}
	before := sim.Index()
	stubs, index, err := cl.ListJobs(ctx, "*")
	if err != nil {
		t.Fatal(err)
	}
	if index < before {
		t.Fatalf("listed at index %d, before the last register's %d", index, before)
	}
	seen := map[string]bool{}
	for _, st := range stubs {
		if seen[st.ID] {
			t.Fatalf("job %s listed twice", st.ID)
		}
		seen[st.ID] = true
		if _, ok := st.Meta[jobs.MetaRendered]; ok || st.Meta["statefulset_parent"] != "web" {
			t.Fatalf("stub %s has meta %v", st.ID, st.Meta)
		}
	}
	if len(seen) != n {
		t.Fatalf("listed %d jobs, want %d", len(seen), n)
	}

	// Nomad's own pages: each names the first job of the next.
	resp, err := http.Get(addr + "/v1/jobs?namespace=*&per_page=2")
	if err != nil {
		t.Fatal(err)
	}
	var first []*api.JobListStub
	err = json.NewDecoder(resp.Body).Decode(&first)
	resp.Body.Close()
	next := resp.Header.Get("X-Nomad-NextToken")
	if err != nil || len(first) != 2 || next != "default."+stubs[2].ID {
		t.Fatalf("first page: %d stubs, next token %q, %v", len(first), next, err)
	}
	resp, err = http.Get(addr + "/v1/jobs?namespace=*&per_page=2&next_token=" + url.QueryEscape(next))
	if err != nil {
		t.Fatal(err)
	}
	var second []*api.JobListStub
	err = json.NewDecoder(resp.Body).Decode(&second)
	resp.Body.Close()
	if err != nil || len(second) != 2 || second[0].ID != stubs[2].ID {
		t.Fatalf("second page: %+v, %v", second, err)
	}
}
