package agent

import (
	"context"
	"encoding/json"
	"net"
	"net/http"
	"net/http/pprof"
	"time"

	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/nomad-statefulset/nomad-statefulset/backend"
	"github.com/nomad-statefulset/nomad-statefulset/client"
)

// httpServer serves the agent's read API. It listens in the constructor so
// that a bind error reaches the caller at start-up.
type httpServer struct {
	ln  net.Listener
	srv *http.Server
}

func newHTTPServer(addr string, a *Agent) (*httpServer, error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, err
	}
	mux := http.NewServeMux()
	mux.HandleFunc("GET /v1/health", a.handleHealth)
	if a.opts.DisableMetrics {
		mux.HandleFunc("GET /v1/metrics", func(w http.ResponseWriter, r *http.Request) {
			writeJSON(w, http.StatusNotFound, map[string]string{"error": "metrics are off: telemetry { prometheus_metrics = false }"})
		})
	} else {
		mux.Handle("GET /v1/metrics", promhttp.HandlerFor(a.metrics.reg, promhttp.HandlerOpts{}))
	}
	if a.opts.EnableDebug {
		// net/http/pprof's handlers, on this mux only (not the default one).
		mux.HandleFunc("GET /debug/pprof/", pprof.Index)
		mux.HandleFunc("GET /debug/pprof/cmdline", pprof.Cmdline)
		mux.HandleFunc("GET /debug/pprof/profile", pprof.Profile)
		mux.HandleFunc("GET /debug/pprof/symbol", pprof.Symbol)
		mux.HandleFunc("GET /debug/pprof/trace", pprof.Trace)
	}
	mux.HandleFunc("GET /v1/statefulsets", func(w http.ResponseWriter, r *http.Request) {
		writeJSON(w, http.StatusOK, a.viewList())
	})
	mux.HandleFunc("GET /v1/statefulset/{namespace}/{name}", func(w http.ResponseWriter, r *http.Request) {
		key := backend.SetKey{Namespace: r.PathValue("namespace"), Name: r.PathValue("name")}
		d, ok := a.view(key)
		if !ok {
			writeJSON(w, http.StatusNotFound, map[string]string{"error": "no statefulset " + key.String() + " is known to this agent"})
			return
		}
		writeJSON(w, http.StatusOK, d)
	})
	return &httpServer{ln: ln, srv: &http.Server{
		Handler: mux, ReadHeaderTimeout: 10 * time.Second, ReadTimeout: 30 * time.Second,
		WriteTimeout: 30 * time.Second, IdleTimeout: 2 * time.Minute,
	}}, nil
}

func (h *httpServer) serve() error {
	err := h.srv.Serve(h.ln)
	if err == http.ErrServerClosed {
		return nil
	}
	return err
}

func (h *httpServer) shutdown() {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_ = h.srv.Shutdown(ctx)
}

func writeJSON(w http.ResponseWriter, code int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	_ = enc.Encode(v)
}

func (a *Agent) handleHealth(w http.ResponseWriter, r *http.Request) {
	h := a.health(r.Context())
	code := http.StatusOK
	if h.Status != "ok" {
		code = http.StatusServiceUnavailable
	}
	writeJSON(w, code, h)
}

// electionState is what an elector with a real election (the Consul lock)
// tells beyond backend.Elector; backend.AlwaysLeader has none of it.
type electionState interface {
	// LeaderSince is when the current term began, zero when not leading.
	LeaderSince() time.Time
	// Err is why the elector can neither lead nor follow (Consul
	// unreachable, the token denied), or nil.
	Err() error
}

func (a *Agent) health(ctx context.Context) client.Health {
	h := client.Health{Status: "ok", Leader: a.elector.IsLeader(), Checks: map[string]string{}}
	if es, ok := a.elector.(electionState); ok {
		h.HighAvailability = true
		if since := es.LeaderSince(); h.Leader && !since.IsZero() {
			h.LeaderSince = &since
		}
		// A denied token is retried, not fatal, so the agent stays up;
		// this check is where an operator sees why it never leads.
		if err := es.Err(); err != nil {
			h.Checks["leader_election"] = err.Error()
			h.Status = "degraded"
		} else {
			h.Checks["leader_election"] = "ok"
		}
	}
	if c := a.current.Load(); c != nil {
		ok, msg := c.term.Healthy()
		if calls := a.metrics.calls.problem(time.Now()); calls != "" {
			if ok {
				msg = calls
			} else {
				msg += "; " + calls
			}
			ok = false
		}
		pacing := a.nomad.WritePacing()
		h.EventStream = &client.EventStreamHealth{Resets: c.term.Resets(), WriteHolds: pacing.Holds,
			WriteHeldSeconds: pacing.Held.Seconds(), MaxBehind: pacing.MaxBehind}
		if last, lost := c.term.LastReset(); lost {
			h.EventStream.LastReset = &client.EventStreamReset{Reason: last.Reason, Message: last.Message, At: last.At}
		}
		if ok {
			h.Checks["nomad"] = "ok"
		} else {
			h.Checks["nomad"] = msg
			h.Status = "degraded"
		}
	} else {
		h.Checks["nomad"] = "standby: not the leader, not watching"
	}
	sctx, cancel := context.WithTimeout(ctx, 3*time.Second)
	defer cancel()
	if _, err := a.store.ListSets(sctx); err != nil {
		h.Checks["store"] = err.Error()
		h.Status = "degraded"
	} else {
		h.Checks["store"] = "ok"
	}
	return h
}

// viewList lists the sets this agent shows: none while it does not lead.
func (a *Agent) viewList() client.SetList {
	if c := a.current.Load(); c != nil {
		return c.sets.list()
	}
	return client.SetList{Sets: []client.SetSummary{}}
}

// setMetrics returns every set's metrics: none while this agent does not
// lead (a follower publishes no per-set series, so each series has one
// source across the agents).
func (a *Agent) setMetrics() []setMetrics {
	if c := a.current.Load(); c != nil {
		return c.sets.metricsViews()
	}
	return nil
}

// view returns what this agent shows of one set; false while it does not
// lead or does not know the set.
func (a *Agent) view(key backend.SetKey) (client.SetDetail, bool) {
	if c := a.current.Load(); c != nil {
		return c.sets.get(key)
	}
	return client.SetDetail{}, false
}
