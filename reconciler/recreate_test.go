package reconciler

import (
	"fmt"
	"slices"
	"sync/atomic"
)

// The Recreate strategy's invariants (KEP-3541, DESIGN §3b), run by
// checkDecision and checkState after every step of every world, and the
// helpers the other invariants use to judge a Recreate's stop as the one
// step it is. Its table tests are in recreate_table_test.go.

// randomRecreateStops counts the randomized decisions that stopped pods for
// a Recreate, randomRecreateChecks the Recreate checks they asked, and
// randomRecreateGated the decisions whose stop waited at its gate:
// TestRandomized fails when a full run never got there.
var randomRecreateStops, randomRecreateChecks, randomRecreateGated atomic.Int64

// rolls reports whether the spec's strategy moves pods by itself: a
// RollingUpdate, or a Recreate (which repairs drift and grows volumes as a
// rolling update does, and stops every pod for a new revision).
func rolls(spec Spec) bool {
	return spec.UpdateStrategy == RollingUpdate || spec.UpdateStrategy == Recreate
}

// isRecreateStop reports whether action a of the decision out, made from
// in, is part of a Recreate's stop: the strategy is Recreate, the set is
// neither paused nor deleted, and a deletes a pod at another revision than
// the update revision, as an update, a scale-down or a pod that ended.
//
// A condemned pod is the stop's only along with a replica, or once no live
// replica at an older revision is left; otherwise it scales down by the
// ordinary rules, as it does while the stop waits at its gate.
func isRecreateStop(in Input, out Output, a Action) bool {
	spec := in.Spec
	upd := out.Status.UpdateRevision
	if spec.UpdateStrategy != Recreate || spec.Paused || spec.Deleted || a.Type != ActionDeletePod || a.Pod.Revision == upd {
		return false
	}
	inRange := func(o int) bool { return o >= spec.OrdinalsStart && o < spec.OrdinalsStart+spec.Replicas }
	switch {
	case a.Cause == CauseUpdate || a.Cause == CauseEnded:
		return inRange(a.Ordinal)
	case a.Cause != CauseScaleDown || inRange(a.Ordinal):
		return false
	}
	withReplica := slices.ContainsFunc(out.Actions, func(b Action) bool {
		return b.Type == ActionDeletePod && b.Cause == CauseUpdate && inRange(b.Ordinal) && b.Pod.Revision != upd
	})
	replicaLeft := slices.ContainsFunc(in.Pods, func(p Pod) bool {
		return inRange(p.Ordinal) && p.Revision != upd && !p.Terminating && !finishedPod(p)
	})
	return withReplica || !replicaLeft
}

// recreateStep reports whether a is a Recreate's stop, or the one check
// asked for it.
func recreateStep(in Input, out Output, a Action) bool {
	return isRecreateStop(in, out, a) || (a.Type == ActionCheckDisruption && a.Revision.Name != "")
}

// recreateUnderWay reports whether the stored status says a Recreate's stop
// is under way: a member's pod was stopped by one and not created again.
// checkRecreateState checks that the record is never invented.
func recreateUnderWay(in Input) bool {
	start, n := in.Spec.OrdinalsStart, in.Spec.Replicas
	return slices.ContainsFunc(in.Previous.Ordinals, func(r OrdinalRecord) bool {
		return r.RecreateStopped && r.Ordinal >= start && r.Ordinal < start+n
	})
}

// recreateCleared reports whether the Recreate's one check passed for rev
// and is not stale.
func recreateCleared(in Input, rev string) bool {
	return slices.ContainsFunc(in.Cleared, func(c Clearance) bool { return c.Recreate == rev && c.Until.After(in.Now) })
}

// recreateGateNeeded reports whether the Ready pods a decision stops for a
// Recreate needed the operator's approval, as one step: the stop is not
// under way, and a supervised leader is among them, or the disruption check
// is declared and has not passed for the update revision.
func recreateGateNeeded(in Input, out Output, stops []Pod) bool {
	spec := in.Spec
	if len(stops) == 0 || recreateUnderWay(in) {
		return false
	}
	for _, p := range stops {
		if spec.LeaderCheck != "" && spec.LeaderUpdate == LeaderSupervised && p.Leader {
			return true
		}
	}
	return spec.DisruptionCheck != "" && !recreateCleared(in, out.Status.UpdateRevision)
}

// recreateWindowed reports whether a decision made outside every
// maintenance window starts a Recreate's stop of a Ready pod (not on a
// draining node), or asks its check: one voluntary disruption, which needs
// one approval. A stop under way goes on outside the window.
func recreateWindowed(in Input, out Output) bool {
	for _, a := range out.Actions {
		if !recreateStep(in, out, a) || (a.Type == ActionDeletePod && recreateUnderWay(in)) {
			continue
		}
		i := slices.IndexFunc(in.Pods, func(p Pod) bool { return p.Ordinal == a.Ordinal && p.Created.Equal(a.Pod.Created) })
		if i < 0 {
			continue
		}
		if p := in.Pods[i]; p.Phase == PhaseRunning && p.Ready && !p.Terminating && !p.NodeDraining {
			return true
		}
	}
	return false
}

// checkRecreate is KEP-3541's promise on one decision, against the
// observation it was made from: under Recreate no pod is created at a
// revision while a pod at another one still runs or terminates, so two
// revisions never run side by side (the stop waits until every older pod
// has terminated before the first pod is created again). Its stop runs no
// switchover (no follower is left to lead), and its one disruption check is
// asked only before the stop is under way, never in a decision that stops.
// Of the other promises, volumes (kept unless the retention policy said
// Delete) and no downgrade are the world's checks, the same for every
// strategy (world.apply).
func checkRecreate(in Input, out Output) error {
	spec := in.Spec
	if spec.UpdateStrategy != Recreate || spec.Deleted {
		return nil
	}
	stops := slices.ContainsFunc(out.Actions, func(a Action) bool { return isRecreateStop(in, out, a) && a.Cause == CauseUpdate })
	if stops {
		randomRecreateStops.Add(1)
	}
	for _, a := range out.Actions {
		switch a.Type {
		case ActionCreatePod:
			for _, p := range in.Pods {
				if p.Ordinal < 0 || p.Revision == a.Revision.Name {
					continue
				}
				state := "runs"
				if p.Terminating {
					state = "terminates"
				}
				return fmt.Errorf("Recreate: pod %d created at %s while pod %d at %s still %s (KEP-3541: never two revisions side by side)",
					a.Ordinal, a.Revision.Name, p.Ordinal, p.Revision, state)
			}
		case ActionSwitchover:
			if stops {
				return fmt.Errorf("Recreate: switchover of %d in a decision that stops every pod", a.Ordinal)
			}
		case ActionCheckDisruption:
			if a.Revision.Name == "" {
				continue
			}
			randomRecreateChecks.Add(1)
			switch {
			case a.Revision.Name != out.Status.UpdateRevision:
				return fmt.Errorf("Recreate: check asked for %s, the update revision is %s", a.Revision.Name, out.Status.UpdateRevision)
			case stops || recreateUnderWay(in):
				return fmt.Errorf("Recreate: the disruption check asked again while the stop is under way (stops in this decision: %v)", stops)
			case recreateCleared(in, a.Revision.Name):
				return fmt.Errorf("Recreate: the disruption check asked again although it passed for %s", a.Revision.Name)
			}
		}
	}
	if slices.ContainsFunc(out.Held, func(h Hold) bool {
		return h.Reason == HoldWaitingForMaintenanceWindow || h.Reason == HoldWaitingForApproval
	}) || slices.ContainsFunc(out.Actions, func(a Action) bool { return a.Type == ActionCheckDisruption && a.Revision.Name != "" }) {
		randomRecreateGated.Add(1)
	}
	return nil
}

// noteRecreate remembers the ordinals a decision stopped for a Recreate,
// for checkRecreateState.
func (w *world) noteRecreate(in Input, out Output) {
	for _, a := range out.Actions {
		if isRecreateStop(in, out, a) && a.Cause == CauseUpdate && w.inRange(a.Ordinal) {
			if w.recreateEmitted == nil {
				w.recreateEmitted = map[int]bool{}
			}
			w.recreateEmitted[a.Ordinal] = true
		}
	}
}

// checkRecreateState is KEP-3541's promise on the world after a step: under
// Recreate every pod it holds, terminating ones included, runs one
// revision. And the record a Recreate's stop leaves (RecreateStopped, which
// lets the rest of a stop under way pass no gate again) is never made for
// an ordinal no Recreate stopped.
func (w *world) checkRecreateState() error {
	if w.spec.UpdateStrategy != Recreate {
		return nil
	}
	var first *Pod
	for _, p := range w.sortedPods() {
		if first == nil {
			first = &p
			continue
		}
		if p.Revision != first.Revision {
			return fmt.Errorf("Recreate: pod %d at %s and pod %d at %s side by side (terminating: %v, %v)",
				first.Ordinal, first.Revision, p.Ordinal, p.Revision, first.Terminating, p.Terminating)
		}
	}
	for _, rec := range w.status.Ordinals {
		if rec.RecreateStopped && !w.recreateEmitted[rec.Ordinal] {
			return fmt.Errorf("Recreate: ordinal %d recorded as stopped by a Recreate that never stopped it", rec.Ordinal)
		}
	}
	return nil
}
