package agent

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/http/pprof"
	"strconv"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/nomad-statefulset/nomad-statefulset/agent/config"
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
	tlsConf, err := serverTLS(a.opts.HTTPTLS)
	if err != nil {
		return nil, err
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, err
	}
	if tlsConf != nil {
		// Only TLS is spoken: a plain HTTP request is answered 400 by
		// net/http ("Client sent an HTTP request to an HTTPS server").
		ln = tls.NewListener(ln, tlsConf)
	}
	api := &apiHandler{
		views: agentViews{a}, guard: newGuard(a.opts.Authorizer, a.log.Named("http"), a.opts.Clock),
		health: a.handleHealth, metrics: promhttp.HandlerFor(a.metrics.reg, promhttp.HandlerOpts{}),
		disableMetrics: a.opts.DisableMetrics, anonymousMetrics: a.opts.AnonymousMetrics, debug: a.opts.EnableDebug,
	}
	return &httpServer{ln: ln, srv: &http.Server{
		Handler: api.routes(), ReadHeaderTimeout: 10 * time.Second, ReadTimeout: 30 * time.Second,
		WriteTimeout: 30 * time.Second, IdleTimeout: 2 * time.Minute,
		// TLS handshake failures (a plain HTTP client, an unknown client
		// certificate) are the client's problem: debug, not stderr.
		ErrorLog: a.log.Named("http").StandardLogger(&hclog.StandardLoggerOptions{ForceLevel: hclog.Debug}),
	}}, nil
}

// serverTLS builds the listener's TLS configuration from http { tls {} },
// or returns nil when TLS is off. Its errors name the files, never their
// content.
func serverTLS(c config.HTTPTLSConfig) (*tls.Config, error) {
	if !c.Enabled() {
		return nil, nil
	}
	cert, err := tls.LoadX509KeyPair(c.CertFile, c.KeyFile)
	if err != nil {
		return nil, fmt.Errorf("loading http.tls.cert_file %s and key_file %s: %w", c.CertFile, c.KeyFile, err)
	}
	conf := &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12}
	if c.CAFile != "" {
		pool, err := config.LoadCAPool(c.CAFile)
		if err != nil {
			return nil, fmt.Errorf("loading http.tls.ca_file: %w", err)
		}
		conf.ClientCAs, conf.ClientAuth = pool, tls.VerifyClientCertIfGiven
	}
	if c.VerifyHTTPSClient {
		conf.ClientAuth = tls.RequireAndVerifyClientCert
	}
	return conf, nil
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

// setViews is what the HTTP API shows of the sets; the agent's current
// term in the daemon (agentViews), a fixed table in tests.
type setViews interface {
	// list lists every set the agent shows.
	list() client.SetList
	// get returns one set's view, every stored revision's template
	// included, or false.
	get(key backend.SetKey) (client.SetDetail, bool)
}

// agentViews are the views of the agent's current leadership term.
type agentViews struct{ a *Agent }

func (v agentViews) list() client.SetList { return v.a.viewList() }
func (v agentViews) get(key backend.SetKey) (client.SetDetail, bool) {
	return v.a.view(key)
}

// apiHandler is the agent's HTTP API, guarded as Nomad's is (DESIGN §4):
// with Nomad's ACLs on, every request but /v1/health needs a token, and
// the answer is what Nomad lets that token read.
type apiHandler struct {
	views            setViews
	guard            *guard
	health           http.HandlerFunc
	metrics          http.Handler
	disableMetrics   bool
	anonymousMetrics bool
	debug            bool
}

// routes builds the API's mux.
func (h *apiHandler) routes() *http.ServeMux {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /v1/health", h.health)
	mux.HandleFunc("GET /v1/metrics", h.serveMetrics)
	if h.debug {
		// net/http/pprof's handlers, on this mux only (not the default
		// one); with ACLs on, for a management token only, as Nomad's
		// own /v1/agent/pprof needs agent:write.
		for path, f := range map[string]http.HandlerFunc{"/debug/pprof/": pprof.Index, "/debug/pprof/cmdline": pprof.Cmdline,
			"/debug/pprof/profile": pprof.Profile, "/debug/pprof/symbol": pprof.Symbol, "/debug/pprof/trace": pprof.Trace} {
			mux.HandleFunc("GET "+path, h.management(f))
		}
	}
	mux.HandleFunc("GET /v1/statefulsets", h.serveList)
	mux.HandleFunc("GET /v1/statefulset/{namespace}/{name}", h.serveDetail)
	return mux
}

// management lets through requests that carry a Nomad management token,
// or every request when Nomad's ACLs are off.
func (h *apiHandler) management(next http.HandlerFunc) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		on, err := h.guard.aclsOn(r.Context())
		if err == nil && on {
			err = h.guard.known(r.Context(), requestToken(r), true)
		}
		if err != nil {
			writeAuthzError(w, err)
			return
		}
		next(w, r)
	}
}

func (h *apiHandler) serveMetrics(w http.ResponseWriter, r *http.Request) {
	if !h.anonymousMetrics {
		on, err := h.guard.aclsOn(r.Context())
		if err == nil && on {
			if err = h.guard.known(r.Context(), requestToken(r), false); err != nil {
				err = fmt.Errorf("%w (or set telemetry { prometheus_anonymous = true })", err)
			}
		}
		if err != nil {
			writeAuthzError(w, err)
			return
		}
	}
	if h.disableMetrics {
		writeJSON(w, http.StatusNotFound, map[string]string{"error": "metrics are off: telemetry { prometheus_metrics = false }"})
		return
	}
	h.metrics.ServeHTTP(w, r)
}

// serveList lists the sets; with Nomad's ACLs on, only those in the
// namespaces where the token may read-job.
func (h *apiHandler) serveList(w http.ResponseWriter, r *http.Request) {
	list := h.views.list()
	on, err := h.guard.aclsOn(r.Context())
	if err != nil {
		writeAuthzError(w, err)
		return
	}
	if on {
		token := requestToken(r)
		if token == "" {
			writeAuthzError(w, errNoToken)
			return
		}
		if list.Sets, err = h.readable(r.Context(), token, list.Sets); err != nil {
			writeAuthzError(w, err)
			return
		}
	}
	writeJSON(w, http.StatusOK, list)
}

// readable keeps the sets in the namespaces where token may read-job,
// asking Nomad once per namespace (with the namespace's first set as the
// job read). A namespace Nomad could not be asked about fails the list: a
// list that silently lacks a namespace would mislead.
func (h *apiHandler) readable(ctx context.Context, token string, sets []client.SetSummary) ([]client.SetSummary, error) {
	allowed := map[string]bool{}
	kept := []client.SetSummary{}
	for _, s := range sets {
		ok, seen := allowed[s.Namespace]
		if !seen {
			err := h.guard.readJob(ctx, token, s.Namespace, s.Name)
			if err != nil && !errors.Is(err, backend.ErrPermissionDenied) {
				return nil, err
			}
			ok = err == nil
			allowed[s.Namespace] = ok
		}
		if ok {
			kept = append(kept, s)
		}
	}
	return kept, nil
}

// serveDetail shows one set. A revision's template, which holds the task
// env, meta and template data where secrets live, is shown only for
// ?revision=N, and only that revision's; with Nomad's ACLs on, only to a
// token that may read-job in the set's namespace, as the whole detail.
func (h *apiHandler) serveDetail(w http.ResponseWriter, r *http.Request) {
	key := backend.SetKey{Namespace: r.PathValue("namespace"), Name: r.PathValue("name")}
	var revision int64
	if q := r.URL.Query().Get("revision"); q != "" {
		n, err := strconv.ParseInt(q, 10, 64)
		if err != nil || n < 1 {
			writeJSON(w, http.StatusBadRequest, map[string]string{"error": fmt.Sprintf("?revision=%q is not a revision number (1 or more)", q)})
			return
		}
		revision = n
	}
	on, err := h.guard.aclsOn(r.Context())
	if err == nil && on {
		// Before the lookup, so that a token that may not read the
		// namespace does not learn which sets exist in it.
		err = h.guard.readJob(r.Context(), requestToken(r), key.Namespace, key.Name)
	}
	if err != nil {
		writeAuthzError(w, err)
		return
	}
	d, ok := h.views.get(key)
	if !ok {
		writeJSON(w, http.StatusNotFound, map[string]string{"error": "no statefulset " + key.String() + " is known to this agent"})
		return
	}
	for i := range d.Revisions {
		if d.Revisions[i].Number != revision {
			d.Revisions[i].Template = ""
		}
	}
	writeJSON(w, http.StatusOK, d)
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
