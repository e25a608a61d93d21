package agent

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/nomad/api"

	"github.com/nomad-statefulset/nomad-statefulset/backend"
	"github.com/nomad-statefulset/nomad-statefulset/backend/memory"
	"github.com/nomad-statefulset/nomad-statefulset/backend/nomad"
	"github.com/nomad-statefulset/nomad-statefulset/internal/nomadsim"
	"github.com/nomad-statefulset/nomad-statefulset/jobs"
	"github.com/nomad-statefulset/nomad-statefulset/reconciler"
)

// The tests in this file sync one set at a time on a controller whose
// effects, queue and clock are fakes: no Nomad, no goroutines, no real time.
// They are the agent's counterpart of the reconciler's step tests.

// fakeEffector records the actions it is asked to carry out. Revision and
// status actions go to a real in-memory store, so that the next pass sees
// them; pod and volume actions are only recorded. hold defers an action
// ("CreatePod 5") as a backoff or a hook would.
type fakeEffector struct {
	store backend.Store
	// mu guards calls: the actions of a group run at once.
	mu    sync.Mutex
	calls []string
	hold  map[string]*waitError
	// next, when set, carries the actions out for real after they are
	// recorded (a podControl over a simulated Nomad).
	next effector
}

func (f *fakeEffector) execute(ctx context.Context, p *pass, act reconciler.Action) outcome {
	name := fmt.Sprintf("%s %d", act.Type, act.Ordinal)
	f.mu.Lock()
	d := f.hold[name]
	if d == nil {
		f.calls = append(f.calls, name)
	}
	f.mu.Unlock()
	if d != nil {
		return done(d)
	}
	if f.next != nil {
		return f.next.execute(ctx, p, act)
	}
	switch act.Type {
	case reconciler.ActionCreateRevision, reconciler.ActionUpdateRevision:
		return done(f.store.PutRevision(ctx, p.key, act.Revision))
	case reconciler.ActionRecordOrdinals:
		st := p.prev
		st.Ordinals = act.Ordinals
		return done(f.store.PutStatus(ctx, p.key, st))
	case reconciler.ActionRecordStatus:
		return done(f.store.PutStatus(ctx, p.key, *act.Status))
	case reconciler.ActionDeleteSetState:
		o := done(f.store.DeleteSet(ctx, p.key))
		o.stateDeleted = o.Err == nil
		return o
	}
	return outcome{}
}

// recordingQueue records what the controller queues.
type recordingQueue struct {
	added []string
	after map[string]time.Duration
}

func (q *recordingQueue) Add(key string) { q.added = append(q.added, key) }
func (q *recordingQueue) AddAfter(key string, d time.Duration) {
	if q.after == nil {
		q.after = map[string]time.Duration{}
	}
	q.after[key] = d
}

// syncRig is a controller over a hand-filled cache.
type syncRig struct {
	c     *controller
	cache *nomad.Cache
	eff   *fakeEffector
	queue *recordingQueue
	now   time.Time
	key   backend.SetKey
	// resyncs counts the re-lists the controller asked for.
	resyncs int
}

func newSyncRig(t *testing.T, parent *api.Job) *syncRig {
	t.Helper()
	r := &syncRig{cache: nomad.NewCache(), queue: &recordingQueue{},
		now: time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC), key: backend.SetKey{Namespace: "default", Name: *parent.ID}}
	parent.Version, parent.JobModifyIndex, parent.ModifyIndex, parent.CreateIndex = ptr(uint64(0)), ptr(uint64(10)), ptr(uint64(10)), ptr(uint64(10))
	r.cache.Replace(nomad.Snapshot{Index: 10, Jobs: []*api.Job{parent}})
	store := memory.NewStore()
	r.eff = &fakeEffector{store: store, hold: map[string]*waitError{}}
	r.c = &controller{
		log: hclog.NewNullLogger(), store: store, term: &nomad.Term{Cache: r.cache}, render: jobs.RenderedDigest, queue: r.queue,
		expectTTL: time.Minute, clock: func() time.Time { return r.now },
		metrics: newMetrics(func() float64 { return 0 }), sets: newSetStates(nil), effector: r.eff,
		requestResync: func() { r.resyncs++ },
	}
	return r
}

// useNomad makes the rig's actions really happen against api (with no
// volume provisioner), as the agent's podControl carries them out.
func (r *syncRig) useNomad(api nomad.API) {
	r.eff.next = &podControl{log: hclog.NewNullLogger(), nomad: nomad.NewCluster(api), store: r.c.store, nodes: r.cache,
		clock: r.c.clock, expectTTL: r.c.expectTTL, event: r.c.sets.event, requestResync: r.c.requestResync}
}

// firstChild syncs once, so that the set's first revision is stored, and
// returns ordinal ord's child rendered from that revision as the daemon
// registers it.
func (r *syncRig) firstChild(t *testing.T, parent *api.Job, ord int) *api.Job {
	t.Helper()
	r.sync(t)
	return r.renderFirst(t, parent, ord)
}

// renderFirst renders ordinal ord's child from the set's one stored
// revision.
func (r *syncRig) renderFirst(t *testing.T, parent *api.Job, ord int) *api.Job {
	t.Helper()
	spec, err := jobs.Parse(parent)
	if err != nil {
		t.Fatal(err)
	}
	revs, err := r.c.store.ListRevisions(context.Background(), r.key)
	if err != nil || len(revs) != 1 {
		t.Fatalf("revisions %v, %v", revs, err)
	}
	child, err := jobs.RenderChild(spec, revs[0], ord)
	if err != nil {
		t.Fatal(err)
	}
	return child
}

// healthyAlloc is child's allocation "a0" on node n1, running and healthy
// for an hour, created at index create.
func (r *syncRig) healthyAlloc(child string, create uint64) *api.AllocationListStub {
	return &api.AllocationListStub{ID: "a0", Namespace: "default", JobID: child, NodeID: "n1",
		ClientStatus: "running", DesiredStatus: "run", CreateIndex: create, ModifyIndex: create + 1,
		DeploymentStatus: &api.AllocDeploymentStatus{Healthy: ptr(true), Timestamp: r.now.Add(-time.Hour)},
		TaskStates:       map[string]*api.TaskState{"app": {State: "running", StartedAt: r.now.Add(-time.Hour)}}}
}

func (r *syncRig) sync(t *testing.T) {
	t.Helper()
	r.eff.calls, r.queue.added, r.queue.after = nil, nil, nil
	if err := r.c.sync(context.Background(), r.key); err != nil {
		t.Fatalf("sync: %v", err)
	}
}

// TestHeldStepHoldsOnlyItsOrdinal is issue 17's first defect: under
// Parallel a scale-up emits CreatePod for every new ordinal in one pass, and
// one of them in crash-loop backoff used to hold all the others for up to
// the backoff's maximum (5 minutes). The agent runs a prefix of the
// decision: the pass stops after the group in which the step was held, and
// the set is queued again at once; the next decision, with the wait in the
// set's memory, creates every other ordinal and holds only the one.
func TestHeldStepHoldsOnlyItsOrdinal(t *testing.T) {
	r := newSyncRig(t, parentJob("web", map[string]string{
		"statefulset_replicas": "10", "statefulset_pod_management_policy": "Parallel"}, "v1"))
	r.eff.hold["CreatePod 5"] = &waitError{reason: reconciler.HoldPluginUnavailable, msg: "the plugin is down"}
	r.sync(t)
	if slices.Contains(r.eff.calls, "CreatePod 9") && slices.Contains(r.eff.calls, "CreatePod 8") {
		// 1, 2, 4, then 3: 5 is in the fourth group with 3 others only if
		// the prefix went on past the group with the wait.
		t.Fatalf("the pass went on past the held group: %v", r.eff.calls)
	}
	first := slices.Clone(r.eff.calls)
	if len(r.queue.added) == 0 {
		t.Fatal("a held pass did not queue the set again at once")
	}
	r.sync(t)
	calls := append(first, r.eff.calls...)
	for o := 0; o < 10; o++ {
		want := fmt.Sprintf("CreatePod %d", o)
		if got := slices.Contains(calls, want); got != (o != 5) {
			t.Errorf("%s carried out: %v, want %v (%v)", want, got, o != 5, calls)
		}
		if !slices.Contains(calls, fmt.Sprintf("CreateVolume %d", o)) {
			t.Errorf("CreateVolume %d not carried out: it comes before the held step", o)
		}
	}
	d, ok := r.c.sets.get(r.key)
	if !ok {
		t.Fatal("no view of the set")
	}
	held := false
	for _, c := range d.Status.Conditions {
		held = held || (string(c.Type) == string(ConditionHeld) && c.Reason == reconciler.HoldPluginUnavailable && strings.Contains(c.Message, "web-5"))
	}
	if !held {
		t.Fatalf("the view does not show web-5 held: %+v", d.Status.Conditions)
	}
	if len(r.queue.added) == 0 {
		t.Fatal("the set was not queued again after acting")
	}
	// The wait is an input from now on: the reconciler itself keeps the
	// held ordinal's creation back and says so, with no call to the
	// effector, until the wait ends.
	delete(r.eff.hold, "CreatePod 5")
	r.now = r.now.Add(reconciler.PluginRetry - time.Second)
	r.sync(t)
	if slices.Contains(r.eff.calls, "CreatePod 5") {
		t.Fatalf("CreatePod 5 carried out while its hold is in force: %v", r.eff.calls)
	}
	r.now = r.now.Add(time.Second)
	r.sync(t)
	if !slices.Contains(r.eff.calls, "CreatePod 5") {
		t.Fatalf("CreatePod 5 not carried out once its hold ended: %v", r.eff.calls)
	}
}

// TestHeldPassKeepsTheDecisionsRequeue: a pass whose only step is held used
// to queue the set again after the hold's wait alone, dropping the
// reconciler's own requeue (here the progress deadline, 10 minutes, against
// a hook that says "ask again in an hour").
func TestHeldPassKeepsTheDecisionsRequeue(t *testing.T) {
	r := newSyncRig(t, parentJob("web", map[string]string{"statefulset_replicas": "1", "statefulset_volume_claims": ""}, "v1"))
	r.eff.hold["CreatePod 0"] = &waitError{reason: reconciler.HoldPluginUnavailable, msg: "the plugin holds web-0"}
	r.sync(t) // stores the revision; CreatePod 0 is held
	r.sync(t) // only the held step is left, and the status it leads to
	if !slices.Equal(r.eff.calls, []string{"RecordStatus 0"}) {
		t.Fatalf("second pass carried out %v, want only the status write", r.eff.calls)
	}
	got, ok := r.queue.after[r.key.String()]
	if !ok || got <= 0 || got > 10*time.Minute {
		t.Fatalf("queued again after %v (queued: %v), want the progress deadline's 10m at most", got, ok)
	}
}

// TestExpectationsGateThePass: after a write, the set is not decided again
// until the write is observed; once the expectation's time to live passes
// unobserved, the cache is distrusted (a re-list is asked for) rather than
// acted on, whether or not any event comes to wake the set.
func TestExpectationsGateThePass(t *testing.T) {
	r := newSyncRig(t, parentJob("web", map[string]string{"statefulset_replicas": "1", "statefulset_volume_claims": ""}, "v1"))
	r.c.sets.of(r.key).expectWrite("child web-0 registered", r.now, r.c.expectTTL, func(o nomad.Observation) bool { return len(o.Pods) > 0 })
	r.sync(t)
	if len(r.eff.calls) != 0 {
		t.Fatalf("acted while its own write was not observed: %v", r.eff.calls)
	}
	// No event may ever come for a write whose event Nomad dropped: the
	// set is queued again for just after the expectation expires.
	if got := r.queue.after[r.key.String()]; got <= r.c.expectTTL || got > r.c.expectTTL+time.Second {
		t.Fatalf("a set waiting for its write is queued again after %v, want just past the %v time to live", got, r.c.expectTTL)
	}
	r.now = r.now.Add(2 * time.Minute)
	r.sync(t)
	if len(r.eff.calls) != 0 {
		t.Fatalf("acted on a cache it distrusts: %v", r.eff.calls)
	}
	if r.resyncs != 1 {
		t.Fatalf("an expired expectation asked for %d re-lists, want 1", r.resyncs)
	}
	// The re-list would clear the stale expectation with the set forgotten
	// or observed; forgetting the set drops it.
	r.c.forget(r.key)
	r.sync(t)
	if !slices.Contains(r.eff.calls, "CreatePod 0") {
		t.Fatalf("after the set was forgotten its decision was still gated: %v", r.eff.calls)
	}
}

// TestForgetDropsAllPerSetState: a set that is gone leaves nothing behind,
// and another set keeps all of its own. Everything kept per set lives in
// its setState, so forgetting is one delete; the test shows that the
// state is really gone (a set seen again starts afresh) and that the
// other set's is untouched.
func TestForgetDropsAllPerSetState(t *testing.T) {
	r := newSyncRig(t, parentJob("web", map[string]string{"statefulset_replicas": "1", "statefulset_volume_claims": ""}, "v1"))
	r.sync(t)
	fill := func(st *setState) {
		st.memory = reconciler.Memory{Crashes: map[int]reconciler.CrashRecord{0: {Count: 2, Last: r.now}},
			PostReady: map[string]reconciler.PostReadyAnswer{"alloc-1": {Done: true}},
			Holds:     []reconciler.Hold{{Ordinal: 0, Step: reconciler.StepDisrupt, Until: r.now.Add(time.Hour)}}}
		st.expectWrite("x", r.now, time.Minute, func(nomad.Observation) bool { return false })
		st.child("web-0").own = 7
	}
	fill(r.c.sets.of(r.key))
	other := backend.SetKey{Namespace: "default", Name: "web2"}
	fill(r.c.sets.of(other))
	r.c.forget(r.key)
	if _, ok := r.c.sets.peek(r.key); ok {
		t.Fatal("the set's state is left")
	}
	if _, ok := r.c.sets.get(r.key); ok {
		t.Fatal("view left")
	}
	fresh := r.c.sets.of(r.key)
	if fresh.spec != nil || len(fresh.memory.Crashes)+len(fresh.expect)+len(fresh.memory.PostReady)+len(fresh.memory.Holds)+len(fresh.children) != 0 {
		t.Fatalf("a set seen again does not start afresh: %+v", fresh)
	}
	kept, ok := r.c.sets.peek(other)
	if !ok || kept.memory.Crashes[0].Count != 2 || len(kept.expect) != 1 || len(kept.memory.PostReady) != 1 || len(kept.memory.Holds) != 1 || kept.children["web-0"].own != 7 {
		t.Fatalf("forgetting web touched web2's state: %+v", kept)
	}
}

// oneTermElector leads once, until end is closed, then stays a follower.
type oneTermElector struct {
	end    chan struct{}
	ended  chan struct{}
	leader atomic.Bool
}

func (e *oneTermElector) Run(ctx context.Context, lead func(context.Context) error) error {
	term, cancel := context.WithCancel(ctx)
	e.leader.Store(true)
	go func() {
		select {
		case <-e.end:
		case <-ctx.Done():
		}
		cancel()
	}()
	err := lead(term)
	e.leader.Store(false)
	close(e.ended)
	<-ctx.Done()
	return err
}

func (e *oneTermElector) IsLeader() bool { return e.leader.Load() }

// TestFormerLeaderServesNoStatus: the views used to outlive a leadership
// term, so a former leader kept serving a status frozen at the moment it
// lost the lock. Once the term ends, the agent shows no set.
func TestFormerLeaderServesNoStatus(t *testing.T) {
	sim := nomadsim.NewNomad(fastSim())
	defer sim.Close()
	el := &oneTermElector{end: make(chan struct{}), ended: make(chan struct{})}
	opts := testOptions(t, sim, memory.NewStore())
	opts.Elector = el
	a, stop := runAgent(t, opts)
	defer stop()
	h := &harness{t: t, sim: sim, agent: a}
	h.register(parentJob("web", map[string]string{"statefulset_replicas": "1"}, "v1"))
	h.waitFor("the leader to show the set", 30*time.Second, func() (bool, string) {
		_, ok := a.view(backend.SetKey{Namespace: "default", Name: "web"})
		return ok, "no view yet"
	})
	close(el.end)
	<-el.ended
	if sets := a.viewList(); len(sets.Sets) != 0 {
		t.Fatalf("a former leader still shows %d sets", len(sets.Sets))
	}
}

// TestBlockedChildIsEvaluatedWhenItsNodeIsBack is issue 14's "one ordinal
// never came back": a child registered while the node of its volume was
// ineligible (a drain) has no allocation; Nomad does not place it when the
// node is eligible again. The daemon asks Nomad to evaluate it, once per
// such node change, reacting to the node's state, not to a timer.
func TestBlockedChildIsEvaluatedWhenItsNodeIsBack(t *testing.T) {
	parent := parentJob("web", map[string]string{"statefulset_replicas": "1"}, "v1")
	r := newSyncRig(t, parent)
	sim := nomadsim.NewNomad(fastSim())
	t.Cleanup(sim.Close)
	child := r.firstChild(t, parent, 0)
	r.useNomad(sim)
	child.Version, child.JobModifyIndex, child.ModifyIndex, child.CreateIndex = ptr(uint64(0)), ptr(uint64(20)), ptr(uint64(20)), ptr(uint64(20))
	vol := &api.HostVolumeStub{Namespace: "default", ID: "vol-0", Name: "data-web-0", NodeID: "n1", State: api.HostVolumeStateReady}
	node := func(eligibility string, modify uint64) *api.NodeListStub {
		return &api.NodeListStub{ID: "n1", Status: api.NodeStatusReady, SchedulingEligibility: eligibility, ModifyIndex: modify}
	}
	relist := func(n *api.NodeListStub) {
		r.cache.Replace(nomad.Snapshot{Index: 60, Jobs: []*api.Job{parent, child}, Volumes: []*api.HostVolumeStub{vol}, Nodes: []*api.NodeListStub{n}})
	}
	evals := func() int { return sim.Calls()[nomad.VerbEvaluateJob] }

	// The node is still ineligible: nothing to ask.
	relist(node(api.NodeSchedulingIneligible, 10))
	r.sync(t)
	if n := evals(); n != 0 {
		t.Fatalf("%d evaluations while the node is ineligible", n)
	}
	// The node became eligible after the child was registered: ask once.
	relist(node(api.NodeSchedulingEligible, 50))
	r.sync(t)
	r.sync(t)
	if n := evals(); n != 1 {
		t.Fatalf("%d evaluations once the node is back, want 1", n)
	}
	// A node that was fine before the child was registered says nothing
	// about a blocked placement: no evaluation for it.
	r2 := newSyncRig(t, parentJob("web", map[string]string{"statefulset_replicas": "1"}, "v1"))
	r2.sync(t)
	r2.useNomad(sim)
	r2.cache.Replace(nomad.Snapshot{Index: 60, Jobs: []*api.Job{parent, child}, Volumes: []*api.HostVolumeStub{vol},
		Nodes: []*api.NodeListStub{node(api.NodeSchedulingEligible, 5)}})
	r2.sync(t)
	if n := evals(); n != 1 {
		t.Fatalf("%d evaluations in all, want still 1", n)
	}
}

// TestHeldPassRecordsItsNewPods: a pass that stops early (a step held)
// writes no status, so the revisions of the pods it created are recorded
// on their own (reconciler.RecordsAfter) before the set is decided again:
// a child purged while no leader watched must not come back at an older
// revision than it ran.
func TestHeldPassRecordsItsNewPods(t *testing.T) {
	r := newSyncRig(t, parentJob("web", map[string]string{
		"statefulset_replicas": "3", "statefulset_pod_management_policy": "Parallel", "statefulset_volume_claims": ""}, "v1"))
	r.eff.hold["CreatePod 2"] = &waitError{reason: reconciler.HoldPluginUnavailable, msg: "the plugin is down"}
	r.sync(t)
	st, found, err := r.c.store.GetStatus(context.Background(), r.key)
	if err != nil || !found {
		t.Fatalf("status: %v %v", found, err)
	}
	revs, _ := r.c.store.ListRevisions(context.Background(), r.key)
	if len(revs) != 1 {
		t.Fatalf("revisions %v", revs)
	}
	got := map[int]string{}
	for _, rec := range st.Ordinals {
		got[rec.Ordinal] = rec.Revision
	}
	for o := 0; o < 3; o++ {
		created := slices.Contains(r.eff.calls, fmt.Sprintf("CreatePod %d", o))
		if want := map[bool]string{true: revs[0].Name}[created]; got[o] != want {
			t.Errorf("ordinal %d (created %v) recorded at %q, want %q (records %+v)", o, created, got[o], want, st.Ordinals)
		}
	}
}
