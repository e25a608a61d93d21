package nomad

import (
	"errors"
	"fmt"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/nomad/api"

	"github.com/nomad-statefulset/nomad-statefulset/backend"
	"github.com/nomad-statefulset/nomad-statefulset/jobs"
	"github.com/nomad-statefulset/nomad-statefulset/reconciler"
)

func ptr[T any](v T) *T { return &v }

func childJob(set string, ord string, rev string, stop bool, modify uint64) *api.Job {
	return &api.Job{
		ID: ptr(set + "-" + ord), Namespace: ptr("default"), Stop: ptr(stop),
		ModifyIndex: ptr(modify), JobModifyIndex: ptr(modify),
		Meta:       map[string]string{"statefulset_parent": set, "statefulset_ordinal": ord, "statefulset_revision": rev},
		TaskGroups: []*api.TaskGroup{{Name: ptr("g"), Disconnect: &api.DisconnectStrategy{StopOnClientAfter: ptr(time.Minute)}}},
	}
}

func alloc(id, job, client, desired string, healthy *bool, create uint64, modifyTime time.Time) *api.AllocationListStub {
	a := &api.AllocationListStub{ID: id, JobID: job, Namespace: "default", ClientStatus: client, DesiredStatus: desired,
		CreateIndex: create, ModifyIndex: create, ModifyTime: modifyTime.UnixNano(), NodeID: "node1"}
	if healthy != nil {
		a.DeploymentStatus = &api.AllocDeploymentStatus{Healthy: healthy, Timestamp: modifyTime}
	}
	return a
}

func TestObservePodStates(t *testing.T) {
	now := time.Unix(1_000_000, 0)
	key := backend.SetKey{Namespace: "default", Name: "web"}
	cases := []struct {
		name      string
		stop      bool
		allocs    []*api.AllocationListStub
		wantPod   bool
		phase     reconciler.Phase
		ready     bool
		terminate bool
	}{
		{name: "no allocation yet is Pending", wantPod: true, phase: reconciler.PhasePending},
		{name: "running and healthy is Ready", wantPod: true, phase: reconciler.PhaseRunning, ready: true,
			allocs: []*api.AllocationListStub{alloc("a1", "web-0", "running", "run", ptr(true), 10, now)}},
		{name: "running but not yet healthy is not Ready", wantPod: true, phase: reconciler.PhaseRunning,
			allocs: []*api.AllocationListStub{alloc("a1", "web-0", "running", "run", nil, 10, now)}},
		{name: "failed allocation is Failed", wantPod: true, phase: reconciler.PhaseFailed,
			allocs: []*api.AllocationListStub{alloc("a1", "web-0", "failed", "run", nil, 10, now)}},
		{name: "stopped job with a running allocation is Terminating", stop: true, wantPod: true, phase: reconciler.PhaseRunning, terminate: true,
			allocs: []*api.AllocationListStub{alloc("a1", "web-0", "running", "stop", ptr(true), 10, now)}},
		{name: "stopped job whose allocations are terminal has no pod", stop: true, wantPod: false,
			allocs: []*api.AllocationListStub{alloc("a1", "web-0", "complete", "stop", ptr(true), 10, now)}},
		{name: "recently lost allocation still holds the ordinal", stop: true, wantPod: true, phase: reconciler.PhaseRunning, terminate: true,
			allocs: []*api.AllocationListStub{alloc("a1", "web-0", "lost", "stop", nil, 10, now.Add(-time.Minute))}},
		{name: "lost allocation past stop_on_client_after and margin is gone", stop: true, wantPod: false,
			allocs: []*api.AllocationListStub{alloc("a1", "web-0", "lost", "stop", nil, 10, now.Add(-time.Minute-lostAllocMargin))}},
		{name: "an older allocation still running beside the new one is never Ready", wantPod: true, phase: reconciler.PhaseRunning,
			allocs: []*api.AllocationListStub{
				alloc("a1", "web-0", "running", "stop", ptr(true), 10, now),
				alloc("a2", "web-0", "running", "run", ptr(true), 20, now),
			}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			c := NewCache()
			c.Replace(Snapshot{Index: 5, Jobs: []*api.Job{childJob("web", "0", "web-abc", tc.stop, 7)}, Allocs: tc.allocs})
			obs := c.Observe(key, nil, now)
			if !tc.wantPod {
				if len(obs.Pods) != 0 || len(obs.Stopped) != 1 {
					t.Fatalf("want no pod and one stopped child, got pods=%+v stopped=%+v", obs.Pods, obs.Stopped)
				}
				if obs.Stopped[0].JobModifyIndex != 7 {
					t.Fatalf("stopped child must carry its modify index for check-and-set, got %d", obs.Stopped[0].JobModifyIndex)
				}
				return
			}
			if len(obs.Pods) != 1 {
				t.Fatalf("want one pod, got %+v", obs.Pods)
			}
			p := obs.Pods[0].Pod
			if p.Phase != tc.phase || p.Ready != tc.ready || p.Terminating != tc.terminate || p.Ordinal != 0 || p.Revision != "web-abc" {
				t.Fatalf("pod = %+v, want phase %s ready %v terminating %v", p, tc.phase, tc.ready, tc.terminate)
			}
		})
	}
}

func TestCacheUpdatesOnlyMoveForward(t *testing.T) {
	c := NewCache()
	newer := childJob("web", "0", "web-new", false, 20)
	older := childJob("web", "0", "web-old", false, 10)
	c.UpsertJob(newer, 20)
	c.UpsertJob(older, 21) // a replayed, older event
	obs := c.Observe(backend.SetKey{Namespace: "default", Name: "web"}, nil, time.Now())
	if len(obs.Pods) != 1 || obs.Pods[0].Pod.Revision != "web-new" {
		t.Fatalf("an older job version overwrote a newer one: %+v", obs.Pods)
	}
	if c.Index() != 21 {
		t.Fatalf("index = %d, want 21", c.Index())
	}
}

func TestCacheGroupsParentsChildrenAndVolumes(t *testing.T) {
	c := NewCache()
	parent := &api.Job{ID: ptr("web"), Namespace: ptr("default"), ModifyIndex: ptr(uint64(3)),
		Meta: map[string]string{"statefulset": "true"}}
	other := &api.Job{ID: ptr("unrelated"), Namespace: ptr("default"), ModifyIndex: ptr(uint64(3))}
	touched := c.Replace(Snapshot{Index: 9,
		Jobs: []*api.Job{parent, other, childJob("web", "0", "r", false, 4), childJob("web", "1", "r", false, 5)},
		Volumes: []*api.HostVolumeStub{
			{Namespace: "default", Name: "data-web-0", ID: "v0"},
			{Namespace: "default", Name: "data-web-1", ID: "v1"},
			{Namespace: "default", Name: "data-web-extra-0", ID: "vx"}, // another set "web-extra"
			{Namespace: "default", Name: "logs-web-0", ID: "vl"},       // an undeclared claim
		}})
	if len(touched) != 1 || touched[0].Name != "web" {
		t.Fatalf("touched = %v, want only web", touched)
	}
	obs := c.Observe(backend.SetKey{Namespace: "default", Name: "web"}, []string{"data"}, time.Now())
	if obs.Parent == nil || len(obs.Pods) != 2 || len(obs.Volumes) != 2 {
		t.Fatalf("observation = parent %v, %d pods, %d volumes; want parent, 2, 2", obs.Parent != nil, len(obs.Pods), len(obs.Volumes))
	}
	for i, v := range obs.Volumes {
		if v.Volume.Ordinal != i || v.Volume.Claim != "data" {
			t.Fatalf("volume %d = %+v", i, v)
		}
	}
}

func TestCachePurgedChildWithRunningAllocIsTerminatingUntilTerminal(t *testing.T) {
	c := NewCache()
	key := backend.SetKey{Namespace: "default", Name: "web"}
	now := time.Now()
	c.Replace(Snapshot{Index: 1, Jobs: []*api.Job{childJob("web", "0", "r", false, 4)},
		Allocs: []*api.AllocationListStub{alloc("a1", "web-0", "running", "run", ptr(true), 5, now)}})
	c.RemoveJob("default", "web-0", 6, now)
	obs := c.Observe(key, nil, now)
	if len(obs.Pods) != 1 || !obs.Pods[0].Pod.Terminating {
		t.Fatalf("a purged child whose allocation still runs must be Terminating, got %+v", obs.Pods)
	}
	c.upsertAllocPayload(stubPayload(alloc("a1", "web-0", "complete", "stop", ptr(true), 5, now)), 7)
	obs = c.Observe(key, nil, now)
	if len(obs.Pods) != 0 || len(obs.Stopped) != 0 {
		t.Fatalf("once terminal, a purged child is forgotten; got %+v %+v", obs.Pods, obs.Stopped)
	}
}

func TestSplitOrdinal(t *testing.T) {
	for _, tc := range []struct {
		in   string
		base string
		ord  int
		ok   bool
	}{
		{"data-web-0", "data-web", 0, true},
		{"data-web-12", "data-web", 12, true},
		{"data-web-", "", 0, false},
		{"web", "", 0, false},
		{"data-web--1", "data-web-", 1, true}, // matches no set: "data-web-" is no claim-set prefix
		{"-1", "", 0, false},
	} {
		base, ord, ok := splitOrdinal(tc.in)
		if base != tc.base || ord != tc.ord || ok != tc.ok {
			t.Errorf("splitOrdinal(%q) = %q %d %v, want %q %d %v", tc.in, base, ord, ok, tc.base, tc.ord, tc.ok)
		}
	}
}

func TestObserveReRegisteredChildIsPendingUntilItsNewAllocationExists(t *testing.T) {
	now := time.Unix(1_000_000, 0)
	key := backend.SetKey{Namespace: "default", Name: "web"}
	job := childJob("web", "0", "web-new", false, 30)
	job.Version = ptr(uint64(2))
	old := alloc("a1", "web-0", "complete", "stop", ptr(true), 10, now)
	old.JobVersion = 0
	c := NewCache()
	c.Replace(Snapshot{Index: 31, Jobs: []*api.Job{job}, Allocs: []*api.AllocationListStub{old}})
	obs := c.Observe(key, nil, now)
	if len(obs.Pods) != 1 || obs.Pods[0].Pod.Phase != reconciler.PhasePending || obs.Pods[0].Pod.Terminating {
		t.Fatalf("a child re-registered at version 2 with only a completed version-0 allocation must be Pending, got %+v", obs.Pods)
	}
	// Allocation events carry no job version: only the create index tells.
	fresh := alloc("a2", "web-0", "running", "run", ptr(true), 32, now)
	c.upsertAllocPayload(stubPayload(fresh), 33)
	obs = c.Observe(key, nil, now)
	if !obs.Pods[0].Pod.Ready || obs.Pods[0].AllocID != "a2" {
		t.Fatalf("the current version's allocation must decide the pod, got %+v", obs.Pods[0])
	}
}

func TestPermissionErrorNamesTheCapability(t *testing.T) {
	cases := map[string]string{"ListJobs": "list-jobs", "RegisterJob": "submit-job", "CreateHostVolume": "host-volume-create", "DeleteHostVolume": "host-volume-write"}
	for verb, capability := range cases {
		err := denied(verb, "default", fmt.Errorf("Unexpected response code: 403 (Permission denied)"))
		var pe *PermissionError
		if !errors.As(err, &pe) || pe.Capability != capability || !strings.Contains(err.Error(), `"`+capability+`"`) {
			t.Errorf("%s: %v does not name the capability %q", verb, err, capability)
		}
	}
	if err := denied("ListJobs", "default", fmt.Errorf("Unexpected response code: 500 (boom)")); errors.As(err, new(*PermissionError)) {
		t.Errorf("a 500 was taken for a permission error: %v", err)
	}
}

// TestCacheFollowsNodeDrains: a listing fills the nodes' states, a Node
// event with a drain strategy marks the node draining and touches every set
// so that its pods are looked at, an event that changes nothing touches
// none, and a deregistered node is forgotten.
func TestCacheFollowsNodeDrains(t *testing.T) {
	c := NewCache()
	c.Replace(Snapshot{Index: 5, Jobs: []*api.Job{childJob("web", "0", "web-r1", false, 3)},
		Nodes: []*api.NodeListStub{{ID: "n1", Status: "ready", SchedulingEligibility: api.NodeSchedulingEligible}}})
	if st, ok := c.NodeState("n1"); !ok || st.Draining || !st.Eligible {
		t.Fatalf("listed node: %+v %v", st, ok)
	}
	drain := &nodePayload{ID: "n1", Status: "ready", SchedulingEligibility: api.NodeSchedulingIneligible, DrainStrategy: &api.DrainStrategy{}}
	if touched := c.upsertNode(drain, false, 6); len(touched) != 1 || touched[0].Name != "web" {
		t.Fatalf("a drain touched %v, want the set web", touched)
	}
	if st, _ := c.NodeState("n1"); !st.Draining || st.Eligible {
		t.Fatalf("draining node: %+v", st)
	}
	if touched := c.upsertNode(drain, false, 7); len(touched) != 0 {
		t.Fatalf("an unchanged node touched %v", touched)
	}
	c.upsertNode(drain, true, 8)
	if _, ok := c.NodeState("n1"); ok {
		t.Fatal("a deregistered node is still known")
	}
}

// TestCacheFollowsHostVolumeEvents: the watcher is the cache's one writer;
// a volume created or deleted (by the daemon or anyone) reaches the cache
// from the HostVolume topic, touches the sets it may belong to, and an older
// event does not undo a newer one.
func TestCacheFollowsHostVolumeEvents(t *testing.T) {
	c := NewCache()
	c.Replace(Snapshot{Index: 5, Jobs: []*api.Job{childJob("web", "0", "web-r1", false, 3)}})
	vol := &api.HostVolume{Namespace: "default", ID: "v1", Name: "data-web-0", NodeID: "n1", ModifyIndex: 10}
	if touched := c.upsertVolume(vol, false, 10); len(touched) != 1 || touched[0].Name != "web" {
		t.Fatalf("a registered volume touched %v, want web", touched)
	}
	if got := c.Observe(backend.SetKey{Namespace: "default", Name: "web"}, []string{"data"}, time.Now()).Volumes; len(got) != 1 || got[0].ID != "v1" {
		t.Fatalf("observed volumes %+v", got)
	}
	old := *vol
	old.ModifyIndex, old.NodeID = 8, "stale"
	c.upsertVolume(&old, false, 11)
	if got := c.Observe(backend.SetKey{Namespace: "default", Name: "web"}, []string{"data"}, time.Now()).Volumes; got[0].NodeID != "n1" {
		t.Fatalf("an older event overwrote the volume: %+v", got[0])
	}
	c.upsertVolume(vol, true, 12)
	if got := c.Observe(backend.SetKey{Namespace: "default", Name: "web"}, []string{"data"}, time.Now()).Volumes; len(got) != 0 {
		t.Fatalf("a deleted volume is still observed: %+v", got)
	}
}

// TestObserveVolumeClassAndCapacity: an observed volume carries Nomad's
// capacity and the class its parameters record, from an event or from a
// listing with the classes the re-list read; the class of a volume that
// is gone is forgotten.
func TestObserveVolumeClassAndCapacity(t *testing.T) {
	key := backend.SetKey{Namespace: "default", Name: "web"}
	observe := func(c *Cache) []reconciler.Volume {
		var out []reconciler.Volume
		for _, v := range c.Observe(key, []string{"data"}, time.Now()).Volumes {
			out = append(out, v.Volume)
		}
		return out
	}
	c := NewCache()
	c.Replace(Snapshot{Index: 5, Jobs: []*api.Job{childJob("web", "0", "web-r1", false, 3)}})
	c.upsertVolume(&api.HostVolume{Namespace: "default", ID: "v0", Name: "data-web-0", ModifyIndex: 10, CapacityBytes: 10 << 20,
		Parameters: map[string]string{ClassParameter: "fast", "vg": "x"}}, false, 10)
	c.upsertVolume(&api.HostVolume{Namespace: "default", ID: "v1", Name: "data-web-1", ModifyIndex: 11}, false, 11)
	want := []reconciler.Volume{
		{Claim: "data", Ordinal: 0, Name: "data-web-0", Class: "fast", Capacity: 10 << 20},
		{Claim: "data", Ordinal: 1, Name: "data-web-1"},
	}
	if got := observe(c); !reflect.DeepEqual(got, want) {
		t.Fatalf("from events: %+v, want %+v", got, want)
	}
	if !c.volumeClassKnown("v1") {
		t.Fatal("the default class of an event's volume is not known")
	}

	// An expansion's event moves the capacity.
	c.upsertVolume(&api.HostVolume{Namespace: "default", ID: "v0", Name: "data-web-0", ModifyIndex: 12, CapacityBytes: 20 << 20,
		Parameters: map[string]string{ClassParameter: "fast"}}, false, 12)
	if got := observe(c); got[0].Capacity != 20<<20 || got[0].Class != "fast" {
		t.Fatalf("after the expansion: %+v", got[0])
	}

	// A re-list keeps what the cache knew of the volumes it still holds,
	// adds what it read, and forgets the rest.
	c.Replace(Snapshot{Index: 20, Jobs: []*api.Job{childJob("web", "0", "web-r1", false, 3)},
		Volumes: []*api.HostVolumeStub{
			{Namespace: "default", ID: "v0", Name: "data-web-0", ModifyIndex: 12, CapacityBytes: 20 << 20},
			{Namespace: "default", ID: "v2", Name: "data-web-2", ModifyIndex: 15, CapacityBytes: 1 << 30},
		},
		VolumeClasses: map[string]string{"v2": "slow", "v9": "gone"}})
	want = []reconciler.Volume{
		{Claim: "data", Ordinal: 0, Name: "data-web-0", Class: "fast", Capacity: 20 << 20},
		{Claim: "data", Ordinal: 2, Name: "data-web-2", Class: "slow", Capacity: 1 << 30},
	}
	if got := observe(c); !reflect.DeepEqual(got, want) {
		t.Fatalf("after a re-list: %+v, want %+v", got, want)
	}
	if c.volumeClassKnown("v1") || c.volumeClassKnown("v9") {
		t.Fatal("the class of a volume the listing does not hold is kept")
	}
	c.upsertVolume(&api.HostVolume{Namespace: "default", ID: "v2", Name: "data-web-2", ModifyIndex: 21}, true, 21)
	if c.volumeClassKnown("v2") {
		t.Fatal("the class of a deleted volume is kept")
	}
}

// TestCachePurgeSequences is issue 20's purge: Nomad 1.10 deletes a purged
// job's allocations in the same transaction and sends no allocation event
// for them, so a purged child whose allocation still ran used to stay
// Terminating until the periodic re-list (270 s). Whatever events Nomad
// sends around a purge (none, or the allocation's end before or after it,
// with any indexes), the child ends gone, and its ordinal is never free
// before its tasks must have stopped (kill grace: kill_timeout and
// shutdown_delay, plus PurgeMargin); the observation says when to look
// again. A new child under the same ID starts afresh.
func TestCachePurgeSequences(t *testing.T) {
	key := backend.SetKey{Namespace: "default", Name: "web"}
	t0 := time.Unix(1000, 0)
	grace := 5*time.Second + PurgeMargin // Nomad's default kill_timeout
	running := func(idx uint64) *allocPayload {
		return stubPayload(alloc("a1", "web-0", "running", "run", ptr(true), idx, t0))
	}
	complete := func(idx uint64) *allocPayload {
		return stubPayload(alloc("a1", "web-0", "complete", "stop", ptr(true), idx, t0))
	}
	for _, tc := range []struct {
		name   string
		events func(c *Cache)
		// freeAt is when the ordinal is free: at once (0) or after grace.
		freeAt time.Duration
	}{
		{"purge, no allocation event", func(c *Cache) { c.RemoveJob("default", "web-0", 6, t0) }, grace},
		{"allocation ends, then purge", func(c *Cache) {
			c.upsertAllocPayload(complete(6), 6)
			c.RemoveJob("default", "web-0", 7, t0)
		}, 0},
		{"purge, then allocation ends", func(c *Cache) {
			c.RemoveJob("default", "web-0", 6, t0)
			c.upsertAllocPayload(complete(7), 7)
		}, 0},
		{"purge, then a stale running event", func(c *Cache) {
			c.RemoveJob("default", "web-0", 8, t0)
			c.upsertAllocPayload(running(5), 5)
		}, grace},
		// A re-list knows nothing of a purge: it must not end the grace
		// the purge event started.
		{"purge, then a re-list", func(c *Cache) {
			c.RemoveJob("default", "web-0", 6, t0)
			c.Replace(Snapshot{Index: 9, At: t0.Add(time.Second)})
		}, grace},
		// The stream was cut and the purge event lost: the re-list no
		// longer holds a child whose allocation last ran, which only a
		// purge does. Its grace runs from the listing.
		{"purge missed, then a re-list", func(c *Cache) {
			c.Replace(Snapshot{Index: 9, At: t0})
		}, grace},
		{"allocation ended, purge missed, then a re-list", func(c *Cache) {
			c.upsertAllocPayload(complete(6), 6)
			c.Replace(Snapshot{Index: 9, At: t0})
		}, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := NewCache()
			c.Replace(Snapshot{Index: 1, Jobs: []*api.Job{childJob("web", "0", "r", false, 4)},
				Allocs: []*api.AllocationListStub{alloc("a1", "web-0", "running", "run", ptr(true), 5, t0)}})
			tc.events(c)
			for _, at := range []time.Duration{0, grace - time.Second, grace} {
				obs := c.Observe(key, nil, t0.Add(at))
				free := len(obs.Pods) == 0 && len(obs.Stopped) == 0
				if want := at >= tc.freeAt; free != want {
					t.Fatalf("at +%v: ordinal free %v, want %v (pods %+v)", at, free, want, obs.Pods)
				}
				if !free && (obs.RecheckAfter <= 0 || obs.RecheckAfter > grace-at) {
					t.Fatalf("at +%v: recheck after %v, want at most %v", at, obs.RecheckAfter, grace-at)
				}
			}
			// The re-created child is a new job: the purged one's
			// allocation is not its own.
			c.UpsertJob(childJob("web", "0", "r", false, 20), 20)
			obs := c.Observe(key, nil, t0.Add(grace))
			if len(obs.Pods) != 1 || obs.Pods[0].AllocID != "" || obs.Pods[0].Pod.Terminating {
				t.Fatalf("the new child: %+v", obs.Pods)
			}
		})
	}
}

// TestCacheVolumeDeleteSequences is issue 20's deleted volume: whatever
// order the events around a `nomad volume delete` arrive in (a re-list and
// the stream overlap, so events older than the snapshot may come after it,
// in any order), the deleted volume ends gone, so its ordinal gets a fresh
// volume, and a fresh volume under the same name is never taken away by the
// old one's delete nor hidden by the old one's registration. Each case
// plays every order of its events, with each re-list Nomad could give
// placed anywhere it could come (after only the events it is newer than).
func TestCacheVolumeDeleteSequences(t *testing.T) {
	key := backend.SetKey{Namespace: "default", Name: "web"}
	v1 := &api.HostVolume{Namespace: "default", ID: "v1", Name: "data-web-0", NodeID: "n1", CreateIndex: 10, ModifyIndex: 11}
	v2 := &api.HostVolume{Namespace: "default", ID: "v2", Name: "data-web-0", NodeID: "n2", CreateIndex: 30, ModifyIndex: 31}
	type ev struct {
		vol     *api.HostVolume
		deleted bool
		index   uint64
	}
	type snap struct {
		index uint64
		vols  []*api.HostVolume
	}
	for _, tc := range []struct {
		name   string
		events []ev
		// snaps are the re-lists Nomad could give along the way.
		snaps []snap
		// want is the volume observed in the end ("" for none).
		want string
	}{
		{"delete", []ev{{v1, false, 11}, {v1, true, 20}},
			[]snap{{15, []*api.HostVolume{v1}}, {25, nil}}, ""},
		{"delete, then a fresh volume", []ev{{v1, false, 11}, {v1, true, 20}, {v2, false, 31}},
			[]snap{{15, []*api.HostVolume{v1}}, {25, nil}, {35, []*api.HostVolume{v2}}}, "v2"},
	} {
		for _, order := range permutations(len(tc.events)) {
			for si, sn := range append([]snap{{}}, tc.snaps...) {
				for snapAt := 0; snapAt <= len(order); snapAt++ {
					if si == 0 && snapAt > 0 {
						break // no re-list at all: one run is enough
					}
					if !newerThanAll(sn.index, tc.events, order[:snapAt], func(e ev) uint64 { return e.index }) {
						continue // Nomad cannot list before an event it lists the result of
					}
					name := fmt.Sprintf("%s/order %v/re-list %d after %d", tc.name, order, sn.index, snapAt)
					t.Run(name, func(t *testing.T) {
						c := NewCache()
						c.Replace(Snapshot{Index: 1, Jobs: []*api.Job{childJob("web", "0", "r", false, 4)}})
						relist := func() {
							if si > 0 {
								c.Replace(Snapshot{Index: sn.index, Jobs: []*api.Job{childJob("web", "0", "r", false, 4)}, Volumes: stubs(sn.vols)})
							}
						}
						for i, o := range order {
							if i == snapAt {
								relist()
							}
							e := tc.events[o]
							c.upsertVolume(e.vol, e.deleted, e.index)
						}
						if snapAt == len(order) {
							relist()
						}
						got := c.Observe(key, []string{"data"}, time.Unix(0, 0)).Volumes
						var have string
						if len(got) == 1 {
							have = got[0].ID
						}
						if len(got) > 1 || have != tc.want {
							t.Fatalf("observed volumes %+v, want %q", got, tc.want)
						}
					})
				}
			}
		}
	}
}

// newerThanAll reports whether index is at least the index of every event
// of evs picked by idx.
func newerThanAll[E any](index uint64, evs []E, idx []int, of func(E) uint64) bool {
	for _, i := range idx {
		if of(evs[i]) > index {
			return false
		}
	}
	return true
}

func stubs(vs []*api.HostVolume) []*api.HostVolumeStub {
	var out []*api.HostVolumeStub
	for _, v := range vs {
		out = append(out, &api.HostVolumeStub{Namespace: v.Namespace, ID: v.ID, Name: v.Name, NodeID: v.NodeID,
			CreateIndex: v.CreateIndex, ModifyIndex: v.ModifyIndex})
	}
	return out
}

// permutations returns every order of 0…n-1.
func permutations(n int) [][]int {
	if n == 0 {
		return [][]int{{}}
	}
	var out [][]int
	for _, p := range permutations(n - 1) {
		for i := 0; i <= len(p); i++ {
			q := append(append(append([]int{}, p[:i]...), n-1), p[i:]...)
			out = append(out, q)
		}
	}
	return out
}

// TestObserveChildUpdatedInPlace is issue 20's `nomad job scale`: the agent
// puts a scaled child back to count 1 by registering it again, which Nomad
// applies in place: no allocation is placed, the running one is updated to
// the new version. The pod used to wait for an allocation created after the
// registration that never came, Pending for good. The in-place updated
// allocation (an event's AllocModifyIndex past the registration, a list
// stub's JobVersion equal to the job's) is now the pod's; an old one that a
// registration replaces is never taken for it, nor is one being stopped.
func TestObserveChildUpdatedInPlace(t *testing.T) {
	now := time.Unix(1_000_000, 0)
	key := backend.SetKey{Namespace: "default", Name: "web"}
	for _, tc := range []struct {
		name string
		// fill puts the original allocation a1 (created at 11) and the
		// extra a2 (created at 21, for the scale) into c.
		fill      func(c *Cache, a1, a2 *api.AllocationListStub)
		wantAlloc string
		wantReady bool
	}{
		{"events: a1 updated in place, a2 stopped", func(c *Cache, a1, a2 *api.AllocationListStub) {
			p := stubPayload(a1)
			p.JobVersion, p.AllocModifyIndex, p.ModifyIndex = nil, 31, 31
			c.upsertAllocPayload(p, 31)
			p2 := stubPayload(a2)
			p2.JobVersion, p2.AllocModifyIndex = nil, 31
			c.upsertAllocPayload(p2, 32)
		}, "a1", true},
		{"re-list: a1 at the job's version", func(c *Cache, a1, a2 *api.AllocationListStub) {
			a1.JobVersion = 2
			a2.JobVersion = 1
			c.Replace(Snapshot{Index: 40, Jobs: []*api.Job{scaledBack()}, Allocs: []*api.AllocationListStub{a1, a2}})
		}, "a1", true},
		{"re-list: a1 not updated yet (a replacing registration)", func(c *Cache, a1, a2 *api.AllocationListStub) {
			a1.JobVersion = 0
			a2.JobVersion = 1
			c.Replace(Snapshot{Index: 40, Jobs: []*api.Job{scaledBack()}, Allocs: []*api.AllocationListStub{a1, a2}})
		}, "", false},
		{"events: a1 being stopped", func(c *Cache, a1, a2 *api.AllocationListStub) {
			p := stubPayload(a1)
			p.JobVersion, p.AllocModifyIndex, p.ModifyIndex, p.DesiredStatus = nil, 31, 31, "stop"
			c.upsertAllocPayload(p, 31)
		}, "", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := NewCache()
			a1 := alloc("a1", "web-0", "running", "run", ptr(true), 11, now)
			a2 := alloc("a2", "web-0", "complete", "stop", nil, 21, now)
			c.Replace(Snapshot{Index: 30, Jobs: []*api.Job{scaledBack()}})
			tc.fill(c, a1, a2)
			obs := c.Observe(key, nil, now)
			if len(obs.Pods) != 1 {
				t.Fatalf("pods %+v", obs.Pods)
			}
			p := obs.Pods[0]
			if p.AllocID != tc.wantAlloc || p.Pod.Ready != tc.wantReady {
				t.Fatalf("pod judged by %q (ready %v), want %q (ready %v): %+v", p.AllocID, p.Pod.Ready, tc.wantAlloc, tc.wantReady, p)
			}
		})
	}
}

// scaledBack is web-0 registered at 10 (version 0), scaled to 2 at 20
// (version 1) and put back to 1 at 30 (version 2).
func scaledBack() *api.Job {
	j := childJob("web", "0", "r", false, 30)
	j.Version = ptr(uint64(2))
	j.TaskGroups[0].Count = ptr(1)
	return j
}

// TestObserveLostAllocationRechecksWhenItsWaitEnds: a lost allocation (its
// node purged, or down past the server's heartbeat) is held as Terminating
// until its client must have stopped it. Nothing in Nomad changes when that
// wait ends, so the observation says when to look again; without it the
// set waited for the periodic re-list (TestPurgedNodeReplacedOnNewVolume
// sat Terminating for minutes).
func TestObserveLostAllocationRechecksWhenItsWaitEnds(t *testing.T) {
	key := backend.SetKey{Namespace: "default", Name: "web"}
	t0 := time.Unix(1000, 0)
	c := NewCache()
	lost := alloc("a1", "web-0", "lost", "stop", ptr(true), 5, t0)
	c.Replace(Snapshot{Index: 6, Jobs: []*api.Job{childJob("web", "0", "r", false, 4)}, Allocs: []*api.AllocationListStub{lost}})
	// The child is rendered with the default stop_on_client_after.
	wait := jobs.DefaultStopOnClientAfter + lostAllocMargin
	for _, tc := range []struct {
		at          time.Duration
		terminating bool
		recheck     time.Duration
	}{
		{0, true, wait},
		{time.Minute, true, wait - time.Minute},
		{wait, false, 0},
	} {
		obs := c.Observe(key, nil, t0.Add(tc.at))
		if len(obs.Pods) != 1 || obs.Pods[0].Pod.Terminating != tc.terminating {
			t.Fatalf("at +%v: pods %+v, want one, terminating %v", tc.at, obs.Pods, tc.terminating)
		}
		if obs.RecheckAfter != tc.recheck {
			t.Fatalf("at +%v: recheck after %v, want %v", tc.at, obs.RecheckAfter, tc.recheck)
		}
	}
}

// TestCacheDeregisterSettleSequences: a deregister event is held as
// stopping (noteDeregister) until Nomad says whether it was a stop or a
// purge (settleDeregister), and that answer, read off the event loop, may
// come after newer events or a re-list. Whatever the order, the cache never
// frees an ordinal whose child may still run before Nomad said it was
// purged (and then only after its kill grace), and an answer never undoes
// what a newer event or a re-list told.
func TestCacheDeregisterSettleSequences(t *testing.T) {
	key := backend.SetKey{Namespace: "default", Name: "web"}
	t0 := time.Unix(1000, 0)
	grace := 5*time.Second + PurgeMargin
	parent := &api.Job{ID: ptr("web"), Namespace: ptr("default"), ModifyIndex: ptr(uint64(3)), Meta: map[string]string{"statefulset": "true"}}
	withCreate := func(j *api.Job, create uint64) *api.Job { j.CreateIndex = ptr(create); return j }
	// before is web-0 as the cache lists it, and as a purge's payload
	// carries it; stopped is web-0 stopped at index 6.
	before := func() *api.Job { return withCreate(childJob("web", "0", "r1", false, 4), 4) }
	stopped := func() *api.Job { return withCreate(childJob("web", "0", "r1", true, 6), 4) }
	// recreated is a new web-0, registered at 9 after a purge.
	recreated := func() *api.Job { return withCreate(childJob("web", "0", "r2", false, 9), 9) }
	complete := func(c *Cache, idx uint64) {
		c.upsertAllocPayload(stubPayload(alloc("a1", "web-0", "complete", "stop", ptr(true), 5, t0)), idx)
	}
	note := func(want bool, j *api.Job, idx uint64) func(*testing.T, *Cache) {
		return func(t *testing.T, c *Cache) {
			if _, _, settle := c.noteDeregister(j, nil, idx); settle != want {
				t.Fatalf("the deregister at %d asks Nomad: %v, want %v", idx, settle, want)
			}
		}
	}
	answer := func(idx uint64, j *api.Job, now time.Time) func(*testing.T, *Cache) {
		return func(_ *testing.T, c *Cache) { c.settleDeregister("default", *before().ID, idx, true, j, now) }
	}
	step := func(f func(*Cache)) func(*testing.T, *Cache) { return func(_ *testing.T, c *Cache) { f(c) } }
	// States of web-0.
	const (
		running  = "running"  // a pod, not stopping
		stopping = "stopping" // a Terminating pod at any time: unsettled, or stopped with its allocation running
		purged   = "purged"   // Terminating until its grace from t0 ends, then free
		stoppedS = "stopped"  // no pod, a stopped child (its ordinal is not free)
		gone     = "gone"     // free at once
		fresh    = "fresh"    // the new web-0 at r2, without the purged one's allocation
	)
	for _, tc := range []struct {
		name  string
		steps []func(*testing.T, *Cache)
		want  string
	}{
		{"stop, unanswered", []func(*testing.T, *Cache){note(true, stopped(), 6)}, stopping},
		{"stop, answered", []func(*testing.T, *Cache){note(true, stopped(), 6), answer(6, stopped(), t0)}, stopping},
		{"stop, allocation ends, answered", []func(*testing.T, *Cache){note(true, stopped(), 6), step(func(c *Cache) { complete(c, 7) }), answer(6, stopped(), t0)}, stoppedS},
		{"purge, unanswered", []func(*testing.T, *Cache){note(true, before(), 6)}, stopping},
		{"purge, answered", []func(*testing.T, *Cache){note(true, before(), 6), answer(6, nil, t0)}, purged},
		// Unanswered, a deregistered child is a pod still going even once
		// its allocation ended: a stopped child would be registered again
		// over the index of one that may have been purged (a conflict).
		{"purge, allocation ends, unanswered", []func(*testing.T, *Cache){note(true, before(), 6), step(func(c *Cache) { complete(c, 7) })}, stopping},
		{"purge, allocation ends, answered", []func(*testing.T, *Cache){note(true, before(), 6), step(func(c *Cache) { complete(c, 7) }), answer(6, nil, t0)}, gone},
		// The stop's answer, read after the purge, is stale: the purge
		// event at 8 decides.
		{"stop, purge, the stop's answer", []func(*testing.T, *Cache){note(true, stopped(), 6), note(true, stopped(), 8), answer(6, nil, t0)}, stopping},
		{"stop, purge, the stop's answer read before the purge", []func(*testing.T, *Cache){note(true, stopped(), 6), note(true, stopped(), 8), answer(6, stopped(), t0)}, stopping},
		{"stop, purge, both answers", []func(*testing.T, *Cache){note(true, stopped(), 6), note(true, stopped(), 8), answer(6, stopped(), t0), answer(8, nil, t0)}, purged},
		{"stop answered, then purge answered", []func(*testing.T, *Cache){note(true, stopped(), 6), answer(6, stopped(), t0), note(true, stopped(), 8), answer(8, nil, t0)}, purged},
		// A new child under the purged one's ID is a new job (its
		// CreateIndex): the purged one's allocation is not its own.
		{"purge, new child, the purge's answer", []func(*testing.T, *Cache){note(true, before(), 6), step(func(c *Cache) { c.UpsertJob(recreated(), 9) }), answer(6, nil, t0)}, fresh},
		{"purge, new child, the answer names it", []func(*testing.T, *Cache){note(true, before(), 6), step(func(c *Cache) { c.UpsertJob(recreated(), 9) }), answer(6, recreated(), t0)}, fresh},
		{"purge, the answer names the new child before its event", []func(*testing.T, *Cache){note(true, before(), 6), answer(6, recreated(), t0), step(func(c *Cache) { c.UpsertJob(recreated(), 9) })}, fresh},
		{"purge answered, then the new child", []func(*testing.T, *Cache){note(true, before(), 6), answer(6, nil, t0), step(func(c *Cache) { c.UpsertJob(recreated(), 9) })}, fresh},
		// A re-list after the event holds its outcome: the purge's grace
		// runs from the listing, and a late answer (here an hour late)
		// changes nothing.
		{"purge, re-list, late answer", []func(*testing.T, *Cache){note(true, before(), 6), step(func(c *Cache) { c.Replace(Snapshot{Index: 9, At: t0}) }), answer(6, nil, t0.Add(time.Hour))}, purged},
		{"stop, re-list holding it, late answer", []func(*testing.T, *Cache){note(true, stopped(), 6), step(func(c *Cache) {
			c.Replace(Snapshot{Index: 9, At: t0, Jobs: []*api.Job{stopped()}, Allocs: []*api.AllocationListStub{alloc("a1", "web-0", "running", "run", ptr(true), 5, t0)}})
		}), answer(6, nil, t0)}, stopping},
		{"a deregister the listing holds", []func(*testing.T, *Cache){note(false, before(), 2)}, running},
		{"an older deregister", []func(*testing.T, *Cache){step(func(c *Cache) { c.UpsertJob(withCreate(childJob("web", "0", "r1", false, 10), 4), 10) }), note(false, before(), 11)}, running},
		{"purge seen twice", []func(*testing.T, *Cache){note(true, before(), 6), answer(6, nil, t0), note(false, before(), 6)}, purged},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := NewCache()
			c.Replace(Snapshot{Index: 2, Jobs: []*api.Job{parent, before()},
				Allocs: []*api.AllocationListStub{alloc("a1", "web-0", "running", "run", ptr(true), 5, t0)}})
			for _, s := range tc.steps {
				s(t, c)
			}
			at := func(d time.Duration) (pod *PodDetail, stoppedChild bool) {
				obs := c.Observe(key, nil, t0.Add(d))
				for i := range obs.Pods {
					if obs.Pods[i].Pod.Ordinal == 0 {
						pod = &obs.Pods[i]
					}
				}
				return pod, len(obs.Stopped) == 1
			}
			early, stoppedEarly := at(grace - time.Second)
			late, stoppedLate := at(grace)
			var ok bool
			switch tc.want {
			case running:
				ok = early != nil && !early.Pod.Terminating && late != nil && !late.Pod.Terminating
			case stopping:
				ok = early != nil && early.Pod.Terminating && late != nil && late.Pod.Terminating
			case purged:
				ok = early != nil && early.Pod.Terminating && late == nil && !stoppedLate
			case stoppedS:
				ok = early == nil && stoppedEarly && late == nil && stoppedLate
			case gone:
				ok = early == nil && !stoppedEarly
			case fresh:
				ok = early != nil && early.Pod.Revision == "r2" && early.AllocID == "" && !early.Pod.Terminating && early.AllTerminal
			}
			if !ok {
				t.Fatalf("web-0 is not %s: at +%v %+v (stopped child %v), at +%v %+v (stopped child %v)", tc.want,
					grace-time.Second, early, stoppedEarly, grace, late, stoppedLate)
			}
		})
	}
}

// TestCacheParentDeregisterSettles: a parent's deregister holds it stopped
// (its set is deleted by its own spec either way) until Nomad's answer; a
// purge then keeps it as purged while it has children, and a child of an
// unknown job is adopted from the answer only while the cache still does
// not know it.
func TestCacheParentDeregisterSettles(t *testing.T) {
	key := backend.SetKey{Namespace: "default", Name: "web"}
	parent := &api.Job{ID: ptr("web"), Namespace: ptr("default"), ModifyIndex: ptr(uint64(3)), Meta: map[string]string{"statefulset": "true"}}
	c := NewCache()
	c.Replace(Snapshot{Index: 2, Jobs: []*api.Job{parent, childJob("web", "0", "r1", false, 2)}})
	if _, held, settle := c.noteDeregister(parent, nil, 6); !held || !settle {
		t.Fatalf("a known parent's deregister: held %v, asks %v", held, settle)
	}
	obs := c.Observe(key, nil, time.Now())
	if obs.Parent == nil || obs.Parent.(jobs.Parent).Job().Stop == nil || !*obs.Parent.(jobs.Parent).Job().Stop || obs.ParentPurged {
		t.Fatalf("an unsettled parent must show stopped: %+v purged %v", obs.Parent, obs.ParentPurged)
	}
	if parent.Stop != nil {
		t.Fatal("the event's job was changed in place")
	}
	c.settleDeregister("default", "web", 6, true, nil, time.Now())
	if obs := c.Observe(key, nil, time.Now()); obs.Parent == nil || !obs.ParentPurged {
		t.Fatalf("a purged parent with children must show purged: %+v %v", obs.Parent, obs.ParentPurged)
	}

	web1 := childJob("web", "1", "r1", true, 7)
	if _, held, settle := c.noteDeregister(web1, nil, 7); held || !settle {
		t.Fatalf("an unknown child's deregister: held %v, asks %v", held, settle)
	}
	c.settleDeregister("default", "web-1", 7, false, nil, time.Now())
	if obs := c.Observe(key, nil, time.Now()); len(obs.Stopped) != 0 {
		t.Fatalf("a child Nomad no longer has was adopted: %+v", obs.Stopped)
	}
	c.settleDeregister("default", "web-1", 7, false, web1, time.Now())
	if obs := c.Observe(key, nil, time.Now()); len(obs.Stopped) != 1 || obs.Stopped[0].JobID != "web-1" {
		t.Fatalf("a stopped child the stream missed must be adopted: %+v", obs.Stopped)
	}
}
