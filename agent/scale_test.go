package agent

import (
	"context"
	"slices"
	"testing"

	"github.com/hashicorp/nomad/api"

	"github.com/nomad-statefulset/nomad-statefulset/backend/nomad"
	"github.com/nomad-statefulset/nomad-statefulset/internal/nomadsim"
	"github.com/nomad-statefulset/nomad-statefulset/jobs"
)

// TestScaledChildGoesBackToOneInPlace is issue 20's `nomad job scale
// <child> <group> N`: the daemon used to take any count but 1 as drift and
// replace the child, killing its healthy original allocation too. A count
// above 1 is now put back to 1 by re-registering the child as Nomad has it,
// fenced on its JobModifyIndex, so that Nomad stops only the extra
// allocation; the set's events say so, and the re-register happens once
// per change. A count of 0 (the pod is stopped) and a scale that came with
// another edit stay drift: the reconciler replaces the child whole, within
// the budget, once its allocation has ended.
func TestScaledChildGoesBackToOneInPlace(t *testing.T) {
	for _, tc := range []struct {
		name  string
		count int
		edit  func(j *api.Job)
		// inPlace: put back to count 1 by a re-register; otherwise
		// replaced as drift (DeletePod).
		inPlace bool
	}{
		{name: "scaled to 2", count: 2, inPlace: true},
		{name: "scaled to 5", count: 5, inPlace: true},
		{name: "scaled to 0", count: 0},
		{name: "scaled to 3 and edited", count: 3, edit: func(j *api.Job) {
			j.TaskGroups[0].Tasks[0].Env[jobs.EnvOrdinal] = "7"
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx := context.Background()
			parent := parentJob("web", map[string]string{"statefulset_replicas": "1"}, "v1")
			r := newSyncRig(t, parent)
			sim := nomadsim.NewNomad(fastSim())
			t.Cleanup(sim.Close)
			child := r.firstChild(t, parent, 0)
			r.useNomad(sim)
			if _, err := sim.RegisterJob(ctx, child, true, 0); err != nil {
				t.Fatal(err)
			}
			// The operator's verb.
			scaled, err := sim.GetJob(ctx, "default", "web-0")
			if err != nil {
				t.Fatal(err)
			}
			scaled.TaskGroups[0].Count = ptr(tc.count)
			if tc.edit != nil {
				tc.edit(scaled)
			}
			if _, err := sim.RegisterJob(ctx, scaled, true, *scaled.JobModifyIndex); err != nil {
				t.Fatal(err)
			}
			if scaled, err = sim.GetJob(ctx, "default", "web-0"); err != nil {
				t.Fatal(err)
			}
			vol := &api.HostVolumeStub{Namespace: "default", ID: "vol-0", Name: "data-web-0", NodeID: "n1", State: api.HostVolumeStateReady}
			r.cache.Replace(nomad.Snapshot{Index: 100, Jobs: []*api.Job{parent, scaled}, Volumes: []*api.HostVolumeStub{vol}})
			registers := sim.Calls()[nomad.VerbRegisterJob]

			r.sync(t)
			calls := slices.Clone(r.eff.calls)
			r.sync(t) // the write is not observed yet: nothing more
			after, err := sim.GetJob(ctx, "default", "web-0")
			if err != nil {
				t.Fatal(err)
			}
			replaced := slices.Contains(calls, "DeletePod 0")
			reRegistered := sim.Calls()[nomad.VerbRegisterJob] - registers
			if tc.inPlace {
				if replaced || reRegistered != 1 || *after.TaskGroups[0].Count != 1 || *after.JobModifyIndex <= *scaled.JobModifyIndex {
					t.Fatalf("replaced %v, re-registered %d times, count now %d (index %d, was %d): want one re-register to count 1 and no replacement",
						replaced, reRegistered, *after.TaskGroups[0].Count, *after.JobModifyIndex, *scaled.JobModifyIndex)
				}
				if after.Meta[jobs.MetaRevision] != scaled.Meta[jobs.MetaRevision] {
					t.Fatalf("re-registered at revision %s, want its own %s", after.Meta[jobs.MetaRevision], scaled.Meta[jobs.MetaRevision])
				}
				if d, _ := r.c.sets.get(r.key); !hasEvent(d, "RestoreCount", "web-0: its child was scaled to") {
					t.Fatal("no RestoreCount event in the set's status")
				}
				return
			}
			if !replaced || reRegistered != 0 || *after.TaskGroups[0].Count != tc.count {
				t.Fatalf("replaced %v, re-registered %d times (count now %d): a stopped or edited child is the reconciler's to replace",
					replaced, reRegistered, *after.TaskGroups[0].Count)
			}
		})
	}
}
