package agent

import (
	"context"
	"fmt"
	"maps"
	"math"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/nomad/api"

	"github.com/nomad-statefulset/nomad-statefulset/agent/config"
	"github.com/nomad-statefulset/nomad-statefulset/backend"
	"github.com/nomad-statefulset/nomad-statefulset/backend/memory"
	"github.com/nomad-statefulset/nomad-statefulset/backend/nomad"
	"github.com/nomad-statefulset/nomad-statefulset/internal/nomadsim"
	"github.com/nomad-statefulset/nomad-statefulset/plugin"
	"github.com/nomad-statefulset/nomad-statefulset/plugin/builtin/hostvolume"
	"github.com/nomad-statefulset/nomad-statefulset/plugin/manager"
	"github.com/nomad-statefulset/nomad-statefulset/reconciler"
)

func ptr[T any](v T) *T { return &v }

// parentJob builds an annotated parent job as `nomad job run` would submit it.
func parentJob(name string, meta map[string]string, image string) *api.Job {
	m := map[string]string{"statefulset": "true", "statefulset_volume_claims": "data"}
	for k, v := range meta {
		m[k] = v
	}
	return &api.Job{
		ID: ptr(name), Name: ptr(name), Namespace: ptr("default"), Type: ptr("service"),
		Datacenters: []string{"*"}, Meta: m,
		TaskGroups: []*api.TaskGroup{{
			Name: ptr(name), Count: ptr(0),
			Volumes: map[string]*api.VolumeRequest{"data": {
				Name: "data", Type: "host", Source: "data",
				AccessMode: "single-node-single-writer", AttachmentMode: "file-system",
			}},
			Tasks: []*api.Task{{
				Name: "app", Driver: "exec",
				Config:       map[string]any{"command": "/bin/sh", "args": []string{"-c", image}},
				VolumeMounts: []*api.VolumeMount{{Volume: ptr("data"), Destination: ptr("/data")}},
			}},
		}},
	}
}

type harness struct {
	t   *testing.T
	sim *nomadsim.Nomad
	// nomad is Nomad as the agent sees it: sim, with a fence in its event
	// streams.
	nomad *fencedNomad
	// clock is the agent's clock when the test drives it (startAgentOnClock).
	clock *fakeClock
	store backend.Store
	agent *Agent
	stop  func()
}

func startAgent(t *testing.T, cfg nomadsim.NomadConfig) *harness {
	t.Helper()
	return startAgentWith(t, cfg, nil)
}

func startAgentWith(t *testing.T, cfg nomadsim.NomadConfig, opt func(*Options)) *harness {
	t.Helper()
	sim := nomadsim.NewNomad(cfg)
	store := memory.NewStore()
	opts := testOptions(t, sim, store)
	if opt != nil {
		opt(&opts)
	}
	// Outermost, over whatever opt put between the agent and the simulator.
	var fenced *fencedNomad
	wrapNomad(&opts, func(api nomad.API) nomad.API {
		fenced = &fencedNomad{API: api, sim: sim}
		return fenced
	})
	a, stop := runAgent(t, opts)
	h := &harness{t: t, sim: sim, nomad: fenced, store: store, agent: a, stop: func() { stop(); sim.Close() }}
	t.Cleanup(h.stop)
	return h
}

// startAgentOnClock starts an agent whose time is fc: its Options.Clock,
// and the delays of its work queue (backoffs, retries, holds), which then
// fire only when the test advances fc. Nomad (the simulator) and the
// watcher keep wall time.
func startAgentOnClock(t *testing.T, cfg nomadsim.NomadConfig, fc *fakeClock, opt func(*Options)) *harness {
	t.Helper()
	h := startAgentWith(t, cfg, func(o *Options) {
		o.Clock = fc.Now
		if opt != nil {
			opt(o)
		}
	})
	h.clock = fc
	q := h.queue()
	q.mu.Lock()
	defer q.mu.Unlock()
	// The simulator is empty, so the term's first list queued nothing
	// delayed: no timer is left on the wall clock.
	if len(q.timers) != 0 {
		t.Fatalf("the queue has %d delayed keys before the test began", len(q.timers))
	}
	q.now, q.afterFunc = fc.Now, fc.AfterFunc
	return h
}

// term returns the controller of the agent's leadership term, once it has
// begun.
func (h *harness) term() *controller {
	h.t.Helper()
	var c *controller
	h.waitFor("the agent to lead", 10*time.Second, func() (bool, string) {
		c = h.agent.current.Load()
		return c != nil, "not leading"
	})
	return c
}

// queue returns the work queue of the agent's term.
func (h *harness) queue() *queue {
	h.t.Helper()
	return h.term().queue.(*queue)
}

// settle waits until the agent has provably done all it was given, and
// nothing is under way that would give it more: the simulator has no
// transition scheduled, the watcher has applied every event Nomad
// published and queued the sets they touched, the queue has processed them
// and everything that led to, and meanwhile nothing was written to Nomad
// and no re-list began. Only then does "nothing happened" mean something.
// On the real clock, delayed keys due within the agent's RetryMaxDelay
// (its retries after an error) are waited out, and later ones (holds,
// backoffs, requeues; Delayed lists them) left out. On a fake clock every
// delayed key is left out: it fires only when the test advances it. Not
// seen: a re-list the agent asked for that the watcher has not yet begun;
// only a conflict or an expired expectation asks for one.
func (h *harness) settle() {
	h.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	c := h.term()
	q := c.queue.(*queue)
	var within time.Duration
	if h.clock == nil {
		within = h.agent.opts.RetryMaxDelay
	}
	for {
		idx, relists := h.sim.Index(), c.watcher().Relists()
		if h.sim.Pending() == 0 && c.watcher().Settling() == 0 {
			if err := h.nomad.caughtUp(ctx, c.cache()); err != nil {
				h.t.Fatalf("the watcher never caught up with Nomad (index %d, cache at %d): %v", h.sim.Index(), c.cache().Index(), err)
			}
			if err := q.WaitIdle(ctx, within); err != nil {
				h.t.Fatalf("the work queue never went idle (a hot loop?): %v; %d reconciles so far", err, reconciles(h.agent))
			}
			if h.sim.Index() == idx && h.sim.Pending() == 0 && c.watcher().Relists() == relists && c.watcher().Settling() == 0 {
				return
			}
		}
		if ctx.Err() != nil {
			h.t.Fatalf("the agent and Nomad never settled: index %d (was %d), %d transitions pending", h.sim.Index(), idx, h.sim.Pending())
		}
		// Nomad is still moving (allocations starting, stopping): poll.
		time.Sleep(time.Millisecond)
	}
}

// fencedNomad is Nomad as the agent sees it, with a fence in its
// event streams. The simulator hands events to a subscriber through a
// buffer and the watcher applies them on its own goroutine, so nothing
// outside tells when the watcher is done with what Nomad published. Here
// each stream passes through a relay with no buffer: the watcher takes a
// batch only once it has applied the one before and queued the sets that
// one touched, so once it has taken a heartbeat the relay offered (fence),
// it is done with every batch that came before.
type fencedNomad struct {
	nomad.API
	// sim is the simulator behind API, asked for its newest event.
	sim *nomadsim.Nomad
	mu  sync.Mutex
	// streams are the open streams, newest last.
	streams []*fencedStream
}

// LastWriteIndex passes the simulator's on (nomad.WriteIndexer), so that
// the agent's writes are paced by the stream as they are in production.
func (f *fencedNomad) LastWriteIndex() uint64 { return f.sim.LastWriteIndex() }

// fencedStream is one relayed event stream.
type fencedStream struct {
	// fence asks the relay to offer a heartbeat; it closes the channel it
	// was given once the watcher has taken it.
	fence chan chan struct{}
	// ended is closed when the relay stops.
	ended chan struct{}
}

// Events relays the simulator's stream through a fence.
func (f *fencedNomad) Events(ctx context.Context, index uint64) (<-chan *api.Events, error) {
	in, err := f.API.Events(ctx, index)
	if err != nil {
		return nil, err
	}
	s := &fencedStream{fence: make(chan chan struct{}), ended: make(chan struct{})}
	f.mu.Lock()
	f.streams = append(f.streams, s)
	f.mu.Unlock()
	out := make(chan *api.Events)
	go func() {
		defer close(out)
		defer close(s.ended)
		defer func() {
			f.mu.Lock()
			defer f.mu.Unlock()
			f.streams = slices.DeleteFunc(f.streams, func(o *fencedStream) bool { return o == s })
		}()
		for {
			select {
			case evs, ok := <-in:
				if !ok {
					return
				}
				select {
				case out <- evs:
				case <-ctx.Done():
					return
				}
			case taken := <-s.fence:
				select {
				case out <- &api.Events{}: // Index 0 and no events: a heartbeat
					close(taken)
				case <-ctx.Done():
					return
				}
			case <-ctx.Done():
				return
			}
		}
	}()
	return out, nil
}

// fence returns once the watcher has taken a heartbeat from its current
// stream: it has applied every batch it took before, or listed Nomad and
// queued what the list touched if the stream is new.
func (f *fencedNomad) fence(ctx context.Context) error {
	for {
		f.mu.Lock()
		var s *fencedStream
		if n := len(f.streams); n > 0 {
			s = f.streams[n-1]
		}
		f.mu.Unlock()
		if s != nil {
			taken := make(chan struct{})
			select {
			case s.fence <- taken:
				select {
				case <-taken:
					return nil
				case <-s.ended: // the watcher left this stream: try its next
				case <-ctx.Done():
					return ctx.Err()
				}
			case <-s.ended:
			case <-ctx.Done():
				return ctx.Err()
			}
		}
		// The watcher is between streams, listing Nomad: poll for the next.
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(time.Millisecond):
		}
	}
}

// newestEvent returns the index of the newest event Nomad has published,
// which a stream asked for an index beyond it replays first (0 when Nomad
// has published nothing). Nomad's index alone says nothing: writes that
// change nothing (a plan that places nothing, an unchanged register) take
// an index and publish no event.
func (f *fencedNomad) newestEvent(ctx context.Context) (uint64, error) {
	if f.sim.Index() == 0 {
		return 0, nil
	}
	pctx, cancel := context.WithCancel(ctx)
	defer cancel()
	ch, err := f.sim.Events(pctx, math.MaxUint64)
	if err != nil {
		return 0, err
	}
	select {
	case evs, ok := <-ch:
		if !ok || evs.Err != nil {
			return 0, fmt.Errorf("reading Nomad's newest event: stream ended (%v)", evs)
		}
		return evs.Index, nil
	case <-ctx.Done():
		return 0, ctx.Err()
	}
}

// caughtUp returns once the watcher has applied every event Nomad has
// published so far and queued the sets they touched.
func (f *fencedNomad) caughtUp(ctx context.Context, cache *nomad.Cache) error {
	newest, err := f.newestEvent(ctx)
	if err != nil {
		return err
	}
	for cache.Index() < newest {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(time.Millisecond):
		}
	}
	return f.fence(ctx)
}

// fakeClock is a clock that moves only when the test says: Advance runs
// the timers (AfterFunc) due by then, in order, on the caller's goroutine.
type fakeClock struct {
	mu     sync.Mutex
	now    time.Time
	timers []*fakeClockTimer
}

// fakeClockTimer is one AfterFunc of a fakeClock; the clock's mu guards it.
type fakeClockTimer struct {
	c       *fakeClock
	at      time.Time
	f       func()
	stopped bool
}

func newFakeClock() *fakeClock {
	// Wall time at the start, so that times the simulator and the watcher
	// stamp (wall time) fall after it rather than in its future.
	return &fakeClock{now: time.Now()}
}

// Now returns the fake time.
func (c *fakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

// AfterFunc runs f once the clock is advanced d past now.
func (c *fakeClock) AfterFunc(d time.Duration, f func()) stopper {
	c.mu.Lock()
	defer c.mu.Unlock()
	t := &fakeClockTimer{c: c, at: c.now.Add(d), f: f}
	c.timers = append(c.timers, t)
	return t
}

// Stop keeps the timer from firing; it reports whether it had not fired.
func (t *fakeClockTimer) Stop() bool {
	t.c.mu.Lock()
	defer t.c.mu.Unlock()
	was := !t.stopped
	t.stopped = true
	return was
}

// Advance moves the clock d forward and runs the timers due by then.
func (c *fakeClock) Advance(d time.Duration) {
	c.mu.Lock()
	c.now = c.now.Add(d)
	var due []*fakeClockTimer
	c.timers = slices.DeleteFunc(c.timers, func(t *fakeClockTimer) bool {
		if t.stopped {
			return true
		}
		if !t.at.After(c.now) {
			t.stopped = true // fired: Stop reports false from now on
			due = append(due, t)
			return true
		}
		return false
	})
	c.mu.Unlock()
	slices.SortStableFunc(due, func(a, b *fakeClockTimer) int { return a.at.Compare(b.at) })
	// Outside c.mu: a timer's function takes the queue's lock, under which
	// the queue calls the clock.
	for _, t := range due {
		t.f()
	}
}

// testOptions are the agent options of the simulator tests: fast retries,
// no periodic resync, a short expectation TTL.
func testOptions(t *testing.T, api nomad.API, store backend.Store) Options {
	return Options{
		Logger: hclog.New(&hclog.LoggerOptions{Level: hclog.Warn, Output: testWriter{t}}),
		Nomad:  nomad.NewCluster(api), PluginBuiltins: hostVolumeBuiltin(api),
		Store: store, HTTPAddr: "127.0.0.1:0", Workers: 3,
		RetryBaseDelay: 5 * time.Millisecond, RetryMaxDelay: 100 * time.Millisecond,
		ResyncInterval: time.Hour, ExpectationTTL: 2 * time.Second,
	}
}

// hostVolumeBuiltin is the built-in provisioner over api, as command/
// wires it.
func hostVolumeBuiltin(api nomad.API) map[string]plugin.Factory {
	return map[string]plugin.Factory{hostvolume.Name: hostvolume.Factory(api)}
}

// wrapNomad puts wrap between the agent (its Cluster, and its built-in
// provisioner) and the Nomad API they called.
func wrapNomad(o *Options, wrap func(nomad.API) nomad.API) {
	api := wrap(o.Nomad.(*nomad.Cluster).Unpaced())
	o.Nomad = nomad.NewCluster(api)
	builtins := maps.Clone(o.PluginBuiltins)
	maps.Copy(builtins, hostVolumeBuiltin(api))
	o.PluginBuiltins = builtins
}

// runAgent runs an agent until the returned function (also registered with
// t.Cleanup; calling it twice is harmless) stops it and waits until Run has
// returned.
func runAgent(t *testing.T, opts Options) (*Agent, func()) {
	t.Helper()
	a, err := New(opts)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		if err := a.Run(ctx); err != nil {
			t.Errorf("agent: %v", err)
		}
	}()
	var once sync.Once
	stop := func() { once.Do(func() { cancel(); <-done }) }
	t.Cleanup(stop)
	return a, stop
}

type testWriter struct{ t *testing.T }

func (w testWriter) Write(p []byte) (int, error) {
	w.t.Log(strings.TrimSpace(string(p)))
	return len(p), nil
}

func (h *harness) register(job *api.Job) {
	h.t.Helper()
	if _, err := h.sim.RegisterJob(context.Background(), job, false, 0); err != nil {
		h.t.Fatalf("registering %s: %v", *job.ID, err)
	}
}

// healthyChildren returns, per ordinal, the revision of children whose one
// running allocation is healthy.
func (h *harness) healthyChildren(set string) map[int]string {
	out := map[int]string{}
	stubs, _, _ := h.sim.ListJobs(context.Background(), "default")
	for _, s := range stubs {
		if s.Meta["statefulset_parent"] != set || s.Stop {
			continue
		}
		ord, _ := strconv.Atoi(s.Meta["statefulset_ordinal"])
		for _, a := range h.sim.Allocs("default", s.ID) {
			if a.ClientStatus == "running" && a.DeploymentStatus != nil && a.DeploymentStatus.Healthy != nil && *a.DeploymentStatus.Healthy {
				out[ord] = s.Meta["statefulset_revision"]
			}
		}
	}
	return out
}

func (h *harness) liveChildren(set string) int {
	n := 0
	stubs, _, _ := h.sim.ListJobs(context.Background(), "default")
	for _, s := range stubs {
		if s.Meta["statefulset_parent"] == set && !s.Stop {
			n++
		}
	}
	return n
}

// waitFor polls cond until it holds or the deadline passes; the message says
// what was awaited and what was last seen.
func (h *harness) waitFor(what string, timeout time.Duration, cond func() (bool, string)) {
	h.t.Helper()
	deadline := time.Now().Add(timeout)
	last := ""
	for time.Now().Before(deadline) {
		ok, seen := cond()
		if ok {
			return
		}
		last = seen
		time.Sleep(5 * time.Millisecond)
	}
	h.t.Fatalf("timed out after %v waiting for %s; last seen: %s", timeout, what, last)
}

func (h *harness) waitConverged(set string, replicas int, revision func(string) bool) {
	h.t.Helper()
	h.waitFor(fmt.Sprintf("%s to have %d healthy children", set, replicas), 20*time.Second, func() (bool, string) {
		hc := h.healthyChildren(set)
		if len(hc) != replicas || h.liveChildren(set) != replicas {
			return false, fmt.Sprintf("healthy=%v live=%d", hc, h.liveChildren(set))
		}
		for o, r := range hc {
			if o >= replicas || (revision != nil && !revision(r)) {
				return false, fmt.Sprintf("healthy=%v", hc)
			}
		}
		return true, ""
	})
}

func fastSim() nomadsim.NomadConfig {
	return nomadsim.NomadConfig{JSONPayloads: true, PlaceDelay: time.Millisecond, StartDelay: 2 * time.Millisecond, HealthyDelay: 3 * time.Millisecond, StopDelay: 2 * time.Millisecond}
}

func TestAgentOrderedLifecycleOnSimulatedNomad(t *testing.T) {
	h := startAgent(t, fastSim())
	h.register(parentJob("web", map[string]string{"statefulset_replicas": "3"}, "v1"))
	h.waitConverged("web", 3, nil)

	// Volumes were created per ordinal, before their children.
	vols := map[string]bool{}
	for _, v := range h.sim.HostVolumes() {
		vols[v.Name] = true
	}
	for i := 0; i < 3; i++ {
		if !vols["data-web-"+strconv.Itoa(i)] {
			t.Fatalf("volume data-web-%d missing; have %v", i, vols)
		}
	}

	// Scale up and down.
	job := h.sim.Job("default", "web")
	job.Meta["statefulset_replicas"] = "5"
	h.register(job)
	h.waitConverged("web", 5, nil)
	job = h.sim.Job("default", "web")
	job.Meta["statefulset_replicas"] = "2"
	h.register(job)
	h.waitConverged("web", 2, nil)

	// A template change rolls every pod to the new revision.
	before := h.healthyChildren("web")[0]
	job = h.sim.Job("default", "web")
	job.TaskGroups[0].Tasks[0].Config["args"] = []string{"-c", "v2"}
	h.register(job)
	h.waitConverged("web", 2, func(r string) bool { return r != before })

	if got := h.sim.MaxConcurrentAllocsPerJob(); got > 1 {
		t.Fatalf("an ordinal ran %d allocations at once", got)
	}
	revs, err := h.store.ListRevisions(context.Background(), backend.SetKey{Namespace: "default", Name: "web"})
	if err != nil || len(revs) != 2 {
		t.Fatalf("want 2 stored revisions, got %d (%v)", len(revs), err)
	}

	// Steady state makes no Nomad writes, not even when a re-list has the
	// agent reconcile every set again.
	h.waitFor("status to settle", 5*time.Second, func() (bool, string) {
		d, ok := h.agent.view(backend.SetKey{Namespace: "default", Name: "web"})
		return ok && d.Status.UpdatedReplicas == 2 && d.Status.ReadyReplicas == 2, fmt.Sprintf("%+v", d.Status)
	})
	h.settle() // the convergence's last writes are not the steady state's
	h.sim.ResetCalls()
	c := h.term()
	relists, passes := c.watcher().Relists(), reconciles(h.agent)
	c.watcher().RequestResync()
	h.waitFor("a resync", 5*time.Second, func() (bool, string) {
		return c.watcher().Relists() > relists, fmt.Sprint(h.sim.Calls())
	})
	h.settle()
	if reconciles(h.agent) == passes {
		t.Fatal("the re-list reconciled nothing: no writes would prove nothing")
	}
	if w := h.sim.Writes(); w != 0 {
		t.Fatalf("steady state made %d Nomad writes: %v", w, h.sim.Calls())
	}
}

func TestAgentHTTPAPI(t *testing.T) {
	h := startAgent(t, fastSim())
	h.register(parentJob("api", map[string]string{"statefulset_replicas": "2", "statefulset_pod_management_policy": "Parallel"}, "v1"))
	h.waitConverged("api", 2, nil)
	base := "http://" + h.agent.HTTPAddr()
	for _, path := range []string{"/v1/health", "/v1/metrics", "/v1/statefulsets", "/v1/statefulset/default/api"} {
		resp, err := http.Get(base + path)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != 200 {
			t.Fatalf("GET %s = %d", path, resp.StatusCode)
		}
	}
	resp, err := http.Get(base + "/v1/statefulset/default/nope")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 404 {
		t.Fatalf("unknown set: %d, want 404", resp.StatusCode)
	}
}

func TestAgentInvalidJobDoesNotBlockOthers(t *testing.T) {
	h := startAgent(t, fastSim())
	bad := parentJob("bad", map[string]string{"statefulset_replicas": "-1", "statefulset_partition": "x"}, "v1")
	h.register(bad)
	h.register(parentJob("good", map[string]string{"statefulset_replicas": "2"}, "v1"))
	h.waitConverged("good", 2, nil)
	key := backend.SetKey{Namespace: "default", Name: "bad"}
	h.waitFor("the invalid set's condition", 5*time.Second, func() (bool, string) {
		st, found, err := h.store.GetStatus(context.Background(), key)
		if err != nil || !found {
			return false, fmt.Sprint(err)
		}
		for _, c := range st.Conditions {
			if c.Type == reconciler.ConditionInvalidSpec && c.Status &&
				strings.Contains(c.Message, "statefulset_replicas") && strings.Contains(c.Message, "statefulset_partition") {
				return true, ""
			}
		}
		return false, fmt.Sprintf("%+v", st.Conditions)
	})
	h.settle() // every pass the two registrations led to, not just the first
	if n := h.liveChildren("bad"); n != 0 {
		t.Fatalf("an invalid set got %d children", n)
	}
	if d, _ := h.agent.view(key); !strings.Contains(d.Error, "statefulset_replicas") {
		t.Fatalf("the invalid set's view shows error %q; want the reason", d.Error)
	}

	// Once the job is fixed, the set converges and its view no longer
	// shows the old error.
	h.register(parentJob("bad", map[string]string{"statefulset_replicas": "1"}, "v2"))
	h.waitConverged("bad", 1, nil)
	h.waitFor("the fixed set's view to drop the error", 5*time.Second, func() (bool, string) {
		d, _ := h.agent.view(key)
		return d.Error == "" && d.Status.ReadyReplicas == 1, fmt.Sprintf("error %q status %+v", d.Error, d.Status)
	})
}

// A stopped parent's set is torn down by its retention policy; then the set
// is left alone: no reconcile runs until something changes, whether the
// stopped parent stays in Nomad or is purged afterwards. (A pass whose
// DeleteSetState found nothing to delete used to queue the set again at
// once: a hot loop of store reads, 28,809 reconciles in 300 ms.)
func TestAgentCascadingDelete(t *testing.T) {
	for _, policy := range []string{"Retain", "Delete"} {
		t.Run(policy, func(t *testing.T) {
			h := startAgentOnClock(t, fastSim(), newFakeClock(), nil)
			h.register(parentJob("db", map[string]string{"statefulset_replicas": "3", "statefulset_volume_retention_when_deleted": policy}, "v1"))
			h.waitConverged("db", 3, nil)
			if err := h.sim.DeregisterJob(context.Background(), "default", "db", false); err != nil {
				t.Fatal(err)
			}
			key := backend.SetKey{Namespace: "default", Name: "db"}
			h.waitFor("the cascade to finish", 20*time.Second, func() (bool, string) {
				revs, _ := h.store.ListRevisions(context.Background(), key)
				_, found, _ := h.store.GetStatus(context.Background(), key)
				return h.liveChildren("db") == 0 && len(revs) == 0 && !found, fmt.Sprintf("live=%d revisions=%d status=%v", h.liveChildren("db"), len(revs), found)
			})
			h.settle() // a later pass must not delete a retained volume either
			n := len(h.sim.HostVolumes())
			if policy == "Retain" && n != 3 {
				t.Fatalf("Retain kept %d volumes, want 3", n)
			}
			if policy == "Delete" && n != 0 {
				t.Fatalf("Delete left %d volumes", n)
			}
			h.assertIdle("stopped parent kept")
			if err := h.sim.DeregisterJob(context.Background(), "default", "db", true); err != nil {
				t.Fatal(err)
			}
			h.assertIdle("parent purged")
		})
	}
}

// assertIdle checks that, nothing changing, the agent stops reconciling: it
// settles (a set queued again at once never lets the queue go idle), and
// once every look it scheduled for later has come due, each was one pass
// and none scheduled another. Then no reconcile can run until Nomad
// changes. The agent must run on h.clock.
func (h *harness) assertIdle(when string) {
	h.t.Helper()
	h.settle()
	before, delayed := reconciles(h.agent), h.queue().Delayed()
	h.clock.Advance(time.Hour) // past any backoff, hold or requeue of these tests
	h.settle()
	if n := reconciles(h.agent) - before; n > uint64(len(delayed)) {
		h.t.Fatalf("%s: %d reconciles with nothing changing but %d delayed looks (%v) coming due", when, n, len(delayed), delayed)
	}
	if d := h.queue().Delayed(); len(d) != 0 {
		h.t.Fatalf("%s: with nothing changing the agent still schedules looks: %v", when, d)
	}
}

// counterTotal sums a counter series of the agent's metrics over its
// labels. Reading it makes no Nomad call.
func counterTotal(t *testing.T, a *Agent, name string) int {
	return counterWith(t, a, name, "", "")
}

// counterWith sums the agent's counter name over the series whose label
// has value; an empty label sums every series.
func counterWith(t *testing.T, a *Agent, name, label, value string) int {
	t.Helper()
	mfs, err := a.metrics.reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	total := 0.0
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		for _, m := range mf.GetMetric() {
			match := label == ""
			for _, l := range m.GetLabel() {
				match = match || (l.GetName() == label && l.GetValue() == value)
			}
			if match {
				total += m.GetCounter().GetValue()
			}
		}
	}
	return int(total)
}

// startSyncedAgent starts an agent and waits until it has listed Nomad and
// subscribed to its events, so that the calls it makes afterwards are those
// of the sets it is given.
func startSyncedAgent(t *testing.T) *harness {
	h := startAgent(t, fastSim())
	h.waitFor("the agent to list Nomad and watch its events", 5*time.Second, func() (bool, string) {
		c := h.agent.current.Load()
		return c != nil && c.cache().Synced() && h.sim.Calls()[nomad.VerbEvents] > 0, fmt.Sprint(h.sim.Calls())
	})
	return h
}

func TestAgentConvergesDespiteAFailureAtEveryCall(t *testing.T) {
	// Find how many calls a clean run takes, then fail each one in turn.
	const callsTotal = "nomad_statefulset_nomad_api_calls_total"
	clean := startSyncedAgent(t)
	before := counterTotal(t, clean.agent, callsTotal)
	clean.register(parentJob("f", map[string]string{"statefulset_replicas": "3"}, "v1"))
	clean.waitConverged("f", 3, nil)
	calls := counterTotal(t, clean.agent, callsTotal) - before
	clean.stop()
	if calls < 6 {
		t.Fatalf("a clean run took %d agent calls; want at least the 3 volumes and 3 children", calls)
	}

	var mu sync.Mutex
	failures := 0
	for n := 1; n <= calls; n++ {
		t.Run(fmt.Sprintf("call-%d", n), func(t *testing.T) {
			h := startSyncedAgent(t)
			// The fault is armed before the test's own register, which is
			// call 1, so it hits the agent's n-th call after it (arming it
			// after the register raced with the agent's first call). Nothing
			// here calls the simulator until the agent has met the fault:
			// the polling of waitConverged would otherwise take it instead.
			h.sim.FailCall(n+1, nomadsim.ServerError())
			h.register(parentJob("f", map[string]string{"statefulset_replicas": "3"}, "v1"))
			h.waitFor("the agent to meet the fault", 10*time.Second, func() (bool, string) {
				return counterTotal(t, h.agent, "nomad_statefulset_nomad_api_errors_total") > 0, fmt.Sprint(h.sim.Calls(), counterTotal(t, h.agent, callsTotal))
			})
			h.waitConverged("f", 3, nil)
			h.settle() // a duplicate made by a late retry counts too
			if got := h.sim.MaxConcurrentAllocsPerJob(); got > 1 {
				t.Fatalf("an ordinal ran %d allocations at once", got)
			}
			if got := len(h.sim.HostVolumes()); got != 3 {
				t.Fatalf("%d volumes, want exactly 3 (no duplicates, none lost)", got)
			}
			mu.Lock()
			failures++
			mu.Unlock()
		})
	}
	if failures != calls {
		t.Fatalf("only %d of %d fault runs converged", failures, calls)
	}
}

func TestAgentRecoversFromEventStreamGap(t *testing.T) {
	h := startAgent(t, fastSim())
	h.register(parentJob("gap", map[string]string{"statefulset_replicas": "2"}, "v1"))
	h.waitConverged("gap", 2, nil)
	relists := h.agent.current.Load().watcher().Relists()
	// Events are lost and then the stream breaks, as when Nomad drops a slow
	// subscriber: the watcher must re-list rather than trust its cache.
	h.sim.DropEvents(2)
	job := h.sim.Job("default", "gap")
	job.Meta["statefulset_replicas"] = "4"
	h.register(job)
	h.sim.CloseEventStreams(fmt.Errorf("connection reset"))
	h.waitConverged("gap", 4, nil)
	if h.agent.current.Load().watcher().Relists() <= relists {
		t.Fatal("the watcher did not re-list after the stream broke")
	}
}

// A pod that keeps failing is recreated at once after its first failure,
// as Kubernetes does, and then after a backoff of 1s doubling per failure.
// Time is the agent's fake clock, so the test sees exactly when each
// recreation comes: between two, with time stopped, the agent settles
// (without backoff it never would: the simulator saw hundreds of
// recreations a second) and nothing more is recreated, however slow the
// machine.
func TestAgentBacksOffACrashLoopAndRecovers(t *testing.T) {
	fc := newFakeClock()
	h := startAgentOnClock(t, fastSim(), fc, nil)
	var fixed atomic.Bool
	h.sim.SetBehavior(func(job *api.Job, group string) nomadsim.AllocBehavior {
		return nomadsim.AllocBehavior{FailOnStart: *job.ID == "crash-2" && !fixed.Load()}
	})
	h.register(parentJob("crash", map[string]string{"statefulset_replicas": "4"}, "v1"))
	failures := func() int { return len(h.sim.Allocs("default", "crash-2")) }
	for _, step := range []struct {
		advance  time.Duration
		failures int
		backoff  string
	}{
		{0, 2, "1s"}, // the first failure is recreated at once
		{time.Second - time.Millisecond, 2, "1s"},
		{time.Millisecond, 3, "2s"},
		{2*time.Second - time.Millisecond, 3, "2s"},
		{time.Millisecond, 4, "4s"},
	} {
		fc.Advance(step.advance)
		h.settle()
		at := fc.Now().Sub(h.term().termStart)
		if n := failures(); n != step.failures {
			t.Fatalf("at +%v crash-2 has failed %d times, want %d", at, n, step.failures)
		}
		c, ok := heldCondition(h.view("crash"))
		if !ok || c.Reason != "BackOff" || !strings.Contains(c.Message, "crash-2") || !strings.Contains(c.Message, "a backoff of "+step.backoff) {
			t.Fatalf("at +%v the view shows %+v, want crash-2 held for %s", at, c, step.backoff)
		}
		if h.sim.Job("default", "crash-3") != nil {
			t.Fatal("crash-3 was created while crash-2 was failing")
		}
	}
	fixed.Store(true)
	fc.Advance(4 * time.Second)
	h.waitConverged("crash", 4, nil)
}

// fakeHooks is a built-in lifecycle hook plugin that holds pre_delete until
// released and records every call. It runs through the agent's own plugin
// manager, as a configured hook block does.
type fakeHooks struct {
	mu       sync.Mutex
	released bool
	calls    []string
}

func (f *fakeHooks) PluginInfo(context.Context) (*plugin.Info, error) {
	return &plugin.Info{Name: "fake-hooks", Type: plugin.TypeLifecycleHook}, nil
}
func (f *fakeHooks) SetConfig(context.Context, map[string]string) error { return nil }
func (f *fakeHooks) answer(event plugin.Event, pod plugin.Pod) (*plugin.HookResponse, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.calls = append(f.calls, string(event)+" "+pod.Name)
	if event == plugin.EventPreDelete && !f.released {
		return plugin.Wait(20*time.Millisecond, "draining"), nil
	}
	return plugin.Done(), nil
}
func (f *fakeHooks) PreDelete(_ context.Context, p plugin.Pod) (*plugin.HookResponse, error) {
	return f.answer(plugin.EventPreDelete, p)
}
func (f *fakeHooks) PostReady(_ context.Context, p plugin.Pod) (*plugin.HookResponse, error) {
	return f.answer(plugin.EventPostReady, p)
}
func (f *fakeHooks) PreUpdate(_ context.Context, p plugin.Pod) (*plugin.HookResponse, error) {
	return f.answer(plugin.EventPreUpdate, p)
}

// withHooks runs hooks as the built-in plugin of a hook block "drain" on
// pre_delete and pre_update.
func withHooks(hooks plugin.LifecycleHook) func(*Options) {
	return func(o *Options) {
		cfg := config.Default()
		cfg.Plugins = append(cfg.Plugins, &config.PluginConfig{Name: "fake", Driver: "fake-hooks", Config: map[string]string{}})
		cfg.Hooks = append(cfg.Hooks, &config.HookConfig{Name: "drain", Plugin: "fake",
			Events: []plugin.Event{plugin.EventPreDelete, plugin.EventPreUpdate}, Timeout: 10 * time.Second, FailurePolicy: plugin.FailureBlock})
		o.Plugins = manager.ConfigOf(cfg)
		o.PluginBuiltins["fake-hooks"] = func(hclog.Logger) plugin.Base { return hooks }
	}
}

func (f *fakeHooks) seen() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]string(nil), f.calls...)
}

// The hook answers "wait 20ms"; on the agent's fake clock those 20ms pass
// only when the test says, so it sees each asking, and that none deletes.
func TestAgentLifecycleHooksHoldDeletionsUntilTheySayDone(t *testing.T) {
	hooks := &fakeHooks{}
	fc := newFakeClock()
	h := startAgentOnClock(t, fastSim(), fc, withHooks(hooks))
	h.register(parentJob("hk", map[string]string{"statefulset_replicas": "3"}, "v1"))
	h.waitConverged("hk", 3, nil)
	job := h.sim.Job("default", "hk")
	job.Meta["statefulset_replicas"] = "1"
	h.register(job)
	askedHk2 := func() int {
		n := 0
		for _, c := range hooks.seen() {
			if c == "pre_delete hk-2" {
				n++
			}
		}
		return n
	}
	// Every pass that reaches hk-2's deletion asks (how many events make a
	// pass is the simulator's business); the hook's retry makes one more.
	asked := 0
	for round := 0; round < 2; round++ {
		if round > 0 {
			fc.Advance(20 * time.Millisecond) // the hook's "ask again in 20ms"
		}
		h.settle()
		n := askedHk2()
		if n <= asked {
			t.Fatalf("round %d: the pre_delete hook was asked about hk-2 %d times in all, %d before: %v", round, n, asked, hooks.seen())
		}
		asked = n
		if n := h.liveChildren("hk"); n != 3 {
			t.Fatalf("a held pre_delete hook must keep hk-2: %d live children", n)
		}
		c, ok := heldCondition(h.view("hk"))
		if !ok || c.Reason != "HookWaiting" || !strings.Contains(c.Message, `hook "drain" (pre_delete) on pod hk-2 is waiting: draining`) {
			t.Fatalf("hk's view does not say why it is held: %+v", c)
		}
	}
	hooks.mu.Lock()
	hooks.released = true
	hooks.mu.Unlock()
	fc.Advance(20 * time.Millisecond)
	h.waitConverged("hk", 1, nil)
	h.waitFor("the Held condition to clear", 5*time.Second, func() (bool, string) {
		c, ok := heldCondition(h.view("hk"))
		return !ok, fmt.Sprintf("%+v", c)
	})

	// A rolling update asks pre_update, not pre_delete.
	job = h.sim.Job("default", "hk")
	job.TaskGroups[0].Tasks[0].Config["args"] = []string{"-c", "v2"}
	h.register(job)
	h.waitFor("pre_update for hk-0", 10*time.Second, func() (bool, string) {
		for _, c := range hooks.seen() {
			if c == "pre_update hk-0" {
				return true, ""
			}
		}
		return false, fmt.Sprint(hooks.seen())
	})
}

// TestAgentSaysAVolumeStartsEmpty is issue 20's volume delete: a kept volume
// deleted by hand while its ordinal is scaled away is created afresh before
// the child on scale-up (the watcher follows the HostVolume topic), and the
// set's events say that the pod starts on empty data.
func TestAgentSaysAVolumeStartsEmpty(t *testing.T) {
	h := startAgent(t, fastSim())
	h.register(parentJob("nv", map[string]string{"statefulset_replicas": "2"}, "v1"))
	h.waitConverged("nv", 2, nil)
	job := h.sim.Job("default", "nv")
	job.Meta["statefulset_replicas"] = "1"
	h.register(job)
	h.waitConverged("nv", 1, nil)
	vols, err := h.sim.ListHostVolumes(context.Background(), "default", "data-nv-1")
	if err != nil || len(vols) != 1 {
		t.Fatalf("kept volume: %v %v", vols, err)
	}
	// Nomad refuses while the stopped pod's allocation still holds it.
	h.waitFor("data-nv-1 to be deleted by hand", 5*time.Second, func() (bool, string) {
		err := h.sim.DeleteHostVolume(context.Background(), "default", vols[0].ID)
		return err == nil, fmt.Sprint(err)
	})
	job = h.sim.Job("default", "nv")
	job.Meta["statefulset_replicas"] = "2"
	h.register(job)
	h.waitConverged("nv", 2, nil)
	h.waitFor("an event saying data-nv-1 starts empty", 5*time.Second, func() (bool, string) {
		for _, e := range h.view("nv").Events {
			if e.Type == "NewVolume" && strings.Contains(e.Message, "data-nv-1") && strings.Contains(e.Message, "nv-1") {
				return true, ""
			}
		}
		return false, fmt.Sprint(h.view("nv").Events)
	})
}

// TestAgentMetricsCountItsOwnCallsOnly: the writes the agent makes are
// counted through its context's nomad.CallTrace, those of the built-in
// volume provisioner included, and a write someone else makes to the same
// Nomad (here the test's registration of the parent) is not. Reads are not
// compared: the test's polling reads the same Nomad.
func TestAgentMetricsCountItsOwnCallsOnly(t *testing.T) {
	h := startSyncedAgent(t)
	before := h.sim.Calls()
	h.register(parentJob("own", map[string]string{"statefulset_replicas": "3"}, "v1"))
	h.waitConverged("own", 3, nil)
	// Stopped, the agent has no call in flight: each it made is both in
	// Nomad's count and, once returned, in its metrics.
	h.stop()
	after := h.sim.Calls()
	for verb, v := range nomad.Verbs {
		if !v.Write {
			continue
		}
		want := after[verb] - before[verb]
		if verb == nomad.VerbRegisterJob {
			want-- // the test's registration of the parent
		}
		if got := counterWith(t, h.agent, "nomad_statefulset_nomad_api_calls_total", "verb", verb); got != want {
			t.Errorf("metrics count %d %s calls; the agent made %d (Nomad saw %d)", got, verb, want, after[verb]-before[verb])
		}
	}
	if got := counterWith(t, h.agent, "nomad_statefulset_nomad_api_calls_total", "verb", nomad.VerbCreateHostVolume); got != 3 {
		t.Errorf("metrics count %d volume creations by the built-in provisioner, want 3", got)
	}
}

// watcher is the term's watcher, for tests that count its re-lists.
func (c *controller) watcher() *nomad.Watcher { return c.term.(*nomad.Term).Watcher }

// cache is the term's cache, for tests that read what it holds.
func (c *controller) cache() *nomad.Cache { return c.term.(*nomad.Term).Cache }
