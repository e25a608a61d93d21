package nomadsim

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/nomad/api"

	"github.com/nomad-statefulset/nomad-statefulset/backend/nomad"
)

// Manual-mode delays used throughout: distinct, so each Advance moves
// exactly one kind of transition.
const (
	tPlace   = 1 * time.Second
	tStart   = 2 * time.Second
	tHealthy = 3 * time.Second
	tStop    = 5 * time.Second
)

func manual(t testing.TB, mod ...func(*NomadConfig)) *Nomad {
	t.Helper()
	cfg := NomadConfig{Manual: true, PlaceDelay: tPlace, StartDelay: tStart, HealthyDelay: tHealthy, StopDelay: tStop}
	for _, m := range mod {
		m(&cfg)
	}
	s := NewNomad(cfg)
	t.Cleanup(s.Close)
	return s
}

// testJob is a count-1 service job like a child the agent renders.
func testJob(id string) *api.Job {
	j := api.NewServiceJob(id, id, "global", 50)
	tg := api.NewTaskGroup("pod", 1)
	tg.AddTask(api.NewTask("app", "mock_driver"))
	j.AddTaskGroup(tg)
	j.Meta = map[string]string{"statefulset_revision": "r1"}
	return j
}

func withVolume(j *api.Job, source string) *api.Job {
	j.TaskGroups[0].Volumes = map[string]*api.VolumeRequest{
		"data": {Name: "data", Type: "host", Source: source, AccessMode: "single-node-single-writer", AttachmentMode: "file-system"},
	}
	return j
}

func register(t testing.TB, s *Nomad, j *api.Job, enforce bool, idx uint64) *api.JobRegisterResponse {
	t.Helper()
	resp, err := s.RegisterJob(context.Background(), j, enforce, idx)
	if err != nil {
		t.Fatalf("register %s: %v", *j.ID, err)
	}
	return resp
}

func only(t testing.TB, s *Nomad, id string) *api.AllocationListStub {
	t.Helper()
	allocs := s.Allocs("default", id)
	if len(allocs) != 1 {
		t.Fatalf("job %s has %d allocations, want 1: %+v", id, len(allocs), allocs)
	}
	return allocs[0]
}

func jobStatus(t testing.TB, s *Nomad, id string) string {
	t.Helper()
	j := s.Job("default", id)
	if j == nil {
		t.Fatalf("job %s not found", id)
	}
	return *j.Status
}

// responseBody unpacks a simulated Nomad error the way a caller of the real
// api client would.
func responseBody(t testing.TB, err error) (int, string) {
	t.Helper()
	var ure api.UnexpectedResponseError
	if !errors.As(err, &ure) {
		t.Fatalf("error %v (%T) is not an api.UnexpectedResponseError", err, err)
	}
	return ure.StatusCode(), ure.Body()
}

func TestRegisterCheckAndSet(t *testing.T) {
	type step struct {
		op      string // register, stop, purge
		enforce bool
		index   func(jmi uint64) uint64
		wantErr string
	}
	cur := func(jmi uint64) uint64 { return jmi }
	zero := func(uint64) uint64 { return 0 }
	stale := func(jmi uint64) uint64 { return jmi - 1 }
	future := func(uint64) uint64 { return 999 }
	reg := func(enforce bool, idx func(uint64) uint64, wantErr string) step {
		return step{op: "register", enforce: enforce, index: idx, wantErr: wantErr}
	}
	cases := []struct {
		name  string
		steps []step
	}{
		{"create with index 0", []step{reg(true, zero, "")}},
		{"create when it exists", []step{reg(true, zero, ""), reg(true, zero, "Enforcing job modify index 0: job already exists")}},
		{"a stopped job exists", []step{reg(true, zero, ""), {op: "stop"}, reg(true, zero, "Enforcing job modify index 0: job already exists")}},
		{"update at the current index", []step{reg(true, zero, ""), reg(true, cur, "")}},
		{"update at a stale index", []step{reg(true, zero, ""), reg(true, cur, ""), reg(true, stale, "Enforcing job modify index %[2]d: job exists with conflicting job modify index: %[1]d")}},
		{"update of a missing job", []step{reg(true, future, "Enforcing job modify index 999: job does not exist")}},
		{"create again after purge", []step{reg(true, zero, ""), {op: "purge"}, reg(true, zero, "")}},
		{"unforced register overwrites", []step{reg(true, zero, ""), reg(false, future, "")}},
		{"restart a stopped job at its index", []step{reg(true, zero, ""), {op: "stop"}, reg(true, cur, "")}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			s := manual(t)
			ctx := context.Background()
			var jmi uint64
			for i, st := range tc.steps {
				var err error
				switch st.op {
				case "register":
					j := testJob("web-0")
					j.Meta["step"] = fmt.Sprint(i) // every register is a new spec
					var resp *api.JobRegisterResponse
					resp, err = s.RegisterJob(ctx, j, st.enforce, st.index(jmi))
					if st.wantErr == "" {
						if err != nil {
							t.Fatalf("step %d: %v", i, err)
						}
						if got := *s.Job("default", "web-0").JobModifyIndex; got != resp.JobModifyIndex {
							t.Fatalf("step %d: response JobModifyIndex %d, job has %d", i, resp.JobModifyIndex, got)
						}
					}
				case "stop", "purge":
					err = s.DeregisterJob(ctx, "default", "web-0", st.op == "purge")
				}
				if st.wantErr != "" {
					want := st.wantErr
					if strings.Contains(want, "%") {
						want = fmt.Sprintf(want, jmi, st.index(jmi))
					}
					if err == nil {
						t.Fatalf("step %d: no error, want %q", i, want)
					}
					code, body := responseBody(t, err)
					if code != http.StatusInternalServerError || body != want {
						t.Fatalf("step %d: got %d %q, want 500 %q", i, code, body, want)
					}
					if got := err.Error(); got != "Unexpected response code: 500 ("+want+")" {
						t.Fatalf("step %d: Error() = %q", i, got)
					}
					continue
				}
				if err != nil {
					t.Fatalf("step %d: %v", i, err)
				}
				if j := s.Job("default", "web-0"); j != nil {
					jmi = *j.JobModifyIndex
				} else {
					jmi = 0
				}
			}
		})
	}
}

func TestRegisterVersions(t *testing.T) {
	s := manual(t)
	ctx := context.Background()
	sub, cancel := subscribe(t, s, 0)
	defer cancel()

	r1 := register(t, s, testJob("web-0"), true, 0)
	j := s.Job("default", "web-0")
	if *j.Version != 0 || *j.JobModifyIndex != r1.JobModifyIndex || *j.CreateIndex != r1.JobModifyIndex || *j.ModifyIndex != r1.JobModifyIndex {
		t.Fatalf("first version: %+v", j)
	}
	if *j.Status != "pending" || *j.Stop || *j.Namespace != "default" || *j.Type != "service" {
		t.Fatalf("first version is not canonical and pending: status %q", *j.Status)
	}

	// The same spec again: no new version, no job write, but an eval index.
	r2 := register(t, s, testJob("web-0"), true, r1.JobModifyIndex)
	if r2.JobModifyIndex != r1.JobModifyIndex || r2.EvalCreateIndex <= r1.JobModifyIndex {
		t.Fatalf("unchanged spec: %+v after %+v", r2, r1)
	}
	if v := *s.Job("default", "web-0").Version; v != 0 {
		t.Fatalf("unchanged spec made version %d", v)
	}

	changed := testJob("web-0")
	changed.Meta["statefulset_revision"] = "r2"
	r3 := register(t, s, changed, true, r1.JobModifyIndex)
	j = s.Job("default", "web-0")
	if *j.Version != 1 || *j.JobModifyIndex != r3.JobModifyIndex || *j.CreateIndex != r1.JobModifyIndex {
		t.Fatalf("second version: version %d jmi %d create %d", *j.Version, *j.JobModifyIndex, *j.CreateIndex)
	}

	if err := s.DeregisterJob(ctx, "default", "web-0", false); err != nil {
		t.Fatal(err)
	}
	j = s.Job("default", "web-0")
	if !*j.Stop || *j.Version != 2 || *j.JobModifyIndex <= r3.JobModifyIndex {
		t.Fatalf("stop is a new version: stop %v version %d jmi %d", *j.Stop, *j.Version, *j.JobModifyIndex)
	}

	// Job events: JobRegistered for each new version, JobDeregistered for
	// the stop; none for the unchanged register.
	var types []string
	for _, ev := range drain(s, sub) {
		for _, e := range ev.Events {
			if e.Topic == api.TopicJob {
				types = append(types, e.Type)
			}
		}
	}
	want := []string{"JobRegistered", "JobRegistered", "JobDeregistered"}
	if strings.Join(types, ",") != strings.Join(want, ",") {
		t.Fatalf("job events %v, want %v", types, want)
	}
}

func TestLifecycle(t *testing.T) {
	s := manual(t)
	register(t, s, testJob("web-0"), true, 0)
	if n := len(s.Allocs("default", "web-0")); n != 0 {
		t.Fatalf("allocation placed before the scheduler ran: %d", n)
	}
	s.Advance(tPlace)
	a := only(t, s, "web-0")
	if a.ClientStatus != "pending" || a.DesiredStatus != "run" || a.Name != "web-0.pod[0]" || a.JobVersion != 0 {
		t.Fatalf("placed: %+v", a)
	}
	if st := jobStatus(t, s, "web-0"); st != "running" {
		t.Fatalf("job status with a pending alloc: %q", st)
	}
	d := s.Deployment("default", "web-0")
	if d == nil || d.Status != "running" || d.TaskGroups["pod"].PlacedAllocs != 1 {
		t.Fatalf("deployment: %+v", d)
	}
	if full := s.Alloc(a.ID); full.DeploymentID != d.ID {
		t.Fatalf("alloc deployment %q, want %q", full.DeploymentID, d.ID)
	}

	s.Advance(tStart)
	a = only(t, s, "web-0")
	if a.ClientStatus != "running" || a.DeploymentStatus != nil {
		t.Fatalf("started: %+v", a)
	}
	if a.TaskStates["app"].State != "running" {
		t.Fatalf("task state: %+v", a.TaskStates["app"])
	}

	s.Advance(tHealthy)
	a = only(t, s, "web-0")
	if a.DeploymentStatus == nil || a.DeploymentStatus.Healthy == nil || !*a.DeploymentStatus.Healthy {
		t.Fatalf("healthy: %+v", a.DeploymentStatus)
	}
	if !a.DeploymentStatus.Timestamp.Equal(s.Now()) {
		t.Fatalf("health time %v, now %v", a.DeploymentStatus.Timestamp, s.Now())
	}
	if d := s.Deployment("default", "web-0"); d.Status != "successful" || d.TaskGroups["pod"].HealthyAllocs != 1 {
		t.Fatalf("deployment after health: %+v", d)
	}
	j := s.Job("default", "web-0")
	if !*j.Stable || *j.ModifyIndex == *j.JobModifyIndex {
		t.Fatalf("stable version: stable %v modify %d jmi %d", *j.Stable, *j.ModifyIndex, *j.JobModifyIndex)
	}
	if s.Pending() != 0 {
		t.Fatalf("%d transitions left after healthy", s.Pending())
	}

	// Stop: desired stop at the plan, complete after the stop delay.
	if err := s.DeregisterJob(context.Background(), "default", "web-0", false); err != nil {
		t.Fatal(err)
	}
	s.Advance(tPlace)
	a = only(t, s, "web-0")
	if a.DesiredStatus != "stop" || a.ClientStatus != "running" {
		t.Fatalf("stopping: %+v", a)
	}
	if st := jobStatus(t, s, "web-0"); st != "dead" {
		t.Fatalf("a stopped job is dead at once in Nomad, got %q", st)
	}
	if s.RunningAllocs("default", "web-0") != 1 {
		t.Fatal("a stopping alloc still runs")
	}
	s.Advance(tStop)
	a = only(t, s, "web-0")
	if a.ClientStatus != "complete" {
		t.Fatalf("stopped: %+v", a)
	}
	if s.RunningAllocs("default", "web-0") != 0 || s.MaxConcurrentAllocsPerJob() != 1 {
		t.Fatalf("running %d max %d", s.RunningAllocs("default", "web-0"), s.MaxConcurrentAllocsPerJob())
	}

	// Purge: the job goes, its allocations stay listed until GC.
	if err := s.DeregisterJob(context.Background(), "default", "web-0", true); err != nil {
		t.Fatal(err)
	}
	if _, err := s.GetJob(context.Background(), "default", "web-0"); !errors.Is(err, nomad.ErrNotFound) {
		t.Fatalf("purged job: %v", err)
	}
	if allocs := s.Allocs("default", "web-0"); len(allocs) != 1 {
		t.Fatalf("allocs of a purged job: %v", allocs)
	}
	if n := s.GC(); n != 1 || len(s.Allocs("default", "web-0")) != 0 {
		t.Fatalf("GC removed %d", n)
	}
	// Deregistering a job that does not exist is not an error in Nomad.
	if err := s.DeregisterJob(context.Background(), "default", "nope", true); err != nil {
		t.Fatalf("deregister of a missing job: %v", err)
	}
}

// TestUpdateReplacesAfterStop: a new version replaces the allocation
// destructively, and the replacement waits for the old one to stop, as
// Nomad's client does for a previous allocation.
func TestUpdateReplacesAfterStop(t *testing.T) {
	s := manual(t)
	r := register(t, s, testJob("web-0"), true, 0)
	s.Settle()
	old := only(t, s, "web-0")

	next := testJob("web-0")
	next.Meta["statefulset_revision"] = "r2"
	register(t, s, next, true, r.JobModifyIndex)
	s.Advance(tPlace)
	allocs := s.Allocs("default", "web-0")
	if len(allocs) != 2 {
		t.Fatalf("want old and new allocation, got %d", len(allocs))
	}
	o, n := allocs[0], allocs[1]
	if o.ID != old.ID || o.DesiredStatus != "stop" || o.DesiredDescription != descUpdating || o.NextAllocation != n.ID {
		t.Fatalf("old: %+v", o)
	}
	if full := s.Alloc(n.ID); full.PreviousAllocation != o.ID || n.JobVersion != 1 || n.Name != o.Name {
		t.Fatalf("new: %+v", full)
	}
	if d := s.Deployment("default", "web-0"); d.JobVersion != 1 || d.Status != "running" {
		t.Fatalf("deployment of the new version: %+v", d)
	}

	// Long past the start delay, the new one still waits for the old.
	s.Advance(tStart + tHealthy)
	if n := s.Alloc(n.ID); n.ClientStatus != "pending" {
		t.Fatalf("replacement started before the old alloc stopped: %s", n.ClientStatus)
	}
	s.Settle()
	allocs = s.Allocs("default", "web-0")
	if allocs[0].ClientStatus != "complete" || allocs[1].ClientStatus != "running" || !*allocs[1].DeploymentStatus.Healthy {
		t.Fatalf("after settle: %+v / %+v", allocs[0], allocs[1])
	}
	if m := s.MaxConcurrentAllocsPerJob(); m != 1 {
		t.Fatalf("max concurrent %d", m)
	}
}

// TestStopThenRegisterMayOverlap: a job stopped and registered again gets a
// fresh placement that does not wait for the stopping allocation, as in
// Nomad. The watchdog sees the overlap.
func TestStopThenRegisterMayOverlap(t *testing.T) {
	s := manual(t)
	register(t, s, testJob("web-0"), true, 0)
	s.Settle()
	ctx := context.Background()
	if err := s.DeregisterJob(ctx, "default", "web-0", false); err != nil {
		t.Fatal(err)
	}
	s.Advance(tPlace)
	register(t, s, testJob("web-0"), true, *s.Job("default", "web-0").JobModifyIndex)
	s.Advance(tPlace + tStart) // < tStop: the old one is still running
	if got := s.RunningAllocs("default", "web-0"); got != 2 {
		t.Fatalf("running %d, want the overlap of 2", got)
	}
	s.Settle()
	if m := s.MaxConcurrentAllocs("default", "web-0"); m != 2 {
		t.Fatalf("max concurrent %d, want 2", m)
	}
	if m := s.MaxConcurrentAllocsPerJob(); m != 2 {
		t.Fatalf("max concurrent per job %d, want 2", m)
	}
	// Waiting for the old allocation to complete first avoids it.
	s2 := manual(t)
	register(t, s2, testJob("web-0"), true, 0)
	s2.Settle()
	if err := s2.DeregisterJob(ctx, "default", "web-0", true); err != nil {
		t.Fatal(err)
	}
	s2.Settle()
	register(t, s2, testJob("web-0"), true, 0)
	s2.Settle()
	if m := s2.MaxConcurrentAllocsPerJob(); m != 1 {
		t.Fatalf("max concurrent %d after a clean purge and create", m)
	}
}

func TestAllocFaults(t *testing.T) {
	cases := []struct {
		name       string
		do         func(s *Nomad, id string) error
		wantClient string
		wantAllocs int
		// replacement state after settling, if any
		wantNewClient string
		wantPrev      bool
	}{
		{"fail", (*Nomad).FailAlloc, "failed", 1, "", false},
		{"lose", (*Nomad).LoseAlloc, "lost", 2, "running", true},
		{"stop", (*Nomad).StopAlloc, "complete", 2, "running", true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			s := manual(t)
			register(t, s, testJob("web-0"), true, 0)
			s.Settle()
			a := only(t, s, "web-0")
			if err := tc.do(s, a.ID); err != nil {
				t.Fatal(err)
			}
			s.Settle()
			allocs := s.Allocs("default", "web-0")
			if len(allocs) != tc.wantAllocs || allocs[0].ClientStatus != tc.wantClient {
				t.Fatalf("allocs: %+v", allocs)
			}
			if tc.wantNewClient != "" {
				n := s.Alloc(allocs[1].ID)
				if n.ClientStatus != tc.wantNewClient || (n.PreviousAllocation == a.ID) != tc.wantPrev {
					t.Fatalf("replacement: %+v", n)
				}
			}
			if m := s.MaxConcurrentAllocsPerJob(); m != 1 {
				t.Fatalf("max concurrent %d", m)
			}
			if err := tc.do(s, a.ID); err == nil {
				t.Fatal("a terminal allocation accepted another fault")
			}
		})
	}
}

func TestBehavior(t *testing.T) {
	s := manual(t)
	s.SetBehavior(func(j *api.Job, group string) AllocBehavior {
		switch j.Meta["statefulset_revision"] {
		case "fails":
			return AllocBehavior{FailOnStart: true}
		case "unhealthy":
			return AllocBehavior{Unhealthy: true}
		case "stuck":
			return AllocBehavior{NeverHealthy: true}
		}
		return AllocBehavior{}
	})
	for _, rev := range []string{"fails", "unhealthy", "stuck", "good"} {
		j := testJob("web-" + rev)
		j.Meta["statefulset_revision"] = rev
		register(t, s, j, true, 0)
	}
	s.Settle()
	check := func(id, client string, healthy *bool, deployment string) {
		t.Helper()
		a := only(t, s, id)
		if a.ClientStatus != client {
			t.Fatalf("%s: client %s, want %s", id, a.ClientStatus, client)
		}
		var got *bool
		if a.DeploymentStatus != nil {
			got = a.DeploymentStatus.Healthy
		}
		if (got == nil) != (healthy == nil) || (got != nil && *got != *healthy) {
			t.Fatalf("%s: healthy %v, want %v", id, got, healthy)
		}
		if d := s.Deployment("default", id); d.Status != deployment {
			t.Fatalf("%s: deployment %s, want %s", id, d.Status, deployment)
		}
	}
	check("web-fails", "failed", ptr(false), "failed")
	check("web-unhealthy", "running", ptr(false), "failed")
	check("web-stuck", "running", nil, "running")
	check("web-good", "running", ptr(true), "successful")
	if st := jobStatus(t, s, "web-fails"); st != "dead" {
		t.Fatalf("a job whose only alloc failed is %q", st)
	}
}

func TestScale(t *testing.T) {
	s := manual(t)
	j := testJob("multi")
	j.TaskGroups[0].Count = ptr(3)
	r := register(t, s, j, true, 0)
	s.Settle()
	if n := len(s.Allocs("default", "multi")); n != 3 {
		t.Fatalf("%d allocs", n)
	}
	j.TaskGroups[0].Count = ptr(1)
	register(t, s, j, true, r.JobModifyIndex)
	s.Settle()
	running := 0
	for _, a := range s.Allocs("default", "multi") {
		if a.ClientStatus == "running" {
			running++
			if a.Name != "multi.pod[0]" {
				t.Fatalf("kept %s", a.Name)
			}
		}
	}
	if running != 1 {
		t.Fatalf("%d running after scale-down", running)
	}
}

func TestHostVolumes(t *testing.T) {
	s := manual(t)
	ctx := context.Background()

	// A job whose volume does not exist yet waits, as a blocked eval.
	register(t, s, withVolume(testJob("web-0"), "data-web-0"), true, 0)
	s.Settle()
	if n := len(s.Allocs("default", "web-0")); n != 0 {
		t.Fatalf("placed without its volume: %d allocs", n)
	}
	if st := jobStatus(t, s, "web-0"); st != "pending" {
		t.Fatalf("blocked job status %q", st)
	}

	// Nomad 1.10.5 wants capacity_max ≥ capacity_min even when max is unset.
	_, err := s.CreateHostVolume(ctx, &api.HostVolume{Name: "data-web-0", PluginID: "mkdir", RequestedCapacityMinBytes: 1 << 20})
	if code, body := responseBody(t, err); code != 500 || body != "volume validation failed: capacity_max (0) must be larger than capacity_min (1048576)" {
		t.Fatalf("capacity_min alone: %d %q", code, body)
	}
	v, err := s.CreateHostVolume(ctx, &api.HostVolume{Name: "data-web-0", PluginID: "mkdir",
		RequestedCapacityMinBytes: 1 << 20, RequestedCapacityMaxBytes: 1 << 20})
	if err != nil {
		t.Fatal(err)
	}
	if v.ID == "" || v.NodeID != "node-1" || v.State != api.HostVolumeStateReady || v.Namespace != "default" || v.CapacityBytes != 1<<20 {
		t.Fatalf("created: %+v", v)
	}
	// Names are not unique in Nomad: a second create is a second volume,
	// on another node.
	v2, err := s.CreateHostVolume(ctx, &api.HostVolume{Name: "data-web-0"})
	if err != nil || v2.ID == v.ID || v2.NodeID != "node-2" {
		t.Fatalf("second volume of the name: %+v %v", v2, err)
	}
	if _, err := s.CreateHostVolume(ctx, &api.HostVolume{Name: "x", NodeID: "nowhere"}); err == nil {
		t.Fatal("a volume on a missing node was created")
	}
	other, _ := s.CreateHostVolume(ctx, &api.HostVolume{Name: "logs-web-0"})
	if _, err := s.CreateHostVolume(ctx, &api.HostVolume{Name: "data-web-0", Namespace: "other"}); err != nil {
		t.Fatal(err)
	}

	s.Settle()
	a := only(t, s, "web-0")
	if a.NodeID != "node-1" || a.ClientStatus != "running" {
		t.Fatalf("placed on %s (%s), want the volume's node-1", a.NodeID, a.ClientStatus)
	}

	list, err := s.ListHostVolumes(ctx, "default", "data-")
	if err != nil || len(list) != 2 {
		t.Fatalf("list by name prefix: %v %v", list, err)
	}
	if list, _ := s.ListHostVolumes(ctx, "default", other.ID[:12]); len(list) != 1 || list[0].ID != other.ID {
		t.Fatalf("list by ID prefix: %v", list)
	}
	if list, _ := s.ListHostVolumes(ctx, "other", "data"); len(list) != 1 || list[0].Namespace != "other" {
		t.Fatalf("other namespace: %v", list)
	}
	if list, _ := s.ListHostVolumes(ctx, "default", "data-web-0x"); len(list) != 0 {
		t.Fatalf("a longer prefix: %v", list)
	}
	if list, _ := s.ListHostVolumes(ctx, "*", ""); len(list) != 4 {
		t.Fatalf("all namespaces: %v", list)
	}

	err = s.DeleteHostVolume(ctx, "default", v.ID)
	if _, body := responseBody(t, err); body != fmt.Sprintf("volume %s in use by allocations: [%s]", v.ID, a.ID) {
		t.Fatalf("delete in use: %q", body)
	}
	if err := s.DeregisterJob(ctx, "default", "web-0", false); err != nil {
		t.Fatal(err)
	}
	s.Settle()
	if err := s.DeleteHostVolume(ctx, "default", v.ID); err != nil {
		t.Fatalf("delete after the alloc stopped: %v", err)
	}
	err = s.DeleteHostVolume(ctx, "default", v.ID)
	if _, body := responseBody(t, err); body != "no such volume: "+v.ID {
		t.Fatalf("delete twice: %q", body)
	}
	if n := len(s.HostVolumes()); n != 3 {
		t.Fatalf("%d volumes left", n)
	}
}

// TestNodeEligibility: nothing is placed on an ineligible node, so a job
// whose volume lives there is blocked; the node's changes are Node events
// and listings with their index; making the node eligible again leaves
// the job blocked (Nomad 1.10, issue 14) until it is evaluated.
func TestNodeEligibility(t *testing.T) {
	s := manual(t)
	ctx := context.Background()
	if _, err := s.CreateHostVolume(ctx, &api.HostVolume{Name: "data-web-0"}); err != nil {
		t.Fatal(err)
	}
	if err := s.SetNodeEligibility("node-1", false); err != nil {
		t.Fatal(err)
	}
	if err := s.SetNodeEligibility("nowhere", false); err == nil {
		t.Fatal("an unknown node's eligibility was set")
	}
	events, err := s.Events(ctx, s.Index())
	if err != nil {
		t.Fatal(err)
	}
	if ev := <-events; len(ev.Events) != 1 || ev.Events[0].Topic != api.TopicNode || ev.Events[0].Key != "node-1" {
		t.Fatalf("node event: %+v", ev)
	}
	register(t, s, withVolume(testJob("web-0"), "data-web-0"), true, 0)
	s.Settle()
	if n := len(s.Allocs("default", "web-0")); n != 0 || !s.Blocked("default", "web-0") {
		t.Fatalf("placed on an ineligible node: %d allocs, blocked %v", n, s.Blocked("default", "web-0"))
	}
	if err := s.SetNodeEligibility("node-1", true); err != nil {
		t.Fatal(err)
	}
	back := s.Index()
	s.Settle()
	if n := len(s.Allocs("default", "web-0")); n != 0 {
		t.Fatalf("placed once the node is eligible, without an evaluation: %d allocs", n)
	}
	nodes, err := s.ListNodes(ctx)
	if err != nil || nodes[0].SchedulingEligibility != api.NodeSchedulingEligible || nodes[0].ModifyIndex != back {
		t.Fatalf("listed %+v (%v), want node-1 eligible at %d", nodes[0], err, back)
	}
	if err := s.EvaluateJob(ctx, "default", "web-0"); err != nil {
		t.Fatal(err)
	}
	s.Settle()
	if s.Blocked("default", "web-0") {
		t.Fatal("still blocked once evaluated")
	}
	if a := only(t, s, "web-0"); a.NodeID != "node-1" || a.ClientStatus != "running" {
		t.Fatalf("evaluated: on %s (%s), want running on node-1", a.NodeID, a.ClientStatus)
	}
}

// TestHostVolumeUpdate: an update by ID is how Nomad expands a dynamic
// host volume, and the simulation refuses what Nomad's ValidateUpdate
// refuses, in its words: a claimed volume, a capacity_max below the
// volume's capacity, a new node pool. An accepted update keeps the node,
// pool, constraints and path, and takes the request's capacities,
// parameters and capabilities.
func TestHostVolumeUpdate(t *testing.T) {
	s := manual(t)
	ctx := context.Background()
	ch, cancel := subscribe(t, s, 0)
	defer cancel()
	req := &api.HostVolume{Name: "data-web-0", PluginID: "lvm",
		RequestedCapacityMinBytes: 10 << 20, RequestedCapacityMaxBytes: 10 << 20,
		Parameters:            map[string]string{"nomad_statefulset_class": "fast"},
		Constraints:           []*api.Constraint{{LTarget: "${attr.kernel.name}", RTarget: "linux", Operand: "="}},
		RequestedCapabilities: []*api.HostVolumeCapability{{AccessMode: "single-node-single-writer", AttachmentMode: "file-system"}}}
	v, err := s.CreateHostVolume(ctx, req)
	if err != nil || v.CapacityBytes != 10<<20 {
		t.Fatalf("create: %+v, %v", v, err)
	}
	register(t, s, withVolume(testJob("web-0"), "data-web-0"), true, 0)
	s.Settle()
	a := only(t, s, "web-0")

	got, err := s.GetHostVolume(ctx, "default", v.ID)
	if err != nil || got.Parameters["nomad_statefulset_class"] != "fast" || len(got.RequestedCapabilities) != 1 ||
		len(got.Allocations) != 1 || got.Allocations[0].ID != a.ID {
		t.Fatalf("get: %+v, %v", got, err)
	}
	if _, err := s.GetHostVolume(ctx, "other", v.ID); !errors.Is(err, nomad.ErrNotFound) {
		t.Fatalf("get in another namespace: %v", err)
	}
	if _, err := s.GetHostVolume(ctx, "default", "nope"); !errors.Is(err, nomad.ErrNotFound) {
		t.Fatalf("get of an unknown ID: %v", err)
	}

	grow := func(min, max int64, pool string) (*api.HostVolume, error) {
		return s.CreateHostVolume(ctx, &api.HostVolume{ID: v.ID, Name: v.Name, NodePool: pool,
			RequestedCapacityMinBytes: min, RequestedCapacityMaxBytes: max,
			Parameters: got.Parameters, RequestedCapabilities: got.RequestedCapabilities})
	}
	_, err = grow(20<<20, 20<<20, "")
	// The api client trims the body, so the multierror's closing blank
	// line is gone, as from a real Nomad.
	want := fmt.Sprintf("validating volume %q update failed: 1 error occurred:\n\t* cannot update a volume in use: claimed by allocs (%s)", v.ID, a.ID)
	if code, body := responseBody(t, err); code != 500 || body != want {
		t.Fatalf("update in use: %d %q, want %q", code, body, want)
	}
	if err := s.DeregisterJob(ctx, "default", "web-0", false); err != nil {
		t.Fatal(err)
	}
	s.Settle()

	drain(s, ch)
	big, err := grow(20<<20, 20<<20, "")
	if err != nil || big.CapacityBytes != 20<<20 || big.NodeID != v.NodeID || big.HostPath != v.HostPath ||
		big.PluginID != "lvm" || len(big.Constraints) != 1 || big.Parameters["nomad_statefulset_class"] != "fast" ||
		big.CreateIndex != v.CreateIndex || big.ModifyIndex <= v.ModifyIndex {
		t.Fatalf("expanded: %+v, %v", big, err)
	}
	var seen *api.HostVolume
	for _, evs := range drain(s, ch) {
		for i := range evs.Events {
			if e := &evs.Events[i]; e.Topic == TopicHostVolume && e.Type == "HostVolumeRegistered" {
				if err := nomad.DecodePayload(e, "Volume", &seen); err != nil {
					t.Fatal(err)
				}
			}
		}
	}
	if seen == nil || seen.CapacityBytes != 20<<20 || seen.Parameters["nomad_statefulset_class"] != "fast" {
		t.Fatalf("the expansion's event carries %+v", seen)
	}
	if list, _ := s.ListHostVolumes(ctx, "default", "data-web-0"); len(list) != 1 || list[0].CapacityBytes != 20<<20 {
		t.Fatalf("listed after the expansion: %+v", list)
	}

	_, err = grow(10<<20, 10<<20, "all")
	want = fmt.Sprintf("validating volume %q update failed: 2 errors occurred:\n\t* node pool cannot be updated\n\t* capacity_max (10485760) cannot be less than existing provisioned capacity (20971520)", v.ID)
	if _, body := responseBody(t, err); body != want {
		t.Fatalf("shrink and move: %q, want %q", body, want)
	}
	if _, err := s.CreateHostVolume(ctx, &api.HostVolume{ID: "nope", Name: v.Name}); err == nil {
		t.Fatal("an update of an unknown ID was accepted")
	}
}

func TestDeepCopies(t *testing.T) {
	s := manual(t)
	ctx := context.Background()
	j := testJob("web-0")
	register(t, s, j, true, 0)
	j.Meta["statefulset_revision"] = "mutated-input"
	*j.TaskGroups[0].Count = 7
	j.TaskGroups[0].Tasks[0].Name = "renamed"

	got, err := s.GetJob(ctx, "default", "web-0")
	if err != nil {
		t.Fatal(err)
	}
	got.Meta["statefulset_revision"] = "mutated-output"
	*got.TaskGroups[0].Count = 9
	*got.Version = 42

	again := s.Job("default", "web-0")
	if again.Meta["statefulset_revision"] != "r1" || *again.TaskGroups[0].Count != 1 ||
		again.TaskGroups[0].Tasks[0].Name != "app" || *again.Version != 0 {
		t.Fatalf("the simulation's job was changed from outside: %+v", again)
	}

	vol := &api.HostVolume{Name: "data", Parameters: map[string]string{"a": "1"}}
	v, err := s.CreateHostVolume(ctx, vol)
	if err != nil {
		t.Fatal(err)
	}
	vol.Parameters["a"] = "2"
	v.Parameters["a"] = "3"
	if p := s.HostVolumes()[0].Parameters["a"]; p != "1" {
		t.Fatalf("volume parameters changed from outside: %q", p)
	}
}

// TestCopyAndEqual checks the reflection helpers against reflect.DeepEqual
// on a canonical job and on single-field changes at every depth.
func TestCopyAndEqual(t *testing.T) {
	j := withVolume(testJob("web-0"), "data-web-0")
	j.TaskGroups[0].Tasks[0].Config = map[string]any{"run_for": "1h", "args": []any{"a", 1.5}}
	j.Canonicalize()
	c := deepCopy(j)
	if !reflect.DeepEqual(j, c) || !deepEqual(j, c) {
		t.Fatal("a copy differs from its original")
	}
	if c.TaskGroups[0] == j.TaskGroups[0] || c.TaskGroups[0].Tasks[0].Config["args"].([]any)[1] != 1.5 {
		t.Fatal("the copy shares its task groups")
	}
	changes := map[string]func(*api.Job){
		"top-level pointer": func(x *api.Job) { *x.Priority = 1 },
		"meta value":        func(x *api.Job) { x.Meta["statefulset_revision"] = "r9" },
		"meta key":          func(x *api.Job) { x.Meta["extra"] = "" },
		"group count":       func(x *api.Job) { *x.TaskGroups[0].Count = 2 },
		"volume source":     func(x *api.Job) { x.TaskGroups[0].Volumes["data"].Source = "other" },
		"task config":       func(x *api.Job) { x.TaskGroups[0].Tasks[0].Config["args"].([]any)[0] = "b" },
		"nil vs empty": func(x *api.Job) {
			if x.Datacenters == nil {
				x.Datacenters = []string{}
			} else {
				x.Datacenters = nil
			}
		},
		"duration": func(x *api.Job) { *x.TaskGroups[0].Update.MinHealthyTime = 1 },
	}
	for name, change := range changes {
		d := deepCopy(j)
		change(d)
		if deepEqual(j, d) || reflect.DeepEqual(j, d) {
			t.Fatalf("%s: change not seen", name)
		}
		if !deepEqual(j, deepCopy(j)) {
			t.Fatalf("%s: the change leaked into the original", name)
		}
	}
}

// TestListAllocations: one call lists the allocations of every job, in one
// namespace or all of them, newest first and without task states, the same
// stubs Allocs gives job by job.
func TestListAllocations(t *testing.T) {
	s := manual(t)
	ctx := context.Background()
	register(t, s, testJob("web-0"), true, 0)
	other := testJob("db-0")
	other.Namespace = ptr("prod")
	register(t, s, other, true, 0)
	s.Settle()
	// A new version replaces web-0's allocation: both stay listed.
	next := testJob("web-0")
	next.Meta["statefulset_revision"] = "r2"
	register(t, s, next, false, 0)
	s.Settle()

	all, err := s.ListAllocations(ctx, "*")
	if err != nil {
		t.Fatal(err)
	}
	var want []*api.AllocationListStub
	for _, j := range []struct{ ns, id string }{{"default", "web-0"}, {"prod", "db-0"}} {
		want = append(want, s.Allocs(j.ns, j.id)...)
	}
	if len(all) != 3 || len(want) != 3 {
		t.Fatalf("listed %d allocations, job by job %d; want 3", len(all), len(want))
	}
	byID := map[string]*api.AllocationListStub{}
	for i, a := range all {
		if a.TaskStates != nil {
			t.Errorf("allocation %s lists task states", a.ID)
		}
		if i > 0 && all[i-1].CreateIndex < a.CreateIndex {
			t.Errorf("not newest first: %d before %d", all[i-1].CreateIndex, a.CreateIndex)
		}
		byID[a.ID] = a
	}
	for _, w := range want {
		a := byID[w.ID]
		if a == nil || a.JobID != w.JobID || a.Namespace != w.Namespace || a.ClientStatus != w.ClientStatus ||
			a.DesiredStatus != w.DesiredStatus || a.ModifyIndex != w.ModifyIndex || a.NodeID != w.NodeID {
			t.Errorf("allocation %s: listed %+v, job listing %+v", w.ID, a, w)
		}
	}
	prod, err := s.ListAllocations(ctx, "prod")
	if err != nil || len(prod) != 1 || prod[0].JobID != "db-0" {
		t.Fatalf("namespace prod: %v %v", prod, err)
	}
	def, err := s.ListAllocations(ctx, "")
	if err != nil || len(def) != 2 {
		t.Fatalf("default namespace: %d allocations, %v", len(def), err)
	}
}
