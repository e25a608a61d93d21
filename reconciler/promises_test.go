package reconciler

import (
	"fmt"
	"slices"
	"testing"
	"time"
)

// The tests in this file are the scenarios of the three safety promises
// (DESIGN §3): the budget, no silent downgrade, and kept data stays kept.
// Each one failed on the reconciler before the promises were enforced.

// downAfter counts the in-range ordinals that are not healthy in the world.
func downAfter(w *world) int {
	down := 0
	for o := w.spec.OrdinalsStart; o < w.spec.OrdinalsStart+w.spec.Replicas; o++ {
		if i := w.podIndex(o); i < 0 || !w.healthy(w.pods[i]) {
			down++
		}
	}
	return down
}

// TestClaimsChangeIsABudgetedOrderedReplacement: adding a claim makes every
// child drifted (its storage no longer matches). That used to yield one
// repair per ordinal in a single decision, which the agent carries out as a
// stop: a full outage. It is now replaced like a template change: highest
// ordinal first, within maxUnavailable, with the cause that runs the
// pre_update hooks, and (OrderedReady) only once the previous replacement is
// available again.
func TestClaimsChangeIsABudgetedOrderedReplacement(t *testing.T) {
	for _, p := range []PodManagementPolicy{OrderedReady, Parallel} {
		t.Run(string(p), func(t *testing.T) {
			w := newWorld(Spec{Replicas: 3, PodManagementPolicy: p, VolumeClaims: []string{"data"}}, "v1")
			converge(t, w)
			w.spec.VolumeClaims = []string{"data", "logs"}
			w.checkBudget = true
			var order []int
			for i := 0; i < 200 && !w.converged(); i++ {
				out := mustStep(t, w)
				for _, a := range out.effects() {
					if a.Type == ActionDeletePod {
						if a.Cause != CauseRepair {
							t.Fatalf("drift replacement with cause %s, want %s", a.Cause, CauseRepair)
						}
						order = append(order, a.Ordinal)
					}
				}
				if d := downAfter(w); d > 1 {
					t.Fatalf("%d ordinals down at once, budget 1\n%s", d, w.dump())
				}
				w.advanceAll()
				w.now = w.now.Add(time.Second)
			}
			if !w.converged() {
				t.Fatalf("not converged\n%s", w.dump())
			}
			if !slices.Equal(order, []int{2, 1, 0}) {
				t.Fatalf("replacement order %v, want [2 1 0]", order)
			}
			for o := 0; o < 3; o++ {
				if !w.hasVolume("logs", o) {
					t.Fatalf("ordinal %d has no logs volume", o)
				}
			}
		})
	}
}

// TestDriftWaitsWhereAnUpdateWould: a drifted child is replaced only where a
// rolling update may act. Under OnDelete it waits for the user's delete,
// below the partition and while paused it stays as it is.
func TestDriftWaitsWhereAnUpdateWould(t *testing.T) {
	for _, tc := range []struct {
		name string
		edit func(*Spec)
	}{
		{"OnDelete", func(s *Spec) { s.UpdateStrategy = OnDelete }},
		{"paused", func(s *Spec) { s.Paused = true }},
		{"below the partition", func(s *Spec) { s.Partition = 3 }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			w := newWorld(Spec{Replicas: 3, VolumeClaims: []string{"data"}}, "v1")
			converge(t, w)
			tc.edit(&w.spec)
			w.spec.VolumeClaims = []string{"data", "logs"}
			converge(t, w)
			if n := w.podsDeleted; n != 0 {
				t.Fatalf("%d drifted pods replaced", n)
			}
			if w.spec.UpdateStrategy == OnDelete {
				w.pods[w.podIndex(1)].Terminating = true // the user deletes pod 1
				converge(t, w)
				if w.drifted(w.pods[w.podIndex(1)]) {
					t.Fatal("the deleted pod came back drifted")
				}
			}
		})
	}
}

// TestBudgetCountsEveryUnavailablePod is the scenario of the issue: with
// minReadySeconds, 3 replicas and maxUnavailable 1, ordinal 0 at the old
// revision is Ready but not yet available. One decision used to delete
// ordinals 2 and 0 (0 "for free"), leaving 1 of 3 healthy. Ordinal 0
// already uses the budget, so no healthy pod may be taken down.
func TestBudgetCountsEveryUnavailablePod(t *testing.T) {
	w := newWorld(Spec{Replicas: 3, PodManagementPolicy: Parallel, MinReadySeconds: 10}, "v1")
	converge(t, w)
	i := w.podIndex(0)
	w.pods[i].ReadySince = w.now // ready again just now: not available for 10s
	w.template = []byte("v2")
	out := mustStep(t, w)
	for _, a := range out.effects() {
		if a.Type == ActionDeletePod && a.Ordinal != 0 {
			t.Fatalf("healthy pod %d taken down while pod 0 is unavailable: %+v", a.Ordinal, out.effects())
		}
	}
	if d := downAfter(w); d > 1 {
		t.Fatalf("%d down after one decision", d)
	}
}

// TestBudgetCountsBelowThePartition: an unavailable pod below the partition
// counts too (the upstream fix of issue 137409 counts the whole range).
func TestBudgetCountsBelowThePartition(t *testing.T) {
	for _, p := range []PodManagementPolicy{OrderedReady, Parallel} {
		t.Run(string(p), func(t *testing.T) {
			w := newWorld(Spec{Replicas: 4, PodManagementPolicy: p, Partition: 2}, "v1")
			converge(t, w)
			i := w.podIndex(0)
			w.pods[i].Ready, w.pods[i].ReadySince = false, time.Time{} // restarting
			w.template = []byte("v2")
			out := mustStep(t, w)
			if n := countActions(out, ActionDeletePod); n != 0 {
				t.Fatalf("took %d pods down while pod 0 below the partition is unavailable: %+v", n, out.effects())
			}
		})
	}
}

// TestNotReadyCurrentPodIsWaitedFor: under OrderedReady a pod at the
// current revision that is briefly not ready is waited for, as
// updateStatefulSet does; it used to be replaced out of order while another
// pod was already down.
func TestNotReadyCurrentPodIsWaitedFor(t *testing.T) {
	w := newWorld(Spec{Replicas: 3, ProgressDeadline: 10 * time.Minute}, "v1")
	converge(t, w)
	w.template = []byte("v2")
	mustStep(t, w) // deletes pod 2 for the update
	i := w.podIndex(0)
	w.pods[i].Ready, w.pods[i].ReadySince = false, time.Time{} // pod 0 restarts
	for k := 0; k < 3; k++ {
		out := mustStep(t, w)
		if n := countActions(out, ActionDeletePod); n != 0 {
			t.Fatalf("replaced a pod while pod 0 at the current revision restarts: %+v", out.effects())
		}
		w.now = w.now.Add(time.Second)
	}
}

// TestAbandonedRevisionIsReplacedAtOnce keeps the departure of issue 67250:
// after a revert, a pod stuck not ready at the abandoned revision is
// replaced without waiting, under both policies.
func TestAbandonedRevisionIsReplacedAtOnce(t *testing.T) {
	for _, p := range []PodManagementPolicy{OrderedReady, Parallel} {
		t.Run(string(p), func(t *testing.T) {
			w := newWorld(Spec{Replicas: 3, PodManagementPolicy: p}, "v1")
			w.broken["bad"] = true
			converge(t, w)
			w.template = []byte("bad")
			for k := 0; k < 5; k++ {
				mustStep(t, w)
				w.advanceAll()
			}
			w.template = []byte("v1") // the revert
			converge(t, w)
			if got := podRevisions(w, 0, 3); slices.ContainsFunc(got, func(r string) bool { return r != revName("web", "v1") }) {
				t.Fatalf("revisions after the revert: %v", got)
			}
		})
	}
}

// TestOnDeleteScaleUpDoesNotDowngrade is the scenario: under
// OnDelete, pod 4 is deleted and returns at v2; the set is scaled 5→3→5.
// Ordinal 4 used to come back at v1, on a volume v2 last wrote.
func TestOnDeleteScaleUpDoesNotDowngrade(t *testing.T) {
	v2 := revName("web", "v2")
	w := newWorld(Spec{Replicas: 5, UpdateStrategy: OnDelete, VolumeClaims: []string{"data"}}, "v1")
	converge(t, w)
	w.template = []byte("v2")
	converge(t, w)
	w.pods[w.podIndex(4)].Terminating = true
	converge(t, w)
	w.spec.Replicas = 3
	converge(t, w)
	w.spec.Replicas = 5
	converge(t, w)
	if got := podRevisions(w, 3, 5); !slices.Equal(got, []string{v2, v2}) {
		t.Fatalf("ordinals 3 and 4 after 5→3→5: %v, want both at %s", got, v2)
	}
}

// TestPausedRecreatesUpdatedPodAtUpdateRevision: while paused, a pod at or
// above the partition that was already updated and then fails comes back at
// the update revision, as OpenKruise's isCurrentRevisionNeeded decides; it
// used to come back at the old one.
func TestPausedRecreatesUpdatedPodAtUpdateRevision(t *testing.T) {
	v1, v2 := revName("web", "v1"), revName("web", "v2")
	forPolicies(t, func(t *testing.T, spec Spec) {
		spec.Replicas = 3
		spec.Partition = 1
		w := newWorld(spec, "v1")
		converge(t, w)
		w.template = []byte("v2")
		// Let the rollout update ordinal 2 only, then pause.
		for k := 0; k < 100 && podRevisions(w, 2, 3)[0] != v2; k++ {
			mustStep(t, w)
			w.advanceAll()
			w.now = w.now.Add(time.Second)
		}
		w.spec.Paused = true
		converge(t, w)
		i := w.podIndex(2)
		w.pods[i].Phase, w.pods[i].Ready = PhaseFailed, false
		converge(t, w)
		if got := podRevisions(w, 0, 3); got[2] != v2 || got[0] != v1 {
			t.Fatalf("paused set after pod 2 failed: %v", got)
		}
	})
}

// TestRaisingThePartitionIsAnExplicitStepBack: a pod below a partition the
// user raised comes back at the current revision, even if it ran the update
// revision: that is the user's step back, not a silent downgrade.
func TestRaisingThePartitionIsAnExplicitStepBack(t *testing.T) {
	v1 := revName("web", "v1")
	w := newWorld(Spec{Replicas: 3, Partition: 2}, "v1")
	converge(t, w)
	w.template = []byte("v2")
	converge(t, w)
	w.spec.Partition = 3
	w.pods[w.podIndex(2)].Terminating = true
	converge(t, w)
	if got := podRevisions(w, 2, 3); got[0] != v1 {
		t.Fatalf("pod 2 below the raised partition at %s, want %s", got[0], v1)
	}
}

// TestRetentionSwitchKeepsVolumesKeptEarlier is the scenario: 3→1
// under Retain keeps data-web-1 and data-web-2; switching the policy to
// Delete afterwards, with no scale change, used to delete them.
func TestRetentionSwitchKeepsVolumesKeptEarlier(t *testing.T) {
	for _, p := range []PodManagementPolicy{OrderedReady, Parallel} {
		t.Run(string(p), func(t *testing.T) {
			w := newWorld(Spec{Replicas: 3, PodManagementPolicy: p, VolumeClaims: []string{"data"}}, "v1")
			converge(t, w)
			w.spec.Replicas = 1
			converge(t, w)
			w.spec.WhenScaled = Delete
			converge(t, w)
			for o := 1; o < 3; o++ {
				if !w.hasVolume("data", o) {
					t.Fatalf("data-web-%d deleted after the switch to Delete", o)
				}
			}
			// A scale-down made under Delete does delete.
			w.spec.Replicas = 3
			converge(t, w)
			w.spec.Replicas = 2
			converge(t, w)
			if w.hasVolume("data", 2) {
				t.Fatal("data-web-2 kept after a scale-down under Delete")
			}
			if !w.hasVolume("data", 1) {
				t.Fatal("data-web-1 deleted")
			}
		})
	}
}

// TestSetDeleteKeepsVolumesItDidNotCondemn: deleting a set under
// whenDeleted=Delete deletes its members' volumes, but not those an earlier
// scale-down kept under Retain, nor those of an earlier set of the same name.
func TestSetDeleteKeepsVolumesItDidNotCondemn(t *testing.T) {
	w := newWorld(Spec{Replicas: 3, VolumeClaims: []string{"data"}}, "v1")
	// data-web-7 is left by an earlier set named "web".
	w.volumes = append(w.volumes, Volume{Claim: "data", Ordinal: 7, Name: VolumeName("data", "web", 7)})
	converge(t, w)
	w.spec.Replicas = 2 // data-web-2 kept under Retain
	converge(t, w)
	w.spec.WhenDeleted = Delete
	w.spec.Deleted = true
	converge(t, w)
	var left []string
	for _, v := range w.volumes {
		left = append(left, v.Name)
	}
	slices.Sort(left)
	if want := []string{"data-web-2", "data-web-7"}; !slices.Equal(left, want) {
		t.Fatalf("volumes left after the delete: %v, want %v", left, want)
	}
}

// TestRecordsSurviveInTheStatus: the ordinal records live in the status the
// caller stores, so a new leader (a fresh reconciler with the stored status)
// decides the same: here, ordinal 4 of an OnDelete set scaled away comes
// back at the revision it last ran even though the status is all it has.
func TestRecordsSurviveInTheStatus(t *testing.T) {
	w := newWorld(Spec{Replicas: 3, Paused: true, VolumeClaims: []string{"data"}}, "v1")
	converge(t, w)
	st := w.status
	if len(st.Ordinals) != 3 {
		t.Fatalf("records %+v, want one per ordinal", st.Ordinals)
	}
	for o, rec := range st.Ordinals {
		if rec.Ordinal != o || rec.Revision != revName("web", "v1") || rec.Condemned {
			t.Fatalf("record %+v", rec)
		}
	}
	// Steady state: the status is not rewritten and no action is needed.
	before := w.status.Ordinals
	mustStep(t, w)
	if &before[0] != &w.status.Ordinals[0] {
		t.Fatal("steady reconcile rebuilt the records")
	}
}

// TestDrainWithinTheBudget: two nodes drained at once with a budget of 1.
// The daemon takes their pods down itself, highest ordinal first, never more
// than one ordinal down at once, under every strategy (a drain is not an
// update). Without claims the pods move to other nodes one after the other;
// with claims a pod waits for its volume's node, so the second waits for
// the budget until the drain is lifted, and then every ordinal is back.
func TestDrainWithinTheBudget(t *testing.T) {
	for _, claims := range [][]string{nil, {"data"}} {
		for _, strategy := range []UpdateStrategy{RollingUpdate, OnDelete} {
			for _, p := range []PodManagementPolicy{OrderedReady, Parallel} {
				t.Run(fmt.Sprintf("claims=%v/%s/%s", claims, strategy, p), func(t *testing.T) {
					w := newWorld(Spec{Replicas: 3, PodManagementPolicy: p, UpdateStrategy: strategy, VolumeClaims: claims}, "v1")
					converge(t, w)
					w.drain(1)
					w.drain(2)
					var order []int
					for i := 0; i < 100; i++ {
						out := mustStep(t, w)
						for _, a := range out.effects() {
							if a.Type == ActionDeletePod {
								if a.Cause != CauseDrain {
									t.Fatalf("pod %d deleted with cause %s during a drain", a.Ordinal, a.Cause)
								}
								order = append(order, a.Ordinal)
							}
						}
						if d := downAfter(w); d > 1 {
							t.Fatalf("%d ordinals down at once during the drain\n%s", d, w.dump())
						}
						w.advanceAll()
						w.now = w.now.Add(time.Second)
					}
					if len(claims) == 0 {
						if !slices.Equal(order, []int{2, 1}) || !w.converged() {
							t.Fatalf("without claims: order %v, converged %v\n%s", order, w.converged(), w.dump())
						}
						return
					}
					if !slices.Equal(order, []int{2}) {
						t.Fatalf("with claims, while drained: order %v, want only [2]\n%s", order, w.dump())
					}
					w.liftDrains()
					converge(t, w)
				})
			}
		}
	}
}

// TestDrainLeavesAPeersBlipAlone replays a NATS drain seen in CI: two of
// three nodes drained, budget 1. The daemon takes ordinal 2 off; while it
// waits for its node, ordinal 1 is briefly not ready (its peers elect a new
// JetStream leader). The daemon used to take ordinal 1 too, as an already
// unavailable pod that costs no budget: two members down. Kubernetes'
// eviction under a PodDisruptionBudget (IfHealthyBudget, the default
// unhealthyPodEvictionPolicy) refuses that while the set is over its
// budget, and so does the daemon. Alone on a draining node, within the
// budget, a pod that is not ready still goes at once (Parallel).
func TestDrainLeavesAPeersBlipAlone(t *testing.T) {
	for _, p := range []PodManagementPolicy{OrderedReady, Parallel} {
		t.Run(string(p), func(t *testing.T) {
			w := newWorld(Spec{Replicas: 3, PodManagementPolicy: p, VolumeClaims: []string{"data"}}, "v1")
			converge(t, w)
			w.drain(1)
			w.drain(2)
			if got := deletedOrdinals(mustStep(t, w)); !slices.Equal(got, []int{2}) {
				t.Fatalf("first pass of the drain deleted %v, want [2]\n%s", got, w.dump())
			}
			w.advanceAll()
			blip := &w.pods[w.podIndex(1)]
			blip.Ready, blip.ReadySince = false, time.Time{}
			for i := 0; i < 5; i++ {
				w.now = w.now.Add(time.Second)
				if got := deletedOrdinals(mustStep(t, w)); len(got) > 0 {
					t.Fatalf("pass %d: deleted %v while ordinal 2 waits for its node and 1 is not ready\n%s", i, got, w.dump())
				}
			}
			w.liftDrains()
			converge(t, w)

			if p == OrderedReady {
				// updateStatefulSet's monotonic walk stops at a pod that
				// is not ready, before any drain is looked at.
				return
			}
			// Within the budget a pod that is not ready on a draining node
			// goes without waiting: it is down already.
			alone := &w.pods[w.podIndex(0)]
			alone.Ready, alone.ReadySince = false, time.Time{}
			w.drain(0)
			if got := deletedOrdinals(mustStep(t, w)); !slices.Equal(got, []int{0}) {
				t.Fatalf("a lone pod that is not ready on a draining node: deleted %v, want [0]\n%s", got, w.dump())
			}
		})
	}
}

// deletedOrdinals returns the ordinals a decision deletes pods of, in order.
func deletedOrdinals(out Output) []int {
	var ords []int
	for _, a := range out.effects() {
		if a.Type == ActionDeletePod {
			ords = append(ords, a.Ordinal)
		}
	}
	return ords
}

// TestPodReplace: `pod replace` deletes the ordinal's pod (an explicit
// delete: the pre_delete cause, no budget) and recreates it on its own
// volume; with -new-volume the volume is deleted once the pod is gone and a
// fresh one is created before the pod. Each request is carried out once: a
// new leader (the stored records are all it has) does not do it again.
func TestPodReplace(t *testing.T) {
	for _, newVolume := range []bool{false, true} {
		t.Run(fmt.Sprintf("new-volume=%v", newVolume), func(t *testing.T) {
			w := newWorld(Spec{Replicas: 3, VolumeClaims: []string{"data"}}, "v1")
			converge(t, w)
			before := w.volumesEverCreated
			w.spec.Replacements = []Replacement{{Ordinal: 1, Token: "t1", NewVolume: newVolume}}
			out := mustStep(t, w)
			if n := countActions(out, ActionDeletePod); n != 1 || out.effects()[len(out.effects())-1].Cause != CauseReplace {
				t.Fatalf("first step: %+v", out.effects())
			}
			converge(t, w)
			wantVolumes := 0
			if newVolume {
				wantVolumes = 1
			}
			if got := w.volumesEverCreated - before; got != wantVolumes || w.volumesDeleted != wantVolumes {
				t.Fatalf("volumes created %d, deleted %d; want %d of each", got, w.volumesDeleted, wantVolumes)
			}
			if w.podsDeleted != 1 {
				t.Fatalf("%d pods deleted, want 1", w.podsDeleted)
			}
			// Done once: more passes (any leader) change nothing.
			for k := 0; k < 5; k++ {
				if out := mustStep(t, w); len(out.effects()) != 0 {
					t.Fatalf("a carried-out request acted again: %+v", out.effects())
				}
			}
			// A new request (new token) is carried out again.
			w.spec.Replacements[0].Token = "t2"
			converge(t, w)
			if w.podsDeleted != 2 {
				t.Fatalf("%d pods deleted after the second request, want 2", w.podsDeleted)
			}
		})
	}
}
