package e2e

import (
	"fmt"
	"maps"
	"sort"
	"strings"
	"testing"
	"time"

	nomadapi "github.com/hashicorp/nomad/api"

	"github.com/nomad-statefulset/nomad-statefulset/client"
)

// A typo or a removed annotation detaches a set on real Nomad, it never
// deletes it (DESIGN §1): the parent is re-run with statefulset = "True",
// then without the key, with the leading daemon SIGKILLed and restarted in
// between (the other takes over and must learn of the detached set from
// Nomad's listing alone), then annotated again. The set has
// whenDeleted = Delete, so a delete would have taken its volumes too. Every
// child keeps its allocations and its registration throughout, and no
// volume goes.
func TestDetachMistypeRemoveReannotate(t *testing.T) {
	c := NewCluster(t)
	a := c.StartDaemon(haConfig)
	b := c.StartDaemon(haConfig)
	leader, follower := leaderAndFollower(t, a, b)
	const set = "dt"
	RegisterHCL(t, c.Nomad.Client, setSpec{name: set, meta: map[string]string{
		"statefulset_replicas": "2", "statefulset_volume_retention_when_deleted": "Delete",
		"statefulset_volume_retention_when_scaled": "Delete"}}.hcl())
	waitConverged(t, c, leader, set, 2, nil)
	before := childState(t, c, set)
	volumes := len(HostVolumes(t, c.Nomad.Client, "default", "data-"+set+"-"))
	if volumes != 2 {
		t.Fatalf("%d volumes, want 2", volumes)
	}
	unchanged := func(when string) {
		t.Helper()
		if got := childState(t, c, set); !maps.Equal(got, before) {
			t.Fatalf("%s: the children changed:\n got %v\nwant %v", when, got, before)
		}
		if n := len(HostVolumes(t, c.Nomad.Client, "default", "data-"+set+"-")); n != volumes {
			t.Fatalf("%s: %d volumes left of %d", when, n, volumes)
		}
	}

	updateParent(t, c, set, setMeta("statefulset", "True"))
	waitDetached(t, leader, set, `statefulset = \"True\"`)
	time.Sleep(5 * time.Second) // a daemon that would act has had time to
	unchanged("mistyped")

	leader.Kill()
	Eventually(t, time.Minute, "the other daemon to take over", func() error {
		if !health(t, follower).Leader {
			return fmt.Errorf("not leading yet")
		}
		return nil
	})
	waitDetached(t, follower, set, `statefulset = \"True\"`)
	leader.Start()

	updateParent(t, c, set, func(j *nomadapi.Job) { delete(j.Meta, "statefulset") })
	waitDetached(t, follower, set, "has no statefulset key")
	time.Sleep(5 * time.Second)
	unchanged("annotation removed, after a leader change")

	updateParent(t, c, set, setMeta("statefulset", "true"))
	Eventually(t, convergeTimeout, "the set to be adopted", func() error {
		st, err := setStatus(follower, set)
		if err != nil {
			return err
		}
		if cond, ok := conditionNamed(st, "Detached"); ok && cond.Status {
			return fmt.Errorf("still detached: %s", cond.Message)
		}
		if st.Status.ReadyReplicas != 2 || st.Status.UpdatedReplicas != 2 {
			return fmt.Errorf("status %+v", st.Status)
		}
		return nil
	})
	time.Sleep(5 * time.Second)
	unchanged("annotated again")
	st, err := setStatus(follower, set)
	if err != nil {
		t.Fatal(err)
	}
	if len(st.Revisions) != 1 {
		t.Fatalf("want the one revision kept, got %+v", st.Revisions)
	}
}

// childState is, per child job of set, its JobModifyIndex and the IDs of
// its allocations: what a restart or a re-registration would change.
func childState(t *testing.T, c *Cluster, set string) map[string]string {
	t.Helper()
	out := map[string]string{}
	for _, j := range ChildJobs(t, c.Nomad.Client, "default", set) {
		var ids []string
		for _, a := range Allocations(t, c.Nomad.Client, "default", j.ID) {
			ids = append(ids, a.ID+"/"+a.ClientStatus)
		}
		sort.Strings(ids)
		out[j.ID] = fmt.Sprintf("job modify index %d stop=%v allocs %s", j.JobModifyIndex, j.Stop, strings.Join(ids, ","))
	}
	return out
}

// waitDetached waits until d shows set with the Detached condition, its
// message containing why.
func waitDetached(t *testing.T, d *Daemon, set, why string) {
	t.Helper()
	why = strings.ReplaceAll(why, `\"`, `"`)
	Eventually(t, time.Minute, "the set to show as detached", func() error {
		st, err := setStatus(d, set)
		if err != nil {
			return err
		}
		cond, ok := conditionNamed(st, "Detached")
		if !ok || !cond.Status || !strings.Contains(cond.Message, why) {
			return fmt.Errorf("conditions %+v", st.Status.Conditions)
		}
		return nil
	})
}

// conditionNamed returns st's condition of type typ.
func conditionNamed(st client.SetDetail, typ string) (client.Condition, bool) {
	for _, c := range st.Status.Conditions {
		if c.Type == typ {
			return c, true
		}
	}
	return client.Condition{}, false
}
