package consul

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	consulapi "github.com/hashicorp/consul/api"
	"github.com/hashicorp/go-hclog"

	"github.com/nomad-statefulset/nomad-statefulset/backend"
)

// Blocking-query settings of the health watches.
const (
	// healthWaitTime is how long one blocking query waits for a change.
	// Consul's default is 5 minutes; an idle watch costs one request per
	// this long.
	healthWaitTime = 5 * time.Minute
	// healthMinInterval keeps a watch whose query returns at once without
	// a change (Consul allows it) from spinning.
	healthMinInterval = time.Second
	// healthMinBackoff and healthMaxBackoff bound the wait after an error.
	healthMinBackoff = time.Second
	healthMaxBackoff = 30 * time.Second
	// maxCheckOutput is how much of a critical check's output a pod's
	// reason shows.
	maxCheckOutput = 120
)

// nomadServicePrefix starts the ID of every service Nomad registers for a
// task or group: _nomad-task-<alloc ID>-<task or group-name>-<service>-<port>.
const nomadServicePrefix = "_nomad-task-"

// allocIDLen is the length of a Nomad allocation ID (a UUID).
const allocIDLen = 36

// HealthAPI is the one Consul call the watches make: a blocking query of
// a service's health entries (Health().Service), narrowed for tests.
type HealthAPI interface {
	Service(ctx context.Context, service string, waitIndex uint64) ([]*consulapi.ServiceEntry, *consulapi.QueryMeta, error)
}

// NewHealthAPI wraps a Consul client.
func NewHealthAPI(c *consulapi.Client) HealthAPI { return healthClient{c: c} }

type healthClient struct{ c *consulapi.Client }

func (h healthClient) Service(ctx context.Context, service string, waitIndex uint64) ([]*consulapi.ServiceEntry, *consulapi.QueryMeta, error) {
	q := (&consulapi.QueryOptions{WaitIndex: waitIndex, WaitTime: healthWaitTime}).WithContext(ctx)
	entries, meta, err := h.c.Health().Service(service, "", false, q)
	if err != nil {
		return nil, nil, fmt.Errorf("reading the health of Consul service %q: %w", service, err)
	}
	return entries, meta, nil
}

// AllocChecks is what the Consul checks of one allocation's services say.
type AllocChecks struct {
	// Known is set when Consul lists at least one service of the
	// allocation.
	Known bool
	// Critical names the first critical check and its output; empty when
	// none is critical.
	Critical string
	// PassingSince is when the watch saw the allocation's checks stop
	// being critical; zero when it has not seen them critical.
	PassingSince time.Time
}

// CheckWatcher follows the health of Consul services with one blocking
// query per service name, whatever the number of sets and pods that use it,
// and maps each check to its allocation by the service ID Nomad registers.
// When what a service's checks say about an allocation changes, every set
// watching that service is handed to onChange (the agent's work queue): a
// change is seen within one blocking query's return, and nothing polls.
type CheckWatcher struct {
	ctx      context.Context
	api      HealthAPI
	log      hclog.Logger
	clock    func() time.Time
	onChange func(backend.SetKey)
	// queries counts the blocking queries made, for metrics and the
	// benchmarks.
	queries *atomic.Int64

	mu       sync.Mutex
	services map[string]*serviceWatch
	sets     map[backend.SetKey][]string
	wg       sync.WaitGroup
}

// serviceWatch is the state of one service's blocking query.
type serviceWatch struct {
	cancel context.CancelFunc
	sets   map[backend.SetKey]struct{}
	// synced is set once the first answer came.
	synced bool
	allocs map[string]*allocCheck
	// err is the last error, "" once a query succeeds again.
	err string
}

// allocCheck is one allocation's checks in one service.
type allocCheck struct {
	critical     string
	passingSince time.Time
}

// CheckWatcherConfig configures a CheckWatcher.
type CheckWatcherConfig struct {
	// API is Consul's health endpoint.
	API    HealthAPI
	Logger hclog.Logger
	// Clock stamps PassingSince; time.Now when nil.
	Clock func() time.Time
	// OnChange is called, without locks held, for every set whose
	// services' checks changed.
	OnChange func(backend.SetKey)
	// Queries, when set, counts the blocking queries made, across the
	// watchers of successive leadership terms.
	Queries *atomic.Int64
}

// NewCheckWatcher returns a watcher whose queries live until ctx is done.
func NewCheckWatcher(ctx context.Context, cfg CheckWatcherConfig) *CheckWatcher {
	if cfg.Clock == nil {
		cfg.Clock = time.Now
	}
	if cfg.Logger == nil {
		cfg.Logger = hclog.NewNullLogger()
	}
	if cfg.Queries == nil {
		cfg.Queries = new(atomic.Int64)
	}
	return &CheckWatcher{
		ctx: ctx, api: cfg.API, log: cfg.Logger, clock: cfg.Clock, onChange: cfg.OnChange, queries: cfg.Queries,
		services: map[string]*serviceWatch{}, sets: map[backend.SetKey][]string{},
	}
}

// Watch sets the Consul services whose checks decide the readiness of a
// set's pods: a query starts for a service no set watched yet, and stops
// for one no set watches any more. A nil or empty list forgets the set.
// Calling it again with the same services costs a comparison.
func (w *CheckWatcher) Watch(key backend.SetKey, services []string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	old := w.sets[key]
	if slices.Equal(old, services) {
		return
	}
	for _, s := range old {
		if slices.Contains(services, s) {
			continue
		}
		sw := w.services[s]
		if sw == nil {
			continue
		}
		delete(sw.sets, key)
		if len(sw.sets) == 0 {
			sw.cancel()
			delete(w.services, s)
		}
	}
	if len(services) == 0 {
		delete(w.sets, key)
		return
	}
	w.sets[key] = slices.Clone(services)
	for _, s := range services {
		sw := w.services[s]
		if sw == nil {
			ctx, cancel := context.WithCancel(w.ctx)
			sw = &serviceWatch{cancel: cancel, sets: map[backend.SetKey]struct{}{}}
			w.services[s] = sw
			w.wg.Add(1)
			go func() {
				defer w.wg.Done()
				w.run(ctx, s)
			}()
		}
		sw.sets[key] = struct{}{}
	}
}

// Wait returns once every query has ended, after the watcher's context is
// done.
func (w *CheckWatcher) Wait() { w.wg.Wait() }

// Queries returns how many blocking queries the watcher has made.
func (w *CheckWatcher) Queries() int64 { return w.queries.Load() }

// Services returns how many services are watched, one query each.
func (w *CheckWatcher) Services() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return len(w.services)
}

// Checks returns what the checks of the set's services say about one
// allocation, and whether every one of those services has been read at
// least once (synced). A critical check in any service wins.
func (w *CheckWatcher) Checks(key backend.SetKey, allocID string) (checks AllocChecks, synced bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	synced = true
	for _, s := range w.sets[key] {
		sw := w.services[s]
		if sw == nil || !sw.synced {
			synced = false
			continue
		}
		a := sw.allocs[allocID]
		if a == nil {
			continue
		}
		checks.Known = true
		if checks.Critical == "" && a.critical != "" {
			checks.Critical = a.critical
		}
		if a.passingSince.After(checks.PassingSince) {
			checks.PassingSince = a.passingSince
		}
	}
	return checks, synced
}

// Err returns the last error of any watched service, "" when all answer.
func (w *CheckWatcher) Err() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	for _, sw := range w.services {
		if sw.err != "" {
			return sw.err
		}
	}
	return ""
}

// run is one service's blocking-query loop.
func (w *CheckWatcher) run(ctx context.Context, service string) {
	log := w.log.With("service", service)
	log.Debug("following the service's Consul health checks")
	defer log.Debug("stopped following the service's Consul health checks")
	var index uint64
	backoff := healthMinBackoff
	for {
		start := w.clock()
		w.queries.Add(1)
		entries, meta, err := w.api.Service(ctx, service, index)
		if ctx.Err() != nil {
			return
		}
		if err != nil {
			w.failed(service, err, log, backoff)
			if !sleepCtx(ctx, backoff) {
				return
			}
			backoff = min(backoff*2, healthMaxBackoff)
			continue
		}
		backoff = healthMinBackoff
		var filtered string
		if meta.ResultsFilteredByACLs {
			// Consul hides what the token may not read rather than refuse.
			filtered = fmt.Sprintf("Consul's ACLs filtered out some of the health of service %q: the token needs service_prefix \"\" and node_prefix \"\" read", service)
		}
		// Consul's advice: an index that went backwards, or 0, restarts
		// the wait from 0, or the next query would return at once forever.
		next := meta.LastIndex
		if next < index || next == 0 {
			next = 0
		}
		unchanged := next == index
		index = next
		changed, newErr := w.update(service, entries, filtered)
		if newErr {
			log.Warn("Consul health checks are incomplete; pods whose checks are hidden are judged on their task states", "error", filtered)
		}
		if changed {
			w.notify(service)
		}
		if unchanged && w.clock().Sub(start) < healthMinInterval {
			if !sleepCtx(ctx, healthMinInterval) {
				return
			}
		}
	}
}

func (w *CheckWatcher) failed(service string, err error, log hclog.Logger, retryIn time.Duration) {
	w.mu.Lock()
	sw := w.services[service]
	first := sw != nil && sw.err == ""
	if sw != nil {
		sw.err = err.Error()
	}
	w.mu.Unlock()
	if first {
		log.Warn("cannot read Consul health checks; pods of sets using this service are judged on their task states", "error", err, "retry_in", retryIn)
	}
}

// sleepCtx waits d and reports whether ctx is still live.
func sleepCtx(ctx context.Context, d time.Duration) bool {
	sleep(ctx, d)
	return ctx.Err() == nil
}

// update folds one answer into the service's state, with errMsg the
// problem it has ("" for none). It reports whether what the answer says
// about any allocation changed (or it is the first answer), and whether
// errMsg is news.
func (w *CheckWatcher) update(service string, entries []*consulapi.ServiceEntry, errMsg string) (changed, newErr bool) {
	now := w.clock()
	next := AllocChecksOf(entries)
	w.mu.Lock()
	defer w.mu.Unlock()
	sw := w.services[service]
	if sw == nil {
		return false, false
	}
	newErr = errMsg != "" && sw.err != errMsg
	sw.err = errMsg
	changed = !sw.synced
	sw.synced = true
	allocs := make(map[string]*allocCheck, len(next))
	for id, critical := range next {
		a := &allocCheck{critical: critical}
		if old := sw.allocs[id]; old != nil {
			a.passingSince = old.passingSince
			if old.critical != "" && critical == "" {
				a.passingSince = now
			}
			changed = changed || old.critical != critical
		} else {
			changed = true
		}
		allocs[id] = a
	}
	for id := range sw.allocs {
		if _, ok := allocs[id]; !ok {
			changed = true
		}
	}
	sw.allocs = allocs
	return changed, newErr
}

func (w *CheckWatcher) notify(service string) {
	w.mu.Lock()
	sw := w.services[service]
	var keys []backend.SetKey
	if sw != nil {
		for k := range sw.sets {
			keys = append(keys, k)
		}
	}
	w.mu.Unlock()
	for _, k := range keys {
		w.onChange(k)
	}
}

// AllocChecksOf maps a service's health entries to the allocations that
// registered them, by the service ID Nomad gives every instance
// (_nomad-task-<alloc ID>-…): per allocation, the first critical check of
// its instances ("" when none is critical). Only the instance's own checks
// count, not the node's (serfHealth): a node's health is Nomad's to judge.
// Instances not registered by Nomad are left out.
func AllocChecksOf(entries []*consulapi.ServiceEntry) map[string]string {
	out := make(map[string]string, len(entries))
	for _, e := range entries {
		if e == nil || e.Service == nil {
			continue
		}
		id, ok := AllocIDOf(e.Service.ID)
		if !ok {
			continue
		}
		critical := out[id]
		for _, c := range e.Checks {
			if critical != "" {
				break
			}
			if c == nil || c.ServiceID != e.Service.ID || c.Status != consulapi.HealthCritical {
				continue
			}
			critical = describeCritical(c)
		}
		out[id] = critical
	}
	return out
}

// AllocIDOf returns the allocation ID in the ID of a service Nomad
// registered, and false for any other service ID.
func AllocIDOf(serviceID string) (string, bool) {
	rest, ok := strings.CutPrefix(serviceID, nomadServicePrefix)
	if !ok || len(rest) < allocIDLen+1 || rest[allocIDLen] != '-' {
		return "", false
	}
	return rest[:allocIDLen], true
}

// describeCritical names a critical check as a pod's reason shows it.
func describeCritical(c *consulapi.HealthCheck) string {
	msg := fmt.Sprintf("check %q of service %q is critical", c.Name, c.ServiceName)
	out := strings.Join(strings.Fields(c.Output), " ")
	if len(out) > maxCheckOutput {
		out = out[:maxCheckOutput] + "…"
	}
	if out != "" {
		msg += ": " + out
	}
	return msg
}
