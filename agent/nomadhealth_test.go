package agent

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hashicorp/nomad/api"

	"github.com/nomad-statefulset/nomad-statefulset/backend"
	"github.com/nomad-statefulset/nomad-statefulset/backend/memory"
	"github.com/nomad-statefulset/nomad-statefulset/backend/nomad"
	"github.com/nomad-statefulset/nomad-statefulset/client"
	"github.com/nomad-statefulset/nomad-statefulset/internal/nomadsim"
)

// refusingNomad answers 500 to child registrations while refuse is set;
// everything else, the event stream included, works.
type refusingNomad struct {
	*nomadsim.Nomad
	refuse atomic.Bool
}

func (r *refusingNomad) RegisterJob(ctx context.Context, job *api.Job, enforce bool, idx uint64) (*api.JobRegisterResponse, error) {
	if r.refuse.Load() && job.Meta["statefulset_parent"] != "" {
		// An implementation of nomad.API reports each call it answers.
		err := nomadsim.ServerError()
		nomad.TraceCall(ctx, nomad.VerbRegisterJob, &err)
		return nil, err
	}
	return r.Nomad.RegisterJob(ctx, job, enforce, idx)
}

func getHealth(t *testing.T, a *Agent) (client.Health, int) {
	t.Helper()
	resp, err := http.Get("http://" + a.HTTPAddr() + "/v1/health")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var h client.Health
	if err := json.NewDecoder(resp.Body).Decode(&h); err != nil {
		t.Fatal(err)
	}
	return h, resp.StatusCode
}

// Nomad answering 5xx to writes while its event stream works: health says
// degraded and names the failing verb, the agent retries with backoff, and
// health recovers with Nomad.
func TestAgentHealthReportsFailingNomadWritesAndRecovers(t *testing.T) {
	refusing := &refusingNomad{}
	h := startAgentWith(t, fastSim(), func(o *Options) {
		wrapNomad(o, func(api nomad.API) nomad.API {
			refusing.Nomad = api.(*nomadsim.Nomad)
			return refusing
		})
	})
	refusing.refuse.Store(true)
	h.register(parentJob("refused", map[string]string{"statefulset_replicas": "2"}, "v1"))
	h.waitFor("health to report the failing writes", 10*time.Second, func() (bool, string) {
		hl, code := getHealth(t, h.agent)
		return code == http.StatusServiceUnavailable && hl.Status == "degraded" &&
			strings.Contains(hl.Checks["nomad"], "RegisterJob failing since"), fmt.Sprintf("%d %+v", code, hl)
	})
	refusing.refuse.Store(false)
	h.waitConverged("refused", 2, nil)
	h.waitFor("health to recover", 10*time.Second, func() (bool, string) {
		hl, code := getHealth(t, h.agent)
		return code == http.StatusOK && hl.Checks["nomad"] == "ok", fmt.Sprintf("%d %+v", code, hl)
	})
}

func TestCallHealth(t *testing.T) {
	t0 := time.Unix(1000, 0)
	boom := errors.New("500 internal error")
	tests := []struct {
		name  string
		calls func(h *callHealth)
		at    time.Time
		want  string
	}{
		{"no calls", func(h *callHealth) {}, t0, ""},
		{"a failure", func(h *callHealth) { h.observe("RegisterJob", boom, t0) }, t0,
			"RegisterJob failing since 1970-01-01T00:16:40Z: 500 internal error"},
		{"cleared by a success of the same verb", func(h *callHealth) {
			h.observe("RegisterJob", boom, t0)
			h.observe("RegisterJob", nil, t0.Add(time.Second))
		}, t0.Add(time.Second), ""},
		{"not cleared by another verb", func(h *callHealth) {
			h.observe("RegisterJob", boom, t0)
			h.observe("ListJobs", nil, t0.Add(time.Second))
		}, t0.Add(time.Second), "RegisterJob failing since 1970-01-01T00:16:40Z: 500 internal error"},
		{"not found is an answer", func(h *callHealth) { h.observe("GetJob", nomad.ErrNotFound, t0) }, t0, ""},
		{"a lasting failure reports when it began, and the latest error", func(h *callHealth) {
			h.observe("RegisterJob", errors.New("503 no leader"), t0)
			h.observe("RegisterJob", boom, t0.Add(time.Minute))
		}, t0.Add(time.Minute), "RegisterJob failing since 1970-01-01T00:16:40Z: 500 internal error"},
		{"retried within the memory: still counts", func(h *callHealth) {
			h.observe("DeleteHostVolume", boom, t0)
			h.observe("DeleteHostVolume", boom, t0.Add(callFailureMemory))
		}, t0.Add(callFailureMemory + time.Second), "DeleteHostVolume failing since 1970-01-01T00:16:40Z: 500 internal error"},
		{"a failure after a forgotten one starts afresh", func(h *callHealth) {
			h.observe("DeleteHostVolume", boom, t0)
			h.observe("DeleteHostVolume", boom, t0.Add(callFailureMemory+time.Minute))
		}, t0.Add(callFailureMemory + time.Minute), "DeleteHostVolume failing since 1970-01-01T00:19:40Z: 500 internal error"},
		{"forgotten when not retried", func(h *callHealth) { h.observe("DeleteHostVolume", boom, t0) },
			t0.Add(callFailureMemory + time.Second), ""},
		{"several, sorted", func(h *callHealth) {
			h.observe("RegisterJob", boom, t0)
			h.observe("CreateHostVolume", boom, t0)
		}, t0, "CreateHostVolume failing since 1970-01-01T00:16:40Z: 500 internal error; RegisterJob failing since 1970-01-01T00:16:40Z: 500 internal error"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var h callHealth
			tt.calls(&h)
			if got := h.problem(tt.at); got != tt.want {
				t.Fatalf("problem = %q, want %q", got, tt.want)
			}
		})
	}
}

// Nomad ending the event stream with its plain-text "event dropped from
// buffer" (as its HTTP stream does when the daemon reads too slowly): the
// agent, through the real nomad.Client, counts it under buffer_overflow in
// nomad_statefulset_nomad_event_stream_resets_total, shows it in
// /v1/health with a message that names event_buffer_size, re-lists, and
// stays healthy.
func TestLostStreamIsCountedAndShown(t *testing.T) {
	sim, c := simOverHTTP(t)
	a, stop := runAgent(t, testOptions(t, nomad.NewAPI(c), memory.NewStore()))
	t.Cleanup(stop)
	waitUntilT(t, "the agent to lead and list", func() bool {
		ct := a.current.Load()
		return ct != nil && ct.cache().Synced()
	})
	if hl, _ := getHealth(t, a); hl.EventStream == nil || hl.EventStream.LastReset != nil || len(hl.EventStream.Resets) != 0 {
		t.Fatalf("before any loss, /v1/health's event_stream is %+v, want no resets", hl.EventStream)
	}
	relists := a.current.Load().watcher().Relists()
	sim.CloseEventStreams(nomadsim.ErrEventDropped)
	waitUntilT(t, "the re-list after the lost stream", func() bool { return a.current.Load().watcher().Relists() > relists })

	hl, code := getHealth(t, a)
	es := hl.EventStream
	if es == nil || es.Resets[nomad.ResetBufferOverflow] != 1 || es.LastReset == nil ||
		es.LastReset.Reason != nomad.ResetBufferOverflow || !strings.Contains(es.LastReset.Message, "event_buffer_size") {
		t.Fatalf("/v1/health's event_stream is %+v (last %+v), want one buffer_overflow that names event_buffer_size", es, es.LastReset)
	}
	if code != http.StatusOK || hl.Checks["nomad"] != "ok" {
		t.Fatalf("after the re-list /v1/health is %d %+v, want ok: a lost stream is recovered", code, hl.Checks)
	}
	resp, err := http.Get("http://" + a.HTTPAddr() + "/v1/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	const want = `nomad_statefulset_nomad_event_stream_resets_total{reason="buffer_overflow"} 1`
	if !strings.Contains(string(body), want) {
		t.Fatalf("/v1/metrics lacks %s:\n%s", want, grepLines(string(body), "event_stream"))
	}
}

// While Nomad's event stream is stalled, the agent's writes wait for it
// once they, those in flight counted, are a quarter of event_buffer_size
// ahead (here 20, so 5), and go on
// when it moves again. The real nomad.Client reads each write's index
// from Nomad's X-Nomad-Index header. The holds show in /v1/health and in
// nomad_statefulset_nomad_write_holds_total, and the set converges.
func TestHeldWritesAreCountedAndShown(t *testing.T) {
	sim, c := simOverHTTP(t)
	opts := testOptions(t, nomad.NewAPI(c), memory.NewStore())
	cluster := nomad.NewCluster(nomad.NewAPI(c), nomad.WithEventBufferSize(20))
	opts.Nomad, opts.PluginBuiltins = cluster, hostVolumeBuiltin(cluster.API())
	a, stop := runAgent(t, opts)
	t.Cleanup(stop)
	waitUntilT(t, "the agent to lead and list", func() bool {
		ct := a.current.Load()
		return ct != nil && ct.cache().Synced()
	})
	if hl, _ := getHealth(t, a); hl.EventStream == nil || hl.EventStream.WriteHolds != 0 {
		t.Fatalf("before any write, /v1/health's event_stream is %+v, want no holds", hl.EventStream)
	}

	// A stream that delivers every event two seconds late: the agent sees
	// the parent, then makes its eight creates while none of their events
	// has come back, so the ones past the pacer's limit (5) are held. A
	// delay, unlike pausing and resuming the stream around the parent,
	// does not depend on how fast this host runs the agent.
	sim.SetEventDelay(2 * time.Second)
	if _, err := sim.RegisterJob(context.Background(), parentJob("web", map[string]string{
		"statefulset_replicas": "8", "statefulset_pod_management_policy": "Parallel"}, "v1"), false, 0); err != nil {
		t.Fatal(err)
	}
	waitUntilT(t, "the lagging stream to hold a write", func() bool {
		return cluster.WritePacing().Holds > 0
	})
	hl, _ := getHealth(t, a)
	if es := hl.EventStream; es == nil || es.WriteHolds == 0 || es.MaxBehind < 5 {
		t.Fatalf("with a write held, /v1/health's event_stream is %+v, want write_holds > 0 and max_behind >= 5", es)
	}
	resp, err := http.Get("http://" + a.HTTPAddr() + "/v1/metrics")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if lines := grepLines(string(body), "nomad_statefulset_nomad_write_holds_total "); lines == "" || strings.HasSuffix(lines, " 0") {
		t.Fatalf("/v1/metrics counts no held write:\n%s", grepLines(string(body), "write_h"))
	}
	sim.SetEventDelay(0)
	waitUntilT(t, "the set to converge once the stream catches up", func() bool {
		d, ok := a.current.Load().sets.get(backend.SetKey{Namespace: "default", Name: "web"})
		return ok && d.Status.ReadyReplicas == 8
	})
}

// simOverHTTP starts a simulated Nomad served over Nomad's HTTP API, and
// an api client of it: the agent then talks to it through the real
// nomad.Client, headers and stream encoding included.
func simOverHTTP(t *testing.T) (*nomadsim.Nomad, *api.Client) {
	t.Helper()
	sim := nomadsim.NewNomad(fastSim())
	t.Cleanup(sim.Close)
	srv := httptest.NewServer(sim.Handler())
	t.Cleanup(srv.Close)
	c, err := api.NewClient(&api.Config{Address: srv.URL})
	if err != nil {
		t.Fatal(err)
	}
	return sim, c
}

// waitUntilT polls cond for up to 10 s.
func waitUntilT(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// grepLines returns the lines of s that contain sub.
func grepLines(s, sub string) string {
	var out []string
	for _, l := range strings.Split(s, "\n") {
		if strings.Contains(l, sub) {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
}
