package nomad

import (
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/nomad/api"

	"github.com/nomad-statefulset/nomad-statefulset/backend"
)

// TestCachePlacementSequences is issue 14's Blocked state: a child Nomad
// could not place shows Nomad's reason until it is placed, whatever order
// the evaluation, allocation and job events come in, and a re-list (which
// has no evaluations) keeps it.
func TestCachePlacementSequences(t *testing.T) {
	key := backend.SetKey{Namespace: "default", Name: "web"}
	now := time.Unix(1000, 0)
	failed := map[string]*api.AllocationMetric{"g": {NodesEvaluated: 3, NodesFiltered: 3,
		ConstraintFiltered: map[string]int{"${meta.rack} = nowhere": 3}}}
	eval := func(status string, idx, jobIdx uint64, f map[string]*api.AllocationMetric) *evalPayload {
		return &evalPayload{Namespace: "default", JobID: "web-0", Status: status, ModifyIndex: idx, JobModifyIndex: jobIdx, FailedTGAllocs: f}
	}
	const want = `Nomad could not place it: group "g": 3 of 3 nodes filtered (${meta.rack} = nowhere: 3)`
	for _, tc := range []struct {
		name   string
		events func(c *Cache)
		want   string
	}{
		{"failed evaluation", func(c *Cache) { c.notePlacement(eval("complete", 12, 10, failed), 12) }, want},
		{"failed, then the blocked evaluation it made", func(c *Cache) {
			c.notePlacement(eval("complete", 12, 10, failed), 12)
			c.notePlacement(eval("blocked", 13, 10, nil), 13)
		}, want},
		{"failed, then placed by the unblocked evaluation", func(c *Cache) {
			c.notePlacement(eval("complete", 12, 10, failed), 12)
			c.notePlacement(eval("complete", 14, 10, nil), 14)
		}, ""},
		{"failed, then an allocation", func(c *Cache) {
			c.notePlacement(eval("complete", 12, 10, failed), 12)
			c.upsertAllocPayload(stubPayload(alloc("a1", "web-0", "pending", "run", nil, 15, now)), 15)
		}, ""},
		{"an older allocation says nothing", func(c *Cache) {
			c.upsertAllocPayload(stubPayload(alloc("a0", "web-0", "complete", "stop", nil, 11, now)), 11)
			c.notePlacement(eval("complete", 12, 10, failed), 12)
		}, want},
		{"a stale failure after the placement", func(c *Cache) {
			c.notePlacement(eval("complete", 14, 10, nil), 14)
			c.notePlacement(eval("complete", 12, 10, failed), 12)
		}, ""},
		{"a failure of an older version of the child", func(c *Cache) { c.notePlacement(eval("complete", 12, 5, failed), 12) }, ""},
		{"failed, then the child registered again", func(c *Cache) {
			c.notePlacement(eval("complete", 12, 10, failed), 12)
			c.UpsertJob(childJob("web", "0", "r", false, 20), 20)
		}, ""},
		{"failed, then a re-list", func(c *Cache) {
			c.notePlacement(eval("complete", 12, 10, failed), 12)
			c.Replace(Snapshot{Index: 13, At: now, Jobs: []*api.Job{childJob("web", "0", "r", false, 10)}})
		}, want},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := NewCache()
			c.Replace(Snapshot{Index: 10, At: now, Jobs: []*api.Job{childJob("web", "0", "r", false, 10)}})
			tc.events(c)
			obs := c.Observe(key, nil, now)
			if len(obs.Pods) != 1 {
				t.Fatalf("pods %+v", obs.Pods)
			}
			if got := obs.Pods[0].Blocked; got != tc.want {
				t.Fatalf("Blocked %q, want %q", got, tc.want)
			}
		})
	}
}

func TestPlacementFailure(t *testing.T) {
	for _, tc := range []struct {
		name string
		in   map[string]*api.AllocationMetric
		want string
	}{
		{"none", nil, ""},
		{"filtered and exhausted", map[string]*api.AllocationMetric{"app": {NodesEvaluated: 3, NodesInPool: 3, NodesFiltered: 1,
			ConstraintFiltered: map[string]int{"missing compatible host volumes": 1}, NodesExhausted: 2, DimensionExhausted: map[string]int{"memory": 2}}},
			`Nomad could not place it: group "app": 1 of 3 nodes filtered (missing compatible host volumes: 1); 2 nodes exhausted (memory: 2)`},
		{"no nodes", map[string]*api.AllocationMetric{"app": {}},
			`Nomad could not place it: group "app": no nodes were eligible for evaluation`},
		{"quota", map[string]*api.AllocationMetric{"app": {NodesEvaluated: 2, NodesInPool: 2, QuotaExhausted: []string{"cpu exhausted (500 needed > 400 limit)"}}},
			`Nomad could not place it: group "app": quota exhausted: cpu exhausted (500 needed > 400 limit)`},
	} {
		if got := PlacementFailure(tc.in); got != tc.want {
			t.Errorf("%s: got %q\nwant %q", tc.name, got, tc.want)
		}
	}
}

// TestCachePlacementWaitsForNewVolume: Nomad creates a host volume
// "pending" and marks it "ready" at its client's next node update, 5 to
// 10 s later, in the Raft entry that unblocks the evaluations of that
// node's class. A child registered in between, as every new pod is, fails
// with "missing compatible host volumes" and is placed by Nomad once the
// volume is ready. That wait is shown as such (Waiting, naming the
// volume), not as
// Blocked; a failure with its volumes ready is Blocked as before.
func TestCachePlacementWaitsForNewVolume(t *testing.T) {
	key := backend.SetKey{Namespace: "default", Name: "web"}
	now := time.Unix(1000, 0)
	failed := map[string]*api.AllocationMetric{"g": {NodesEvaluated: 1, NodesFiltered: 1,
		ConstraintFiltered: map[string]int{"missing compatible host volumes": 1}}}
	const want = `Nomad could not place it: group "g": 1 of 1 nodes filtered (missing compatible host volumes: 1)`
	failure := func(c *Cache, idx uint64) {
		c.notePlacement(&evalPayload{Namespace: "default", JobID: "web-0", Status: "complete", ModifyIndex: idx, JobModifyIndex: 10, FailedTGAllocs: failed}, idx)
	}
	volume := func(c *Cache, name string, state api.HostVolumeState, idx uint64) {
		c.upsertVolume(&api.HostVolume{Namespace: "default", ID: "id-" + name, Name: name, NodeID: "n1", State: state,
			CreateIndex: 9, ModifyIndex: idx}, false, idx)
	}
	for _, tc := range []struct {
		name        string
		events      func(c *Cache)
		wantBlocked string
		wantPending string
	}{
		{"failed while its volume is pending", func(c *Cache) {
			volume(c, "data-web-0", api.HostVolumeStatePending, 11)
			failure(c, 12)
		}, "", "data-web-0"},
		{"the volume turned ready after the failure: Nomad places it again", func(c *Cache) {
			volume(c, "data-web-0", api.HostVolumeStatePending, 11)
			failure(c, 12)
			volume(c, "data-web-0", api.HostVolumeStateReady, 15)
		}, "", ""},
		{"failed with its volume ready", func(c *Cache) {
			volume(c, "data-web-0", api.HostVolumeStateReady, 11)
			failure(c, 12)
		}, want, ""},
		{"failed again after the volume turned ready", func(c *Cache) {
			volume(c, "data-web-0", api.HostVolumeStatePending, 11)
			failure(c, 12)
			volume(c, "data-web-0", api.HostVolumeStateReady, 15)
			failure(c, 17)
		}, want, ""},
		{"another ordinal's volume is pending", func(c *Cache) {
			volume(c, "data-web-0", api.HostVolumeStateReady, 11)
			volume(c, "data-web-1", api.HostVolumeStatePending, 11)
			failure(c, 12)
		}, want, ""},
		{"its volume is unavailable", func(c *Cache) {
			volume(c, "data-web-0", api.HostVolumeStateUnavailable, 11)
			failure(c, 12)
		}, want, ""},
		{"pending but not failed: nothing to explain", func(c *Cache) {
			volume(c, "data-web-0", api.HostVolumeStatePending, 11)
		}, "", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := NewCache()
			c.Replace(Snapshot{Index: 10, At: now, Jobs: []*api.Job{childJob("web", "0", "r", false, 10)}})
			tc.events(c)
			obs := c.Observe(key, []string{"data"}, now)
			if len(obs.Pods) != 1 {
				t.Fatalf("pods %+v", obs.Pods)
			}
			got := obs.Pods[0]
			if got.Blocked != tc.wantBlocked || (got.Waiting != "") != (tc.wantPending != "") || !strings.Contains(got.Waiting, tc.wantPending) {
				t.Fatalf("Blocked %q, Waiting %q; want %q, and waiting for %q", got.Blocked, got.Waiting, tc.wantBlocked, tc.wantPending)
			}
		})
	}
}
