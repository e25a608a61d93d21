package reconciler

import "strconv"

// Recreate (statefulset_update_strategy = "Recreate"; DESIGN §3b, KEP-3541,
// alpha in Kubernetes 1.37). On a new revision every pod is stopped, all at
// once, and once none is left at another revision, neither running nor
// terminating, the pods are created again at the update revision in the pod
// management policy's order (OrderedReady one by one, each once its
// predecessor is Running, Ready and available; Parallel all at once), on
// their own volumes. Two revisions never run side by side: that is the
// strategy's promise, and what the set gives up for it is availability.
//
// Of DESIGN §3's three promises the budget does not apply to the stop, by
// definition: it takes every pod down. The other two do: volumes are never
// deleted by it (a pod comes back on its own volumes), and no pod is created
// at an older revision than its ordinal last ran.
//
// The stop is one voluntary disruption, gated once, before the first pod
// goes, in the order DESIGN §3b gives a single pod's:
//
//   - the maintenance window: outside every window nothing is stopped (and
//     nothing asked) until the next one opens, unless `rollout approve`
//     lets the step go;
//   - under statefulset_leader_update = "supervised", the operator's
//     approval, as the leader goes down with the rest;
//   - the disruption check, when declared: asked once, in a Ready pod, for
//     the whole set (Action.Revision names the revision every pod is to be
//     stopped for; its pass is a Clearance with Recreate set).
//
// No switchover is run: every pod goes down, so there is no follower to
// hand leadership to, and the leader is stopped with the followers. A pod
// that is down already is stopped without any gate, as a rolling update
// replaces an unavailable pod at once: a rollout stuck on pods that never
// become ready, the case KEP-3541 was written for, is recreated at once.
//
// Once the first pod is stopped the Recreate is under way: the ordinal
// records say so (OrdinalRecord.RecreateStopped, stored before the stop),
// and the rest of the set is stopped without asking or waiting again, a
// new leader's decisions included, so that a set is never left half
// stopped because a window closed or the check changed its mind.
//
// While the stop waits at its gate, a pod that goes down (it failed, its
// node drains, a `pod replace`) is put back at the revision every pod runs
// (the current one), as below a partition, so the set stays whole until
// its window opens; never at the update revision, which would run it beside
// the old one.
//
// What is not a new revision is done as a rolling update does it, within
// the budget: a drifted child is repaired alone (it comes back at the
// revision it had, so no other revision runs beside it), a volume that must
// grow takes its pod down alone, and a scale up or down is the policy's.
// A paused set stops nothing and puts a missing pod back at the revision the
// others run.

// ReasonRecreating: Progressing, a Recreate is under way: the set's pods
// are being stopped to be created again at the update revision, or are
// being created again.
const ReasonRecreating = "Recreating"

// recreateState is what one decision knows of a Recreate.
type recreateState struct {
	// active: the strategy is Recreate, the set is not paused, and some
	// observed pod runs another revision than the update revision: the set
	// is to be stopped, or waits for the pods it stopped to terminate.
	active bool
	// recorded: a member's record says a Recreate stopped its pod and it
	// has not been created again (OrdinalRecord.RecreateStopped).
	recorded bool
	// begun: recorded, or this decision stops a pod for the Recreate.
	begun bool
	// gated: the stop waits for its gate (window, approval, check).
	gated bool
	// condemned: the stop covers the condemned pods at an older revision
	// (recreateCandidates), which then wait with it.
	condemned bool
	// old counts the observed pods at another revision than the update
	// revision, live the ones of them not terminating.
	old, live int
	// stopping counts the pods this decision stops.
	stopping int
	// uniform is the one revision every observed pod runs, when pods
	// is set (there is one); mixed is set when they run more than one.
	uniform     string
	pods, mixed bool
	// created is the revision this decision creates pods at, once it
	// creates one: every other pod it creates takes the same.
	created string
}

// observeRecreate fills r.rc from the observation and the ordinal records.
func (r *reconciler) observeRecreate() {
	if r.spec.UpdateStrategy != Recreate {
		return
	}
	for _, rec := range r.in.Previous.Ordinals {
		if rec.RecreateStopped && r.inRange(rec.Ordinal) {
			r.rc.recorded = true
			break
		}
	}
	for i := range r.in.Pods {
		p := &r.in.Pods[i]
		if p.Ordinal < 0 {
			continue // not ours to judge (observe)
		}
		switch {
		case !r.rc.pods:
			r.rc.uniform, r.rc.pods = p.Revision, true
		case p.Revision != r.rc.uniform:
			r.rc.mixed = true
		}
		if p.Revision == r.update.Name {
			continue
		}
		r.rc.old++
		if !p.Terminating {
			r.rc.live++
		}
	}
	r.rc.active = r.rc.old > 0 && !r.spec.Paused
	r.rc.begun = r.rc.recorded
}

// allPodsAt reports whether every observed pod, terminating ones included,
// and every pod this decision creates runs revision name (true when there
// is none).
func (r *reconciler) allPodsAt(name string) bool {
	return !r.rc.mixed && (!r.rc.pods || r.rc.uniform == name) && (r.rc.created == "" || r.rc.created == name)
}

// recreateTarget is one pod a Recreate stops: its index in in.Pods, and its
// slot (-1 for a condemned pod).
type recreateTarget struct {
	pod, slot int
}

// recreateCandidates lists the pods the Recreate stops now: each pod at
// another revision than the update revision that is not terminating, and
// whose disruption no hold keeps (a hook that said wait: that pod waits
// alone, and the hold is noted), the condemned ones first, then the
// replicas from the highest ordinal down, as a teardown goes; all of them go
// in the same decision. A slot with a duplicate is left to the duplicate's
// cleanup. Condemned pods are the Recreate's only along with a replica, or
// once no replica at an older revision is left: while the replicas wait
// (their holds, or the gate), a condemned pod scales down by the ordinary
// rules. checkHeld reports a refused Recreate check in force: it holds the
// whole stop until it is asked again.
func (r *reconciler) recreateCandidates() (steps []recreateTarget, checkHeld bool) {
	held := func(p *Pod) bool {
		if finished(p) {
			return false // removing it disrupts nothing
		}
		h, ok := r.activeHold(p.Ordinal, StepDisrupt)
		if !ok || !r.holdApplies(h, p) {
			return false
		}
		r.noteHeld(h)
		checkHeld = checkHeld || h.Reason == HoldDisruptionCheckFailed
		return true
	}
	replicas, stopped := 0, 0 // live replicas at an older revision; of them, not held
	for i := len(r.slots) - 1; i >= 0; i-- {
		s := &r.slots[i]
		if s.pod == noPod || s.extra > 0 {
			continue
		}
		p := &r.in.Pods[s.pod]
		if p.Terminating || p.Revision == r.update.Name {
			continue
		}
		if !finished(p) {
			replicas++
		}
		if !held(p) {
			steps = append(steps, recreateTarget{pod: int(s.pod), slot: i})
			if !finished(p) {
				stopped++
			}
		}
	}
	if stopped == 0 && replicas > 0 {
		return steps, checkHeld
	}
	var condemned []recreateTarget
	r.rc.condemned = true
	for _, pi := range r.condemned {
		if p := &r.in.Pods[pi]; !p.Terminating && p.Revision != r.update.Name && !held(p) {
			condemned = append(condemned, recreateTarget{pod: int(pi), slot: -1})
		}
	}
	return append(condemned, steps...), checkHeld
}

// recreateStop stops every pod at another revision than the update
// revision, all at once: the budget does not apply (KEP-3541). Before the
// first Ready pod goes, the stop passes its gate once (recreateMayStop); a
// stop under way passes no gate again.
func (r *reconciler) recreateStop() {
	steps, checkHeld := r.recreateCandidates()
	var subject *Pod // the Ready pod the gate's check is about
	for _, st := range steps {
		p := &r.in.Pods[st.pod]
		if runningAndReady(p) && !finished(p) && (subject == nil || (st.slot >= 0 && !r.inRange(subject.Ordinal))) {
			subject = p
		}
	}
	if subject != nil && !r.rc.begun && (checkHeld || !r.recreateMayStop(steps, subject)) {
		r.rc.gated = true
		return
	}
	for _, st := range steps {
		p := &r.in.Pods[st.pod]
		cause, why := CauseUpdate, "Recreate: every pod is stopped, then created again at "+r.update.Name
		switch {
		case st.slot < 0:
			cause, why = CauseScaleDown, "scale down (Recreate: every pod at an older revision is stopped at once)"
		case finished(p):
			cause, why = CauseEnded, "pod "+string(p.Phase)+"; Recreate creates it again at "+r.update.Name+" once no older pod is left"
		}
		r.emitDelete(p, cause, why)
		r.rc.stopping++
		r.waitOrdinal(p.Ordinal, "to terminate (Recreate)")
		if st.slot >= 0 {
			s := &r.slots[st.slot]
			s.acted = true
			// A pod that ended begins nothing: the Recreate is under way
			// once it takes a live member down.
			s.recreateStopped = cause == CauseUpdate
			r.rc.begun = r.rc.begun || s.recreateStopped
		}
	}
}

// recreateMayStop is the stop's gate, passed once before the first Ready
// pod goes: the maintenance window, the supervised leader's approval, the
// disruption check asked once for the whole set. An approval of `rollout
// approve` answers for all of it, as the stop is one step. When the stop
// may not go, it has emitted what comes first (the check) or noted why it
// waits.
func (r *reconciler) recreateMayStop(steps []recreateTarget, subject *Pod) bool {
	outside := false
	for _, st := range steps {
		outside = outside || r.outsideWindow(&r.in.Pods[st.pod], CauseUpdate)
	}
	if outside {
		if r.approvalPending() {
			r.useApproval()
			return true
		}
		for _, st := range steps {
			if p := &r.in.Pods[st.pod]; r.outsideWindow(p, CauseUpdate) {
				r.holdForWindow(p)
			}
		}
		return false
	}
	if leader, ok := r.recreateSupervised(steps, subject); ok {
		if r.approvalPending() {
			r.useApproval()
			return true
		}
		r.awaitingApproval = leader
		r.noteHeld(Hold{Ordinal: leader, Step: StepDisrupt, Reason: HoldWaitingForApproval,
			Message: "a Recreate takes every pod down, the leader with them; it starts once approved: nomad-statefulset rollout approve " + r.spec.Name})
		return false
	}
	if r.spec.DisruptionCheck == "" || r.recreateCleared() {
		return true
	}
	if r.approvalPending() {
		r.useApproval()
		return true
	}
	runner, ok := r.checkRunner(subject)
	if !ok {
		// Every pod goes down: the check may run in the one it is about.
		runner = subject.Ordinal
	}
	r.emit(Action{Type: ActionCheckDisruption, Ordinal: subject.Ordinal, Target: runner, Pod: *subject, Revision: r.update,
		Reason: "asking " + PodName(r.spec.Name, runner) + " whether the cluster can lose all of its " +
			strconv.Itoa(r.rc.live) + " pods now (Recreate to " + r.update.Name + ")"})
	r.waitOrdinal(subject.Ordinal, "for the disruption check, asked once before a Recreate stops every pod")
	return false
}

// recreateSupervised reports whether the stop waits for the operator under
// statefulset_leader_update = "supervised": a pod it stops leads, or which
// one leads is not known. It returns the ordinal to name: the leader's, or
// the subject's.
func (r *reconciler) recreateSupervised(steps []recreateTarget, subject *Pod) (int, bool) {
	if r.spec.LeaderCheck == "" || r.spec.LeaderUpdate != LeaderSupervised {
		return 0, false
	}
	leader, found := subject.Ordinal, r.in.LeaderUnknown
	for _, st := range steps {
		if p := &r.in.Pods[st.pod]; r.leads(p) {
			leader, found = p.Ordinal, true
		}
	}
	return leader, found
}

// recreateCleared reports whether the Recreate's one check passed for the
// update revision and is not stale.
func (r *reconciler) recreateCleared() bool {
	for _, c := range r.in.Cleared {
		if c.Recreate == r.update.Name && c.Until.After(r.now) {
			return true
		}
	}
	return false
}

// recreateRevision is the revision a missing pod of slot i is created at
// under Recreate, given the ordinary choice rev (newPodRevision), or false
// when it must wait. No pod is created at a revision while a pod at another
// one runs or terminates: KEP-3541's promise. So the ordinary choice goes
// when every pod runs it. Else, while the stop waits at its gate (or the
// set is paused), the pod is put back at the revision every pod runs, so
// that the set stays whole meanwhile, if the ordinal ran nothing newer (no
// downgrade). Else it waits until no pod at another revision is left.
func (r *reconciler) recreateRevision(i int, rev Revision) (Revision, bool) {
	if r.allPodsAt(rev.Name) {
		r.rc.created = rev.Name
		return rev, true
	}
	if !r.rc.gated && !r.spec.Paused {
		return Revision{}, false
	}
	for _, alt := range [...]Revision{r.current, r.update} {
		if alt.Name == "" || alt.Name == rev.Name || !r.allPodsAt(alt.Name) {
			continue
		}
		if rec, ok := r.prevRecord(r.spec.OrdinalsStart + i); ok && rec.Revision != "" && alt.Number < r.recordNumber(rec) {
			continue // the ordinal ran something newer: no silent downgrade
		}
		r.rc.created = alt.Name
		return alt, true
	}
	return Revision{}, false
}

// recreateRecord is OrdinalRecord.RecreateStopped for an ordinal's record:
// set when this decision stops its pod for a Recreate, kept until the
// ordinal has a pod again (created by this decision, with withCreates, or
// observed running at the update revision, or at any once no Recreate is
// active), cleared when the ordinal leaves the range.
func (r *reconciler) recreateRecord(rec OrdinalRecord, member, withCreates bool) bool {
	if !member || r.spec.UpdateStrategy != Recreate {
		return false
	}
	s := &r.slots[rec.Ordinal-r.spec.OrdinalsStart]
	switch {
	case s.recreateStopped:
		return true
	case s.created:
		return rec.RecreateStopped && !withCreates
	case s.pod != noPod:
		if p := &r.in.Pods[s.pod]; !p.Terminating && (p.Revision == r.update.Name || !r.rc.active) {
			return false
		}
	}
	return rec.RecreateStopped
}

// recreateProgressing reports whether Progressing says Recreating: pods are
// to be stopped or terminating, a stop is under way, or the pods created
// again are not all updated and ready yet.
func (r *reconciler) recreateProgressing() bool {
	return r.spec.UpdateStrategy == Recreate && !r.spec.Paused &&
		(r.rc.active || r.rc.begun || r.status.CurrentRevision != r.status.UpdateRevision)
}

// recreateProgressed reports whether a Recreate moved since the previous
// status: it stopped pods, or fewer pods are left.
func (r *reconciler) recreateProgressed() bool {
	return r.rc.active && (r.rc.stopping > 0 || r.status.Replicas < r.in.Previous.Replicas)
}

// recreateMessage is Progressing's message while Recreating.
func (r *reconciler) recreateMessage() string {
	upd := r.update.Name
	var msg string
	switch {
	case r.rc.gated:
		msg = "stopping " + plural(r.rc.live, "pod") + " at once to create them again at " + upd + " waits"
	case r.rc.stopping > 0:
		msg = "stopping " + plural(r.rc.stopping, "pod") + " at once to create them again at " + upd
	case r.rc.active && r.rc.live > 0:
		msg = plural(r.rc.live, "pod") + " still run at an older revision; they are stopped to create them again at " + upd
	case r.rc.active:
		msg = "waiting for " + plural(r.rc.old, "pod") + " to terminate before creating them again at " + upd
	default:
		msg = "creating pods again at " + upd + ": " + strconv.Itoa(r.status.UpdatedReplicas) + " of " + strconv.Itoa(r.spec.Replicas)
	}
	return msg + r.waitingOn()
}

// plural is "1 pod", "2 pods".
func plural(n int, word string) string {
	if n == 1 {
		return "1 " + word
	}
	return strconv.Itoa(n) + " " + word + "s"
}
