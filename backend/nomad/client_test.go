package nomad_test

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"net/url"
	"reflect"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/nomad/api"

	"github.com/nomad-statefulset/nomad-statefulset/backend/nomad"
	"github.com/nomad-statefulset/nomad-statefulset/jobs"
)

// TestClientEventsKeepsRawPayloads: Client.Events hands every payload
// object over as the JSON Nomad sent, so the watcher decodes it once, and
// that one decode keeps the fields the api's mapstructure helpers lose. The
// server here speaks the event stream's wire format: one JSON object per
// index, "{}" heartbeats.
func TestClientEventsKeepsRawPayloads(t *testing.T) {
	job := child("r1")
	job.ModifyIndex = ptr(uint64(7))
	jobJSON, err := json.Marshal(map[string]any{"Job": job})
	if err != nil {
		t.Fatal(err)
	}
	queries := make(chan url.Values, 1)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/v1/event/stream" {
			http.NotFound(w, r)
			return
		}
		queries <- r.URL.Query()
		w.WriteHeader(http.StatusOK)
		_, _ = w.Write([]byte("{}\n"))
		_, _ = w.Write([]byte(`{"Index":7,"Events":[{"Topic":"Job","Type":"JobRegistered","Key":"web-0","Index":7,"Payload":` + string(jobJSON) + "}]}\n"))
		_, _ = w.Write([]byte(`{"Index":8,"Events":[{"Topic":"Allocation","Type":"AllocationUpdated","Key":"a1","Index":8,"Payload":{"Allocation":{"ID":"a1","JobID":"web-0","ClientStatus":"running","DeploymentStatus":{"Healthy":true}}}}]}` + "\n"))
	}))
	defer srv.Close()
	c, err := api.NewClient(&api.Config{Address: srv.URL})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	ch, err := nomad.NewAPI(c).Events(ctx, 5)
	if err != nil {
		t.Fatal(err)
	}
	var got []*api.Events
	for evs := range ch {
		got = append(got, evs)
		if evs.Err != nil {
			break
		}
	}
	gotQuery := <-queries
	topics := gotQuery["topic"]
	sort.Strings(topics)
	if gotQuery.Get("index") != "5" || strings.Join(topics, ",") != "Allocation:*,Evaluation:*,HostVolume:*,Job:*,Node:*" {
		t.Fatalf("subscribed with %v", gotQuery)
	}
	if len(got) != 3 || got[0].Index != 7 || got[1].Index != 8 || got[2].Err == nil {
		t.Fatalf("want the two indexes, no heartbeat, then the end of the stream as an error; got %+v", got)
	}
	e := got[0].Events[0]
	if _, raw := e.Payload["Job"].(json.RawMessage); !raw {
		t.Fatalf("the job payload is a %T, not its raw JSON", e.Payload["Job"])
	}
	var decoded *api.Job
	if err := nomad.DecodePayload(&e, "Job", &decoded); err != nil {
		t.Fatal(err)
	}
	g := decoded.TaskGroups[0]
	if *decoded.ModifyIndex != 7 || g.Update == nil || g.Update.MaxParallel == nil || *g.Update.MaxParallel != 1 ||
		g.Disconnect == nil || g.Disconnect.StopOnClientAfter == nil || *g.Disconnect.StopOnClientAfter != time.Minute ||
		g.ReschedulePolicy == nil || g.ReschedulePolicy.Attempts == nil {
		t.Fatalf("decoding lost fields: update %+v disconnect %+v reschedule %+v", g.Update, g.Disconnect, g.ReschedulePolicy)
	}
	var alloc *api.Allocation
	ae := got[1].Events[0]
	if err := nomad.DecodePayload(&ae, "Allocation", &alloc); err != nil || alloc.ID != "a1" || !*alloc.DeploymentStatus.Healthy {
		t.Fatalf("allocation payload: %+v, %v", alloc, err)
	}
}

// TestDecodePayloadForms: a raw JSON payload, a typed object (the
// simulator's default) and a generic map decode to the same job.
func TestDecodePayloadForms(t *testing.T) {
	job := child("r1")
	raw, err := json.Marshal(job)
	if err != nil {
		t.Fatal(err)
	}
	var generic map[string]any
	if err := json.Unmarshal(raw, &generic); err != nil {
		t.Fatal(err)
	}
	for name, v := range map[string]any{"raw": json.RawMessage(raw), "typed": job, "map": generic} {
		e := api.Event{Type: "JobRegistered", Payload: map[string]any{"Job": v}}
		var out *api.Job
		if err := nomad.DecodePayload(&e, "Job", &out); err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		back, _ := json.Marshal(out)
		if string(back) != string(raw) {
			t.Errorf("%s: decoded %s, want %s", name, back, raw)
		}
	}
	e := api.Event{Type: "JobRegistered", Payload: map[string]any{}}
	var out *api.Job
	if err := nomad.DecodePayload(&e, "Job", &out); err == nil {
		t.Error("a missing payload decoded")
	}
}

// TestClientListsDecodeOnlyWhatTheWatcherReads: the re-list's two listings
// keep the fields the watcher and cache read and drop the rest (job
// summaries, task states), which were most of a re-list's memory.
func TestClientListsDecodeOnlyWhatTheWatcherReads(t *testing.T) {
	healthy := true
	stamp := time.Unix(1_700_000_000, 0).UTC()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("X-Nomad-Index", "42")
		w.Header().Set("X-Nomad-LastContact", "0")
		w.Header().Set("X-Nomad-KnownLeader", "true")
		switch r.URL.Path {
		case "/v1/jobs":
			if r.URL.Query().Get("meta") != "true" || r.URL.Query().Get("namespace") != "*" {
				http.Error(w, "want meta=true and namespace=*", http.StatusBadRequest)
				return
			}
			_ = json.NewEncoder(w).Encode([]*api.JobListStub{{
				ID: "web-0", Namespace: "prod", Status: "running", Stop: true, SubmitTime: 5,
				Meta:        map[string]string{jobs.MetaParent: "web", jobs.MetaOrdinal: "0", jobs.MetaRendered: "1.AAAA"},
				CreateIndex: 1, ModifyIndex: 9, JobModifyIndex: 8, Datacenters: []string{"dc1"},
				JobSummary: &api.JobSummary{Summary: map[string]api.TaskGroupSummary{"g": {Running: 1}}},
			}, {
				ID: "web", Namespace: "prod", Status: "running", Meta: map[string]string{jobs.KeyManaged: "true", "statefulset_replicas": "1"},
			}, {
				ID: "other", Namespace: "prod", Status: "running", Meta: map[string]string{"team": "a"},
			}})
		case "/v1/allocations":
			if r.URL.Query().Get("task_states") == "false" || r.URL.Query().Get("namespace") != "*" {
				http.Error(w, "want task states and namespace=*", http.StatusBadRequest)
				return
			}
			_ = json.NewEncoder(w).Encode([]*api.AllocationListStub{{
				ID: "a1", Namespace: "prod", NodeID: "n1", JobID: "web-0", DesiredStatus: "run", ClientStatus: "running",
				DeploymentStatus: &api.AllocDeploymentStatus{Healthy: &healthy, Timestamp: stamp},
				CreateIndex:      3, ModifyIndex: 4, ModifyTime: 6, EvalID: "e1", TaskGroup: "g",
				TaskStates: map[string]*api.TaskState{"app": {
					State: "pending", Failed: true, Restarts: 2, StartedAt: stamp, FinishedAt: stamp.Add(time.Second),
					Events: []*api.TaskEvent{{Type: "Restarting", DisplayMessage: "dropped"}},
				}},
			}})
		default:
			http.NotFound(w, r)
		}
	}))
	defer srv.Close()
	c, err := api.NewClient(&api.Config{Address: srv.URL})
	if err != nil {
		t.Fatal(err)
	}
	cl := nomad.NewAPI(c)
	stubs, index, err := cl.ListJobs(context.Background(), "*")
	if err != nil {
		t.Fatal(err)
	}
	// The stubs' meta keeps only the keys the watcher reads.
	want := []*api.JobListStub{{ID: "web-0", Namespace: "prod", Status: "running", Stop: true, SubmitTime: 5,
		Meta: map[string]string{jobs.MetaParent: "web"}, CreateIndex: 1, ModifyIndex: 9, JobModifyIndex: 8},
		{ID: "web", Namespace: "prod", Status: "running", Meta: map[string]string{jobs.KeyManaged: "true"}},
		{ID: "other", Namespace: "prod", Status: "running"}}
	if index != 42 || !reflect.DeepEqual(stubs, want) {
		t.Fatalf("ListJobs: index %d, stubs %+v; want %+v", index, stubs, want)
	}
	allocs, err := cl.ListAllocations(context.Background(), "*")
	if err != nil {
		t.Fatal(err)
	}
	wantAlloc := &api.AllocationListStub{ID: "a1", Namespace: "prod", NodeID: "n1", JobID: "web-0", DesiredStatus: "run", ClientStatus: "running",
		DeploymentStatus: &api.AllocDeploymentStatus{Healthy: &healthy, Timestamp: stamp}, CreateIndex: 3, ModifyIndex: 4, ModifyTime: 6,
		TaskStates: map[string]*api.TaskState{"app": {State: "pending", Failed: true, Restarts: 2, StartedAt: stamp, FinishedAt: stamp.Add(time.Second)}}}
	if len(allocs) != 1 || !reflect.DeepEqual(allocs[0], wantAlloc) {
		t.Fatalf("ListAllocations: %+v; want %+v", allocs, wantAlloc)
	}
}

// A 404 is Nomad's answer, not any error whose text holds "404": an
// unreachable Nomad on a port like 14046 is not "not found", or the agent
// would take a child it cannot reach for gone.
func TestIsNotFound(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		http.Error(w, "job not found", http.StatusNotFound)
	}))
	defer srv.Close()
	c, err := api.NewClient(&api.Config{Address: srv.URL})
	if err != nil {
		t.Fatal(err)
	}
	_, _, notFound := c.Jobs().Info("web-0", nil)
	dead, err := api.NewClient(&api.Config{Address: "http://127.0.0.1:14046"})
	if err != nil {
		t.Fatal(err)
	}
	_, _, unreachable := dead.Jobs().Info("web-0", nil)
	tests := []struct {
		name string
		err  error
		want bool
	}{
		{"nil", nil, false},
		{"Nomad's 404", notFound, true},
		{"ErrNotFound", nomad.ErrNotFound, true},
		{"unreachable on a port with 404 in it", unreachable, false},
		{"a message mentioning 404", errors.New("quota 404 exceeded"), false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := nomad.IsNotFound(tt.err); got != tt.want {
				t.Fatalf("IsNotFound(%v) = %v, want %v", tt.err, got, tt.want)
			}
		})
	}
}

// TestNodeValue reads every attribute statefulset_spread may name.
func TestNodeValue(t *testing.T) {
	n := &api.Node{ID: "id-1", Name: "n1", Datacenter: "dc2", NodeClass: "big", NodePool: "pool-a",
		Meta: map[string]string{"rack": "r7"}, Attributes: map[string]string{"kernel.name": "linux"}}
	for attr, want := range map[string]string{
		"${node.unique.id}": "id-1", "${node.unique.name}": "n1", "${node.datacenter}": "dc2",
		"${node.class}": "big", "${node.pool}": "pool-a", "${meta.rack}": "r7", "${attr.kernel.name}": "linux",
		"${meta.missing}": "",
	} {
		if got := nomad.NodeValue(n, attr); got != want {
			t.Errorf("NodeValue(%s) = %q, want %q", attr, got, want)
		}
	}
}

// TestClientEventsReadsNomadsPlainTextError: Nomad ends an event stream
// with an error of its own written as plain text (its HTTP handler's
// wrap): after the last event when the stream had started (the 200 was
// sent already), or as a 500's body when it had not. Either way Events
// hands over a *nomad.StreamError with Nomad's message, where the daemon
// used to decode the text as JSON and report only "invalid character 'e'
// looking for beginning of value". A message cut short is no such error.
func TestClientEventsReadsNomadsPlainTextError(t *testing.T) {
	const dropped = "event dropped from buffer"
	for _, tc := range []struct {
		name    string
		started bool
		// trailer is what follows the first event; want the StreamError's
		// text ("" for none).
		trailer, want string
	}{
		{"after the first event", true, dropped, dropped},
		{"before the first event", false, dropped, dropped},
		{"a message cut short", true, `{"Index":9,"Eve`, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				if tc.started {
					w.Header().Set("Content-Type", "application/json")
					_, _ = w.Write([]byte(`{"Index":8,"Events":[{"Topic":"Node","Type":"NodeRegistration","Key":"n1","Index":8,"Payload":{"Node":{"ID":"n1"}}}]}` + "\n"))
					w.(http.Flusher).Flush()
				}
				if strings.HasPrefix(tc.trailer, "{") {
					_, _ = w.Write([]byte(tc.trailer))
					return
				}
				// Nomad's wrap: WriteHeader (superfluous once the stream
				// started, as net/http logs), then the error's text.
				w.Header().Set("Content-Type", "text/plain")
				w.WriteHeader(http.StatusInternalServerError)
				_, _ = w.Write([]byte(tc.trailer))
			}))
			defer srv.Close()
			c, err := api.NewClient(&api.Config{Address: srv.URL})
			if err != nil {
				t.Fatal(err)
			}
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			ch, err := nomad.NewAPI(c).Events(ctx, 5)
			var se *nomad.StreamError
			if !tc.started {
				if !errors.As(err, &se) || se.Body != tc.want {
					t.Fatalf("subscribing: %v (%T), want a StreamError saying %q", err, err, tc.want)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			var got []*api.Events
			for evs := range ch {
				got = append(got, evs)
			}
			if len(got) != 2 || got[0].Index != 8 || got[1].Err == nil {
				t.Fatalf("want the event, then the stream's end; got %+v", got)
			}
			if isStream := errors.As(got[1].Err, &se); isStream != (tc.want != "") || (isStream && se.Body != tc.want) {
				t.Fatalf("the stream ended with %v (%T), want a StreamError saying %q", got[1].Err, got[1].Err, tc.want)
			}
		})
	}
}

// TestClientExecAllocEndsAtTheDeadline: the api client opens the exec's
// websocket without heeding the context, so a Nomad that takes the
// connection and never answers must not hold ExecAlloc past its deadline.
func TestClientExecAllocEndsAtTheDeadline(t *testing.T) {
	release := make(chan struct{})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if strings.HasPrefix(r.URL.Path, "/v1/node/") {
			http.NotFound(w, r)
			return
		}
		<-release // the handshake never gets its answer
	}))
	defer srv.Close()
	defer close(release) // before Close, which waits for the handler
	c, err := api.NewClient(&api.Config{Address: srv.URL})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	start := time.Now()
	res, err := nomad.NewAPI(c).ExecAlloc(ctx, "default", "node-1", "a1", "main", []string{"true"}, nil)
	if took := time.Since(start); took > 5*time.Second || !errors.Is(err, context.DeadlineExceeded) || res.ExitCode != -1 {
		t.Fatalf("got %+v, %v after %s; want a deadline error at 200ms", res, err, took)
	}
}

// TestClientAsksForUncompressedWritesAndStream: the daemon's writes and its
// event stream ask Nomad for no gzip, first in Accept-Encoding (Nomad reads
// only the first value; the api package adds "gzip" after it), and reads
// keep the api package's gzip. TestRealNomadAnswersWritesAndTheStreamUncompressed
// checks Nomad's answers.
func TestClientAsksForUncompressedWritesAndStream(t *testing.T) {
	var mu sync.Mutex
	first := map[string]string{}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		first[r.Method+" "+r.URL.Path] = r.Header.Get("Accept-Encoding")
		mu.Unlock()
		switch {
		case r.URL.Path == "/v1/event/stream":
			_, _ = w.Write([]byte(`{"Index":3,"Events":[{"Topic":"Node","Type":"NodeRegistration","Key":"n1","Index":3,"Payload":{"Node":{"ID":"n1"}}}]}` + "\n"))
		case r.URL.Path == "/v1/jobs" && r.Method == http.MethodGet:
			w.Header().Set("X-Nomad-Index", "3")
			_, _ = w.Write([]byte("[]"))
		case r.URL.Path == "/v1/jobs":
			_, _ = w.Write([]byte(`{"EvalID":"e1","JobModifyIndex":3}`))
		default:
			_, _ = w.Write([]byte(`{"EvalID":"e2"}`))
		}
	}))
	defer srv.Close()
	c, err := api.NewClient(&api.Config{Address: srv.URL})
	if err != nil {
		t.Fatal(err)
	}
	callEncodingVerbs(t, nomad.NewAPI(c), child("r1"))
	mu.Lock()
	defer mu.Unlock()
	want := map[string]string{
		"PUT /v1/jobs":         "identity",
		"DELETE /v1/job/web-0": "identity",
		"GET /v1/event/stream": "identity",
		"GET /v1/jobs":         "gzip",
	}
	if !reflect.DeepEqual(first, want) {
		t.Errorf("the first Accept-Encoding of each call = %v, want %v", first, want)
	}
}

// callEncodingVerbs makes, through client, one call of each kind whose
// Accept-Encoding the encoding tests check: a register and a purge of job,
// a list, and the event stream from index 1, read up to its first batch of
// events.
func callEncodingVerbs(t *testing.T, client *nomad.Client, job *api.Job) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	if _, err := client.RegisterJob(ctx, job, false, 0); err != nil {
		t.Fatalf("RegisterJob: %v", err)
	}
	if err := client.DeregisterJob(ctx, *job.Namespace, *job.ID, true); err != nil {
		t.Fatalf("DeregisterJob: %v", err)
	}
	if _, _, err := client.ListJobs(ctx, *job.Namespace); err != nil {
		t.Fatalf("ListJobs: %v", err)
	}
	events, err := client.Events(ctx, 1)
	if err != nil {
		t.Fatalf("Events: %v", err)
	}
	select {
	case evs := <-events:
		if evs == nil || evs.Err != nil || len(evs.Events) == 0 {
			t.Fatalf("the first batch of the stream: %+v", evs)
		}
	case <-ctx.Done():
		t.Fatal("no event in 2 minutes")
	}
}

// TestListAllocationsReadsAsItDecodes: the allocation listing, decoded one
// stub at a time, reads an empty list, null, and refuses what is not a
// list or is cut short.
func TestListAllocationsReadsAsItDecodes(t *testing.T) {
	for body, want := range map[string]int{`[]`: 0, `null`: 0, `[{"ID":"a1"},{"ID":"a2"}]`: 2, `{}`: -1, `[{"ID":"a1"},`: -1, `[{"ID":1}]`: -1} {
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			_, _ = w.Write([]byte(body))
		}))
		c, err := api.NewClient(&api.Config{Address: srv.URL})
		if err != nil {
			t.Fatal(err)
		}
		allocs, err := nomad.NewAPI(c).ListAllocations(context.Background(), "*")
		srv.Close()
		switch {
		case want < 0 && err == nil:
			t.Errorf("%s: listed %d allocations, want an error", body, len(allocs))
		case want >= 0 && (err != nil || len(allocs) != want):
			t.Errorf("%s: listed %d allocations, %v; want %d", body, len(allocs), err, want)
		}
	}
}
