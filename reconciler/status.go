package reconciler

import (
	"slices"
	"strconv"
	"time"
)

// Condition reasons. They are part of the status users and tools read.
const (
	// ReasonRollingUpdate: Progressing, pods are being moved to the update revision.
	ReasonRollingUpdate = "RollingUpdate"
	// ReasonScaling: Progressing, pods are being created, recreated or removed.
	ReasonScaling = "Scaling"
	// ReasonComplete: every desired pod exists, is available and is at its target revision.
	ReasonComplete = "Complete"
	// ReasonPaused: the rollout is paused; replicas are still kept.
	ReasonPaused = "Paused"
	// ReasonProgressDeadlineExceeded: no progress within the progress deadline.
	ReasonProgressDeadlineExceeded = "ProgressDeadlineExceeded"
	// ReasonWithinDeadline: RolloutStuck is false because progress is recent.
	ReasonWithinDeadline = "WithinDeadline"
	// ReasonNoDeadline: RolloutStuck is false because no deadline is set.
	ReasonNoDeadline = "NoDeadline"
	// ReasonReplicasAvailable: Available is true.
	ReasonReplicasAvailable = "ReplicasAvailable"
	// ReasonReplicasUnavailable: Available is false.
	ReasonReplicasUnavailable = "ReplicasUnavailable"
	// ReasonDeleting: the set is being torn down (cascading delete).
	ReasonDeleting = "Deleting"
)

// countStatus fills the counters the way updateStatus does, from the
// observation: every pod with a valid ordinal counts in Replicas (even a
// terminating one), and only pods that are not terminating count as current
// or updated.
func (r *reconciler) countStatus() {
	st := &r.status
	st.ObservedGeneration = r.spec.Generation
	st.CollisionCount = r.collisionCount
	st.CurrentRevision = r.current.Name
	st.UpdateRevision = r.update.Name
	for i := range r.in.Pods {
		if p := &r.in.Pods[i]; p.Ordinal >= 0 {
			r.countPod(p)
		}
	}
}

// countPod adds one observed pod to the status counters, against the
// current and update revisions already in the status. A terminating pod
// still counts in Replicas (and as ready while it is), but no longer as
// current or updated. Teardown counts with it too.
func (r *reconciler) countPod(p *Pod) {
	st := &r.status
	st.Replicas++
	if runningAndReady(p) {
		st.ReadyReplicas++
		if r.available(p) {
			st.AvailableReplicas++
		}
	}
	if !p.Terminating {
		if p.Revision == st.CurrentRevision {
			st.CurrentReplicas++
		}
		if p.Revision == st.UpdateRevision {
			st.UpdatedReplicas++
		}
	}
}

// finishStatus completes a rollout (completeRollingUpdate): once every pod is
// updated and ready, the update revision becomes the current one. Unlike
// Kubernetes it also requires every desired ordinal to have a pod, so that a
// set whose pods all vanished does not declare a partitioned rollout done
// and recreate the pods below the partition at the new revision. It applies
// to OnDelete too, whose current revision Kubernetes never advances.
func (r *reconciler) finishStatus() {
	st := &r.status
	if st.UpdatedReplicas == st.Replicas && st.ReadyReplicas == st.Replicas && r.allSlotsHavePods() {
		st.CurrentRevision = st.UpdateRevision
		st.CurrentReplicas = st.UpdatedReplicas
	}
}

func (r *reconciler) allSlotsHavePods() bool {
	for i := range r.slots {
		if r.slots[i].pod == noPod || r.slots[i].acted {
			return false
		}
	}
	return true
}

// settled reports whether nothing is left to do: every desired ordinal has
// exactly one available pod at its target revision, nothing is condemned,
// and this reconcile emitted no pod or volume action.
func (r *reconciler) settled() bool {
	if len(r.condemned) > 0 || r.dupes {
		return false
	}
	for _, a := range r.actions {
		switch a.Type {
		case ActionCreateRevision, ActionUpdateRevision, ActionDeleteRevision:
		default:
			return false
		}
	}
	for i := range r.slots {
		s := &r.slots[i]
		if s.pod == noPod || s.acted {
			return false
		}
		if !s.healthy {
			return false
		}
		if r.updating() && i >= r.spec.Partition && (r.in.Pods[s.pod].Revision != r.update.Name || r.resizePending(r.spec.OrdinalsStart+i)) {
			return false
		}
	}
	return true
}

// revisionsPending reports whether pods in the update range still have to
// move to the update revision (so a pause holds something back).
func (r *reconciler) revisionsPending() bool {
	if r.spec.UpdateStrategy == OnDelete {
		return false
	}
	for i := r.spec.Partition; i < len(r.slots); i++ {
		if s := &r.slots[i]; s.pod != noPod && (r.in.Pods[s.pod].Revision != r.update.Name || r.resizePending(r.spec.OrdinalsStart+i)) {
			return true
		}
	}
	return false
}

// availableInRange counts the desired ordinals whose kept pod is healthy.
//
// A pod this decision deletes no longer counts; one whose deletion was held
// (a disruption check or switchover first, the operator's approval) still
// serves and counts, although its slot is marked acted for the budget.
func (r *reconciler) availableInRange() int {
	n := 0
	for i := range r.slots {
		if s := &r.slots[i]; s.pod != noPod && s.healthy && !(s.acted && r.deleting(r.in.Pods[s.pod].Ordinal)) {
			n++
		}
	}
	return n
}

// progressed reports whether the set moved towards its goal since the
// previous status: a new update revision or generation, more updated, ready
// or available pods, or a pod count closer to the desired one.
func (r *reconciler) progressed() bool {
	prev, st := &r.in.Previous, &r.status
	return prev.LastProgressTime.IsZero() ||
		prev.UpdateRevision != st.UpdateRevision ||
		prev.ObservedGeneration != st.ObservedGeneration ||
		st.UpdatedReplicas > prev.UpdatedReplicas ||
		st.ReadyReplicas > prev.ReadyReplicas ||
		st.AvailableReplicas > prev.AvailableReplicas ||
		absDiff(st.Replicas, r.spec.Replicas) < absDiff(prev.Replicas, r.spec.Replicas) ||
		r.recreateProgressed()
}

func absDiff(a, b int) int {
	if a > b {
		return a - b
	}
	return b - a
}

// conditions sets Progressing, Available and RolloutStuck and the progress
// time, and returns how long until the decision may change by the clock
// alone (a pod reaching minReadySeconds, or the progress deadline passing).
func (r *reconciler) conditions() time.Duration {
	st := &r.status
	settled := r.settled()
	paused := r.spec.Paused && r.revisionsPending()

	st.LastProgressTime = r.in.Previous.LastProgressTime
	// A wait for a maintenance window ended is like rest ended: the
	// deadline counts from this pass.
	resting := restingStatus(r.in.Previous) || waitedForWindow(r.in.Previous)
	switch {
	case (settled || paused) && resting && !st.LastProgressTime.IsZero():
		// Still at rest: the deadline does not run, so the clock keeps the
		// time the set came to rest, and a resting set's passes change
		// nothing to store. Rewriting it on every pass made a status write
		// of every pass after a set settled. Upstream's syncRolloutStatus
		// likewise leaves a complete Deployment's Progressing condition
		// alone.
	case settled || r.spec.Paused || r.progressed() || resting:
		// A set that is settled or paused is not expected to progress, and
		// one that just left rest starts its work now: the deadline counts
		// from here.
		st.LastProgressTime = r.now
	}
	deadline := r.spec.ProgressDeadline
	// Waiting for the operator's approval is not a lack of progress.
	if r.awaitingApproval >= 0 {
		st.LastProgressTime = r.now
	}
	// Nor is waiting for a maintenance window (window.go).
	waitingForWindow := r.windowClock()
	stuck := !settled && !r.spec.Paused && !waitingForWindow && deadline > 0 && r.now.Sub(st.LastProgressTime) >= deadline

	conds := make([]Condition, 0, 3)
	want := r.spec.Replicas
	avail := r.availableInRange()

	var prog Condition
	prog.Type = ConditionProgressing
	switch {
	case paused:
		prog.Status, prog.Reason = false, ReasonPaused
		prog.Message = "the rollout to " + st.UpdateRevision + " is paused" + r.waitingOn()
	case settled:
		prog.Status, prog.Reason = false, ReasonComplete
		prog.Message = "all " + strconv.Itoa(want) + " replicas are available at their target revision " + st.UpdateRevision
	case stuck:
		prog.Status, prog.Reason = false, ReasonProgressDeadlineExceeded
		prog.Message = "no progress within " + deadline.String() + r.waitingOn()
	case r.recreateProgressing():
		prog.Status, prog.Reason, prog.Message = true, ReasonRecreating, r.recreateMessage()
	case r.revisionsPending() && r.updating():
		prog.Status, prog.Reason = true, ReasonRollingUpdate
		prog.Message = strconv.Itoa(st.UpdatedReplicas) + " pods at " + st.UpdateRevision + r.waitingOn()
	default:
		prog.Status, prog.Reason = true, ReasonScaling
		prog.Message = strconv.Itoa(st.Replicas) + " pods for " + strconv.Itoa(want) + " replicas" + r.waitingOn()
	}
	conds = append(conds, r.keepTransition(prog))

	av := Condition{Type: ConditionAvailable, Status: avail >= want}
	if av.Status {
		av.Reason = ReasonReplicasAvailable
	} else {
		av.Reason = ReasonReplicasUnavailable
	}
	av.Message = strconv.Itoa(avail) + " of " + strconv.Itoa(want) + " replicas available"
	conds = append(conds, r.keepTransition(av))

	rs := Condition{Type: ConditionRolloutStuck, Status: stuck}
	switch {
	case stuck:
		rs.Reason = ReasonProgressDeadlineExceeded
		rs.Message = "no progress since " + st.LastProgressTime.UTC().Format(time.RFC3339) + r.waitingOn()
	case r.spec.Paused:
		rs.Reason, rs.Message = ReasonPaused, "the deadline does not run while paused"
	case settled:
		rs.Reason, rs.Message = ReasonComplete, "nothing to roll out"
	case deadline <= 0:
		rs.Reason, rs.Message = ReasonNoDeadline, "no progress deadline is set"
	default:
		rs.Reason, rs.Message = ReasonWithinDeadline, "progressing within "+deadline.String()
	}
	conds = append(conds, r.keepTransition(rs))
	if c, ok := r.approvalCondition(); ok {
		conds = append(conds, c)
	}
	if c, ok := r.claimCondition(); ok {
		conds = append(conds, c)
	}
	if c, ok := r.windowCondition(); ok {
		conds = append(conds, c)
	}
	st.Conditions = conds

	var requeue time.Duration
	if !settled && !r.spec.Paused && deadline > 0 && !stuck && !waitingForWindow {
		requeue = st.LastProgressTime.Add(deadline).Sub(r.now)
	}
	if r.spec.MinReadySeconds > 0 {
		minReady := time.Duration(r.spec.MinReadySeconds) * time.Second
		for i := range r.in.Pods {
			p := &r.in.Pods[i]
			if !runningAndReady(p) || p.ReadySince.IsZero() || r.available(p) {
				continue
			}
			if d := p.ReadySince.Add(minReady).Sub(r.now); d > 0 && (requeue == 0 || d < requeue) {
				requeue = d
			}
		}
	}
	return requeue
}

// waitingOn describes the pod the decision waits on, for messages.
func (r *reconciler) waitingOn() string {
	if r.waitPod < 0 {
		return ""
	}
	return "; waiting for pod " + PodName(r.spec.Name, r.waitPod) + " " + r.waitWhy
}

// restingStatus reports whether st was computed for a set at rest:
// settled (Progressing, reason Complete) or paused with a rollout pending
// (reason Paused). A set at rest has no progress deadline running, as
// upstream's DeploymentTimedOut never times out a Deployment whose
// Progressing condition says it is complete.
func restingStatus(st Status) bool {
	for _, c := range st.Conditions {
		if c.Type == ConditionProgressing {
			return !c.Status && (c.Reason == ReasonComplete || c.Reason == ReasonPaused)
		}
	}
	return false
}

// keepTransition keeps the previous LastTransitionTime of a condition whose
// status did not change, and sets Now when it did.
func (r *reconciler) keepTransition(c Condition) Condition {
	c.LastTransitionTime = r.now
	for _, p := range r.in.Previous.Conditions {
		if p.Type == c.Type {
			if p.Status == c.Status && !p.LastTransitionTime.IsZero() {
				c.LastTransitionTime = p.LastTransitionTime
			}
			break
		}
	}
	return c
}

// SetCondition returns conds with cond replacing the condition of its type,
// or added, keeping the transition time when its status did not change.
func SetCondition(conds []Condition, cond Condition, now time.Time) []Condition {
	out := make([]Condition, 0, len(conds)+1)
	replaced := false
	for _, c := range conds {
		if c.Type == cond.Type {
			cond.LastTransitionTime = c.LastTransitionTime
			if c.Status != cond.Status || cond.LastTransitionTime.IsZero() {
				cond.LastTransitionTime = now
			}
			out = append(out, cond)
			replaced = true
			continue
		}
		out = append(out, c)
	}
	if !replaced {
		cond.LastTransitionTime = now
		out = append(out, cond)
	}
	return out
}

// InvalidStatus is prev with the InvalidSpec condition set to msg: what is
// recorded for a set whose job does not parse, which is otherwise left
// untouched.
func InvalidStatus(prev Status, msg string, now time.Time) Status {
	next := prev
	next.Conditions = SetCondition(prev.Conditions, Condition{
		Type: ConditionInvalidSpec, Status: true, Reason: "InvalidAnnotations", Message: msg,
	}, now)
	return next
}

// StatusEqual reports whether two statuses say the same thing, so that a
// status is written only when it changed. It compares times as instants
// and treats a nil list as an empty one: a status read back from the store
// differs from a computed one in both representations (a time's location
// and monotonic reading, a list's nil-ness) but not in meaning, and
// reflect.DeepEqual took that for a change and wrote again.
func StatusEqual(a, b Status) bool {
	if a.ObservedGeneration != b.ObservedGeneration || a.Replicas != b.Replicas || a.ReadyReplicas != b.ReadyReplicas ||
		a.AvailableReplicas != b.AvailableReplicas || a.CurrentReplicas != b.CurrentReplicas ||
		a.UpdatedReplicas != b.UpdatedReplicas || a.CurrentRevision != b.CurrentRevision ||
		a.UpdateRevision != b.UpdateRevision || a.CollisionCount != b.CollisionCount ||
		!a.LastProgressTime.Equal(b.LastProgressTime) || !slices.Equal(a.Ordinals, b.Ordinals) ||
		a.ApprovalUsed != b.ApprovalUsed {
		return false
	}
	return slices.EqualFunc(a.Conditions, b.Conditions, func(x, y Condition) bool {
		return x.Type == y.Type && x.Status == y.Status && x.Reason == y.Reason && x.Message == y.Message &&
			x.LastTransitionTime.Equal(y.LastTransitionTime)
	})
}
