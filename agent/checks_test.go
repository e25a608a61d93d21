package agent

import (
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	consulapi "github.com/hashicorp/consul/api"
	"github.com/hashicorp/nomad/api"

	"github.com/nomad-statefulset/nomad-statefulset/backend"
	"github.com/nomad-statefulset/nomad-statefulset/backend/consul"
	"github.com/nomad-statefulset/nomad-statefulset/backend/nomad"
	"github.com/nomad-statefulset/nomad-statefulset/jobs"
	"github.com/nomad-statefulset/nomad-statefulset/reconciler"
)

// fakeChecks answers Checks from a map by allocation ID, and records what
// each set watches.
type fakeChecks struct {
	checks  map[string]consul.AllocChecks
	synced  bool
	watched map[backend.SetKey][]string
	leader  map[backend.SetKey]string
}

// judgeAll judges every pod once its facts are in, as controller.judge
// does.
func judgeAll(pods []nomad.PodDetail) {
	for i := range pods {
		pods[i].Judge()
	}
}

func (f *fakeChecks) Watch(key backend.SetKey, services []string, leaderCheck string) {
	if f.watched == nil {
		f.watched = map[backend.SetKey][]string{}
		f.leader = map[backend.SetKey]string{}
	}
	f.watched[key] = services
	f.leader[key] = leaderCheck
}

func (f *fakeChecks) Checks(_ backend.SetKey, allocID string) (consul.AllocChecks, bool) {
	return f.checks[allocID], f.synced
}

func TestApplyChecks(t *testing.T) {
	key := backend.SetKey{Namespace: "default", Name: "web"}
	readyAt := time.Unix(1_000_000, 0)
	// ready is a pod Ready on its task states, as Observe hands it over;
	// missed: Nomad judged it unhealthy (it missed its healthy_deadline).
	ready := func(missed bool) nomad.PodDetail {
		d := nomad.PodDetail{AllocID: "a1", Pod: reconciler.Pod{Phase: reconciler.PhaseRunning},
			Facts: reconciler.ReadinessFacts{Alloc: reconciler.AllocFacts{
				Live: true, HealthKnown: true, Healthy: !missed, HealthTime: readyAt, TasksKnown: true}}}
		d.Judge()
		return d
	}
	cases := []struct {
		name        string
		pod         nomad.PodDetail
		checks      consul.AllocChecks
		synced      bool
		hasServices bool
		ready       bool
		since       time.Time
		notReady    string
	}{
		{name: "passing checks keep a pod Ready", pod: ready(false), checks: consul.AllocChecks{Known: true}, synced: true, hasServices: true,
			ready: true, since: readyAt},
		{name: "a critical check makes it not Ready", pod: ready(false), checks: consul.AllocChecks{Known: true, Critical: "check c is critical"},
			synced: true, hasServices: true, notReady: "check c is critical"},
		{name: "checks passing again move ReadySince", pod: ready(false), checks: consul.AllocChecks{Known: true, PassingSince: readyAt.Add(time.Hour)},
			synced: true, hasServices: true, ready: true, since: readyAt.Add(time.Hour)},
		{name: "checks not read yet leave a healthy pod Ready", pod: ready(false), hasServices: true, ready: true, since: readyAt},
		{name: "a pod that missed its deadline waits for its checks", pod: ready(true), hasServices: true, notReady: reconciler.NotReadyChecksUnknown},
		{name: "a pod that missed its deadline with no checks listed waits", pod: ready(true), synced: true, hasServices: true, notReady: reconciler.NotReadyChecksUnknown},
		{name: "a pod that missed its deadline is Ready once its checks pass", pod: ready(true), checks: consul.AllocChecks{Known: true},
			synced: true, hasServices: true, ready: true, since: readyAt},
		{name: "a pod that missed its deadline without Consul services is Ready on its tasks", pod: ready(true), ready: true, since: readyAt},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			src := &fakeChecks{checks: map[string]consul.AllocChecks{"a1": tc.checks}, synced: tc.synced}
			pods := []nomad.PodDetail{tc.pod}
			applyChecks(src, key, pods, tc.hasServices)
			judgeAll(pods)
			p := pods[0]
			if p.Pod.Ready != tc.ready || !p.Pod.ReadySince.Equal(tc.since) || p.NotReady != tc.notReady {
				t.Fatalf("ready %v since %v, %q; want %v since %v, %q", p.Pod.Ready, p.Pod.ReadySince, p.NotReady, tc.ready, tc.since, tc.notReady)
			}
		})
	}
}

// A pod leads when the watcher says its leader check passes, and only while
// its allocation is live: a pod on its way out, or a set without Consul
// services, has no leader. Leading says nothing of readiness.
func TestApplyChecksLeader(t *testing.T) {
	key := backend.SetKey{Namespace: "default", Name: "pg"}
	readyAt := time.Unix(1_000_000, 0)
	live := reconciler.AllocFacts{Live: true, HealthKnown: true, Healthy: true, HealthTime: readyAt, TasksKnown: true}
	running := nomad.PodDetail{AllocID: "a1", Pod: reconciler.Pod{Phase: reconciler.PhaseRunning}, Facts: reconciler.ReadinessFacts{Alloc: live}}
	// terminating is how Observe hands over a pod whose allocation is
	// being stopped: running, and no live facts.
	terminating := nomad.PodDetail{AllocID: "a1", Pod: reconciler.Pod{Phase: reconciler.PhaseRunning, Terminating: true}}
	wasLeader := running
	wasLeader.Pod.Leader = true
	cases := []struct {
		name        string
		pod         nomad.PodDetail
		checks      consul.AllocChecks
		hasServices bool
		leader      bool
		ready       bool
	}{
		{name: "the leader check passes", pod: running, checks: consul.AllocChecks{Known: true, Leader: true}, hasServices: true,
			leader: true, ready: true},
		{name: "a follower is Ready", pod: running, checks: consul.AllocChecks{Known: true}, hasServices: true, ready: true},
		{name: "a leader whose other checks fail still leads, not Ready", pod: running,
			checks: consul.AllocChecks{Known: true, Critical: "check data is critical", Leader: true}, hasServices: true, leader: true},
		{name: "a terminating pod does not lead", pod: terminating, checks: consul.AllocChecks{Known: true, Leader: true}, hasServices: true},
		{name: "without Consul services no pod leads", pod: running, checks: consul.AllocChecks{Known: true, Leader: true}, ready: true},
		{name: "a pod that led no longer does once the check moves", pod: wasLeader, checks: consul.AllocChecks{Known: true}, hasServices: true,
			ready: true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			src := &fakeChecks{checks: map[string]consul.AllocChecks{"a1": tc.checks}, synced: true}
			pods := []nomad.PodDetail{tc.pod}
			applyChecks(src, key, pods, tc.hasServices)
			judgeAll(pods)
			if p := pods[0]; p.Pod.Leader != tc.leader || p.Pod.Ready != tc.ready {
				t.Fatalf("leader %v ready %v (%q); want leader %v ready %v", p.Pod.Leader, p.Pod.Ready, p.NotReady, tc.leader, tc.ready)
			}
		})
	}
}

// The controller watches the set's services with the leader check its spec
// names, and each pass's pods lead as the watcher says: the leader follows
// the check from one pass to the next. A deleted set stops its watches and
// has no leader.
func TestGateChecksLeaderFollowsTheCheck(t *testing.T) {
	key := backend.SetKey{Namespace: "default", Name: "pg"}
	parent := &api.Job{TaskGroups: []*api.TaskGroup{{Services: []*api.Service{{Name: "pg"}, {Name: "pg-primary"}}}}}
	live := reconciler.AllocFacts{Live: true, HealthKnown: true, Healthy: true, HealthTime: time.Unix(1_000_000, 0), TasksKnown: true}
	observe := func() nomad.Observation {
		obs := nomad.Observation{Parent: jobs.ParentOf(parent)}
		for i, id := range []string{"a0", "a1"} {
			obs.Pods = append(obs.Pods, nomad.PodDetail{AllocID: id,
				Pod:   reconciler.Pod{Ordinal: i, Phase: reconciler.PhaseRunning},
				Facts: reconciler.ReadinessFacts{Alloc: live}})
		}
		return obs
	}
	src := &fakeChecks{synced: true}
	c := &controller{checks: src}
	for _, tc := range []struct {
		name    string
		leads   string
		deleted bool
		want    []bool
	}{
		{name: "a0 leads", leads: "a0", want: []bool{true, false}},
		{name: "a1 leads", leads: "a1", want: []bool{false, true}},
		{name: "between leaders", want: []bool{false, false}},
		{name: "deleted", leads: "a1", deleted: true, want: []bool{false, false}},
	} {
		src.checks = map[string]consul.AllocChecks{"a0": {Known: true}, "a1": {Known: true}}
		if tc.leads != "" {
			src.checks[tc.leads] = consul.AllocChecks{Known: true, Leader: true}
		}
		obs := observe()
		c.gateChecks(key, obs, tc.deleted, "primary", true)
		judgeAll(obs.Pods)
		if tc.deleted {
			if len(src.watched[key]) != 0 {
				t.Errorf("%s: still watching %v", tc.name, src.watched[key])
			}
		} else if got := src.watched[key]; src.leader[key] != "primary" || !slices.Equal(got, []string{"pg", "pg-primary"}) {
			t.Errorf("%s: watching %v with leader check %q; want pg, pg-primary with primary", tc.name, got, src.leader[key])
		}
		for i, p := range obs.Pods {
			if p.Pod.Leader != tc.want[i] || !p.Pod.Ready {
				t.Errorf("%s: pod %d leader %v ready %v; want leader %v, Ready", tc.name, i, p.Pod.Leader, p.Pod.Ready, tc.want[i])
			}
		}
	}

	// Reading the checks for a view starts and changes no watch: the
	// watches follow the passes that decide.
	other := backend.SetKey{Namespace: "default", Name: "view-only"}
	c.gateChecks(other, observe(), false, "primary", false)
	if _, ok := src.watched[other]; ok {
		t.Errorf("building a view watched %v", src.watched[other])
	}

	// The leader is known only once every live pod's checks are read, and
	// never without Consul: until then the reconciler takes no Ready pod
	// down as a follower.
	src.checks = map[string]consul.AllocChecks{"a0": {Known: true, Leader: true}, "a1": {Known: true}}
	if !c.gateChecks(key, observe(), false, "primary", true) {
		t.Error("synced checks: the leader is unknown")
	}
	src.synced = false
	if c.gateChecks(key, observe(), false, "primary", true) {
		t.Error("checks not read yet: the leader is taken as known")
	}
	if !c.gateChecks(key, observe(), false, "", true) {
		t.Error("a set without a leader check has an unknown leader")
	}
	noConsul := &controller{}
	if noConsul.gateChecks(key, observe(), false, "primary", true) {
		t.Error("without Consul the leader check cannot be read, yet the leader is taken as known")
	}
}

// From recorded payloads of a real Nomad registering in a real Consul
// (backend/consul/testdata): the allocation, listed as the watcher lists
// it, becomes a Ready pod; its service's critical check, mapped by the
// service ID Nomad registered, makes that pod not Ready with the check's
// name and output as the reason.
func TestRecordedAllocationMapsToItsChecks(t *testing.T) {
	dir := filepath.Join("..", "backend", "consul", "testdata")
	raw, err := os.ReadFile(filepath.Join(dir, "nomad-alloc.json"))
	if err != nil {
		t.Fatal(err)
	}
	var full api.Allocation
	var stub api.AllocationListStub
	if err := json.Unmarshal(raw, &full); err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(raw, &stub); err != nil {
		t.Fatal(err)
	}
	// The recorded job is a plain one; make it a child of set "rec".
	child := full.Job
	child.Meta = map[string]string{"statefulset_parent": "rec", "statefulset_ordinal": "0", "statefulset_revision": "rec-1"}
	stub.JobID = *child.ID
	// The allocation was placed for this registration.
	*child.JobModifyIndex = stub.CreateIndex - 1
	key := backend.SetKey{Namespace: "default", Name: "rec"}
	cache := nomad.NewCache()
	cache.Replace(nomad.Snapshot{Index: stub.ModifyIndex, Jobs: []*api.Job{child}, Allocs: []*api.AllocationListStub{&stub}})

	for _, tc := range []struct {
		file     string
		ready    bool
		notReady string
	}{
		{"health-rec-web-passing.json", true, ""},
		{"health-rec-web-critical.json", false, `check "healthy-file" of service "rec-web" is critical: context deadline exceeded`},
	} {
		t.Run(tc.file, func(t *testing.T) {
			b, err := os.ReadFile(filepath.Join(dir, tc.file))
			if err != nil {
				t.Fatal(err)
			}
			var entries []*consulapi.ServiceEntry
			if err := json.Unmarshal(b, &entries); err != nil {
				t.Fatal(err)
			}
			src := &fakeChecks{checks: consul.AllocChecksOf(entries, ""), synced: true}
			obs := cache.Observe(key, nil, time.Now())
			if len(obs.Pods) != 1 || !obs.Pods[0].Pod.Ready || obs.Pods[0].AllocID != full.ID {
				t.Fatalf("the recorded allocation is not a Ready pod: %+v", obs.Pods)
			}
			applyChecks(src, key, obs.Pods, true)
			judgeAll(obs.Pods)
			if p := obs.Pods[0]; p.Pod.Ready != tc.ready || p.NotReady != tc.notReady {
				t.Fatalf("ready %v, %q; want %v, %q", p.Pod.Ready, p.NotReady, tc.ready, tc.notReady)
			}
		})
	}
}

// fakeLeaders answers Leader from a map by allocation ID (absent: not
// read), and records what each set watches.
type fakeLeaders struct {
	leads    map[string]bool
	check    map[backend.SetKey]string
	interval map[backend.SetKey]time.Duration
	allocs   map[backend.SetKey][]string
}

func (f *fakeLeaders) Watch(key backend.SetKey, check string, interval time.Duration, allocs []string) {
	if f.check == nil {
		f.check, f.interval, f.allocs = map[backend.SetKey]string{}, map[backend.SetKey]time.Duration{}, map[backend.SetKey][]string{}
	}
	f.check[key], f.interval[key], f.allocs[key] = check, interval, allocs
}

func (f *fakeLeaders) Leader(_ backend.SetKey, allocID string) (bool, bool) {
	leads, read := f.leads[allocID]
	return leads, read
}

// TestGateChecksNativeLeader: a leader check on a provider = "nomad"
// service is read by the native watcher, for the live allocations, at the
// check's interval, Consul or not, and never asked of Consul; the leader
// is known once every live pod is read; a Consul leader check, or a
// deleted set, stops the native reads. A native leader check says nothing
// of readiness: a follower stays Ready.
func TestGateChecksNativeLeader(t *testing.T) {
	key := backend.SetKey{Namespace: "default", Name: "pg"}
	nativeParent := &api.Job{TaskGroups: []*api.TaskGroup{{Services: []*api.Service{{Name: "pg-primary", Provider: "nomad",
		Checks: []api.ServiceCheck{{Name: "primary", Type: "http", Interval: 3 * time.Second}}}}}}}
	consulParent := &api.Job{TaskGroups: []*api.TaskGroup{{Services: []*api.Service{{Name: "pg-primary",
		Checks: []api.ServiceCheck{{Name: "primary", Type: "script"}}}}}}}
	live := reconciler.AllocFacts{Live: true, HealthKnown: true, Healthy: true, HealthTime: time.Unix(1_000_000, 0), TasksKnown: true}
	observe := func(parent *api.Job) nomad.Observation {
		obs := nomad.Observation{Parent: jobs.ParentOf(parent)}
		for i, id := range []string{"a0", "a1", "a2"} {
			facts := reconciler.ReadinessFacts{Alloc: live}
			if id == "a2" {
				facts.Alloc.Live = false // terminating: not read, never leads
			}
			d := nomad.PodDetail{AllocID: id, Pod: reconciler.Pod{Ordinal: i, Phase: reconciler.PhaseRunning}, Facts: facts}
			d.Judge()
			obs.Pods = append(obs.Pods, d)
		}
		return obs
	}
	for _, withConsul := range []bool{false, true} {
		consulSrc := &fakeChecks{synced: true}
		src := &fakeLeaders{leads: map[string]bool{"a0": false, "a1": true, "a2": true}}
		c := &controller{native: src}
		if withConsul {
			c.checks = consulSrc
		}
		obs := observe(nativeParent)
		if !c.gateChecks(key, obs, false, "primary", true) {
			t.Fatalf("consul %v: every live pod read, and the leader is unknown", withConsul)
		}
		if src.check[key] != "primary" || src.interval[key] != 3*time.Second || !slices.Equal(src.allocs[key], []string{"a0", "a1"}) {
			t.Fatalf("consul %v: native watch %q every %s of %v; want primary every 3s of the live a0, a1",
				withConsul, src.check[key], src.interval[key], src.allocs[key])
		}
		if withConsul && consulSrc.leader[key] != "" {
			t.Fatalf("the native leader check %q was asked of Consul", consulSrc.leader[key])
		}
		for i, want := range []bool{false, true, false} {
			if p := obs.Pods[i]; p.Pod.Leader != want || (i < 2 && !p.Pod.Ready) {
				t.Fatalf("consul %v: pod %d leader %v ready %v; want leader %v, the live ones Ready", withConsul, i, p.Pod.Leader, p.Pod.Ready, want)
			}
		}
		delete(src.leads, "a0")
		if c.gateChecks(key, observe(nativeParent), false, "primary", true) {
			t.Fatalf("consul %v: a0 not read, and the leader is taken as known", withConsul)
		}
		c.gateChecks(key, observe(consulParent), false, "primary", true)
		if src.check[key] != "" {
			t.Fatalf("consul %v: a Consul leader check still read natively (%q)", withConsul, src.check[key])
		}
		c.gateChecks(key, observe(nativeParent), true, "primary", true)
		if src.check[key] != "" {
			t.Fatalf("consul %v: a deleted set still read natively (%q)", withConsul, src.check[key])
		}
	}
}
