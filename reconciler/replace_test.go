package reconciler

import (
	"math/rand/v2"
	"testing"
)

// TestReplacesPods: pods that disappear (stopped from outside) are recreated
// at their ordinal, reusing their volumes.
func TestReplacesPods(t *testing.T) {
	forPolicies(t, func(t *testing.T, spec Spec) {
		spec.Replicas = 5
		w := newWorld(spec, "v1")
		converge(t, w)
		vols := len(w.volumes)
		for _, o := range []int{0, 2, 4} {
			w.pods[w.podIndex(o)].Terminating = true
		}
		if out := mustStep(t, w); countActions(out, ActionCreatePod) != 0 {
			t.Fatalf("created a pod while the old one terminates: %+v", out.effects())
		}
		converge(t, w)
		if len(w.pods) != 5 || len(w.volumes) != vols {
			t.Fatalf("after replacement:\n%s", w.dump())
		}
	})
}

// TestRecreatesFailedPod: a Failed pod is deleted, and recreated only in a
// later reconcile, once it is gone (as modern Kubernetes does).
func TestRecreatesFailedPod(t *testing.T) {
	forPolicies(t, func(t *testing.T, spec Spec) {
		spec.Replicas = 3
		w := newWorld(spec, "v1")
		converge(t, w)
		for _, phase := range []Phase{PhaseFailed, PhaseSucceeded} {
			i := w.podIndex(1)
			w.pods[i].Phase, w.pods[i].Ready = phase, false
			out := mustStep(t, w)
			if countActions(out, ActionDeletePod) != 1 || countActions(out, ActionCreatePod) != 0 {
				t.Fatalf("%s pod: want one delete and no create, got %+v", phase, out.effects())
			}
			// Terminating: nothing new.
			if out := mustStep(t, w); countActions(out, ActionDeletePod)+countActions(out, ActionCreatePod) != 0 {
				t.Fatalf("acted on a terminating pod: %+v", out.effects())
			}
			w.advanceAll() // gone
			out = mustStep(t, w)
			if countActions(out, ActionCreatePod) != 1 || out.effects()[0].Ordinal != 1 {
				t.Fatalf("want pod 1 recreated, got %+v", out.effects())
			}
			converge(t, w)
		}
	})
}

// TestCreatePodFailure: while every CreatePod fails the set does not move
// and nothing is duplicated; once creation works again it converges.
func TestCreatePodFailure(t *testing.T) {
	forPolicies(t, func(t *testing.T, spec Spec) {
		spec.Replicas = 3
		w := newWorld(spec, "v1")
		w.failCreatePod = true
		for i := 0; i < 5; i++ {
			mustStep(t, w)
			w.advanceAll()
		}
		if len(w.pods) != 0 {
			t.Fatalf("pods exist although every create failed: %+v", w.pods)
		}
		w.failCreatePod = false
		converge(t, w)
		if len(w.pods) != 3 {
			t.Fatalf("%d pods after recovery", len(w.pods))
		}
	})
}

// TestFaultInjectionEveryCall runs one scenario (create, roll out, scale
// down, delete the set) once to count its actions, then again failing the
// Nth action for every N. Every run must converge with no duplicate and no
// lost pod, and every step is checked by the invariants.
func TestFaultInjectionEveryCall(t *testing.T) {
	forPolicies(t, func(t *testing.T, spec Spec) {
		spec.Replicas = 3
		spec.VolumeClaims = []string{"data", "logs"}
		scenario := func(failAt int) (*world, error) {
			w := newWorld(spec, "v1")
			w.failAt = failAt
			rng := rand.New(rand.NewPCG(uint64(failAt), 1))
			for _, change := range []func(){
				func() {},
				func() { w.template = []byte("v2") },
				func() { w.spec.Replicas = 1 },
				func() { w.spec.Replicas = 4; w.template = []byte("v1") },
				func() { w.spec.Deleted = true },
			} {
				change()
				if err := w.settle(rng, 200); err != nil {
					return w, err
				}
				if !w.spec.Deleted && len(w.pods) != w.spec.Replicas {
					return w, errLost
				}
			}
			return w, nil
		}
		w, err := scenario(0)
		if err != nil {
			t.Fatalf("%v\n%s", err, w.dump())
		}
		total := w.calls
		if total < 20 {
			t.Fatalf("scenario has only %d actions", total)
		}
		for n := 1; n <= total; n++ {
			if w, err := scenario(n); err != nil {
				t.Fatalf("failing action %d of %d: %v\n%s", n, total, err, w.dump())
			}
		}
	})
}

var errLost = errorString("converged with the wrong number of pods")

type errorString string

func (e errorString) Error() string { return string(e) }

// TestUpdateSetStatusFailure: while the set's status cannot be written the
// set is left as it is: membership is recorded before any pod or volume is
// made or removed for it (RecordOrdinals), so a set that cannot remember its
// members makes none. Once writes work it converges; a rollout made while
// status writes fail again (membership unchanged) still follows the
// monotonic and update invariants, because those decisions are made from
// the observation, and the status catches up once writes work.
func TestUpdateSetStatusFailure(t *testing.T) {
	forPolicies(t, func(t *testing.T, spec Spec) {
		spec.Replicas = 3
		w := newWorld(spec, "v1")
		w.dropStatus = true
		for i := 0; i < 5; i++ {
			mustStep(t, w)
			w.advanceAll()
		}
		if len(w.pods) != 0 || len(w.volumes) != 0 {
			t.Fatalf("acted while its state could not be recorded:\n%s", w.dump())
		}
		w.dropStatus = false
		w.checkMonotonic = true
		converge(t, w)
		w.checkMonotonic = false
		w.dropStatus = true
		w.template = []byte("v2")
		w.checkUpdateOrder = true
		converge(t, w)
		if w.status.UpdateRevision != revName("web", "v1") {
			t.Fatalf("a status was written during the rollout: %+v", w.status)
		}
		w.dropStatus = false
		mustStep(t, w)
		if st := w.status; st.UpdateRevision != revName("web", "v2") || st.ReadyReplicas != 3 {
			t.Fatalf("status after writes resume: %+v", st)
		}
	})
}
