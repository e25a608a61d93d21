package reconciler

import (
	"reflect"
	"testing"
	"time"
)

// TestCascadingDelete: pods go in reverse ordinal order one at a time under
// OrderedReady (all at once under Parallel), volumes follow whenDeleted once
// their pods are gone, and DeleteSetState comes last.
func TestCascadingDelete(t *testing.T) {
	forPolicies(t, func(t *testing.T, spec Spec) {
		spec.Replicas = 3
		w := newWorld(spec, "v1")
		converge(t, w)
		w.spec.Deleted = true
		var order []int
		for i := 0; i < 50 && !w.stateDeleted; i++ {
			out := mustStep(t, w)
			deletes := 0
			for k, a := range out.effects() {
				switch a.Type {
				case ActionDeletePod:
					order = append(order, a.Ordinal)
					deletes++
				case ActionDeleteSetState:
					if k != len(out.effects())-1 {
						t.Fatalf("DeleteSetState is not last: %+v", out.effects())
					}
				case ActionCreatePod, ActionCreateVolume, ActionCreateRevision:
					t.Fatalf("%s during a delete", a.Type)
				}
			}
			if spec.PodManagementPolicy == OrderedReady && deletes > 1 {
				t.Fatalf("%d pods deleted at once under OrderedReady", deletes)
			}
			w.advanceAll()
		}
		if !w.stateDeleted || len(w.pods) != 0 {
			t.Fatalf("not torn down:\n%s", w.dump())
		}
		if spec.PodManagementPolicy == OrderedReady && (len(order) != 3 || order[0] != 2 || order[1] != 1 || order[2] != 0) {
			t.Fatalf("delete order %v, want [2 1 0]", order)
		}
		if want := map[RetentionPolicy]int{Retain: 3, Delete: 0}[spec.WhenDeleted]; len(w.volumes) != want {
			t.Fatalf("whenDeleted=%s left %d volumes, want %d", spec.WhenDeleted, len(w.volumes), want)
		}
	})
}

// TestDeleteWaitsForTerminatingPod: under OrderedReady nothing else is
// deleted while the highest pod terminates, and a volume whose pod still
// exists is kept even under whenDeleted=Delete.
func TestDeleteWaitsForTerminatingPod(t *testing.T) {
	w := newWorld(Spec{Replicas: 2, VolumeClaims: []string{"data"}, WhenDeleted: Delete}, "v1")
	converge(t, w)
	w.spec.Deleted = true
	out := mustStep(t, w)
	if len(out.effects()) != 1 || out.effects()[0].Type != ActionDeletePod || out.effects()[0].Ordinal != 1 {
		t.Fatalf("first teardown step %+v", out.effects())
	}
	if out := mustStep(t, w); len(out.effects()) != 0 {
		t.Fatalf("acted while pod 1 terminates: %+v", out.effects())
	}
	w.advanceAll() // pod 1 gone
	out = mustStep(t, w)
	if len(out.effects()) != 2 || out.effects()[0].Ordinal != 0 || out.effects()[1].Type != ActionDeleteVolume || out.effects()[1].Volume.Ordinal != 1 {
		t.Fatalf("second teardown step %+v", out.effects())
	}
}

// TestDeleteStatusCounts: while a set is torn down its status still counts
// every observed pod, with the same rules as a live set: a terminating pod
// counts in Replicas (and as ready) but not as current or updated, Ready is
// not Available before minReadySeconds, and the revisions are the previous
// status's.
func TestDeleteStatusCounts(t *testing.T) {
	in := baseInput()
	v1 := in.Revisions[0].Name
	in.Spec.Deleted = true
	in.Spec.MinReadySeconds = 60
	in.Previous.UpdateRevision = "web-v2"
	in.Pods[0].ReadySince = in.Now.Add(-10 * time.Second) // ready, not yet available
	in.Pods[1].Revision, in.Pods[1].Ready = "web-v2", false
	// The highest pod terminates, so this decision deletes nothing (a
	// deletion would adjust the counts) and only counts.
	in.Pods[2].Terminating = true // ready and available, terminating
	in.Pods = append(in.Pods, Pod{Ordinal: -1, Revision: v1, Phase: PhasePending})
	out := safe(t, in)
	if n := countActions(out, ActionDeletePod); n != 0 {
		t.Fatalf("%d pods deleted while the highest terminates", n)
	}
	st := out.Status
	want := Status{Replicas: 4, ReadyReplicas: 2, AvailableReplicas: 1, CurrentReplicas: 2, UpdatedReplicas: 1,
		CurrentRevision: v1, UpdateRevision: "web-v2"}
	got := Status{Replicas: st.Replicas, ReadyReplicas: st.ReadyReplicas, AvailableReplicas: st.AvailableReplicas,
		CurrentReplicas: st.CurrentReplicas, UpdatedReplicas: st.UpdatedReplicas,
		CurrentRevision: st.CurrentRevision, UpdateRevision: st.UpdateRevision}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("teardown status %+v\nwant %+v", got, want)
	}
}
