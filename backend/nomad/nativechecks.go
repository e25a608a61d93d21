package nomad

import (
	"context"
	"errors"
	"maps"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/nomad-statefulset/nomad-statefulset/backend"
)

// Pacing of the native check reads.
const (
	// minNativeCheckInterval is the shortest time between two reads of one
	// set's checks, whatever the check's interval says: Nomad refuses a
	// check interval under a second, so this only guards against a job
	// that was never validated by Nomad.
	minNativeCheckInterval = time.Second
	// nativeCheckMaxBackoff bounds the wait after a read that failed.
	nativeCheckMaxBackoff = 30 * time.Second
)

// CheckReader is the one call the native check watcher makes: API's
// AllocChecks, narrowed for tests.
type CheckReader interface {
	AllocChecks(ctx context.Context, namespace, allocID string) (map[string]CheckStatus, error)
}

// NativeCheckWatcher follows the leader check (statefulset_leader_check,
// DESIGN §3b) of the sets whose check is a Nomad-native service check: one
// of a service with provider = "nomad".
//
// Nomad keeps the results of those checks on the client that runs the
// allocation, and nowhere else: they are not in the allocation the servers
// hold, no event-stream topic carries them (the Service topic carries the
// registrations, not their health), and the checks endpoint
// (GET /v1/client/allocation/<id>/checks) has no blocking query. So unlike
// Consul's checks, which one blocking query per service follows, these are
// read, and the watcher paces the reads by the check itself: each set's live
// allocations are read once per check interval (the check's own `interval`,
// at least a second), because Nomad runs the check once per interval and a
// read in between can only repeat the last result. A set's leadership is
// thus seen to move within one interval of the check seeing it, the same
// delay Nomad's own health tracker has; an idle set of n pods whose check
// runs every 10 s costs n/10 requests a second. An allocation the set did
// not have before (a pod created or replaced, which the event stream tells
// the agent about at once) is read at once, not an interval later, so that
// a new pod does not keep the leader unknown. Nothing is read for a set
// without a native leader check.
//
// When what the checks say changes (a pod starts or stops leading, or an
// allocation is read for the first time), the set is handed to onChange
// (the agent's work queue).
type NativeCheckWatcher struct {
	ctx      context.Context
	api      CheckReader
	log      hclog.Logger
	onChange func(backend.SetKey)
	after    func(time.Duration) <-chan time.Time
	// reads counts the AllocChecks calls, for the tests and the benchmarks.
	reads atomic.Int64

	mu   sync.Mutex
	sets map[backend.SetKey]*nativeSet
	wg   sync.WaitGroup
}

// nativeSet is one set's watch: what it reads, and what it read.
type nativeSet struct {
	cancel   context.CancelFunc
	check    string
	interval time.Duration
	// allocs are the live allocations to read.
	allocs []string
	// read holds, per allocation read at least once, whether its leader
	// check passed in the last answer.
	read map[string]bool
	// kick wakes the set's loop when an allocation it has not read yet
	// joins, or the check changes.
	kick chan struct{}
}

// NativeCheckWatcherConfig configures a NativeCheckWatcher.
type NativeCheckWatcherConfig struct {
	// API reads the checks: the Nomad client, or the simulator.
	API    CheckReader
	Logger hclog.Logger
	// OnChange is called, without locks held, for a set whose leader
	// changed as the checks say.
	OnChange func(backend.SetKey)
	// After paces the loop: the next round of reads waits for the channel
	// it returns (time.After when nil). Tests pass their own, to see the
	// waits asked for and to fire them.
	After func(time.Duration) <-chan time.Time
}

// NewNativeCheckWatcher returns a watcher whose reads stop when ctx is done.
func NewNativeCheckWatcher(ctx context.Context, cfg NativeCheckWatcherConfig) *NativeCheckWatcher {
	if cfg.Logger == nil {
		cfg.Logger = hclog.NewNullLogger()
	}
	if cfg.OnChange == nil {
		cfg.OnChange = func(backend.SetKey) {}
	}
	if cfg.After == nil {
		cfg.After = time.After
	}
	return &NativeCheckWatcher{ctx: ctx, api: cfg.API, log: cfg.Logger, onChange: cfg.OnChange, after: cfg.After,
		sets: map[backend.SetKey]*nativeSet{}}
}

// Watch sets what is read for a set: its native leader check (check, ""
// to stop watching the set), how often Nomad runs it (interval, see
// jobs.NativeLeaderCheck), and the set's live allocations. An allocation
// that is new to the watch is read at once; one that left is forgotten.
// Calling it again with the same arguments costs a comparison.
func (w *NativeCheckWatcher) Watch(key backend.SetKey, check string, interval time.Duration, allocs []string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	s := w.sets[key]
	if check == "" {
		if s != nil {
			s.cancel()
			delete(w.sets, key)
		}
		return
	}
	interval = max(interval, minNativeCheckInterval)
	if s == nil {
		ctx, cancel := context.WithCancel(w.ctx)
		s = &nativeSet{cancel: cancel, read: map[string]bool{}, kick: make(chan struct{}, 1)}
		w.sets[key] = s
		w.wg.Add(1)
		go func() {
			defer w.wg.Done()
			w.run(ctx, key, s)
		}()
	}
	wake := false
	if s.check != check {
		// Another check: nothing read so far says anything about it.
		s.check, s.read, wake = check, map[string]bool{}, true
	}
	if s.interval != interval {
		s.interval, wake = interval, true
	}
	if !slices.Equal(s.allocs, allocs) {
		s.allocs = slices.Clone(allocs)
		maps.DeleteFunc(s.read, func(id string, _ bool) bool { return !slices.Contains(allocs, id) })
		for _, id := range allocs {
			if _, ok := s.read[id]; !ok {
				wake = true
			}
		}
	}
	if wake {
		select {
		case s.kick <- struct{}{}:
		default:
		}
	}
}

// Leader reports whether the set's leader check passed on one allocation
// in the last answer, and whether the allocation has been read at all
// (read false: not yet, or every read so far failed).
func (w *NativeCheckWatcher) Leader(key backend.SetKey, allocID string) (leader, read bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	s := w.sets[key]
	if s == nil {
		return false, false
	}
	leader, read = s.read[allocID]
	return leader, read
}

// Reads returns how many AllocChecks calls the watcher has made.
func (w *NativeCheckWatcher) Reads() int64 { return w.reads.Load() }

// Wait returns once every set's loop has ended, after the watcher's
// context is done.
func (w *NativeCheckWatcher) Wait() { w.wg.Wait() }

// run is one set's loop: read every live allocation's checks, then sleep
// until the next interval, or until Watch brings an allocation not read
// yet. A read that fails is retried with a backoff (doubling from the
// interval, up to nativeCheckMaxBackoff) rather than at once.
func (w *NativeCheckWatcher) run(ctx context.Context, key backend.SetKey, s *nativeSet) {
	log := w.log.With("set", key.String())
	log.Debug("reading the set's Nomad-native leader check")
	defer log.Debug("stopped reading the set's Nomad-native leader check")
	failures := 0
	for {
		w.mu.Lock()
		// This round reads what a pending kick asked for: drop it, or
		// it would bring a second round at once. Watch kicks with the
		// lock held, so no kick is lost between the two.
		select {
		case <-s.kick:
		default:
		}
		check, interval, allocs := s.check, s.interval, slices.Clone(s.allocs)
		w.mu.Unlock()
		changed, failed := false, false
		for _, id := range allocs {
			w.reads.Add(1)
			checks, err := w.api.AllocChecks(ctx, key.Namespace, id)
			if ctx.Err() != nil {
				return
			}
			switch {
			case errors.Is(err, ErrNotFound):
				// Gone from Nomad: it leads nowhere. The event stream
				// tells the agent, whose next Watch drops it.
				checks = nil
			case err != nil:
				if failures == 0 {
					log.Warn("cannot read the Nomad-native leader check; the set waits to learn its leader", "allocation", id, "error", err)
				}
				failed = true
				continue
			}
			changed = w.record(s, check, id, checks[check].Passing) || changed
		}
		if changed {
			w.onChange(key)
		}
		wait := interval
		if failed {
			failures++
			wait = min(interval<<min(failures, 5), nativeCheckMaxBackoff)
		} else {
			failures = 0
		}
		// A timer dropped when a kick comes first is collected by the
		// runtime (Go 1.23 timers).
		select {
		case <-ctx.Done():
			return
		case <-s.kick:
		case <-w.after(wait):
		}
	}
}

// record stores one allocation's answer, unless the watch moved on from
// the check or the allocation meanwhile, and reports whether it is news.
func (w *NativeCheckWatcher) record(s *nativeSet, check, allocID string, leads bool) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	if s.check != check || !slices.Contains(s.allocs, allocID) {
		return false
	}
	was, seen := s.read[allocID]
	s.read[allocID] = leads
	return !seen || was != leads
}
