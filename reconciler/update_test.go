package reconciler

import (
	"fmt"
	"slices"
	"testing"
	"time"
)

// TestRollingUpdate: pods move to the new revision from the highest ordinal
// down, one at a time, and the rollout completes by making the update
// revision current.
func TestRollingUpdate(t *testing.T) {
	forPolicies(t, func(t *testing.T, spec Spec) {
		spec.Replicas = 4
		w := newWorld(spec, "v1")
		converge(t, w)
		w.template = []byte("v2")
		w.checkUpdateOrder, w.checkBudget = true, true
		var order []int
		for i := 0; i < 200; i++ {
			out := mustStep(t, w)
			for _, a := range out.effects() {
				if a.Type == ActionDeletePod {
					order = append(order, a.Ordinal)
				}
			}
			if w.converged() {
				break
			}
			w.advanceAll()
			w.now = w.now.Add(time.Second)
		}
		if !slices.Equal(order, []int{3, 2, 1, 0}) {
			t.Fatalf("update order %v, want [3 2 1 0]", order)
		}
		st := w.last.Status
		v2 := revName("web", "v2")
		if st.CurrentRevision != v2 || st.UpdateRevision != v2 || st.UpdatedReplicas != 4 || st.CurrentReplicas != 4 {
			t.Fatalf("status after rollout %+v", st)
		}
		if got := podRevisions(w, 0, 4); slices.ContainsFunc(got, func(r string) bool { return r != v2 }) {
			t.Fatalf("pod revisions %v", got)
		}
	})
}

func TestRollingUpdateWithPartition(t *testing.T) {
	v1, v2 := revName("web", "v1"), revName("web", "v2")
	for _, tc := range []struct {
		name      string
		replicas  int
		partition int
		want      []string
	}{
		{"partition 0 updates all", 3, 0, []string{v2, v2, v2}},
		{"partition 2 of 5", 5, 2, []string{v1, v1, v2, v2, v2}},
		{"partition = replicas updates nothing", 3, 3, []string{v1, v1, v1}},
		{"partition > replicas updates nothing", 3, 10, []string{v1, v1, v1}},
		{"partition 1 of 2", 2, 1, []string{v1, v2}},
	} {
		for _, p := range []PodManagementPolicy{OrderedReady, Parallel} {
			t.Run(fmt.Sprintf("%s/%s", tc.name, p), func(t *testing.T) {
				w := newWorld(Spec{Replicas: tc.replicas, Partition: tc.partition, PodManagementPolicy: p}, "v1")
				converge(t, w)
				w.template = []byte("v2")
				w.checkUpdateOrder, w.checkBudget = true, true
				converge(t, w)
				if got := podRevisions(w, 0, tc.replicas); !slices.Equal(got, tc.want) {
					t.Fatalf("revisions %v, want %v", got, tc.want)
				}
				// Only a rollout that reached every pod makes v2 current.
				wantCurrent := v1
				if tc.partition == 0 {
					wantCurrent = v2
				}
				if st := w.last.Status; st.CurrentRevision != wantCurrent || st.UpdateRevision != v2 {
					t.Fatalf("current %s update %s, want current %s", st.CurrentRevision, st.UpdateRevision, wantCurrent)
				}
				// A pod below the partition that is deleted comes back at the
				// current revision.
				if tc.partition > 0 && tc.partition <= tc.replicas {
					w.pods[w.podIndex(0)].Terminating = true
					converge(t, w)
					if got := podRevisions(w, 0, 1); got[0] != v1 {
						t.Fatalf("pod 0 below the partition came back at %s", got[0])
					}
				}
				// Lowering the partition to 0 finishes the rollout.
				w.spec.Partition = 0
				converge(t, w)
				mustStep(t, w)
				if st := w.last.Status; st.CurrentRevision != v2 {
					t.Fatalf("rollout not completed after partition 0: %+v", st)
				}
			})
		}
	}
}

// TestOnDelete: no pod is updated until it is deleted; a deleted pod comes
// back at the update revision, and so do new pods from a scale-up, as
// upstream newVersionedStatefulSetPod creates them (its API docs say
// otherwise; DESIGN §3: the code wins).
func TestOnDelete(t *testing.T) {
	v1, v2 := revName("web", "v1"), revName("web", "v2")
	for _, p := range []PodManagementPolicy{OrderedReady, Parallel} {
		t.Run(string(p), func(t *testing.T) {
			w := newWorld(Spec{Replicas: 3, UpdateStrategy: OnDelete, PodManagementPolicy: p}, "v1")
			converge(t, w)
			w.template = []byte("v2")
			converge(t, w)
			if got := podRevisions(w, 0, 3); !slices.Equal(got, []string{v1, v1, v1}) {
				t.Fatalf("OnDelete updated pods by itself: %v", got)
			}
			w.pods[w.podIndex(1)].Terminating = true // the user deletes pod 1
			converge(t, w)
			if got := podRevisions(w, 0, 3); !slices.Equal(got, []string{v1, v2, v1}) {
				t.Fatalf("after deleting pod 1: %v", got)
			}
			w.spec.Replicas = 5
			converge(t, w)
			if got := podRevisions(w, 0, 5); !slices.Equal(got, []string{v1, v2, v1, v2, v2}) {
				t.Fatalf("after scale-up: %v", got)
			}
			// A scale-up pod that is deleted afterwards is updated like any other.
			w.pods[w.podIndex(4)].Terminating = true
			converge(t, w)
			if got := podRevisions(w, 4, 5); got[0] != v2 {
				t.Fatalf("deleted scale-up pod came back at %s", got[0])
			}
		})
	}
}

// TestPaused: replicas are kept (a failed pod is replaced, a scale-up
// happens) but no pod is updated, and new pods take the current revision.
func TestPaused(t *testing.T) {
	v1, v2 := revName("web", "v1"), revName("web", "v2")
	forPolicies(t, func(t *testing.T, spec Spec) {
		spec.Replicas = 3
		w := newWorld(spec, "v1")
		converge(t, w)
		w.spec.Paused = true
		w.template = []byte("v2")
		converge(t, w)
		i := w.podIndex(2)
		w.pods[i].Phase, w.pods[i].Ready = PhaseFailed, false
		w.spec.Replicas = 4
		converge(t, w)
		if got := podRevisions(w, 0, 4); !slices.Equal(got, []string{v1, v1, v1, v1}) {
			t.Fatalf("paused set changed revisions: %v", got)
		}
		if c := condition(w.last.Status, ConditionProgressing); c.Reason != ReasonPaused {
			t.Fatalf("Progressing while paused: %+v", c)
		}
		if c := condition(w.last.Status, ConditionRolloutStuck); c.Status {
			t.Fatalf("stuck while paused: %+v", c)
		}
		w.spec.Paused = false
		converge(t, w)
		if got := podRevisions(w, 0, 4); !slices.Equal(got, []string{v2, v2, v2, v2}) {
			t.Fatalf("after resume: %v", got)
		}
	})
}

// TestMaxUnavailable: up to maxUnavailable pods are updated at once in both
// policies; a percentage rounds down, at least 1 (getStatefulSetMaxUnavailable).
func TestMaxUnavailable(t *testing.T) {
	for _, tc := range []struct {
		mu   IntOrPercent
		want int
	}{
		{IntOrPercent{Value: 1}, 1},
		{IntOrPercent{Value: 2}, 2},
		{IntOrPercent{Value: 0}, 1},
		{IntOrPercent{Value: 25, Percent: true}, 1}, // 25% of 5 = 1.25, rounds down
		{IntOrPercent{Value: 50, Percent: true}, 2}, // 2.5 rounds down
		{IntOrPercent{Value: 10, Percent: true}, 1}, // 0.5 rounds down to 0, at least 1
		{IntOrPercent{Value: 1, Percent: true}, 1},
		{IntOrPercent{Value: 100, Percent: true}, 5},
	} {
		for _, p := range []PodManagementPolicy{OrderedReady, Parallel} {
			t.Run(fmt.Sprintf("%+v/%s", tc.mu, p), func(t *testing.T) {
				if got := MaxUnavailableCount(tc.mu, 5); got != tc.want {
					t.Fatalf("MaxUnavailableCount = %d, want %d", got, tc.want)
				}
				w := newWorld(Spec{Replicas: 5, MaxUnavailable: tc.mu, PodManagementPolicy: p}, "v1")
				converge(t, w)
				w.template = []byte("v2")
				w.checkBudget = true
				out := mustStep(t, w)
				if got := countActions(out, ActionDeletePod); got != tc.want {
					t.Fatalf("first update reconcile deleted %d pods, want %d", got, tc.want)
				}
				for k, a := range out.effects()[1:] { // after CreateRevision
					if a.Ordinal != 4-k {
						t.Fatalf("deleted %d, want highest ordinals first: %+v", a.Ordinal, out.effects())
					}
				}
				converge(t, w)
			})
		}
	}
}

// TestMaxUnavailableOldRevisionUnavailable is Kubernetes issue 137409: pods
// that are unavailable at the old revision (a first revision that never
// worked) must not use the budget and freeze the rollout to a fixed one.
func TestMaxUnavailableOldRevisionUnavailable(t *testing.T) {
	for _, p := range []PodManagementPolicy{OrderedReady, Parallel} {
		t.Run(string(p), func(t *testing.T) {
			// Under OrderedReady the pod at the current revision is waited
			// for (updateStatefulSet) until the progress deadline passes.
			w := newWorld(Spec{Replicas: 3, PodManagementPolicy: p, MaxUnavailable: IntOrPercent{Value: 1},
				ProgressDeadline: 30 * time.Second}, "bad")
			w.broken["bad"] = true
			for i := 0; i < 20; i++ {
				mustStep(t, w)
				w.advanceAll()
			}
			if w.last.Status.ReadyReplicas != 0 {
				t.Fatal("broken pods became ready")
			}
			w.template = []byte("v1")
			converge(t, w)
			if got := podRevisions(w, 0, 3); slices.ContainsFunc(got, func(r string) bool { return r != revName("web", "v1") }) {
				t.Fatalf("revisions %v", got)
			}
		})
	}
}

// TestMinReadySeconds: a ready pod counts as available only after
// minReadySeconds, OrderedReady waits for availability before the next pod,
// and Requeue says when to look again.
func TestMinReadySeconds(t *testing.T) {
	w := newWorld(Spec{Replicas: 2, MinReadySeconds: 10}, "v1")
	mustStep(t, w)
	w.advanceAll() // running
	w.advanceAll() // ready, since now
	out := mustStep(t, w)
	if countActions(out, ActionCreatePod) != 0 {
		t.Fatalf("created pod 1 before pod 0 was available: %+v", out.effects())
	}
	if out.Requeue != 10*time.Second {
		t.Fatalf("requeue %v, want 10s", out.Requeue)
	}
	if st := out.Status; st.ReadyReplicas != 1 || st.AvailableReplicas != 0 {
		t.Fatalf("status %+v", st)
	}
	w.now = w.now.Add(9 * time.Second)
	if out := mustStep(t, w); countActions(out, ActionCreatePod) != 0 || out.Requeue != time.Second {
		t.Fatalf("at 9s: %+v requeue %v", out.effects(), out.Requeue)
	}
	w.now = w.now.Add(time.Second)
	if out := mustStep(t, w); countActions(out, ActionCreatePod) != 1 || out.Status.AvailableReplicas != 1 {
		t.Fatalf("at 10s: %+v", out)
	}
	converge(t, w)
	if c := condition(w.last.Status, ConditionAvailable); !c.Status {
		t.Fatalf("Available %+v", c)
	}
}

// TestParallelRolloutWaitsForTheUpdatedPod: under Parallel, while the pod
// just updated is not ready yet, an outdated pod that stops being ready is
// not taken down with it. Its readiness may hang on that very pod: a NATS
// member's /healthz fails for a moment ("stream not current") while a peer
// restarts, yet it is alive and one of the majority. Upstream's rolling
// update walks from the highest ordinal and stops at the first pod that is
// not healthy; this one used to replace every unready outdated pod at once,
// and took two of three Raft members down in the NATS e2e.
func TestParallelRolloutWaitsForTheUpdatedPod(t *testing.T) {
	v2 := revName("web", "v2")
	w := newWorld(Spec{Replicas: 3, PodManagementPolicy: Parallel, MaxUnavailable: IntOrPercent{Value: 1}}, "v1")
	converge(t, w)
	w.template = []byte("v2")
	w.checkBudget = true
	for n := 0; ; n++ {
		if n > 100 {
			t.Fatalf("ordinal 1 never came back at %s:\n%s", v2, w.dump())
		}
		mustStep(t, w)
		if i := w.podIndex(1); i >= 0 && w.pods[i].Revision == v2 && !w.pods[i].Terminating {
			break
		}
		w.advanceAll()
	}
	i0 := w.podIndex(0)
	w.pods[i0].Ready, w.pods[i0].ReadySince = false, time.Time{}
	// The world's budget check counts the unready pod as down, which is
	// the point: it is down by readiness only, not by the reconciler.
	w.checkBudget = false
	for n := 0; n < 3; n++ {
		out := mustStep(t, w)
		for _, a := range out.effects() {
			if a.Type == ActionDeletePod && a.Ordinal == 0 {
				t.Fatalf("ordinal 0 (outdated, not ready) taken down while ordinal 1 comes up at %s: %+v\n%s", v2, out.effects(), w.dump())
			}
		}
		// Ordinal 1 moves on, ordinal 0 stays unready.
		if i := w.podIndex(1); w.pods[i].Phase == PhasePending {
			w.move(i)
		}
	}
	// Once ordinal 1 is ready, the unready outdated pod is replaced, using
	// no budget (nothing more goes down), and the rollout ends.
	w.move(w.podIndex(1))
	converge(t, w)
	if got := podRevisions(w, 0, 3); slices.ContainsFunc(got, func(r string) bool { return r != v2 }) {
		t.Fatalf("revisions %v", got)
	}
}
