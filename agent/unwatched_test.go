package agent

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/hashicorp/nomad/api"

	"github.com/nomad-statefulset/nomad-statefulset/backend/nomad"
	"github.com/nomad-statefulset/nomad-statefulset/reconciler"
)

// TestPurgeWhileNoLeaderWatchedWaitsOutTheKillGrace is issue 20's seventh
// point for a purge: a child purged while the daemon was down (or while
// leadership moved) is simply missing when the next term begins. Nomad forgot
// its allocation in the purge, but the client may still be killing the task,
// and a new child is a new job whose allocation does not wait for it. The
// ordinal is created again only once the task's kill grace (the longer of
// the template's now and at the revision it last ran) plus PurgeMargin has
// passed since the term began; other ordinals are not held.
func TestPurgeWhileNoLeaderWatchedWaitsOutTheKillGrace(t *testing.T) {
	for _, tc := range []struct {
		name string
		// sinceTerm is how long the term has run at the first pass.
		sinceTerm time.Duration
		// record changes web-1's stored record.
		record   func(*reconciler.OrdinalRecord)
		wantWait time.Duration
	}{
		{name: "fresh term waits kill_timeout 20s plus the margin", wantWait: 20*time.Second + nomad.PurgeMargin},
		{name: "grace already passed in this term", sinceTerm: time.Minute},
		{name: "half the grace passed", sinceTerm: 10 * time.Second, wantWait: 10*time.Second + nomad.PurgeMargin},
		// A condemned ordinal may come back into the range while its old
		// task stops, and one recorded as never run may have had its pod
		// created by a pass that held before its status was written: both
		// wait too (found by the randomized drivers' "an ordinal never
		// runs twice").
		{name: "condemned ordinal waits too", record: func(r *reconciler.OrdinalRecord) { r.Condemned = true },
			wantWait: 20*time.Second + nomad.PurgeMargin},
		{name: "ordinal recorded as never run waits too", record: func(r *reconciler.OrdinalRecord) { r.Revision = "" },
			wantWait: 20*time.Second + nomad.PurgeMargin},
	} {
		t.Run(tc.name, func(t *testing.T) {
			parent := parentJob("web", map[string]string{"statefulset_replicas": "3",
				"statefulset_pod_management_policy": "Parallel", "statefulset_volume_claims": ""}, "v1")
			parent.TaskGroups[0].Volumes = nil
			parent.TaskGroups[0].Tasks[0].VolumeMounts = nil
			parent.TaskGroups[0].Tasks[0].KillTimeout = ptr(20 * time.Second)
			r := newSyncRig(t, parent)
			jobsNow := []*api.Job{parent}
			var allocs []*api.AllocationListStub
			for _, o := range []int{0, 2} {
				child := r.firstChild(t, parent, o)
				idx := uint64(20 + o)
				child.Version, child.JobModifyIndex, child.ModifyIndex, child.CreateIndex = ptr(uint64(0)), ptr(idx), ptr(idx), ptr(idx)
				jobsNow = append(jobsNow, child)
				a := r.healthyAlloc(*child.ID, idx+1)
				a.ID = "a" + *child.ID
				allocs = append(allocs, a)
			}
			r.cache.Replace(nomad.Snapshot{Index: 40, Jobs: jobsNow, Allocs: allocs})
			revs, err := r.c.store.ListRevisions(context.Background(), r.key)
			if err != nil || len(revs) != 1 {
				t.Fatalf("revisions %v, %v", revs, err)
			}
			st, _, _ := r.c.store.GetStatus(context.Background(), r.key)
			st.Ordinals = nil
			for o := 0; o < 3; o++ {
				rec := reconciler.OrdinalRecord{Ordinal: o, Revision: revs[0].Name, RevisionNumber: revs[0].Number}
				if o == 1 && tc.record != nil {
					tc.record(&rec)
				}
				st.Ordinals = append(st.Ordinals, rec)
			}
			if err := r.c.store.PutStatus(context.Background(), r.key, st); err != nil {
				t.Fatal(err)
			}
			r.c.termStart = r.now.Add(-tc.sinceTerm)

			r.sync(t)
			created := slices.Contains(r.eff.calls, "CreatePod 1")
			if tc.wantWait == 0 {
				if !created {
					t.Fatalf("web-1 not created at once: %v", r.eff.calls)
				}
				return
			}
			if created {
				t.Fatalf("web-1 created %v into the term, before its old task must have stopped", tc.sinceTerm)
			}
			if got := r.queue.after[r.key.String()]; got != tc.wantWait {
				t.Fatalf("looks again after %v, want %v", got, tc.wantWait)
			}
			d, _ := r.c.sets.get(r.key)
			held := false
			for _, c := range d.Status.Conditions {
				held = held || (string(c.Type) == string(ConditionHeld) && c.Reason == "KillGrace")
			}
			if !held {
				t.Fatalf("the view does not say why web-1 waits: %+v", d.Status.Conditions)
			}
			r.now = r.now.Add(tc.wantWait - time.Second)
			r.sync(t)
			if slices.Contains(r.eff.calls, "CreatePod 1") {
				t.Fatal("web-1 created a second before its kill grace ran out")
			}
			r.now = r.now.Add(time.Second)
			r.sync(t)
			if !slices.Contains(r.eff.calls, "CreatePod 1") {
				t.Fatalf("web-1 not created once its kill grace ran out: %v", r.eff.calls)
			}
		})
	}
}

// TestUnwatchedGraceUsesTheLongerKillTimeout: the template's kill_timeout
// was lowered after web-1 last ran; its old task may still take the old,
// longer one to stop.
func TestUnwatchedGraceUsesTheLongerKillTimeout(t *testing.T) {
	old := parentJob("web", map[string]string{"statefulset_replicas": "1", "statefulset_volume_claims": ""}, "v1")
	old.TaskGroups[0].Volumes, old.TaskGroups[0].Tasks[0].VolumeMounts = nil, nil
	old.TaskGroups[0].Tasks[0].KillTimeout = ptr(time.Minute)
	r := newSyncRig(t, old)
	r.sync(t)
	revs, _ := r.c.store.ListRevisions(context.Background(), r.key)
	st, _, _ := r.c.store.GetStatus(context.Background(), r.key)
	st.Ordinals = []reconciler.OrdinalRecord{{Ordinal: 0, Revision: revs[0].Name, RevisionNumber: revs[0].Number}}
	if err := r.c.store.PutStatus(context.Background(), r.key, st); err != nil {
		t.Fatal(err)
	}
	now := parentJob("web", map[string]string{"statefulset_replicas": "1", "statefulset_volume_claims": ""}, "v1")
	now.TaskGroups[0].Volumes, now.TaskGroups[0].Tasks[0].VolumeMounts = nil, nil
	now.TaskGroups[0].Tasks[0].KillTimeout = ptr(2 * time.Second)
	now.Version, now.JobModifyIndex, now.ModifyIndex, now.CreateIndex = ptr(uint64(1)), ptr(uint64(30)), ptr(uint64(30)), ptr(uint64(10))
	r.cache.Replace(nomad.Snapshot{Index: 40, Jobs: []*api.Job{now}})
	r.c.termStart = r.now
	r.sync(t) // stores the new revision
	r.sync(t)
	if slices.Contains(r.eff.calls, "CreatePod 0") {
		t.Fatal("web-0 created at once")
	}
	if got, want := r.queue.after[r.key.String()], time.Minute+nomad.PurgeMargin; got != want {
		t.Fatalf("looks again after %v, want %v (the old revision's kill_timeout)", got, want)
	}
}

// TestVanishedInTheTermIsNotHeld: only a child missing at the set's first
// pass in a term may have been purged unseen. One the term saw and that
// vanished later (the daemon's own delete of a failed pod, with its
// allocation seen to end) is created again at once, even within the kill
// grace of the term's start; holding it slowed every crash-loop recovery
// in a term's first seconds. Forgetting the set drops the record.
func TestVanishedInTheTermIsNotHeld(t *testing.T) {
	parent := parentJob("web", map[string]string{"statefulset_replicas": "1", "statefulset_volume_claims": ""}, "v1")
	parent.TaskGroups[0].Volumes, parent.TaskGroups[0].Tasks[0].VolumeMounts = nil, nil
	r := newSyncRig(t, parent)
	r.c.termStart = r.now
	child := r.firstChild(t, parent, 0)
	child.Version, child.JobModifyIndex, child.ModifyIndex, child.CreateIndex = ptr(uint64(0)), ptr(uint64(20)), ptr(uint64(20)), ptr(uint64(20))
	r.cache.Replace(nomad.Snapshot{Index: 30, Jobs: []*api.Job{parent, child},
		Allocs: []*api.AllocationListStub{r.healthyAlloc("web-0", 21)}})
	r.sync(t) // web-0 present: recorded in the status
	st, _, _ := r.c.store.GetStatus(context.Background(), r.key)
	if len(st.Ordinals) != 1 || st.Ordinals[0].Revision == "" {
		t.Fatalf("web-0 not recorded: %+v", st.Ordinals)
	}
	// web-0's allocation ended and its job was purged, both seen.
	done := r.healthyAlloc("web-0", 21)
	done.ClientStatus, done.DesiredStatus = "complete", "stop"
	r.cache.Replace(nomad.Snapshot{Index: 40, Jobs: []*api.Job{parent}, Allocs: []*api.AllocationListStub{done}})
	r.sync(t)
	if !slices.Contains(r.eff.calls, "CreatePod 0") {
		t.Fatalf("web-0, seen to end in this term, not created at once: %v", r.eff.calls)
	}
	r.c.forget(r.key)
	if _, ok := r.c.sets.peek(r.key); ok {
		t.Fatal("forget left the set's state, its vanished ordinals with it")
	}
}
