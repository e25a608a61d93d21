package reconciler

import (
	"slices"
	"strings"
)

// The leader-aware part of the decision (DESIGN §3b): which pod leads is an
// input (Pod.Leader, from the set's leader check), and so is what the
// application said when asked (Input.Cleared, and holds for a check or a
// switchover that failed). The reconciler decides when to ask, when to hand
// leadership over, and when the leader may go.

// disruptionCause reports whether a deletion for cause takes a live member
// down on purpose in a way the application is asked about (the disruption
// check): every one the daemon makes but the set's own deletion.
func disruptionCause(cause DeleteCause) bool {
	switch cause {
	case CauseUpdate, CauseRepair, CauseResize, CauseDrain, CauseScaleDown, CauseReplace:
		return true
	}
	return false
}

// leaderCause reports whether a deletion for cause takes the leader down in
// a way DESIGN §3b orders: a rollout, a drift repair, a drain, a
// scale-down.
func leaderCause(cause DeleteCause) bool {
	switch cause {
	case CauseUpdate, CauseRepair, CauseResize, CauseDrain, CauseScaleDown:
		return true
	}
	return false
}

// leads reports whether p is a Ready leader the leader rules apply to.
func (r *reconciler) leads(p *Pod) bool {
	return r.spec.LeaderCheck != "" && p.Leader && runningAndReady(p) && !p.Terminating
}

// leaderWaits reports whether the leader p must wait for the other pods that
// must go for the same reason: it goes last. A scale-down keeps its order
// (the highest ordinals go), as DESIGN §3b says.
func (r *reconciler) leaderWaits(p *Pod, cause DeleteCause) bool {
	if !r.leads(p) || cause == CauseScaleDown || !leaderCause(cause) {
		return false
	}
	for i := range r.in.Pods {
		q := &r.in.Pods[i]
		if q == p || q.Terminating || !r.inRange(q.Ordinal) {
			continue
		}
		switch cause {
		case CauseDrain:
			if q.NodeDraining {
				return true
			}
		default:
			if r.updating() && q.Ordinal-r.spec.OrdinalsStart >= r.spec.Partition && r.outdated(q) {
				return true
			}
		}
	}
	return false
}

// approvalPending reports whether the operator approved a step
// (`rollout approve`) that no step has used yet.
func (r *reconciler) approvalPending() bool {
	return r.spec.Approval != "" && r.spec.Approval != r.status.ApprovalUsed
}

// useApproval spends the operator's approval on this decision's step.
func (r *reconciler) useApproval() {
	r.status.ApprovalUsed = r.spec.Approval
}

// mayDisrupt decides whether the Ready pod p may be taken down for cause
// now. When it may not, it has already emitted what comes first (a
// switchover, a disruption check) or recorded why it waits.
func (r *reconciler) mayDisrupt(p *Pod, cause DeleteCause) bool {
	if !runningAndReady(p) || p.Terminating {
		// A pod that is down already is replaced without asking.
		return true
	}
	if r.spec.LeaderCheck != "" && r.in.LeaderUnknown && leaderCause(cause) {
		// Any Ready pod may be the leader: take none down as a follower.
		r.waitOrdinal(p.Ordinal, "to learn which pod leads (the leader check is not read yet)")
		return false
	}
	leaderTurn := r.leads(p) && leaderCause(cause)
	if leaderTurn && r.leaderWaits(p, cause) {
		r.waitOrdinal(p.Ordinal, "to go last, as the leader")
		return false
	}
	used := r.status.ApprovalUsed
	switchover := leaderTurn && r.spec.LeaderUpdate == LeaderSwitchover
	if leaderTurn && !switchover && !r.leaderMayGo(p) {
		// supervised: the leader waits for the operator, whose approval
		// then answers for the whole step, the disruption check included.
		return false
	}
	if switchover && !r.approvalPending() {
		if !r.hasSwitchoverCandidate(p) {
			// No follower to hand over to: hold, and ask the
			// application nothing until there is one.
			return r.leaderMayGo(p)
		}
	}
	// DESIGN §3b's order: the disruption check first, then the leader's
	// switchover, then the stop, so that leadership is never handed over
	// for a step that the application then refuses.
	if r.spec.DisruptionCheck != "" && disruptionCause(cause) && !r.cleared(p.Ordinal) && r.status.ApprovalUsed == used {
		if r.approvalPending() {
			// The operator answers for the whole step, the leader's
			// switchover included.
			r.useApproval()
			return true
		}
		runner, ok := r.checkRunner(p)
		if !ok {
			r.noteHeld(Hold{Ordinal: p.Ordinal, Step: StepDisrupt, Reason: HoldDisruptionCheckFailed,
				Message: "no other Ready pod to run the disruption check in; `nomad-statefulset rollout approve` lets this step go"})
			return false
		}
		r.emit(Action{Type: ActionCheckDisruption, Ordinal: p.Ordinal, Target: runner, Pod: *p,
			Reason: "asking " + PodName(r.spec.Name, runner) + " whether the cluster can lose " + PodName(r.spec.Name, p.Ordinal) + " now"})
		r.waitOrdinal(p.Ordinal, "for the disruption check")
		return false
	}
	return !switchover || r.leaderMayGo(p)
}

// leaderMayGo applies statefulset_leader_update to the leader's turn.
func (r *reconciler) leaderMayGo(p *Pod) bool {
	switch r.spec.LeaderUpdate {
	case LeaderSupervised:
		if r.approvalPending() {
			r.useApproval()
			return true
		}
		r.awaitingApproval = p.Ordinal
		r.noteHeld(Hold{Ordinal: p.Ordinal, Step: StepDisrupt, Reason: HoldWaitingForApproval,
			Message: "the leader is taken down only once approved: nomad-statefulset rollout approve " + r.spec.Name})
		return false
	case LeaderSwitchover:
		if r.approvalPending() {
			// The operator overrules a switchover that cannot be done.
			r.useApproval()
			return true
		}
		cands := r.switchoverCandidates(p)
		if len(cands) == 0 {
			r.noteHeld(Hold{Ordinal: p.Ordinal, Step: StepDisrupt, Reason: HoldSwitchoverFailed,
				Message: "no Ready follower to hand leadership to; `nomad-statefulset rollout approve` takes the leader down without one"})
			return false
		}
		others := ""
		if len(cands) > 1 {
			others = " (or " + strings.ReplaceAll(podNames(r.spec.Name, cands[1:]), " ", ", ") + ")"
		}
		r.emit(Action{Type: ActionSwitchover, Ordinal: p.Ordinal, Target: cands[0], Candidates: cands, Pod: *p,
			Reason: "handing leadership to " + PodName(r.spec.Name, cands[0]) + others + " before " + PodName(r.spec.Name, p.Ordinal) + " goes"})
		r.waitOrdinal(p.Ordinal, "to hand leadership over")
		return false
	}
	return true
}

// switchoverCandidates are the followers the leader may hand leadership
// to (DESIGN §3b, the best candidate), in the daemon's order: the Ready
// pods that do not lead and that this decision does not take down, those
// already at the update revision first (the new leader need not go again
// for this rollout), then by ordinal. Within a round of failed
// switchovers (Memory.Tries) over these same candidates, those that
// failed come last, so that the next candidate is the first; other
// candidates than the round's start a new one.
func (r *reconciler) switchoverCandidates(leader *Pod) []int {
	var cands []int
	for _, updated := range []bool{true, false} {
		for i := range r.slots {
			if q, ok := r.followerOf(leader, i); ok && (q.Revision == r.update.Name && !q.Drifted) == updated {
				cands = append(cands, q.Ordinal)
			}
		}
	}
	t, ok := r.in.Memory.Tries[leader.Ordinal]
	if !ok || !sameSet(cands, t.Candidates) {
		return cands
	}
	untried := slices.DeleteFunc(slices.Clone(cands), t.failed)
	return append(untried, slices.DeleteFunc(cands, func(o int) bool { return !t.failed(o) })...)
}

// hasSwitchoverCandidate reports whether the leader has a follower to hand
// leadership to (switchoverCandidates, without building the list).
func (r *reconciler) hasSwitchoverCandidate(leader *Pod) bool {
	for i := range r.slots {
		if _, ok := r.followerOf(leader, i); ok {
			return true
		}
	}
	return false
}

// followerOf returns the pod of slot i if it may take leadership over
// from leader: Ready, not leading, and not taken down by this decision.
func (r *reconciler) followerOf(leader *Pod, i int) (*Pod, bool) {
	s := &r.slots[i]
	if s.pod == noPod || s.acted || s.extra > 0 || !s.healthy {
		return nil, false
	}
	q := &r.in.Pods[s.pod]
	if q.Ordinal == leader.Ordinal || q.Leader || r.deleting(q.Ordinal) {
		return nil, false
	}
	return q, true
}

// handingOverTo reports whether p may be taking leadership over: it is a
// candidate of a switchover this decision makes, or of one in flight (its
// command ran, no other pod is seen to lead yet, and its SwitchingOver
// hold is in force). Such a pod is not taken down on purpose meanwhile:
// the command may choose it, or have chosen it while its leader check does
// not pass yet, and taking it down would leave the set without the leader
// it was just given.
func (r *reconciler) handingOverTo(p *Pod) bool {
	for i := range r.actions {
		if a := &r.actions[i]; a.Type == ActionSwitchover && slices.Contains(a.Candidates, p.Ordinal) {
			return true
		}
	}
	sw := r.in.Memory.Switchover
	if sw == nil || sw.Seen || !slices.Contains(sw.Candidates, p.Ordinal) {
		return false
	}
	h, ok := r.activeHold(sw.From, StepDisrupt)
	return ok && h.Reason == HoldSwitchingOver
}

// checkRunner is the pod the disruption check of p runs in: a Ready pod
// other than p that this decision does not take down, the lowest ordinal.
func (r *reconciler) checkRunner(p *Pod) (int, bool) {
	for i := range r.slots {
		s := &r.slots[i]
		if s.pod == noPod || s.extra > 0 || !s.healthy {
			continue
		}
		q := &r.in.Pods[s.pod]
		if q.Ordinal != p.Ordinal && !r.deleting(q.Ordinal) {
			return q.Ordinal, true
		}
	}
	return 0, false
}

// cleared reports whether a passing disruption check lets ord's pod go now.
func (r *reconciler) cleared(ord int) bool {
	for _, c := range r.in.Cleared {
		if c.Ordinal == ord && c.Until.After(r.now) {
			return true
		}
	}
	return false
}

// holdApplies reports whether hold h still holds pod p: a switchover in
// progress holds the old leader while it still leads, and until the leader
// check passes on another Ready pod (DESIGN §3b: the switchover waits for
// that). The two checks are read apart, so the old leader may stop
// leading before the new one is seen to lead; taking it down then would
// leave the set with no leader known anywhere.
func (r *reconciler) holdApplies(h Hold, p *Pod) bool {
	if h.Reason != HoldSwitchingOver || p.Leader {
		return true
	}
	for i := range r.in.Pods {
		if q := &r.in.Pods[i]; q.Ordinal != p.Ordinal && r.leads(q) {
			return false
		}
	}
	return true
}

// approvalCondition is the WaitingForApproval condition while a step waits
// for the operator, or nothing.
func (r *reconciler) approvalCondition() (Condition, bool) {
	if r.awaitingApproval < 0 {
		return Condition{}, false
	}
	return r.keepTransition(Condition{Type: ConditionWaitingForApproval, Status: true, Reason: "LeaderUpdateSupervised",
		Message: "the leader " + PodName(r.spec.Name, r.awaitingApproval) + " is taken down once approved: nomad-statefulset rollout approve " + r.spec.Name}), true
}
