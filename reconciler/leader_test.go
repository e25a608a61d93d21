package reconciler

import (
	"fmt"
	"slices"
	"testing"
	"time"
)

// rollLeader converges a 3-pod set whose leader is ordinal 1 (a middle
// ordinal), changes the template, and steps the rollout until it settles,
// with the operator playing along as play says. It returns the order of
// the pod deletions and the actions of other kinds, by step.
func rollLeader(t *testing.T, spec Spec, play func(w *world, out Output)) (deleted []int, asked []Action) {
	t.Helper()
	deleted, _, asked = rollLeaderWith(t, spec, func(w *world) { w.template = []byte("v2") }, play)
	return deleted, asked
}

// rollLeaderWith is rollLeader with the change that starts the rollout
// made by change; it also returns the ordinals whose volumes were
// expanded, in order.
func rollLeaderWith(t *testing.T, spec Spec, change func(w *world), play func(w *world, out Output)) (deleted, expanded []int, asked []Action) {
	t.Helper()
	spec.Replicas = 3
	w := newWorld(spec, "v1")
	converge(t, w)
	w.leader = 1
	change(w)
	w.checkUpdateOrder, w.checkBudget = true, true
	for i := 0; i < 300; i++ {
		out := mustStep(t, w)
		for _, a := range out.Actions {
			switch a.Type {
			case ActionDeletePod:
				deleted = append(deleted, a.Ordinal)
			case ActionExpandVolume:
				expanded = append(expanded, a.Ordinal)
			case ActionSwitchover, ActionCheckDisruption:
				asked = append(asked, a)
			}
		}
		if play != nil {
			play(w, out)
		}
		if w.converged() {
			return deleted, expanded, asked
		}
		w.advanceAll()
		w.elect()
		w.now = w.now.Add(time.Second)
	}
	t.Fatalf("not converged\n%s", w.dump())
	return nil, nil, nil
}

// TestLeaderGoesLast: with the leader on ordinal 1 of 0..2, a rolling
// update takes the others down from the highest ordinal first, and the
// leader last; under switchover, exactly one switchover comes first, to a
// follower already at the update revision.
func TestLeaderGoesLast(t *testing.T) {
	forPolicies(t, func(t *testing.T, spec Spec) {
		spec.LeaderCheck, spec.LeaderUpdate = "primary", LeaderLast
		deleted, asked := rollLeader(t, spec, nil)
		if !slices.Equal(deleted, []int{2, 0, 1}) || len(asked) != 0 {
			t.Fatalf("last: deleted %v, asked %v; want [2 0 1] and nothing asked", deleted, asked)
		}

		spec.LeaderUpdate = LeaderSwitchover
		deleted, asked = rollLeader(t, spec, nil)
		if !slices.Equal(deleted, []int{2, 0, 1}) {
			t.Fatalf("switchover: deleted %v, want [2 0 1]", deleted)
		}
		if len(asked) != 1 || asked[0].Type != ActionSwitchover || asked[0].Ordinal != 1 || asked[0].Target != 0 {
			t.Fatalf("switchover: asked %+v, want one switchover from 1 to 0 (the lowest follower at the update revision)", asked)
		}
	})
}

// TestDisruptionCheckBeforeSwitchover: with a disruption check and
// leader_update = switchover, the leader's step asks the check first and
// hands leadership over only once the check has passed for it (DESIGN §3b:
// "Leadership is never handed over for a step that the application then
// refuses"), also while the application refuses some answers.
func TestDisruptionCheckBeforeSwitchover(t *testing.T) {
	for _, refuse := range []bool{false, true} {
		t.Run(fmt.Sprintf("refusals=%v", refuse), func(t *testing.T) {
			spec := Spec{Name: "web", LeaderCheck: "primary", LeaderUpdate: LeaderSwitchover, DisruptionCheck: "pg_isready",
				ProgressDeadline: 10 * time.Minute}
			steps := 0
			deleted, asked := rollLeader(t, spec, func(w *world, out Output) {
				steps++
				w.appFails = refuse && steps < 40
				for _, a := range out.Actions {
					if a.Type == ActionSwitchover && !slices.ContainsFunc(w.memory.Cleared, func(c Clearance) bool {
						return c.Ordinal == a.Ordinal && c.Until.After(w.now)
					}) {
						t.Fatalf("switchover of %d without a passing disruption check for it\n%s", a.Ordinal, w.dump())
					}
				}
			})
			if !slices.Equal(deleted, []int{2, 0, 1}) {
				t.Fatalf("deleted %v, want [2 0 1]", deleted)
			}
			check := slices.IndexFunc(asked, func(a Action) bool { return a.Type == ActionCheckDisruption && a.Ordinal == 1 })
			switchover := slices.IndexFunc(asked, func(a Action) bool { return a.Type == ActionSwitchover && a.Ordinal == 1 })
			if check < 0 || switchover < 0 || check > switchover {
				t.Fatalf("asked %+v: want the disruption check about the leader 1 before its switchover", asked)
			}
		})
	}
}

// TestSwitchoverWaitsForTheNewLeader: after a switchover the old leader
// is taken down only once the leader check passes on another pod (DESIGN
// §3b), not as soon as its own stops passing: the two checks are read
// apart, and between them no pod is seen to lead.
func TestSwitchoverWaitsForTheNewLeader(t *testing.T) {
	spec := Spec{Name: "web", LeaderCheck: "primary", LeaderUpdate: LeaderSwitchover, DisruptionCheck: "pg_isready",
		ProgressDeadline: 10 * time.Minute}
	gap := 0
	deleted, asked := rollLeader(t, spec, func(w *world, out Output) {
		if gap > 0 {
			for _, a := range out.Actions {
				if a.Type == ActionDeletePod && a.Ordinal == 1 {
					t.Fatalf("the old leader 1 deleted while no pod was seen to lead\n%s", w.dump())
				}
			}
			gap--
			w.hideLeader = gap > 0
		}
		if slices.ContainsFunc(out.Actions, func(a Action) bool { return a.Type == ActionSwitchover }) {
			gap, w.hideLeader = 5, true
		}
	})
	if !slices.Equal(deleted, []int{2, 0, 1}) {
		t.Fatalf("deleted %v, want [2 0 1]", deleted)
	}
	if !slices.ContainsFunc(asked, func(a Action) bool { return a.Type == ActionSwitchover && a.Ordinal == 1 }) {
		t.Fatalf("asked %+v: want a switchover of the leader 1", asked)
	}
}

// TestSupervisedLeaderWaitsForApproval: under supervised the rollout stops
// before the leader with WaitingForApproval, and goes on once the operator
// approves; the approval is spent on that one step.
func TestSupervisedLeaderWaitsForApproval(t *testing.T) {
	spec := Spec{Name: "web", LeaderCheck: "primary", LeaderUpdate: LeaderSupervised, ProgressDeadline: time.Minute}
	waited := 0
	deleted, _ := rollLeader(t, spec, func(w *world, out Output) {
		waiting := false
		for _, c := range out.Status.Conditions {
			waiting = waiting || (c.Type == ConditionWaitingForApproval && c.Status)
		}
		if !waiting {
			return
		}
		if slices.ContainsFunc(out.Status.Conditions, func(c Condition) bool { return c.Type == ConditionRolloutStuck && c.Status }) {
			t.Fatal("waiting for approval counted as a stuck rollout")
		}
		// The leader held for approval still serves: once the
		// others are back it is counted available, as the status's
		// counters count it. (The held step used to count it as gone:
		// "2 of 3 replicas available" beside 3 available.)
		if waited == 60 {
			av := condition(out.Status, ConditionAvailable)
			if !av.Status || av.Message != "3 of 3 replicas available" || out.Status.AvailableReplicas != 3 {
				t.Errorf("while waiting for approval: Available %+v, available replicas %d; want 3 of 3\n%s", av, out.Status.AvailableReplicas, w.dump())
			}
		}
		if waited++; waited == 120 {
			w.spec.Approval = "yes"
		}
	})
	if !slices.Equal(deleted, []int{2, 0, 1}) || waited < 120 {
		t.Fatalf("deleted %v after waiting %d steps; want [2 0 1] with the leader only after the approval", deleted, waited)
	}
}

// TestDisruptionCheckHoldsAStep: with a disruption check declared, every
// Ready pod taken down was asked about first, in another Ready pod; a
// refusal holds the step, and it goes on once the check passes.
func TestDisruptionCheckHoldsAStep(t *testing.T) {
	spec := Spec{Name: "web", DisruptionCheck: "pg_isready", ProgressDeadline: 10 * time.Minute}
	refusals := 0
	deleted, asked := rollLeader(t, spec, func(w *world, out Output) {
		w.appFails = refusals < 3
		for _, h := range out.Held {
			if h.Reason == HoldDisruptionCheckFailed {
				refusals++
			}
		}
	})
	if !slices.Equal(deleted, []int{2, 1, 0}) {
		t.Fatalf("deleted %v, want [2 1 0]", deleted)
	}
	for _, a := range asked {
		if a.Type != ActionCheckDisruption || a.Target == a.Ordinal {
			t.Fatalf("asked %+v: want disruption checks run in another pod", a)
		}
	}
	if len(asked) < 3 {
		t.Fatalf("asked %d times for 3 pods", len(asked))
	}
}

// TestLeaderExpandsLast: a growing claim expands every ordinal's volume as
// a disruption (DESIGN §3b), and the leader's goes last, under every
// statefulset_leader_update, as in a rolling update; while the leader is
// unknown no Ready pod is taken down to grow its volume (any may lead),
// and once it is known the expansion goes on, leader last.
func TestLeaderExpandsLast(t *testing.T) {
	grow := func(w *world) { w.spec.ClaimTemplates = []ClaimTemplate{{Claim: "data", CapacityMin: 20}} }
	cases := []struct {
		name   string
		update LeaderUpdate
		// unknownFor is how many decisions the leader check stays unread
		// after the claim grows.
		unknownFor int
		// wantSwitchover is set when one switchover from the leader (1)
		// to the lowest follower (0) must come before the leader goes.
		wantSwitchover bool
	}{
		{name: "last", update: LeaderLast},
		{name: "switchover", update: LeaderSwitchover, wantSwitchover: true},
		{name: "supervised", update: LeaderSupervised},
		{name: "last, leader unknown at first", update: LeaderLast, unknownFor: 20},
		{name: "switchover, leader unknown at first", update: LeaderSwitchover, unknownFor: 20, wantSwitchover: true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			forPolicies(t, func(t *testing.T, spec Spec) {
				spec.LeaderCheck, spec.LeaderUpdate = "primary", tc.update
				steps := 0
				var whileUnknown []int
				change := func(w *world) {
					grow(w)
					w.leaderUnknown = tc.unknownFor > 0
				}
				deleted, expanded, asked := rollLeaderWith(t, spec, change, func(w *world, out Output) {
					steps++
					if w.leaderUnknown {
						for _, a := range out.Actions {
							if a.Type == ActionDeletePod || a.Type == ActionExpandVolume {
								whileUnknown = append(whileUnknown, a.Ordinal)
							}
						}
					}
					if steps == tc.unknownFor {
						w.leaderUnknown = false
					}
					if tc.update == LeaderSupervised {
						w.approveIfWaiting()
					}
				})
				if len(whileUnknown) > 0 {
					t.Fatalf("pods %v taken down or expanded while the leader was unknown", whileUnknown)
				}
				if !slices.Equal(deleted, []int{2, 0, 1}) || !slices.Equal(expanded, []int{2, 0, 1}) {
					t.Fatalf("deleted %v, expanded %v; want [2 0 1] for both: the leader (1) last", deleted, expanded)
				}
				var switchovers []Action
				for _, a := range asked {
					if a.Type == ActionSwitchover {
						switchovers = append(switchovers, a)
					}
				}
				switch {
				case tc.wantSwitchover && (len(switchovers) != 1 || switchovers[0].Ordinal != 1 || switchovers[0].Target != 0):
					t.Fatalf("switchovers %+v, want one from 1 to 0", switchovers)
				case !tc.wantSwitchover && len(switchovers) != 0:
					t.Fatalf("switchovers %+v under %s, want none", switchovers, tc.update)
				}
			})
		})
	}
}
