// Package agent is the nomad-statefulset daemon: it wires the Nomad watcher,
// the per-set work queue, the pure reconciler, the effects and the state
// store together, under leader election, and serves the HTTP API.
//
// Data flows one way: watcher → cache → queue → reconciler → effects →
// status. Only the elected leader runs that pipeline; every agent serves
// HTTP.
package agent

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/nomad-statefulset/nomad-statefulset/agent/config"
	"github.com/nomad-statefulset/nomad-statefulset/backend"
	"github.com/nomad-statefulset/nomad-statefulset/backend/consul"
	"github.com/nomad-statefulset/nomad-statefulset/backend/storecache"
	"github.com/nomad-statefulset/nomad-statefulset/plugin"
	"github.com/nomad-statefulset/nomad-statefulset/plugin/manager"
)

// Options configure an Agent. cmd/ builds them from the config file.
type Options struct {
	Logger hclog.Logger
	// Nomad is the Nomad cluster: backend/nomad.Cluster over a real
	// client or the simulator.
	Nomad backend.Cluster
	// Store keeps revisions and status.
	Store backend.Store
	// Elector decides whether this agent acts; backend.AlwaysLeader{} when
	// there is no election.
	Elector backend.Elector
	// Workers is the number of sets reconciled at once; config.DefaultWorkers
	// when 0.
	Workers int
	// ResyncInterval is the period of the safety re-list.
	ResyncInterval time.Duration
	// HTTPAddr is where the HTTP API listens ("" disables it).
	HTTPAddr string
	// HTTPTLS serves the HTTP API over TLS when its cert_file is set
	// (http { tls {} }).
	HTTPTLS config.HTTPTLSConfig
	// Authorizer asks Nomad what a caller's token may read: with Nomad's
	// ACLs on, every request but /v1/health needs a token, and the API
	// shows what Nomad lets it read. Nil means Nomad has no ACLs (the
	// simulator in tests); command/ wires backend/nomad's.
	Authorizer Authorizer
	// AnonymousMetrics serves /v1/metrics without a token when Nomad's
	// ACLs are on (telemetry { prometheus_anonymous }).
	AnonymousMetrics bool
	// EnableDebug serves net/http/pprof under /debug/pprof/ on the HTTP API
	// (http { enable_debug }).
	EnableDebug bool
	// DisableMetrics turns /v1/metrics off (telemetry { prometheus_metrics =
	// false }); it answers 404 saying so.
	DisableMetrics bool
	// Clock returns the time; time.Now when nil. Tests pass a fake.
	Clock func() time.Time
	// CallTrace, when set, is told of every Nomad call the agent makes,
	// after the metrics count it. A call made for an action carries the
	// action in its context (ActionOf).
	CallTrace backend.CallTrace
	// RetryBaseDelay and RetryMaxDelay bound the backoff of a failing set.
	RetryBaseDelay time.Duration
	RetryMaxDelay  time.Duration
	// Plugins are the plugin, volume_provisioner and hook blocks the agent's
	// plugin manager runs (manager.ConfigOf of the agent's configuration).
	// The zero value is the default configuration's: the built-in
	// nomad-host-volume provisioner with its defaults, and no hooks.
	Plugins manager.Config
	// PluginBuiltins are the compiled-in plugins, by driver name: the
	// built-in nomad-host-volume provisioner (the default configuration's),
	// which command/ wires over the same Nomad client, and an embedding
	// program's or a test's own.
	PluginBuiltins map[string]plugin.Factory
	// ExpectationTTL is how long a write may stay unseen in the event stream
	// before the agent re-lists Nomad (default 2m).
	ExpectationTTL time.Duration
	// ConsulHealth reads the health of Consul services, whose checks then
	// count in the readiness of the pods that registered them. Nil (-dev,
	// no Consul): readiness rests on Nomad's health and the task states.
	ConsulHealth consul.HealthAPI
}

// HookRunner runs the lifecycle hooks of one event for one pod; the plugin
// manager is one.
type HookRunner interface {
	RunHooks(ctx context.Context, event plugin.Event, pod plugin.Pod) plugin.HookResult
	// HasHooks reports whether any hook runs on event.
	HasHooks(event plugin.Event) bool
}

// Agent is the daemon.
type Agent struct {
	opts    Options
	log     hclog.Logger
	nomad   backend.Cluster
	store   backend.Store
	elector backend.Elector
	metrics *metrics
	http    *httpServer
	// plugins runs the volume provisioner and the lifecycle hooks.
	plugins *manager.Manager
	// current is the controller of the current leadership term, nil while
	// not leading.
	current atomic.Pointer[controller]
	depth   atomic.Int64
	// consulQueries counts the Consul health queries of every term.
	consulQueries atomic.Int64
}

// New builds an agent and binds its HTTP listener.
func New(opts Options) (*Agent, error) {
	if opts.Nomad == nil || opts.Store == nil {
		return nil, errors.New("agent: a Nomad API and a store are required")
	}
	if opts.Logger == nil {
		opts.Logger = hclog.NewNullLogger()
	}
	if opts.Elector == nil {
		opts.Elector = backend.AlwaysLeader{}
	}
	if opts.Workers <= 0 {
		opts.Workers = config.DefaultWorkers
	}
	if opts.Clock == nil {
		opts.Clock = time.Now
	}
	if opts.RetryBaseDelay <= 0 {
		opts.RetryBaseDelay = 100 * time.Millisecond
	}
	if opts.ExpectationTTL <= 0 {
		opts.ExpectationTTL = defaultExpectationTTL
	}
	if opts.RetryMaxDelay <= 0 {
		opts.RetryMaxDelay = time.Minute
	}
	a := &Agent{opts: opts, log: opts.Logger, store: opts.Store, elector: opts.Elector}
	a.metrics = newMetrics(func() float64 { return float64(a.depth.Load()) })
	a.metrics.reg.MustRegister(setCollector{views: a.setMetrics, now: time.Now})
	a.metrics.reg.MustRegister(prometheus.NewCounterFunc(prometheus.CounterOpts{
		Name: "nomad_statefulset_consul_health_queries_total",
		Help: "Blocking queries of Consul service health made for pod readiness (one per watched service per change or wait time).",
	}, func() float64 { return float64(a.consulQueries.Load()) }))
	a.metrics.reg.MustRegister(prometheus.NewCounterFunc(prometheus.CounterOpts{
		Name: "nomad_statefulset_nomad_write_holds_total",
		Help: "Writes to Nomad that waited for the event stream, which trailed the daemon's earlier writes, those in flight counted, by a quarter of event_buffer_size.",
	}, func() float64 { return float64(opts.Nomad.WritePacing().Holds) }),
		prometheus.NewCounterFunc(prometheus.CounterOpts{
			Name: "nomad_statefulset_nomad_write_held_seconds_total",
			Help: "Time writes to Nomad waited for the event stream, in all.",
		}, func() float64 { return opts.Nomad.WritePacing().Held.Seconds() }))
	a.nomad = opts.Nomad
	// The agent owns its plugin manager, as the nomad-autoscaler's agent
	// does (setupPlugins). The plugins run with the agent's context, so the
	// built-in provisioner's Nomad calls show in /v1/metrics.
	a.plugins = manager.New(manager.Options{Logger: opts.Logger, Builtins: maps.Clone(opts.PluginBuiltins)})
	if a.opts.Plugins.VolumeProvisioner.Plugin == "" {
		a.opts.Plugins = manager.ConfigOf(config.Default())
	}
	if opts.HTTPAddr != "" {
		h, err := newHTTPServer(opts.HTTPAddr, a)
		if err != nil {
			return nil, fmt.Errorf("starting the HTTP API on %s: %w", opts.HTTPAddr, err)
		}
		a.http = h
	}
	return a, nil
}

// ReloadPlugins applies new plugin, volume_provisioner and hook blocks
// (SIGHUP). On error the running plugins are kept.
func (a *Agent) ReloadPlugins(ctx context.Context, cfg manager.Config) error {
	return a.plugins.Reload(ctx, cfg)
}

// HTTPAddr returns the address the HTTP API listens on.
func (a *Agent) HTTPAddr() string {
	if a.http == nil {
		return ""
	}
	return a.http.ln.Addr().String()
}

// Run serves HTTP and takes part in leader election until ctx is done. While
// leader, it watches Nomad and reconciles sets.
func (a *Agent) Run(ctx context.Context) error {
	// Every Nomad call the agent makes derives its context from this one,
	// and so is counted in /v1/metrics and /v1/health.
	ctx = backend.WithCallTrace(ctx, func(ctx context.Context, verb string, err error) {
		a.metrics.observeNomadCall(ctx, verb, a.nomad.WriteVerb(verb), err)
		if a.opts.CallTrace != nil {
			a.opts.CallTrace(ctx, verb, err)
		}
	})
	if err := a.plugins.Start(ctx, a.opts.Plugins); err != nil {
		return err
	}
	defer a.plugins.Close()
	var wg sync.WaitGroup
	httpErr := make(chan error, 1)
	if a.http != nil {
		wg.Add(1)
		go func() {
			defer wg.Done()
			httpErr <- a.http.serve()
		}()
		a.log.Info("serving the HTTP API", "address", a.HTTPAddr())
	}
	err := a.elector.Run(ctx, a.lead)
	if a.http != nil {
		a.http.shutdown()
	}
	wg.Wait()
	if err != nil && ctx.Err() == nil {
		return err
	}
	select {
	case herr := <-httpErr:
		if herr != nil {
			return fmt.Errorf("serving HTTP: %w", herr)
		}
	default:
	}
	return nil
}

// lead runs one leadership term: a fresh cache, watcher, queue and workers.
// Everything stops when ctx is cancelled, which is the moment leadership is
// lost or the agent shuts down.
func (a *Agent) lead(ctx context.Context) error {
	log := a.log.Named("controller")
	a.metrics.leader.Set(1)
	defer a.metrics.leader.Set(0)
	log.Info("leading: watching Nomad and reconciling sets")

	q := newQueue(a.opts.RetryBaseDelay, a.opts.RetryMaxDelay)
	c := a.newController(log, q)
	if a.opts.ConsulHealth != nil {
		w := consul.NewCheckWatcher(ctx, consul.CheckWatcherConfig{
			API: a.opts.ConsulHealth, Logger: a.log.Named("consul_checks"), Clock: a.opts.Clock,
			Queries: &a.consulQueries,
			OnChange: func(k backend.SetKey) {
				q.Add(k.String())
				a.depth.Store(int64(q.Len()))
			},
		})
		c.checks = w
		defer w.Wait()
	}
	// The Nomad-native leader checks need no Consul: Nomad keeps them.
	native := a.nomad.NewLeaderChecks(ctx, a.log.Named("native_checks"), func(k backend.SetKey) {
		q.Add(k.String())
		a.depth.Store(int64(q.Len()))
	})
	c.native = native
	defer native.Wait()
	a.current.Store(c)
	defer a.current.Store(nil)

	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		if err := c.term.Run(ctx); err != nil {
			log.Error("watcher stopped", "error", err)
		}
	}()
	for i := 0; i < a.opts.Workers; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			a.work(ctx, c, q)
		}()
	}
	<-ctx.Done()
	q.ShutDown()
	wg.Wait()
	c.sets.dropAll()
	log.Info("stopped leading: all reconcile work has ended")
	return nil
}

// newController wires one leadership term's controller: a fresh cache, the
// watcher that fills it and queues the sets it touched, and the podControl
// that carries out the decisions.
func (a *Agent) newController(log hclog.Logger, q *queue) *controller {
	// The term reads each set's revisions and status from memory once it
	// has read them, as upstream reads its informers' caches; a re-list of
	// Nomad drops them, so a resync reads the store again, and a pass that
	// acts reads them from the store first (controller.confirm).
	store := storecache.New(a.store)
	term := a.nomad.NewTerm(backend.TermConfig{
		ResyncInterval: a.opts.ResyncInterval, Clock: a.opts.Clock, OnReset: a.metrics.streamReset,
		OnRelist: store.Forget,
	}, a.log.Named("watcher"), func(k backend.SetKey) {
		q.Add(k.String())
		a.depth.Store(int64(q.Len()))
	})
	c := &controller{
		log: log, store: store, term: term, queue: q, clock: a.opts.Clock, render: a.nomad.RenderedDigest,
		metrics: a.metrics, sets: newSetStates(a.metrics.setPods), hooks: a.plugins, capabilities: a.plugins.Provisioner(),
		expectTTL: a.opts.ExpectationTTL, termStart: a.opts.Clock(),
	}
	c.effector = &podControl{
		log: log, nomad: a.nomad, store: store, nodes: term, provisioner: a.plugins.Provisioner(), hooks: a.plugins,
		clock: a.opts.Clock, expectTTL: a.opts.ExpectationTTL, event: c.sets.event, exec: nomadRunner{a.nomad},
		requestResync: term.RequestResync,
	}
	c.requestResync = term.RequestResync
	c.confirm = store.Confirm
	return c
}

// work is one worker: it takes a set from the queue and reconciles it, so a
// set is never handled by two workers at once and one failing set never
// blocks the others.
func (a *Agent) work(ctx context.Context, c *controller, q *queue) {
	for {
		k, ok := q.Get()
		a.depth.Store(int64(q.Len()))
		if !ok {
			return
		}
		key, err := parseKey(k)
		if err == nil {
			err = c.sync(ctx, key)
		}
		switch {
		case err == nil:
			q.Forget(k)
		case ctx.Err() != nil:
			// Shutting down or deposed: drop the work, the next leader redoes it.
		default:
			c.log.Warn("reconcile failed; will retry with backoff", "set", k, "error", err)
			q.AddRateLimited(k)
		}
		q.Done(k)
	}
}

func parseKey(k string) (backend.SetKey, error) {
	for i := 0; i < len(k); i++ {
		if k[i] == '/' {
			return backend.SetKey{Namespace: k[:i], Name: k[i+1:]}, nil
		}
	}
	return backend.SetKey{}, fmt.Errorf("malformed set key %q", k)
}
