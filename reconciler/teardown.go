package reconciler

import "strconv"

// teardown is the cascading delete of a set whose parent job is gone. Pods go
// first: under OrderedReady the highest ordinal, one at a time, each only after
// the one before it has fully terminated; under Parallel all at once. The
// set's members are condemned under WhenDeleted; a volume is deleted once no
// pod of its ordinal exists, and only if its ordinal was condemned while the
// policy said Delete (a member now under WhenDeleted=Delete, or an ordinal an
// earlier scale-down condemned under WhenScaled=Delete). Volumes kept by an
// earlier scale-down under Retain, or of an earlier set of the same name,
// stay. DeleteSetState (revisions and status) comes last, when no pod is left
// and no volume remains to be deleted. Revisions are neither created nor
// trimmed.
func (r *reconciler) teardown() Output {
	in := &r.in
	prev := in.Previous
	st := &r.status
	st.ObservedGeneration = r.spec.Generation
	st.CurrentRevision = prev.CurrentRevision
	st.UpdateRevision = prev.UpdateRevision
	st.CollisionCount = prev.CollisionCount
	st.LastProgressTime = prev.LastProgressTime
	st.Ordinals = r.nextRecords(true, true)
	r.recordMembership()
	// Every observed pod counts here, a negative ordinal included: teardown
	// deletes it like any other.
	for i := range in.Pods {
		r.countPod(&in.Pods[i])
	}

	if r.spec.PodManagementPolicy == Parallel {
		for i := range in.Pods {
			if p := &in.Pods[i]; !p.Terminating {
				r.deletePod(p, CauseSetDeleted, "set deleted")
			}
		}
	} else if hi := r.highestPod(); hi >= 0 {
		// The highest ordinal goes first; while any pod of it is still
		// terminating, nothing else is deleted.
		ord := in.Pods[hi].Ordinal
		for i := range in.Pods {
			if p := &in.Pods[i]; p.Ordinal == ord && !p.Terminating {
				r.deletePod(p, CauseSetDeleted, "set deleted")
			}
		}
		r.waitOrdinal(ord, "to terminate")
	}

	volumesLeft := false
	for i := range in.Volumes {
		v := &in.Volumes[i]
		if rec, ok := findRecord(st.Ordinals, v.Ordinal); !ok || !rec.DeleteVolumes {
			continue
		}
		volumesLeft = true
		if !r.podExists(v.Ordinal) {
			r.deleteVolume(v, "set deleted while its volume was to be deleted (whenDeleted or whenScaled Delete)")
		}
	}
	if len(in.Pods) == 0 && !volumesLeft && (!in.StateAbsent || len(in.Stopped) > 0) {
		// The stopped children Nomad still holds go first, then the
		// stored state. Once both are gone there is nothing to do: an
		// action then would queue the set again at once, forever.
		a := Action{Type: ActionDeleteSetState, Reason: "set deleted; nothing is left"}
		for _, s := range in.Stopped {
			a.Targets = append(a.Targets, s.JobID)
		}
		r.emit(a)
	}

	msg := strconv.Itoa(len(in.Pods)) + " pods left" + r.waitingOn()
	st.Conditions = []Condition{
		r.keepTransition(Condition{Type: ConditionProgressing, Status: true, Reason: ReasonDeleting, Message: msg}),
		r.keepTransition(Condition{Type: ConditionAvailable, Status: false, Reason: ReasonDeleting, Message: "the set is being deleted"}),
		r.keepTransition(Condition{Type: ConditionRolloutStuck, Status: false, Reason: ReasonDeleting, Message: "the set is being deleted"}),
	}
	// Nothing left in Nomad, and nothing in the store but what stays
	// (retained volumes stay, and so does no state once it is deleted).
	gone := len(in.Pods) == 0 && len(in.Stopped) == 0 && (len(in.Volumes) == 0 || in.StateAbsent)
	return Output{Actions: r.actions, Status: r.status, Requeue: r.holdRequeue(), Held: r.held, Gone: gone}
}

// highestPod returns the index of a pod with the highest ordinal, or -1 if
// there are none.
func (r *reconciler) highestPod() int {
	best := -1
	for i := range r.in.Pods {
		p := &r.in.Pods[i]
		if best < 0 || p.Ordinal > r.in.Pods[best].Ordinal {
			best = i
		}
	}
	return best
}
