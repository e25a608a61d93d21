package nomad_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"maps"
	"net/http/httptest"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/nomad/api"

	"github.com/nomad-statefulset/nomad-statefulset/backend"
	"github.com/nomad-statefulset/nomad-statefulset/backend/nomad"
	"github.com/nomad-statefulset/nomad-statefulset/internal/nomadsim"
	"github.com/nomad-statefulset/nomad-statefulset/jobs"
	"github.com/nomad-statefulset/nomad-statefulset/reconciler"
)

func ptr[T any](v T) *T { return &v }

func child(rev string) *api.Job {
	return &api.Job{
		ID: ptr("web-0"), Namespace: ptr("default"), Type: ptr("service"), Datacenters: []string{"*"},
		Meta: map[string]string{"statefulset_parent": "web", "statefulset_ordinal": "0", "statefulset_revision": rev},
		TaskGroups: []*api.TaskGroup{{
			Name: ptr("app"), Count: ptr(1),
			Update:           &api.UpdateStrategy{MaxParallel: ptr(1)},
			ReschedulePolicy: &api.ReschedulePolicy{Attempts: ptr(0), Unlimited: ptr(false)},
			Disconnect:       &api.DisconnectStrategy{StopOnClientAfter: ptr(time.Minute), Replace: ptr(false)},
			Tasks:            []*api.Task{{Name: "app", Driver: "exec", Config: map[string]any{"command": rev}}},
		}},
	}
}

func waitPod(t *testing.T, c *nomad.Cache, what string, ok func(nomad.Observation) bool) {
	t.Helper()
	key := backend.SetKey{Namespace: "default", Name: "web"}
	deadline := time.Now().Add(10 * time.Second)
	var obs nomad.Observation
	for time.Now().Before(deadline) {
		obs = c.Observe(key, nil, time.Now())
		if ok(obs) {
			return
		}
		time.Sleep(2 * time.Millisecond)
	}
	t.Fatalf("timed out waiting for %s; pods %+v stopped %+v", what, obs.Pods, obs.Stopped)
}

// TestWatcherFollowsAChildThroughStopAndReRegister drives a child through
// the cycle a rolling update makes, on the simulated Nomad, and checks what
// the cache shows at each step.
func TestWatcherFollowsAChildThroughStopAndReRegister(t *testing.T) {
	sim := nomadsim.NewNomad(nomadsim.NomadConfig{JSONPayloads: true, PlaceDelay: time.Millisecond, StartDelay: time.Millisecond, HealthyDelay: time.Millisecond, StopDelay: time.Millisecond})
	defer sim.Close()
	cache := nomad.NewCache()
	w := nomad.NewWatcher(sim, cache, nomad.WatcherConfig{}, hclog.NewNullLogger(), func(backend.SetKey) {})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() { _ = w.Run(ctx) }()

	if _, err := sim.RegisterJob(ctx, child("r1"), true, 0); err != nil {
		t.Fatal(err)
	}
	waitPod(t, cache, "r1 ready", func(o nomad.Observation) bool {
		return len(o.Pods) == 1 && o.Pods[0].Pod.Ready && o.Pods[0].Pod.Revision == "r1"
	})
	// Event payloads are JSON with Go field names: decoded with the api's
	// mapstructure helpers these settings came out nil, so every child
	// looked hand-edited and was recreated forever on a real cluster.
	g := cache.Observe(backend.SetKey{Namespace: "default", Name: "web"}, nil, time.Now()).Pods[0].Job.(*jobs.ChildRecord).Job().TaskGroups[0]
	if g.Update == nil || g.Update.MaxParallel == nil || *g.Update.MaxParallel != 1 ||
		g.Disconnect == nil || g.Disconnect.StopOnClientAfter == nil || *g.Disconnect.StopOnClientAfter != time.Minute ||
		g.ReschedulePolicy == nil || g.ReschedulePolicy.Attempts == nil {
		t.Fatalf("the cached child lost fields in event decoding: update %+v disconnect %+v reschedule %+v", g.Update, g.Disconnect, g.ReschedulePolicy)
	}
	if err := sim.DeregisterJob(ctx, "default", "web-0", false); err != nil {
		t.Fatal(err)
	}
	waitPod(t, cache, "the stopped child to be gone", func(o nomad.Observation) bool {
		return len(o.Pods) == 0 && len(o.Stopped) == 1
	})
	obs := cache.Observe(backend.SetKey{Namespace: "default", Name: "web"}, nil, time.Now())
	if _, err := sim.RegisterJob(ctx, child("r2"), true, obs.Stopped[0].JobModifyIndex); err != nil {
		t.Fatal(err)
	}
	waitPod(t, cache, "r2 ready", func(o nomad.Observation) bool {
		if len(o.Pods) != 1 {
			return false
		}
		p := o.Pods[0]
		if p.Pod.Phase == "Succeeded" {
			t.Errorf("the re-registered child read as Succeeded from its old allocation: %+v", p)
		}
		return p.Pod.Ready && p.Pod.Revision == "r2"
	})
	if n := sim.MaxConcurrentAllocsPerJob(); n > 1 {
		t.Fatalf("%d allocations ran at once", n)
	}
}

// childOf is child for ordinal ord of set.
func childOf(set string, ord int, rev string) *api.Job {
	j := child(rev)
	j.ID = ptr(fmt.Sprintf("%s-%d", set, ord))
	j.Meta = map[string]string{"statefulset_parent": set, "statefulset_ordinal": strconv.Itoa(ord), "statefulset_revision": rev}
	return j
}

// parentOf is a managed parent job with no allocations of its own.
func parentOf(set string) *api.Job {
	j := child("p")
	j.ID = ptr(set)
	j.Meta = map[string]string{"statefulset": "true"}
	j.TaskGroups[0].Count = ptr(0)
	return j
}

// watchWorld starts a watcher over a simulated Nomad holding sets × 3
// healthy children, and waits until the cache shows them all ready.
func watchWorld(t *testing.T, sets int) (*nomadsim.Nomad, *nomad.Cache, *nomad.Watcher) {
	t.Helper()
	sim := nomadsim.NewNomad(nomadsim.NomadConfig{Manual: true, JSONPayloads: true})
	t.Cleanup(sim.Close)
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	for s := 0; s < sets; s++ {
		set := fmt.Sprintf("set%03d", s)
		if _, err := sim.RegisterJob(ctx, parentOf(set), false, 0); err != nil {
			t.Fatal(err)
		}
		for o := 0; o < 3; o++ {
			if _, err := sim.RegisterJob(ctx, childOf(set, o, "r1"), false, 0); err != nil {
				t.Fatal(err)
			}
		}
	}
	sim.Settle()
	cache := nomad.NewCache()
	w := nomad.NewWatcher(sim, cache, nomad.WatcherConfig{ResyncInterval: time.Hour}, hclog.NewNullLogger(), func(backend.SetKey) {})
	go func() { _ = w.Run(ctx) }()
	waitFor(t, "every pod ready in the cache", func() bool {
		for s := 0; s < sets; s++ {
			obs := cache.Observe(backend.SetKey{Namespace: "default", Name: fmt.Sprintf("set%03d", s)}, nil, sim.Now())
			if obs.Parent == nil || len(obs.Pods) != 3 {
				return false
			}
			for _, p := range obs.Pods {
				if !p.Pod.Ready {
					return false
				}
			}
		}
		return true
	})
	return sim, cache, w
}

func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(time.Millisecond)
	}
}

// resync forces a re-list and returns the Nomad calls it made, once the
// watcher has subscribed to the stream again. It first waits for the
// watcher's current subscription: the cache is filled before the watcher
// subscribes, so an Events call still to come would otherwise be counted
// with the re-list's and the count of one would never be seen.
func resync(t *testing.T, sim *nomadsim.Nomad, w *nomad.Watcher) map[string]int {
	t.Helper()
	waitFor(t, "the watcher's subscription", func() bool { return sim.Calls()[nomad.VerbEvents] > 0 })
	sim.ResetCalls()
	before := w.Relists()
	w.RequestResync()
	waitFor(t, "the re-list and the new subscription", func() bool {
		return w.Relists() > before && sim.Calls()[nomad.VerbEvents] == 1
	})
	return sim.Calls()
}

// TestSteadyStateRelistMakesConstantCalls: a re-list of an unchanged
// cluster reads no job and no per-job allocation list: the same handful of
// calls for 2 sets as for 40. The first list, with an empty cache, reads
// every managed job.
func TestSteadyStateRelistMakesConstantCalls(t *testing.T) {
	var got []map[string]int
	for _, sets := range []int{2, 40} {
		sim, _, w := watchWorld(t, sets)
		calls := resync(t, sim, w)
		want := map[string]int{nomad.VerbListJobs: 1, nomad.VerbListAllocations: 1, nomad.VerbListHostVolumes: 1, nomad.VerbListNodes: 1, nomad.VerbEvents: 1}
		for verb, n := range calls {
			if want[verb] != n {
				t.Errorf("%d sets: a steady-state re-list made %d %s calls, want %d (all calls: %v)", sets, n, verb, want[verb], calls)
			}
		}
		got = append(got, calls)
	}
	t.Logf("re-list calls: 2 sets %v, 40 sets %v", got[0], got[1])

	// A cold list reads each managed job once: 2 parents and 6 children.
	sim, _, _ := watchWorld(t, 2)
	cache := nomad.NewCache()
	sim.ResetCalls()
	w := nomad.NewWatcher(sim, cache, nomad.WatcherConfig{ResyncInterval: time.Hour}, hclog.NewNullLogger(), func(backend.SetKey) {})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() { _ = w.Run(ctx) }()
	waitFor(t, "the first list", func() bool { return cache.Synced() })
	if n := sim.Calls()[nomad.VerbGetJob]; n != 8 {
		t.Fatalf("a cold list read %d jobs, want 8", n)
	}
}

// TestRelistReadsEachVolumeClassOnce: a listing's volume stubs carry no
// parameters, so the re-list reads the volumes of sets whose class the
// cache does not know, once each, and none of other names; events keep
// the classes known after that.
func TestRelistReadsEachVolumeClassOnce(t *testing.T) {
	sim, cache, w := watchWorld(t, 2)
	ctx := context.Background()
	sim.PauseEvents()
	for _, v := range []*api.HostVolume{
		{Name: "data-set000-0", PluginID: "lvm", Parameters: map[string]string{nomad.ClassParameter: "fast"},
			RequestedCapacityMinBytes: 1 << 30, RequestedCapacityMaxBytes: 1 << 30},
		{Name: "data-set000-1"},
		{Name: "scratch-nobody-0"},
		{Name: "data-set00-0"},
	} {
		if _, err := sim.CreateHostVolume(ctx, v); err != nil {
			t.Fatal(err)
		}
	}
	calls := resync(t, sim, w)
	if n := calls[nomad.VerbGetHostVolume]; n != 2 {
		t.Fatalf("the re-list read %d volumes, want the 2 of set000 (calls %v)", n, calls)
	}
	sim.ResumeEvents()
	obs := cache.Observe(backend.SetKey{Namespace: "default", Name: "set000"}, []string{"data"}, sim.Now())
	if len(obs.Volumes) != 2 || obs.Volumes[0].Volume.Class != "fast" || obs.Volumes[0].Volume.Capacity != 1<<30 ||
		obs.Volumes[1].Volume.Class != "" {
		t.Fatalf("observed volumes %+v", obs.Volumes)
	}
	if calls := resync(t, sim, w); calls[nomad.VerbGetHostVolume] != 0 {
		t.Fatalf("a second re-list read %d volumes again", calls[nomad.VerbGetHostVolume])
	}
	// A volume made while the stream runs is known from its event.
	if _, err := sim.CreateHostVolume(ctx, &api.HostVolume{Name: "data-set001-0", PluginID: "lvm",
		Parameters: map[string]string{nomad.ClassParameter: "slow"}}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the volume's event", func() bool {
		obs := cache.Observe(backend.SetKey{Namespace: "default", Name: "set001"}, []string{"data"}, sim.Now())
		return len(obs.Volumes) == 1 && obs.Volumes[0].Volume.Class == "slow"
	})
	if calls := resync(t, sim, w); calls[nomad.VerbGetHostVolume] != 0 {
		t.Fatalf("a re-list read %d volumes whose class an event gave", calls[nomad.VerbGetHostVolume])
	}
}

// TestRelistRereadsOnlyChangedJobs: a job that changed while its events
// were missed is read again by the re-list, and only that one, and the cache
// shows the change without any event.
func TestRelistRereadsOnlyChangedJobs(t *testing.T) {
	sim, cache, w := watchWorld(t, 5)
	sim.PauseEvents()
	defer sim.ResumeEvents()
	if _, err := sim.RegisterJob(context.Background(), childOf("set002", 1, "r2"), false, 0); err != nil {
		t.Fatal(err)
	}
	sim.Settle()
	calls := resync(t, sim, w)
	if calls[nomad.VerbGetJob] != 1 {
		t.Fatalf("the re-list read %d jobs, want only the changed one (calls %v)", calls[nomad.VerbGetJob], calls)
	}
	obs := cache.Observe(backend.SetKey{Namespace: "default", Name: "set002"}, nil, sim.Now())
	revs := map[int]string{}
	for _, p := range obs.Pods {
		revs[p.Pod.Ordinal] = p.Pod.Revision
	}
	if revs[0] != "r1" || revs[1] != "r2" || revs[2] != "r1" {
		t.Fatalf("revisions after the re-list: %v, want ordinal 1 at r2", revs)
	}
	// Drift detection still sees the whole of what it compares.
	g := obs.Pods[1].Job.(*jobs.ChildRecord).Job().TaskGroups[0]
	if g.Update == nil || g.Update.MaxParallel == nil || g.Disconnect == nil || g.Disconnect.StopOnClientAfter == nil ||
		g.ReschedulePolicy == nil || g.ReschedulePolicy.Attempts == nil {
		t.Fatalf("the re-read child lost fields: %+v", g)
	}
}

// TestRelistKeepsChildrenWhoseStatusAloneMoved: while the stream is lost a
// child's allocation fails, which moves its job's status and ModifyIndex
// but not its spec (JobModifyIndex), and another child is registered again
// at a new revision. The re-list reads only the second: the listing already
// says all that changed of the first. The kept child is brought up to the
// listing, so that the events after it apply to it, and the failure shows.
func TestRelistKeepsChildrenWhoseStatusAloneMoved(t *testing.T) {
	sim, cache, w := watchWorld(t, 5)
	ctx := context.Background()
	key := backend.SetKey{Namespace: "default", Name: "set001"}
	obs := cache.Observe(key, nil, sim.Now())
	failed := obs.Pods[0]
	before := sim.Job("default", failed.JobID)
	sim.PauseEvents()
	if err := sim.FailAlloc(failed.AllocID); err != nil {
		t.Fatal(err)
	}
	if _, err := sim.RegisterJob(ctx, childOf("set002", 1, "r2"), false, 0); err != nil {
		t.Fatal(err)
	}
	sim.Settle()
	after := sim.Job("default", failed.JobID)
	if *after.ModifyIndex == *before.ModifyIndex || *after.JobModifyIndex != *before.JobModifyIndex {
		t.Fatalf("the failed child's job: ModifyIndex %d → %d, JobModifyIndex %d → %d; want only ModifyIndex moved",
			*before.ModifyIndex, *after.ModifyIndex, *before.JobModifyIndex, *after.JobModifyIndex)
	}
	calls := resync(t, sim, w)
	sim.ResumeEvents()
	if calls[nomad.VerbGetJob] != 1 {
		t.Fatalf("the re-list read %d jobs, want only the one registered again (calls %v)", calls[nomad.VerbGetJob], calls)
	}
	obs = cache.Observe(key, nil, sim.Now())
	rec := obs.Pods[0].Job.(*jobs.ChildRecord)
	if obs.Pods[0].Pod.Phase != reconciler.PhaseFailed || rec.ModifyIndex() != *after.ModifyIndex ||
		*rec.Job().Status != *after.Status || !rec.Digest().Equal(failed.Digest) {
		t.Fatalf("the kept child: phase %s, ModifyIndex %d (Nomad's %d), status %s (Nomad's %s), digest kept %v",
			obs.Pods[0].Pod.Phase, rec.ModifyIndex(), *after.ModifyIndex, *rec.Job().Status, *after.Status, rec.Digest().Equal(failed.Digest))
	}
	revs := map[int]string{}
	for _, p := range cache.Observe(backend.SetKey{Namespace: "default", Name: "set002"}, nil, sim.Now()).Pods {
		revs[p.Pod.Ordinal] = p.Pod.Revision
	}
	if revs[1] != "r2" {
		t.Fatalf("revisions of set002 after the re-list: %v, want ordinal 1 at r2", revs)
	}
	// The stream goes on from the listing: the kept child's next change
	// (registered again) is applied to it.
	if _, err := sim.RegisterJob(ctx, childOf("set001", failed.Pod.Ordinal, "r3"), false, 0); err != nil {
		t.Fatal(err)
	}
	sim.Settle()
	waitFor(t, "the kept child's next event", func() bool {
		for _, p := range cache.Observe(key, nil, sim.Now()).Pods {
			if p.JobID == failed.JobID {
				return p.Pod.Revision == "r3"
			}
		}
		return false
	})
}

// TestJobEventsKeepParentsWhole: from the raw JSON of job events the cache
// keeps a parent whole (the agent renders children from it) and a child in
// its compact form.
func TestJobEventsKeepParentsWhole(t *testing.T) {
	sim := nomadsim.NewNomad(nomadsim.NomadConfig{JSONPayloads: true, PlaceDelay: time.Millisecond, StartDelay: time.Millisecond, HealthyDelay: time.Millisecond, StopDelay: time.Millisecond})
	defer sim.Close()
	cache := nomad.NewCache()
	w := nomad.NewWatcher(sim, cache, nomad.WatcherConfig{ResyncInterval: time.Hour}, hclog.NewNullLogger(), func(backend.SetKey) {})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() { _ = w.Run(ctx) }()
	waitFor(t, "the first list", cache.Synced)
	parent := parentOf("web")
	parent.Meta["user_key"] = "kept"
	for _, j := range []*api.Job{parent, childOf("web", 0, "r1")} {
		if _, err := sim.RegisterJob(ctx, j, false, 0); err != nil {
			t.Fatal(err)
		}
	}
	waitPod(t, cache, "the child", func(o nomad.Observation) bool { return o.Parent != nil && len(o.Pods) == 1 })
	if w.Relists() != 1 {
		t.Fatalf("%d lists: the jobs must have come from events", w.Relists())
	}
	obs := cache.Observe(backend.SetKey{Namespace: "default", Name: "web"}, nil, time.Now())
	pt := obs.Parent.(jobs.Parent).Job().TaskGroups[0].Tasks[0]
	if pt.Driver != "exec" || pt.Config["command"] != "p" || obs.Parent.(jobs.Parent).Job().Meta["user_key"] != "kept" || obs.Parent.(jobs.Parent).Job().Datacenters == nil {
		t.Fatalf("the parent was not kept whole: task %+v meta %v", pt, obs.Parent.(jobs.Parent).Job().Meta)
	}
	ct := obs.Pods[0].Job.(*jobs.ChildRecord).Job().TaskGroups[0].Tasks[0]
	if ct.Driver != "" || ct.Config != nil {
		t.Fatalf("the child is kept whole, not compact: task %+v", ct)
	}
}

// TestWatcherRecordsTimesFromItsClock: the times the watcher records come
// from WatcherConfig.Clock, the clock the agent's controller reads too, and
// not from time.Now. A purged child is held as stopping for its kill grace
// from when the watcher learned of the purge; with the real clock in the
// watcher and a fake one in the controller, that grace was measured
// between two clocks and never (or at once) ran out. Both ways the watcher
// can learn of a purge are covered: its event, and a re-list that no
// longer holds a child whose allocation last ran.
func TestWatcherRecordsTimesFromItsClock(t *testing.T) {
	fake := time.Date(2001, 2, 3, 4, 5, 6, 0, time.UTC)
	// The child has Nomad's default kill_timeout (5 s).
	grace := 5*time.Second + nomad.PurgeMargin
	key := backend.SetKey{Namespace: "default", Name: "web"}
	for _, tc := range []struct {
		name string
		// purge purges web-0 so that the watcher learns of it.
		purge func(t *testing.T, sim *nomadsim.Nomad, w *nomad.Watcher)
	}{
		{"purge event", func(t *testing.T, sim *nomadsim.Nomad, _ *nomad.Watcher) {
			if err := sim.DeregisterJob(context.Background(), "default", "web-0", true); err != nil {
				t.Fatal(err)
			}
		}},
		{"purge missed, then a re-list", func(t *testing.T, sim *nomadsim.Nomad, w *nomad.Watcher) {
			sim.PauseEvents()
			if err := sim.DeregisterJob(context.Background(), "default", "web-0", true); err != nil {
				t.Fatal(err)
			}
			// A write after the purge, so that the re-list's index is past
			// it and the stream does not replay the purge.
			if _, err := sim.RegisterJob(context.Background(), childOf("other", 0, "r1"), false, 0); err != nil {
				t.Fatal(err)
			}
			w.RequestResync()
			sim.ResumeEvents()
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			sim := nomadsim.NewNomad(nomadsim.NomadConfig{Manual: true, JSONPayloads: true})
			defer sim.Close()
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			if _, err := sim.RegisterJob(ctx, childOf("web", 0, "r1"), false, 0); err != nil {
				t.Fatal(err)
			}
			sim.Settle()
			cache := nomad.NewCache()
			w := nomad.NewWatcher(sim, cache, nomad.WatcherConfig{ResyncInterval: time.Hour, Clock: func() time.Time { return fake }},
				hclog.NewNullLogger(), func(backend.SetKey) {})
			go func() { _ = w.Run(ctx) }()
			waitFor(t, "web-0 ready", func() bool {
				obs := cache.Observe(key, nil, fake)
				return len(obs.Pods) == 1 && obs.Pods[0].Pod.Ready
			})
			// The simulation is not stepped: the purged child's allocation
			// still runs, so the child must be held for its grace.
			tc.purge(t, sim, w)
			waitFor(t, "the purge to be recorded at the fake time", func() bool {
				obs := cache.Observe(key, nil, fake.Add(grace))
				return len(obs.Pods) == 0 && len(obs.Stopped) == 0
			})
			obs := cache.Observe(key, nil, fake.Add(grace-time.Second))
			if len(obs.Pods) != 1 || !obs.Pods[0].Pod.Terminating {
				t.Fatalf("a second before its grace ends (by the fake clock) the purged child must be Terminating: %+v", obs.Pods)
			}
		})
	}
}

// gatedGetJob is a simulated Nomad whose GetJob calls, once armed, wait
// until released, and which counts them by job. Once untold is set, its
// deregister events no longer say whether they stopped or purged their job
// (see untell).
type gatedGetJob struct {
	*nomadsim.Nomad
	armed   atomic.Bool
	untold  atomic.Bool
	entered chan string
	release chan struct{}
	mu      sync.Mutex
	calls   map[string]int
}

// Events implements nomad.API, passing each batch through untell.
func (g *gatedGetJob) Events(ctx context.Context, index uint64) (<-chan *api.Events, error) {
	in, err := g.Nomad.Events(ctx, index)
	if err != nil {
		return nil, err
	}
	out := make(chan *api.Events)
	go func() {
		defer close(out)
		for evs := range in {
			if g.untold.Load() {
				evs = untell(evs)
			}
			select {
			case out <- evs:
			case <-ctx.Done():
				return
			}
		}
	}()
	return out, nil
}

// untell returns evs with the index of each deregister event cleared, so
// that the event alone cannot say whether its job was stopped or purged
// (deregisterKindOf reads "unknown"), as from a Nomad that did not write
// a stopped job at the event's index.
func untell(evs *api.Events) *api.Events {
	out := *evs
	out.Events = slices.Clone(evs.Events)
	for i := range out.Events {
		if e := &out.Events[i]; e.Topic == api.TopicJob && (e.Type == "JobDeregistered" || e.Type == "JobBatchDeregistered") {
			e.Index = 0
		}
	}
	return &out
}

func newGatedGetJob(sim *nomadsim.Nomad) *gatedGetJob {
	return &gatedGetJob{Nomad: sim, entered: make(chan string, 100), release: make(chan struct{}), calls: map[string]int{}}
}

// GetJob implements nomad.API.
func (g *gatedGetJob) GetJob(ctx context.Context, namespace, id string) (*api.Job, error) {
	if g.armed.Load() {
		g.mu.Lock()
		g.calls[id]++
		g.mu.Unlock()
		g.entered <- id
		select {
		case <-g.release:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
	return g.Nomad.GetJob(ctx, namespace, id)
}

func (g *gatedGetJob) callsOf(id string) int {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.calls[id]
}

// watchReadySet starts a simulated Nomad holding set web with children
// ready children at revision r1, and a watcher over it whose GetJob the
// test can hold (gatedGetJob, not yet armed); it returns once the cache
// sees every child ready.
func watchReadySet(t *testing.T, ctx context.Context, children int) (*nomadsim.Nomad, *gatedGetJob, *nomad.Cache, *nomad.Watcher) {
	t.Helper()
	sim := nomadsim.NewNomad(nomadsim.NomadConfig{Manual: true, JSONPayloads: true})
	t.Cleanup(sim.Close)
	jobs := []*api.Job{parentOf("web")}
	for i := range children {
		jobs = append(jobs, childOf("web", i, "r1"))
	}
	for _, j := range jobs {
		if _, err := sim.RegisterJob(ctx, j, false, 0); err != nil {
			t.Fatal(err)
		}
	}
	sim.Settle()
	gated := newGatedGetJob(sim)
	cache := nomad.NewCache()
	w := nomad.NewWatcher(gated, cache, nomad.WatcherConfig{ResyncInterval: time.Hour}, hclog.NewNullLogger(), func(backend.SetKey) {})
	go func() { _ = w.Run(ctx) }()
	key := backend.SetKey{Namespace: "default", Name: "web"}
	waitFor(t, "every child ready", func() bool {
		obs := cache.Observe(key, nil, sim.Now())
		return len(obs.Pods) == children && !slices.ContainsFunc(obs.Pods, func(p nomad.PodDetail) bool { return !p.Pod.Ready })
	})
	return sim, gated, cache, w
}

// TestDeregisterIsReadWithoutHoldingUpTheStream: whether a deregistered
// child was stopped or purged must not hold up the event stream: at a
// thousand children, one GetJob per deregister event inside the loop let
// Nomad's event buffer overflow. Nomad's own events tell (deregisterKindOf):
// read from them, a stop leaves a stopped child and a purge none, with no
// GetJob at all. An event that does not tell (untold) is settled by asking
// Nomad, off the event loop: with GetJob held, the events after the
// deregister are applied all the same (web-1 appears), while the
// deregistered child shows as stopping, never as gone (its ordinal is not
// free: it may still run), and once Nomad answers there is one GetJob per
// child. Either way, a newer event (a purge after the stop, a new child
// under the purged one's ID) is not undone by an older one or a stale
// answer.
func TestDeregisterIsReadWithoutHoldingUpTheStream(t *testing.T) {
	for _, tc := range []deregisterCase{
		{name: "stop", want: "stopped", getJobs: 1},
		{name: "purge", purge: true, want: "gone", getJobs: 1},
		{name: "stop, then purge", want: "gone", getJobs: 2, writes: func(t *testing.T, sim *nomadsim.Nomad) {
			if err := sim.DeregisterJob(context.Background(), "default", "web-0", true); err != nil {
				t.Fatal(err)
			}
		}},
		{name: "purge, then a new child under its ID", purge: true, want: "r2", getJobs: 1, writes: func(t *testing.T, sim *nomadsim.Nomad) {
			if _, err := sim.RegisterJob(context.Background(), childOf("web", 0, "r2"), false, 0); err != nil {
				t.Fatal(err)
			}
		}},
	} {
		for _, untold := range []bool{false, true} {
			name := tc.name + ", read from the event"
			if untold {
				name = tc.name + ", settled by Nomad"
			}
			t.Run(name, func(t *testing.T) { deregisterOf(t, tc, untold) })
		}
	}
}

// deregisterCase is one case of TestDeregisterIsReadWithoutHoldingUpTheStream.
type deregisterCase struct {
	name string
	// purge purges web-0 rather than stopping it.
	purge bool
	// writes run with GetJob held, after the deregister of web-0.
	writes func(t *testing.T, sim *nomadsim.Nomad)
	// want is web-0's end state once settled and at rest: "stopped",
	// "gone", or "r2" (a new child at that revision, with no allocation of
	// the purged one).
	want string
	// getJobs bounds the GetJob calls of a deregister settled by Nomad;
	// one read from the event makes none.
	getJobs int
}

// deregisterOf runs tc with deregister events that tell what they did, or
// (untold) that do not.
func deregisterOf(t *testing.T, tc deregisterCase, untold bool) {
	t.Helper()
	key := backend.SetKey{Namespace: "default", Name: "web"}
	purge, writes, want, getJobs := tc.purge, tc.writes, tc.want, tc.getJobs
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	sim, gated, cache, _ := watchReadySet(t, ctx, 1)

	gated.untold.Store(untold)
	gated.armed.Store(true)
	released := false
	release := func() {
		if !released {
			released = true
			close(gated.release)
		}
	}
	defer release()
	// The allocation of web-0 still runs: the simulation is not
	// stepped until GetJob is released.
	if err := sim.DeregisterJob(ctx, "default", "web-0", purge); err != nil {
		t.Fatal(err)
	}
	if writes != nil {
		writes(t, sim)
	}
	if _, err := sim.RegisterJob(ctx, childOf("web", 1, "r1"), false, 0); err != nil {
		t.Fatal(err)
	}
	if untold {
		select {
		case id := <-gated.entered:
			if id != "web-0" {
				t.Fatalf("GetJob of %s, want web-0", id)
			}
		case <-time.After(10 * time.Second):
			t.Fatal("nobody asked Nomad whether web-0 was stopped or purged")
		}
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		obs := cache.Observe(key, nil, sim.Now())
		ords := map[int]nomad.PodDetail{}
		for _, p := range obs.Pods {
			ords[p.Pod.Ordinal] = p
		}
		if _, ok := ords[1]; ok {
			if p, ok := ords[0]; !ok || (want != "r2" && !p.Pod.Terminating) {
				t.Fatalf("while its allocation runs, web-0 must be stopping, not gone: %+v", p.Pod)
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the events after the deregister were not applied while GetJob was held: pods at ordinals %v", slices.Collect(maps.Keys(ords)))
		}
		time.Sleep(time.Millisecond)
	}

	release()
	sim.Settle()
	waitFor(t, "web-0 settled as "+want, func() bool {
		obs := cache.Observe(key, nil, sim.Now().Add(time.Hour))
		var web0 *nomad.PodDetail
		for i := range obs.Pods {
			if obs.Pods[i].Pod.Ordinal == 0 {
				web0 = &obs.Pods[i]
			}
		}
		switch want {
		case "stopped":
			job, err := sim.GetJob(ctx, "default", "web-0")
			return err == nil && web0 == nil && len(obs.Stopped) == 1 && obs.Stopped[0].JobModifyIndex == *job.JobModifyIndex
		case "gone":
			return web0 == nil && len(obs.Stopped) == 0
		default:
			return web0 != nil && web0.Pod.Revision == want && web0.Pod.Ready && len(obs.Stopped) == 0
		}
	})
	n := gated.callsOf("web-0")
	if !untold && n != 0 {
		t.Fatalf("%d GetJob calls for web-0, want none: Nomad's events say whether it was stopped or purged", n)
	}
	if untold && (n < 1 || n > getJobs) {
		t.Fatalf("%d GetJob calls for web-0, want 1 to %d", n, getJobs)
	}
}

// syncBuffer is a bytes.Buffer safe for a logger writing from goroutines.
type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// TestWatcherReportsALostStreamAsWhatItIs: when Nomad ends the event stream
// with an error of its own (plain text, over the real client and HTTP), the
// watcher says what happened, in words an operator can act on, and counts
// the reset by its reason (for nomad_event_stream_resets_total{reason}).
// Nomad's "event dropped from buffer" used to be logged only as the JSON
// decoder's "invalid character 'e' looking for beginning of value".
func TestWatcherReportsALostStreamAsWhatItIs(t *testing.T) {
	for _, tc := range []struct {
		name string
		// cut ends the watcher's stream.
		cut     func(sim *nomadsim.Nomad)
		reason  string
		message string
	}{
		{"buffer overflow", func(sim *nomadsim.Nomad) { sim.CloseEventStreams(errors.New("event dropped from buffer")) },
			nomad.ResetBufferOverflow, "Nomad dropped events the daemon had not read yet (raise event_buffer_size on the servers); re-listing"},
		{"closed by the server", func(sim *nomadsim.Nomad) { sim.CloseEventStreams(nil) },
			nomad.ResetServerClosed, "Nomad closed the event stream"},
		{"another server error", func(sim *nomadsim.Nomad) { sim.CloseEventStreams(errors.New("rpc error: No cluster leader")) },
			nomad.ResetServerError, "Nomad ended the event stream with an error: rpc error: No cluster leader"},
		{"disconnect", func(sim *nomadsim.Nomad) {
			sim.SetUnreachable(true)
			time.Sleep(10 * time.Millisecond)
			sim.SetUnreachable(false)
		}, nomad.ResetDisconnect, "lost the Nomad event stream"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			sim := nomadsim.NewNomad(nomadsim.NomadConfig{Manual: true})
			defer sim.Close()
			srv := httptest.NewServer(sim.Handler())
			defer srv.Close()
			c, err := api.NewClient(&api.Config{Address: srv.URL})
			if err != nil {
				t.Fatal(err)
			}
			var logs syncBuffer
			var mu sync.Mutex
			var reported []string
			cache := nomad.NewCache()
			w := nomad.NewWatcher(nomad.NewAPI(c), cache, nomad.WatcherConfig{
				ResyncInterval: time.Hour, MinBackoff: time.Millisecond, MaxBackoff: time.Millisecond,
				OnReset: func(reason string) {
					mu.Lock()
					reported = append(reported, reason)
					mu.Unlock()
				},
			}, hclog.New(&hclog.LoggerOptions{Output: &logs, Level: hclog.Warn}), func(backend.SetKey) {})
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			go func() { _ = w.Run(ctx) }()
			// The watcher subscribes before it lists: cut the stream
			// once both are done.
			waitFor(t, "the watcher's subscription and listing", func() bool { return sim.Calls()[nomad.VerbEvents] > 0 && w.Relists() > 0 })

			tc.cut(sim)
			waitFor(t, "a re-list and a new subscription", func() bool {
				return w.Relists() >= 2 && sim.Calls()[nomad.VerbEvents] >= 2
			})
			out := logs.String()
			if !strings.Contains(out, tc.message) || strings.Contains(out, "invalid character") {
				t.Fatalf("the log does not say %q:\n%s", tc.message, out)
			}
			if got := w.Resets(); len(got) != 1 || got[tc.reason] != 1 {
				t.Fatalf("resets %v, want one %s", got, tc.reason)
			}
			mu.Lock()
			defer mu.Unlock()
			if len(reported) != 1 || reported[0] != tc.reason {
				t.Fatalf("OnReset was told %v, want [%s]", reported, tc.reason)
			}
		})
	}
}

// TestDeregistersAreSettledSeveralAtOnce: the watcher asks Nomad about
// several deregistered children at once. Asked one at a time, a rollout of
// 5,000 children kept them stopping for minutes: the controller's
// expectations expired and it asked for five extra re-lists. Here the
// deregister events do not tell a stop from a purge (untold), and GetJob
// is held until released, so the watcher can only reach four calls in
// flight by making them concurrently.
func TestDeregistersAreSettledSeveralAtOnce(t *testing.T) {
	const children = 4
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	sim, gated, cache, w := watchReadySet(t, ctx, children)
	key := backend.SetKey{Namespace: "default", Name: "web"}

	gated.untold.Store(true)
	gated.armed.Store(true)
	for i := range children {
		if err := sim.DeregisterJob(ctx, "default", fmt.Sprintf("web-%d", i), false); err != nil {
			t.Fatal(err)
		}
	}
	asked := map[string]bool{}
	for len(asked) < children {
		select {
		case id := <-gated.entered:
			asked[id] = true
		case <-time.After(10 * time.Second):
			close(gated.release)
			t.Fatalf("GetJob held for %v and nobody asked about the others: the watcher settles one at a time", slices.Sorted(maps.Keys(asked)))
		}
	}
	close(gated.release)
	sim.Settle()
	waitFor(t, "every child settled as stopped", func() bool {
		obs := cache.Observe(key, nil, sim.Now().Add(time.Hour))
		return w.Settling() == 0 && len(obs.Pods) == 0 && len(obs.Stopped) == children
	})
}

// slowListing answers ListJobs and then holds the answer until released,
// as a listing of thousands of jobs outlasts Nomad's event buffer.
type slowListing struct {
	*nomadsim.Nomad
	armed   atomic.Bool
	listed  chan struct{}
	release chan struct{}
}

// ListJobs implements nomad.API.
func (s *slowListing) ListJobs(ctx context.Context, namespace string) ([]*api.JobListStub, uint64, error) {
	stubs, index, err := s.Nomad.ListJobs(ctx, namespace)
	if s.armed.CompareAndSwap(true, false) {
		s.listed <- struct{}{}
		<-s.release
	}
	return stubs, index, err
}

// TestListingThatOutlastsTheBufferMissesNothing: Nomad starts a
// subscription at the closest index it still holds and says nothing of
// those it dropped. The watcher used to subscribe after listing, from the
// listing's index: when the listing took longer than Nomad's buffer lasts
// (a re-list of 5,000 children did), what changed meanwhile was lost, and
// 490 of 1,000 sets waited for children the cache never saw. Here ten
// parents are registered while the listing is held, with a buffer of four
// indexes; the watcher must see all ten.
func TestListingThatOutlastsTheBufferMissesNothing(t *testing.T) {
	sim := nomadsim.NewNomad(nomadsim.NomadConfig{Manual: true, JSONPayloads: true, EventBufferSize: 4})
	defer sim.Close()
	slow := &slowListing{Nomad: sim, listed: make(chan struct{}, 1), release: make(chan struct{})}
	slow.armed.Store(true)
	cache := nomad.NewCache()
	w := nomad.NewWatcher(slow, cache, nomad.WatcherConfig{ResyncInterval: time.Hour}, hclog.NewNullLogger(), func(backend.SetKey) {})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() { _ = w.Run(ctx) }()

	<-slow.listed
	const parents = 10
	for i := range parents {
		if _, err := sim.RegisterJob(ctx, parentOf(fmt.Sprintf("set%d", i)), false, 0); err != nil {
			t.Fatal(err)
		}
	}
	close(slow.release)
	waitFor(t, "every parent registered during the listing", func() bool {
		for i := range parents {
			if cache.Observe(backend.SetKey{Namespace: "default", Name: fmt.Sprintf("set%d", i)}, nil, sim.Now()).Parent == nil {
				return false
			}
		}
		return true
	})
	if n := w.Relists(); n != 1 {
		t.Fatalf("%d listings, want 1: nothing was lost, so nothing needs listing again", n)
	}
}

// TestStreamLostInABurstIsLostOnce: after Nomad drops the watcher's stream
// in a burst, the new subscription must not be dropped again at once.
// Nomad's broker starts a subscription at an index it no longer holds at
// the oldest event it holds, and the next event it appends drops a reader
// still there; subscribed at the last index it applied, the watcher was
// lost three and four times in a row on a real Nomad (BENCHMARKS.md). It
// subscribes at StreamFromNewest instead. Here the stream is paused while
// the buffer (4) overflows, which drops it once; the watcher subscribes
// again while the stream is still paused, and one more event is written
// before the new stream delivers anything.
func TestStreamLostInABurstIsLostOnce(t *testing.T) {
	sim := nomadsim.NewNomad(nomadsim.NomadConfig{Manual: true, EventBufferSize: 4, DropSlowSubscribers: true})
	defer sim.Close()
	subscribedAt := make(chan uint64, 16)
	cache := nomad.NewCache()
	w := nomad.NewWatcher(&recordingSubscriptions{API: sim, at: subscribedAt}, cache, nomad.WatcherConfig{
		ResyncInterval: time.Hour, MinBackoff: time.Second, MaxBackoff: time.Second,
	}, hclog.NewNullLogger(), func(backend.SetKey) {})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() { _ = w.Run(ctx) }()
	register := func(i int) uint64 {
		t.Helper()
		j := parentOf(fmt.Sprintf("other-%d", i))
		j.Meta = nil // not a set: the watcher only follows the index
		resp, err := sim.RegisterJob(ctx, j, false, 0)
		if err != nil {
			t.Fatal(err)
		}
		return resp.JobModifyIndex
	}
	waitFor(t, "the first subscription and listing", func() bool { return w.Relists() == 1 })
	first := register(0)
	waitFor(t, "the stream to deliver", func() bool { return cache.Index() >= first })

	sim.PauseEvents()
	for i := 1; i <= 6; i++ {
		register(i)
	}
	sim.ResumeEvents()
	waitFor(t, "the first lost stream", func() bool { return w.Resets()[nomad.ResetBufferOverflow] == 1 })
	sim.PauseEvents()
	// MinBackoff (1 s) keeps the watcher from subscribing again before
	// the stream is paused.
	waitFor(t, "a new subscription and listing", func() bool { return w.Relists() == 2 })
	newest := register(7)
	sim.ResumeEvents()
	waitFor(t, "the new stream to deliver the newest event", func() bool { return cache.Index() >= newest })

	if got := w.Resets(); got[nomad.ResetBufferOverflow] != 1 || len(got) != 1 {
		t.Fatalf("the stream was lost %v times, want once (buffer_overflow)", got)
	}
	close(subscribedAt)
	var got []uint64
	for at := range subscribedAt {
		got = append(got, at)
	}
	if len(got) != 2 || got[0] != nomad.StreamFromNewest || got[1] != nomad.StreamFromNewest {
		t.Errorf("subscribed at indexes %v, want StreamFromNewest (%d) twice: at the start and after the overflow", got, nomad.StreamFromNewest)
	}
}

// recordingSubscriptions is a nomad.API that sends the index of each
// subscription to at.
type recordingSubscriptions struct {
	nomad.API
	at chan<- uint64
}

// Events implements nomad.API.
func (r *recordingSubscriptions) Events(ctx context.Context, index uint64) (<-chan *api.Events, error) {
	r.at <- index
	return r.API.Events(ctx, index)
}
