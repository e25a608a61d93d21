package agent

import (
	"context"
	"errors"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/nomad-statefulset/nomad-statefulset/backend/memory"
	"github.com/nomad-statefulset/nomad-statefulset/backend/nomad"
	"github.com/nomad-statefulset/nomad-statefulset/internal/nomadsim"
)

// fakeElection is an elector with the Consul elector's extra state, set by
// the test.
type fakeElection struct {
	leader bool
	since  time.Time
	err    error
}

func (f *fakeElection) Run(ctx context.Context, _ func(context.Context) error) error {
	<-ctx.Done()
	return nil
}
func (f *fakeElection) IsLeader() bool         { return f.leader }
func (f *fakeElection) LeaderSince() time.Time { return f.since }
func (f *fakeElection) Err() error             { return f.err }

// /v1/health shows the election: high availability, the term's start while
// leading, and an election error (a denied token) as a degraded check.
func TestHealthShowsLeaderElection(t *testing.T) {
	since := time.Date(2026, 11, 21, 6, 0, 0, 0, time.UTC)
	denied := errors.New("leader election: Consul denied the request; the token lacks session:write")
	for _, tc := range []struct {
		name       string
		el         *fakeElection
		wantStatus string
		wantSince  bool
		wantCheck  string
	}{
		{"leader", &fakeElection{leader: true, since: since}, "ok", true, "ok"},
		{"follower", &fakeElection{}, "ok", false, "ok"},
		{"denied", &fakeElection{err: denied}, "degraded", false, denied.Error()},
	} {
		t.Run(tc.name, func(t *testing.T) {
			sim := nomadsim.NewNomad(nomadsim.NomadConfig{})
			t.Cleanup(sim.Close)
			a, err := New(Options{Logger: hclog.NewNullLogger(), Nomad: nomad.NewCluster(sim), Store: memory.NewStore(), Elector: tc.el})
			if err != nil {
				t.Fatal(err)
			}
			h := a.health(context.Background())
			if !h.HighAvailability || h.Leader != tc.el.leader || h.Status != tc.wantStatus || h.Checks["leader_election"] != tc.wantCheck {
				t.Fatalf("health = %+v", h)
			}
			if got := h.LeaderSince != nil; got != tc.wantSince || (got && !h.LeaderSince.Equal(since)) {
				t.Fatalf("leader_since = %v, want set: %v", h.LeaderSince, tc.wantSince)
			}
		})
	}
	// Without an election (AlwaysLeader) there is nothing to report.
	sim := nomadsim.NewNomad(nomadsim.NomadConfig{})
	t.Cleanup(sim.Close)
	a, err := New(Options{Nomad: nomad.NewCluster(sim), Store: memory.NewStore()})
	if err != nil {
		t.Fatal(err)
	}
	if h := a.health(context.Background()); h.HighAvailability || !h.Leader || h.LeaderSince != nil || h.Checks["leader_election"] != "" {
		t.Fatalf("health without HA = %+v", h)
	}
}

// TestHTTPDebugAndMetricsSettings: http { enable_debug } and telemetry {
// prometheus_metrics } used to be decoded and documented, and nothing read
// them. enable_debug serves pprof; prometheus_metrics = false turns
// /v1/metrics off with a 404 that says so.
func TestHTTPDebugAndMetricsSettings(t *testing.T) {
	get := func(h *harness, path string) (int, string) {
		t.Helper()
		resp, err := http.Get("http://" + h.agent.HTTPAddr() + path)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	plain := startAgent(t, fastSim())
	if code, _ := get(plain, "/debug/pprof/"); code != http.StatusNotFound {
		t.Errorf("pprof without enable_debug: %d, want 404", code)
	}
	if code, body := get(plain, "/v1/metrics"); code != http.StatusOK || !strings.Contains(body, "nomad_statefulset_") {
		t.Errorf("metrics by default: %d %q", code, body[:min(len(body), 80)])
	}
	tuned := startAgentWith(t, fastSim(), func(o *Options) { o.EnableDebug, o.DisableMetrics = true, true })
	if code, body := get(tuned, "/debug/pprof/"); code != http.StatusOK || !strings.Contains(body, "goroutine") {
		t.Errorf("pprof with enable_debug: %d", code)
	}
	if code, body := get(tuned, "/v1/metrics"); code != http.StatusNotFound || !strings.Contains(body, "prometheus_metrics = false") {
		t.Errorf("metrics off: %d %q", code, body)
	}
}
