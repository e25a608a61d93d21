package reconciler

import (
	"fmt"
	"slices"
	"testing"
)

func TestCreatesPods(t *testing.T) {
	forPolicies(t, func(t *testing.T, spec Spec) {
		spec.Replicas = 3
		w := newWorld(spec, "v1")
		w.checkMonotonic, w.checkUpdateOrder = true, true
		out := mustStep(t, w)
		if got := countActions(out, ActionCreateRevision); got != 1 {
			t.Fatalf("first reconcile created %d revisions, want 1", got)
		}
		wantCreates := 3
		if spec.PodManagementPolicy == OrderedReady {
			wantCreates = 1
		}
		if got := countActions(out, ActionCreatePod); got != wantCreates {
			t.Fatalf("first reconcile created %d pods, want %d", got, wantCreates)
		}
		if got := countActions(out, ActionCreateVolume); got != wantCreates {
			t.Fatalf("first reconcile created %d volumes, want %d", got, wantCreates)
		}
		converge(t, w)
		st := w.last.Status
		rev := revName("web", "v1")
		if st.Replicas != 3 || st.ReadyReplicas != 3 || st.AvailableReplicas != 3 ||
			st.CurrentReplicas != 3 || st.UpdatedReplicas != 3 || st.CurrentRevision != rev || st.UpdateRevision != rev {
			t.Fatalf("status %+v", st)
		}
		if c := condition(st, ConditionAvailable); !c.Status || c.Reason != ReasonReplicasAvailable {
			t.Fatalf("Available = %+v", c)
		}
		if c := condition(st, ConditionProgressing); c.Status || c.Reason != ReasonComplete {
			t.Fatalf("Progressing = %+v", c)
		}
		for o := 0; o < 3; o++ {
			if !w.hasVolume("data", o) {
				t.Fatalf("no volume for ordinal %d", o)
			}
		}
	})
}

func TestScalesUp(t *testing.T) {
	forPolicies(t, func(t *testing.T, spec Spec) {
		spec.Replicas = 1
		w := newWorld(spec, "v1")
		w.checkMonotonic, w.checkUpdateOrder = true, true
		converge(t, w)
		w.spec.Replicas = 4
		converge(t, w)
		if got := podRevisions(w, 0, 4); got[3] != revName("web", "v1") {
			t.Fatalf("revisions after scale up %v", got)
		}
		if w.last.Status.ReadyReplicas != 4 {
			t.Fatalf("ready %d, want 4", w.last.Status.ReadyReplicas)
		}
	})
}

func TestScalesDown(t *testing.T) {
	forPolicies(t, func(t *testing.T, spec Spec) {
		spec.Replicas = 4
		w := newWorld(spec, "v1")
		w.checkMonotonic, w.checkUpdateOrder = true, true
		converge(t, w)
		w.spec.Replicas = 1
		out := mustStep(t, w)
		deletes := countActions(out, ActionDeletePod)
		want := 3
		if spec.PodManagementPolicy == OrderedReady {
			want = 1
			if i := slices.IndexFunc(out.effects(), func(a Action) bool { return a.Type == ActionDeletePod }); i < 0 || out.effects()[i].Ordinal != 3 {
				t.Fatalf("first scale-down must delete 3: %+v", out.effects())
			}
		}
		if deletes != want {
			t.Fatalf("first scale-down reconcile deleted %d pods, want %d", deletes, want)
		}
		// Nothing more happens while the deleted pods terminate.
		if out := mustStep(t, w); countActions(out, ActionDeletePod) != 0 {
			t.Fatalf("deleted again while terminating: %+v", out.effects())
		}
		converge(t, w)
		if len(w.pods) != 1 || w.pods[0].Ordinal != 0 {
			t.Fatalf("pods after scale down: %+v", w.pods)
		}
		for o := 1; o < 4; o++ {
			if has := w.hasVolume("data", o); has != (spec.WhenScaled == Retain) {
				t.Fatalf("whenScaled=%s: volume of condemned ordinal %d present=%v", spec.WhenScaled, o, has)
			}
		}
		if !w.hasVolume("data", 0) {
			t.Fatal("volume of ordinal 0 removed")
		}
		// A scale-up again reuses retained volumes and creates the others.
		w.spec.Replicas = 3
		converge(t, w)
		if w.volumesEverCreated != map[RetentionPolicy]int{Retain: 4, Delete: 6}[spec.WhenScaled] {
			t.Fatalf("volumes created %d times", w.volumesEverCreated)
		}
	})
}

// TestScaleDownWaitsForPredecessors is the first-unhealthy-pod rule: under
// OrderedReady an unhealthy condemned pod is not removed while a pod below it
// is unhealthy too; only the first unhealthy pod may go while unhealthy.
func TestScaleDownWaitsForPredecessors(t *testing.T) {
	w := newWorld(Spec{Replicas: 4}, "v1")
	converge(t, w)
	w.spec.Replicas = 1
	w.pods[w.podIndex(2)].Ready = false
	w.pods[w.podIndex(3)].Ready = false
	out := mustStep(t, w)
	if n := countActions(out, ActionDeletePod); n != 0 {
		t.Fatalf("deleted unhealthy 3 while its predecessor 2 is unhealthy: %+v", out.effects())
	}
	w.pods[w.podIndex(2)].Ready = true // now 3 is the first unhealthy pod
	out = mustStep(t, w)
	if n := countActions(out, ActionDeletePod); n != 1 || out.effects()[0].Ordinal != 3 {
		t.Fatalf("want the first unhealthy pod 3 deleted, got %+v", out.effects())
	}
}

// TestScaleDownPastPodsStuckAtOutdatedRevision: two condemned pods stuck
// unready at an abandoned revision would wait on each other for ever under
// the first-unhealthy rule (as in Kubernetes); they are not worth waiting for.
func TestScaleDownPastPodsStuckAtOutdatedRevision(t *testing.T) {
	w := newWorld(Spec{Replicas: 4}, "v1")
	w.broken["bad"] = true
	converge(t, w)
	w.template = []byte("bad")
	mustStep(t, w) // deletes 3 for the update
	for w.podIndex(3) < 0 || w.pods[w.podIndex(3)].Phase != PhaseRunning || w.pods[w.podIndex(3)].Terminating {
		w.advanceAll()
		mustStep(t, w)
	}
	w.pods[w.podIndex(2)].Revision = w.pods[w.podIndex(3)].Revision // as if 2 went bad too
	w.pods[w.podIndex(2)].Ready = false
	w.template = []byte("v1") // revert
	w.spec.Replicas = 2
	out := mustStep(t, w)
	if n := countActions(out, ActionDeletePod); n != 1 || out.effects()[len(out.effects())-1].Ordinal != 3 {
		t.Fatalf("want pod 3 deleted, got %+v\n%s", out.effects(), w.dump())
	}
	converge(t, w)
}

func TestStartOrdinal(t *testing.T) {
	forPolicies(t, func(t *testing.T, spec Spec) {
		spec.Replicas, spec.OrdinalsStart = 3, 5
		w := newWorld(spec, "v1")
		w.checkMonotonic = true
		converge(t, w)
		for o := 5; o < 8; o++ {
			if w.podIndex(o) < 0 || !w.hasVolume("data", o) {
				t.Fatalf("ordinal %d missing:\n%s", o, w.dump())
			}
		}
		// Moving the start condemns the ordinals that leave the range.
		w.spec.OrdinalsStart = 6
		converge(t, w)
		if w.podIndex(5) >= 0 || w.podIndex(8) < 0 || len(w.pods) != 3 {
			t.Fatalf("after moving start to 6:\n%s", w.dump())
		}
		if has := w.hasVolume("data", 5); has != (spec.WhenScaled == Retain) {
			t.Fatalf("volume of ordinal 5 present=%v under whenScaled=%s", has, spec.WhenScaled)
		}
	})
}

// TestParallelScaleLarge scales a Parallel set 0→1000 and 501→0: every pod
// is created (and deleted) in the first reconcile, so it takes few steps.
func TestParallelScaleLarge(t *testing.T) {
	for _, tc := range []struct{ from, to int }{{0, 1000}, {501, 0}} {
		t.Run(fmt.Sprintf("%d-%d", tc.from, tc.to), func(t *testing.T) {
			w := newWorld(Spec{Replicas: tc.from, PodManagementPolicy: Parallel, VolumeClaims: []string{"data"},
				WhenScaled: Delete}, "v1")
			converge(t, w)
			w.spec.Replicas = tc.to
			out := mustStep(t, w)
			if tc.to > tc.from {
				if n := countActions(out, ActionCreatePod); n != tc.to-tc.from {
					t.Fatalf("first reconcile created %d pods, want %d", n, tc.to-tc.from)
				}
			} else if n := countActions(out, ActionDeletePod); n != tc.from-tc.to {
				t.Fatalf("first reconcile deleted %d pods, want %d", n, tc.from-tc.to)
			}
			steps := converge(t, w)
			if steps > 5 {
				t.Fatalf("took %d more reconciles, want few", steps)
			}
			if len(w.pods) != tc.to || (tc.to == 0 && len(w.volumes) != 0) {
				t.Fatalf("%d pods and %d volumes left", len(w.pods), len(w.volumes))
			}
		})
	}
}

// TestScaleDownPastFailedPods: two failed condemned pods do not wait on each
// other (Kubernetes deadlocks here: neither is the first unhealthy pod for
// the other, and a condemned pod is never recreated).
func TestScaleDownPastFailedPods(t *testing.T) {
	w := newWorld(Spec{Replicas: 4}, "v1")
	converge(t, w)
	for _, o := range []int{2, 3} {
		i := w.podIndex(o)
		w.pods[i].Phase, w.pods[i].Ready = PhaseFailed, false
	}
	w.spec.Replicas = 2
	converge(t, w)
	if len(w.pods) != 2 {
		t.Fatalf("scale-down stuck:\n%s", w.dump())
	}
}
