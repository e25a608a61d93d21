package command

import (
	"encoding/json"
	"flag"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/cli"
	"github.com/hashicorp/nomad/api"

	"github.com/nomad-statefulset/nomad-statefulset/client"
)

// update rewrites the golden files: go test ./command -update
var update = flag.Bool("update", false, "rewrite testdata/*.golden")

// testNow is the fixed clock of every test, so relative times are stable.
var testNow = time.Date(2026, 11, 21, 12, 0, 0, 0, time.UTC)

// newTestMeta returns a Meta writing to a mock UI, with the fixed clock.
func newTestMeta() (Meta, *cli.MockUi) {
	ui := cli.NewMockUi()
	return Meta{UI: ui, Now: func() time.Time { return testNow }}, ui
}

// golden compares got with testdata/<name>.golden, or rewrites it with -update.
func golden(t *testing.T, name, got string) {
	t.Helper()
	path := filepath.Join("testdata", name+".golden")
	if *update {
		if err := os.MkdirAll("testdata", 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, []byte(got), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("reading golden file (run with -update to create it): %v", err)
	}
	if string(want) != got {
		t.Errorf("output differs from %s (run with -update if the change is intended)\n--- got ---\n%s\n--- want ---\n%s", path, got, want)
	}
}

// closedAddress returns an http address on which nothing listens.
func closedAddress(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	if err := ln.Close(); err != nil {
		t.Fatal(err)
	}
	return "http://" + addr
}

// checkNoCrash fails if the output looks like a Go crash or a raw value.
func checkNoCrash(t *testing.T, out string) {
	t.Helper()
	for _, bad := range []string{"panic", "goroutine ", "runtime error", "&{", "<nil>"} {
		if strings.Contains(out, bad) {
			t.Errorf("output contains %q:\n%s", bad, out)
		}
	}
}

// fakeAgent serves the agent's HTTP API from fixed client types. A set may
// have a sequence of details, served one per request (the last repeats),
// to script a rollout.
type fakeAgent struct {
	t   *testing.T
	srv *httptest.Server

	mu       sync.Mutex
	sets     map[string][]*client.SetDetail // "ns/name" -> sequence
	served   map[string]int
	requests []string
	// health is the body of /v1/health (503 unless its status is "ok"):
	// by default a leader without high availability.
	health client.Health
}

func newFakeAgent(t *testing.T) *fakeAgent {
	a := &fakeAgent{t: t, sets: map[string][]*client.SetDetail{}, served: map[string]int{},
		health: client.Health{Status: "ok", Leader: true, Checks: map[string]string{"nomad": "ok", "store": "ok"}}}
	mux := http.NewServeMux()
	mux.HandleFunc("GET /v1/health", func(w http.ResponseWriter, r *http.Request) {
		a.mu.Lock()
		h := a.health
		a.mu.Unlock()
		code := http.StatusOK
		if h.Status != "ok" {
			code = http.StatusServiceUnavailable
		}
		writeTestJSON(w, code, h)
	})
	mux.HandleFunc("GET /v1/statefulsets", func(w http.ResponseWriter, r *http.Request) {
		a.record(r)
		a.mu.Lock()
		defer a.mu.Unlock()
		list := client.SetList{Sets: []client.SetSummary{}}
		for _, seq := range a.sets {
			d := seq[len(seq)-1]
			if d == nil {
				continue
			}
			list.Sets = append(list.Sets, client.SetSummary{
				Namespace: d.Namespace, Name: d.Name, Replicas: d.Spec.Replicas, ReadyReplicas: d.Status.ReadyReplicas,
				CurrentRevision: d.Status.CurrentRevision, UpdateRevision: d.Status.UpdateRevision, Conditions: d.Status.Conditions,
				Error: d.Error,
			})
		}
		writeTestJSON(w, http.StatusOK, list)
	})
	mux.HandleFunc("GET /v1/statefulset/{namespace}/{name}", func(w http.ResponseWriter, r *http.Request) {
		a.record(r)
		key := r.PathValue("namespace") + "/" + r.PathValue("name")
		a.mu.Lock()
		seq, ok := a.sets[key]
		i := a.served[key]
		if ok {
			a.served[key] = i + 1
		}
		a.mu.Unlock()
		// A nil entry is a 404, as from an agent that just restarted.
		if !ok || seq[min(i, len(seq)-1)] == nil {
			writeTestJSON(w, http.StatusNotFound, map[string]string{"error": "no statefulset " + key + " is known to this agent"})
			return
		}
		d := *seq[min(i, len(seq)-1)]
		// Templates only for the revision asked for, as the contract says.
		want := r.URL.Query().Get("revision")
		revs := make([]client.Revision, len(d.Revisions))
		for j, rv := range d.Revisions {
			if strconv.FormatInt(rv.Number, 10) != want {
				rv.Template = ""
			}
			revs[j] = rv
		}
		d.Revisions = revs
		writeTestJSON(w, http.StatusOK, d)
	})
	a.srv = httptest.NewServer(mux)
	t.Cleanup(a.srv.Close)
	return a
}

func (a *fakeAgent) record(r *http.Request) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.requests = append(a.requests, r.URL.RequestURI())
}

// add serves details for a set, in order; a nil entry is a 404, and the
// set's key is that of the first detail that is not.
func (a *fakeAgent) add(ds ...*client.SetDetail) {
	a.mu.Lock()
	defer a.mu.Unlock()
	for _, d := range ds {
		if d != nil {
			a.sets[d.Namespace+"/"+d.Name] = ds
			return
		}
	}
	a.t.Fatal("fakeAgent.add: no detail")
}

func writeTestJSON(w http.ResponseWriter, code int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	_ = json.NewEncoder(w).Encode(v)
}

// fakeNomad serves the slice of Nomad's HTTP API the CLI uses: job read,
// register with EnforceIndex, and HCL parse. Register enforces the index
// and answers a mismatch with Nomad's own error text.
type fakeNomad struct {
	t   *testing.T
	srv *httptest.Server

	mu   sync.Mutex
	jobs map[string]*api.Job // "ns/id"
	// registered records every successful register request.
	registered []api.JobRegisterRequest
	// beforeRegister runs before the index check: a test bumps the job's
	// index here to lose the check-and-set race.
	beforeRegister func(f *fakeNomad)
	// parse answers /v1/jobs/parse: the job, or an error status and text.
	parseJob    *api.Job
	parseStatus int
	parseErr    string
	parseReq    *api.JobsParseRequest
}

func newFakeNomad(t *testing.T) *fakeNomad {
	f := &fakeNomad{t: t, jobs: map[string]*api.Job{}}
	mux := http.NewServeMux()
	mux.HandleFunc("GET /v1/job/{id}", func(w http.ResponseWriter, r *http.Request) {
		f.mu.Lock()
		defer f.mu.Unlock()
		job, ok := f.jobs[nsOf(r)+"/"+r.PathValue("id")]
		if !ok {
			http.Error(w, "job not found", http.StatusNotFound)
			return
		}
		writeTestJSON(w, http.StatusOK, job)
	})
	mux.HandleFunc("PUT /v1/jobs", func(w http.ResponseWriter, r *http.Request) {
		var req api.JobRegisterRequest
		if err := json.NewDecoder(r.Body).Decode(&req); err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		f.mu.Lock()
		defer f.mu.Unlock()
		if f.beforeRegister != nil {
			f.beforeRegister(f)
		}
		key := *req.Job.Namespace + "/" + *req.Job.ID
		cur, ok := f.jobs[key]
		var curIndex uint64
		if ok {
			curIndex = *cur.JobModifyIndex
		}
		if req.EnforceIndex && req.JobModifyIndex != curIndex {
			// Nomad's text, verbatim (nomad/job_endpoint.go).
			http.Error(w, fmt.Sprintf("Enforcing job modify index %d: job exists with conflicting job modify index: %d", req.JobModifyIndex, curIndex), http.StatusInternalServerError)
			return
		}
		next := curIndex + 1
		req.Job.JobModifyIndex = &next
		f.jobs[key] = req.Job
		f.registered = append(f.registered, req)
		writeTestJSON(w, http.StatusOK, api.JobRegisterResponse{EvalID: "eval-" + strconv.FormatUint(next, 10), JobModifyIndex: next})
	})
	mux.HandleFunc("PUT /v1/jobs/parse", func(w http.ResponseWriter, r *http.Request) {
		var req api.JobsParseRequest
		if err := json.NewDecoder(r.Body).Decode(&req); err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		f.mu.Lock()
		defer f.mu.Unlock()
		f.parseReq = &req
		if f.parseStatus != 0 {
			http.Error(w, f.parseErr, f.parseStatus)
			return
		}
		writeTestJSON(w, http.StatusOK, f.parseJob)
	})
	f.srv = httptest.NewServer(mux)
	t.Cleanup(f.srv.Close)
	return f
}

func nsOf(r *http.Request) string {
	if ns := r.URL.Query().Get("namespace"); ns != "" {
		return ns
	}
	return "default"
}

// put stores a job with the given JobModifyIndex.
func (f *fakeNomad) put(job *api.Job, index uint64) {
	f.mu.Lock()
	defer f.mu.Unlock()
	job.JobModifyIndex = &index
	f.jobs[*job.Namespace+"/"+*job.ID] = job
}

// get returns the stored job.
func (f *fakeNomad) get(ns, id string) *api.Job {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.jobs[ns+"/"+id]
}

func (f *fakeNomad) registers() []api.JobRegisterRequest {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]api.JobRegisterRequest(nil), f.registered...)
}

func ptrTo[T any](v T) *T { return &v }

// parentJob is a valid annotated parent job, as a user would submit it.
func parentJob(name string) *api.Job {
	return &api.Job{
		ID:          ptrTo(name),
		Name:        ptrTo(name),
		Namespace:   ptrTo("default"),
		Type:        ptrTo("service"),
		Datacenters: []string{"dc1"},
		Meta: map[string]string{
			"statefulset":          "true",
			"statefulset_replicas": "3",
			"owner":                "team-a",
		},
		TaskGroups: []*api.TaskGroup{{
			Name:  ptrTo(name),
			Count: ptrTo(0),
			RestartPolicy: &api.RestartPolicy{
				Attempts: ptrTo(0),
			},
			Tasks: []*api.Task{{
				Name:   "app",
				Driver: "docker",
				Config: map[string]any{"image": "nginx:1.27"},
			}},
		}},
	}
}
