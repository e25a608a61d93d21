package consul

import (
	"context"
	"fmt"
	"maps"
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
	// Leader is set when the set's leader check (the check name passed to
	// Watch) is listed for the allocation and every check of that name
	// passes. Warning is not passing: a leader is named only when the
	// application says so plainly. The leader check never sets Critical nor
	// moves PassingSince (DESIGN §3b): on a follower it is critical by
	// design, and that says nothing about the follower's readiness.
	Leader bool
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
	sets     map[backend.SetKey]setWatch
	wg       sync.WaitGroup
}

// setWatch is what one set watches.
type setWatch struct {
	services []string
	// leaderCheck names the set's leader check, "" for none.
	leaderCheck string
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

// allocCheck is one allocation's checks in one service. It keeps the
// checks by name rather than one verdict, because the verdict depends on
// the set that asks: sets sharing a service may name different leader
// checks, and each set's own leader check must neither make a pod critical
// nor move its PassingSince.
type allocCheck struct {
	// critical lists the allocation's critical checks in the order Consul
	// lists them, so that the one a pod's reason shows does not flap.
	critical []namedCheck
	// passing is, per check name, whether every check of that name passes.
	passing map[string]bool
	// recovered is, per check name, when the watch saw the checks of that
	// name stop being critical (turn passing, warning, or go away).
	recovered map[string]time.Time
}

// namedCheck is a critical check: its name, and how a pod's reason shows it.
type namedCheck struct {
	name, reason string
}

// checkView is what one allocation's checks in one service say to a set
// whose leader check is named leaderCheck, but for PassingSince: comparing
// two views tells whether the set must look again (PassingSince moves only
// with critical).
type checkView struct {
	critical string
	// leaderListed is set when a check of the leader check's name is
	// listed; leaderPassing when every such check passes.
	leaderListed, leaderPassing bool
}

// view is what a's checks say to a set whose leader check is leaderCheck
// ("" for none), and since when they are not critical to it.
func (a *allocCheck) view(leaderCheck string) (v checkView, passingSince time.Time) {
	// counts reports whether a check of this name has a say in readiness.
	counts := func(name string) bool { return leaderCheck == "" || name != leaderCheck }
	for _, c := range a.critical {
		if counts(c.name) {
			v.critical = c.reason
			break
		}
	}
	if leaderCheck != "" {
		v.leaderPassing, v.leaderListed = a.passing[leaderCheck]
	}
	for name, t := range a.recovered {
		if counts(name) && t.After(passingSince) {
			passingSince = t
		}
	}
	return v, passingSince
}

// isCritical reports whether a check of this name is critical in a.
func (a *allocCheck) isCritical(name string) bool {
	return slices.ContainsFunc(a.critical, func(c namedCheck) bool { return c.name == name })
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
		services: map[string]*serviceWatch{}, sets: map[backend.SetKey]setWatch{},
	}
}

// Watch sets the Consul services whose checks decide the readiness of a
// set's pods, and the name of the set's leader check (its
// statefulset_leader_check, "" for none): a check of that name, in any of
// the services, says which pod leads (AllocChecks.Leader) and has no say in
// readiness. A query starts for a service no set watched yet, and stops for
// one no set watches any more. A nil or empty list forgets the set.
// Calling it again with the same arguments costs a comparison; a new leader
// check name holds from the next Checks on, since every check's status is
// kept whatever the name.
func (w *CheckWatcher) Watch(key backend.SetKey, services []string, leaderCheck string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	prev := w.sets[key]
	if slices.Equal(prev.services, services) && (prev.leaderCheck == leaderCheck || len(services) == 0) {
		return
	}
	for _, s := range prev.services {
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
	w.sets[key] = setWatch{services: slices.Clone(services), leaderCheck: leaderCheck}
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
// least once (synced). A critical check in any service wins, the set's
// leader check aside. The allocation leads when its leader check passes
// wherever a check of that name is listed.
func (w *CheckWatcher) Checks(key backend.SetKey, allocID string) (checks AllocChecks, synced bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	set := w.sets[key]
	synced = true
	leaderListed, leaderFailing := false, false
	for _, s := range set.services {
		sw := w.services[s]
		if sw == nil || !sw.synced {
			synced = false
			continue
		}
		a := sw.allocs[allocID]
		if a == nil {
			continue
		}
		v, passingSince := a.view(set.leaderCheck)
		checks.Known = true
		if checks.Critical == "" {
			checks.Critical = v.critical
		}
		if passingSince.After(checks.PassingSince) {
			checks.PassingSince = passingSince
		}
		leaderListed = leaderListed || v.leaderListed
		leaderFailing = leaderFailing || (v.leaderListed && !v.leaderPassing)
	}
	checks.Leader = leaderListed && !leaderFailing
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
// about any allocation changed for any set watching the service (or it is
// the first answer), and whether errMsg is news.
func (w *CheckWatcher) update(service string, entries []*consulapi.ServiceEntry, errMsg string) (changed, newErr bool) {
	now := w.clock()
	allocs := allocChecksOf(entries)
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
	// Only what some watching set would see is a change: the leader
	// checks they name, and no leader check at all.
	leaderChecks := []string{""}
	for k := range sw.sets {
		if l := w.sets[k].leaderCheck; l != "" && !slices.Contains(leaderChecks, l) {
			leaderChecks = append(leaderChecks, l)
		}
	}
	for id, a := range allocs {
		old := sw.allocs[id]
		if old == nil {
			changed = true
			continue
		}
		a.recovered = maps.Clone(old.recovered)
		for _, c := range old.critical {
			if !a.isCritical(c.name) {
				if a.recovered == nil {
					a.recovered = map[string]time.Time{}
				}
				a.recovered[c.name] = now
			}
		}
		for _, l := range leaderChecks {
			was, _ := old.view(l)
			is, _ := a.view(l)
			changed = changed || was != is
		}
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
// (_nomad-task-<alloc ID>-…), as a set whose leader check is leaderCheck
// ("" for none) sees them in a first answer: per allocation, Known, the
// first critical check of its instances other than the leader check, and
// whether the leader check passes (Leader). PassingSince is left zero: it
// takes a watch to see checks turn. Only the instance's own checks count,
// not the node's (serfHealth): a node's health is Nomad's to judge.
// Instances not registered by Nomad are left out.
func AllocChecksOf(entries []*consulapi.ServiceEntry, leaderCheck string) map[string]AllocChecks {
	allocs := allocChecksOf(entries)
	out := make(map[string]AllocChecks, len(allocs))
	for id, a := range allocs {
		v, _ := a.view(leaderCheck)
		out[id] = AllocChecks{Known: true, Critical: v.critical, Leader: v.leaderListed && v.leaderPassing}
	}
	return out
}

// allocChecksOf gathers a service's health entries by allocation, as
// AllocChecksOf describes, keeping every check's status by name.
func allocChecksOf(entries []*consulapi.ServiceEntry) map[string]*allocCheck {
	out := make(map[string]*allocCheck, len(entries))
	for _, e := range entries {
		if e == nil || e.Service == nil {
			continue
		}
		id, ok := AllocIDOf(e.Service.ID)
		if !ok {
			continue
		}
		a := out[id]
		if a == nil {
			a = &allocCheck{}
			out[id] = a
		}
		for _, c := range e.Checks {
			if c == nil || c.ServiceID != e.Service.ID {
				continue
			}
			if a.passing == nil {
				a.passing = map[string]bool{}
			}
			// Two checks of one name (two instances of the service, say)
			// pass only when both do.
			passing, seen := a.passing[c.Name]
			a.passing[c.Name] = c.Status == consulapi.HealthPassing && (passing || !seen)
			if c.Status == consulapi.HealthCritical {
				a.critical = append(a.critical, namedCheck{name: c.Name, reason: describeCritical(c)})
			}
		}
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
