package reconciler

import (
	"math"
	"slices"
	"sort"
	"time"
)

// MaxReplicas bounds the replica count the reconciler acts on. A larger
// value (which the annotation parser should already reject) is treated as
// MaxReplicas, so that a bad input cannot make one reconcile allocate
// gigabytes of actions.
const MaxReplicas = 100000

// maxOrdinalsStart bounds OrdinalsStart (Kubernetes uses int32) so that
// start+replicas never overflows.
const maxOrdinalsStart = math.MaxInt32

// noPod marks a slot that has no observed pod.
const noPod = -1

// slot is the reconciler's view of one ordinal in [start, start+replicas).
type slot struct {
	// pod indexes in.Pods: the pod kept for this ordinal, or noPod.
	pod int32
	// extra counts the other pods observed for this ordinal (a bad
	// observation); while there are any the ordinal is only cleaned up.
	extra int32
	// vols has bit c set when the volume of claim c exists (c < 64).
	vols uint64
	// acted is set once this reconcile deleted or created the pod.
	acted bool
	// created is set when this reconcile created the pod, at revision
	// createdRev (number createdNum): the ordinal's record then names it.
	created    bool
	createdRev string
	createdNum int64
	// replaced is the token of a `pod replace` request this reconcile
	// found carried out (the pod and, if asked, its volumes gone).
	replaced string
	// healthy caches r.healthy of the kept pod: it is asked many times.
	healthy bool
	// recreateStopped is set when this decision stops the slot's pod for
	// a Recreate (OrdinalRecord.RecreateStopped).
	recreateStopped bool
}

// reconciler holds one decision in progress. It lives for a single call, on
// the stack: it holds the Input by value and no pointer into itself, so that
// a steady-state decision allocates only what it returns.
type reconciler struct {
	in   Input
	spec Spec
	now  time.Time

	// current and update are copies, not pointers: a pointer into the
	// reconciler itself would make the compiler move it to the heap.
	current, update Revision
	collisionCount  int

	slots     []slot
	condemned []int32 // indexes in.Pods, descending ordinal
	dupes     bool
	monotonic bool
	maxVols   uint64 // bitmask with one bit per claim (claims < 64)

	actions []Action
	// exited is set when a monotonic step blocks; waitPod/waitWhy say on what,
	// for the condition messages.
	waitPod int
	waitWhy string
	// held are the holds that kept a step from happening (Output.Held).
	held []Hold
	// awaitingApproval is the leader's ordinal while its disruption waits
	// for `rollout approve` (LeaderSupervised), else -1.
	awaitingApproval int
	// rc is what this decision knows of a Recreate (recreate.go).
	rc recreateState

	status Status
}

// Reconcile makes one decision for a set: which actions bring the observed
// state one step closer to the spec, and what status to record. It is pure:
// the same Input always gives the same Output, and Input is not modified.
func Reconcile(in Input) Output {
	mem, change := in.Memory.begin(in)
	in = withMemory(in, mem)
	out := decide(in)
	out.Actions = withStatusWrite(in, out)
	out.Memory, out.LeaderChange = mem, change
	if len(in.CapabilitiesUnknown) > 0 {
		out.Requeue = soonestOf(out.Requeue, CapabilitiesRetry)
	}
	return out
}

// withStatusWrite is out's actions followed by the write of its status, when
// that status says something the stored one does not. A cascading delete
// that removes the set's state, or finds none left, writes none: that would
// bring the state back.
func withStatusWrite(in Input, out Output) []Action {
	if out.Gone || (len(out.Actions) > 0 && out.Actions[len(out.Actions)-1].Type == ActionDeleteSetState) {
		return out.Actions
	}
	if !in.StatusMissing && StatusEqual(in.Previous, out.Status) {
		return out.Actions
	}
	st := out.Status
	return append(out.Actions, Action{Type: ActionRecordStatus, Status: &st, Reason: "the status of the decision"})
}

// InvalidDecision is the decision for a set whose spec does not parse: it
// is left untouched, and only its status (prev, the stored one, with the
// InvalidSpec condition naming the culprit) is recorded.
func InvalidDecision(prev Status, missing bool, msg string, now time.Time) Output {
	out := Output{Status: InvalidStatus(prev, msg, now)}
	out.Actions = withStatusWrite(Input{Previous: prev, StatusMissing: missing}, out)
	return out
}

// withMemory is in as the decision reads it: the memory's holds, backoffs
// and answers among the inputs' own, each pod's NodeBack judged against
// the node changes Nomad was already asked about, and the memory itself
// (a switchover's tries).
func withMemory(in Input, mem Memory) Input {
	in.Memory = mem
	if backoff := mem.backoffHolds(in.Now); len(mem.Holds)+len(backoff) > 0 {
		in.Holds = slices.Concat(in.Holds, mem.Holds, backoff)
	}
	if len(mem.Cleared) > 0 {
		in.Cleared = slices.Concat(in.Cleared, mem.Cleared)
	}
	if extra := slices.Concat(mem.CannotExpand, in.CapabilitiesUnknown); len(extra) > 0 {
		in.CannotExpand = slices.Clone(in.CannotExpand)
		for _, class := range extra {
			if !slices.Contains(in.CannotExpand, class) {
				in.CannotExpand = append(in.CannotExpand, class)
			}
		}
	}
	if slices.ContainsFunc(in.Pods, func(p Pod) bool { return p.NodeChange > 0 }) {
		in.Pods = slices.Clone(in.Pods)
		for i := range in.Pods {
			if p := &in.Pods[i]; p.NodeChange > 0 {
				p.NodeBack = p.NodeChange > mem.Evaluated[p.Ordinal]
			}
		}
	}
	return in
}

// decide is Reconcile on an input that includes its memory.
func decide(in Input) Output {
	r := reconciler{in: in, now: in.Now, waitPod: -1, awaitingApproval: -1}
	r.status.ApprovalUsed = in.Previous.ApprovalUsed
	r.spec = normalize(in.Spec)
	if IsDetached(r.spec, in.Previous) {
		return r.detach()
	}
	if r.spec.Deleted {
		return r.teardown()
	}
	r.monotonic = r.spec.PodManagementPolicy != Parallel
	r.selectRevisions()
	r.observe()
	r.observeRecreate()
	r.countStatus()
	r.syncPods()
	r.fixChildren()
	r.status.Ordinals = r.nextRecords(false, true)
	r.cleanupScaledVolumes()
	// After the pod and volume steps: the hooks' answers are readiness
	// for the next decisions, and a wait before them costs them nothing.
	// Before the membership is recorded: the hooks act on the world too,
	// so a condemnation is durable before they are asked, as before any
	// other action.
	asks, askDue := r.in.Memory.postReadyActions(r.in, r.actions)
	r.actions = append(r.actions, asks...)
	r.recordMembership()
	r.finishStatus()
	r.trimHistory(r.status.CurrentRevision)
	requeue := soonestOf(soonestOf(r.conditions(), r.holdRequeue()), askDue)
	return Output{Actions: r.actions, Status: r.status, Requeue: requeue, Held: r.held}
}

// normalize replaces out-of-range spec values by safe ones, so that a bad
// input leads to a defined decision instead of a panic.
func normalize(s Spec) Spec {
	s.Replicas = min(max(s.Replicas, 0), MaxReplicas)
	s.OrdinalsStart = min(max(s.OrdinalsStart, 0), maxOrdinalsStart)
	s.Partition = max(s.Partition, 0)
	s.MinReadySeconds = max(s.MinReadySeconds, 0)
	s.RevisionHistoryLimit = max(s.RevisionHistoryLimit, 0)
	if s.PodManagementPolicy != Parallel {
		s.PodManagementPolicy = OrderedReady
	}
	switch s.UpdateStrategy {
	case OnDelete:
	case Recreate:
		// A partition with Recreate is refused by the parser (every pod
		// goes at once, so there is nothing to partition); one that gets
		// here anyway means nothing.
		s.Partition = 0
	default:
		s.UpdateStrategy = RollingUpdate
	}
	if s.ProgressDeadline < 0 {
		s.ProgressDeadline = 0
	}
	return s
}

// MaxUnavailableCount resolves maxUnavailable against the replica count the
// way getStatefulSetMaxUnavailable does: a percentage rounds down
// (GetScaledValueFromIntOrPercent with roundUp false), and the result is at
// least 1, so that a rollout can always move. 25% of 10 is 2.
func MaxUnavailableCount(m IntOrPercent, replicas int) int {
	n := m.Value
	if m.Percent {
		n = min(max(n, 0), 100)
		n = replicas * n / 100
	}
	return max(n, 1)
}

func (r *reconciler) emit(a Action) {
	r.actions = append(r.actions, a)
}

// inRange reports whether an ordinal belongs to the set's desired range.
func (r *reconciler) inRange(ord int) bool {
	return ord >= r.spec.OrdinalsStart && ord-r.spec.OrdinalsStart < r.spec.Replicas
}

// observe sorts the observed pods into slots (one per desired ordinal) and
// condemned pods (outside the range, highest ordinal first), and records
// which volumes exist. Pods with a negative ordinal are not ours to judge and
// are ignored, as Kubernetes ignores pods whose ordinal does not parse.
func (r *reconciler) observe() {
	in := &r.in
	n := r.spec.Replicas
	r.slots = make([]slot, n)
	for i := range r.slots {
		r.slots[i].pod = noPod
	}
	claims := len(r.spec.VolumeClaims)
	if claims >= 64 {
		r.maxVols = math.MaxUint64
	} else {
		r.maxVols = 1<<claims - 1
	}
	start := r.spec.OrdinalsStart
	for i := range in.Pods {
		p := &in.Pods[i]
		if p.Ordinal < 0 {
			continue
		}
		if !r.inRange(p.Ordinal) {
			r.condemned = append(r.condemned, int32(i))
			continue
		}
		s := &r.slots[p.Ordinal-start]
		if s.pod == noPod {
			s.pod = int32(i)
			continue
		}
		s.extra++
		r.dupes = true
		if better(p, &in.Pods[s.pod]) {
			s.pod = int32(i)
		}
	}
	for i := range r.slots {
		if s := &r.slots[i]; s.pod != noPod {
			s.healthy = r.healthy(&in.Pods[s.pod])
		}
	}
	if len(r.condemned) > 1 {
		sort.Slice(r.condemned, func(a, b int) bool {
			pa, pb := &in.Pods[r.condemned[a]], &in.Pods[r.condemned[b]]
			if pa.Ordinal != pb.Ordinal {
				return pa.Ordinal > pb.Ordinal
			}
			return r.condemned[a] < r.condemned[b]
		})
	}
	for i := range in.Volumes {
		v := &in.Volumes[i]
		if !r.inRange(v.Ordinal) {
			continue
		}
		if c := r.claimIndex(v.Claim); c >= 0 && c < 64 {
			r.slots[v.Ordinal-start].vols |= 1 << c
		}
	}
}

// better reports whether a should be kept over b when both are observed for
// one ordinal: prefer a pod that is not terminating, then one that has not
// finished, then a ready one, then the older one.
func better(a, b *Pod) bool {
	if a.Terminating != b.Terminating {
		return !a.Terminating
	}
	if finished(a) != finished(b) {
		return !finished(a)
	}
	if runningAndReady(a) != runningAndReady(b) {
		return runningAndReady(a)
	}
	return a.Created.Before(b.Created)
}

func (r *reconciler) claimIndex(claim string) int {
	for i, c := range r.spec.VolumeClaims {
		if c == claim {
			return i
		}
	}
	return -1
}

// hasVolume reports whether the volume of claim c exists for slot i.
func (r *reconciler) hasVolume(i, c int) bool {
	if c < 64 {
		return r.slots[i].vols&(1<<c) != 0
	}
	ord := r.spec.OrdinalsStart + i
	claim := r.spec.VolumeClaims[c]
	for j := range r.in.Volumes {
		if v := &r.in.Volumes[j]; v.Ordinal == ord && v.Claim == claim {
			return true
		}
	}
	return false
}

// finished reports whether a pod will not run again: Failed, or Succeeded
// (which for a long-running service means it was stopped from outside).
func finished(p *Pod) bool {
	return p.Phase == PhaseFailed || p.Phase == PhaseSucceeded
}

// runningAndReady is Kubernetes' isRunningAndReady. An unknown phase is
// neither running nor finished, so it is treated like Pending.
func runningAndReady(p *Pod) bool {
	return p.Phase == PhaseRunning && p.Ready
}

// available reports whether a Running and Ready pod has been ready for at
// least minReadySeconds at now; see Available.
func (r *reconciler) available(p *Pod) bool {
	return Available(*p, r.spec.MinReadySeconds, r.now)
}

// healthy is the opposite of Kubernetes' isUnavailable: available and not
// terminating.
func (r *reconciler) healthy(p *Pod) bool {
	return !p.Terminating && r.available(p)
}

// updating reports whether a rolling update may move pods now. Recreate
// moves a new revision by its own stop (recreate.go), and repairs a drifted
// pod or grows a volume with the rolling update's rules.
func (r *reconciler) updating() bool {
	return (r.spec.UpdateStrategy == RollingUpdate || r.spec.UpdateStrategy == Recreate) && !r.spec.Paused
}

// newPodRevision is newVersionedStatefulSetPod's choice of revision for a pod
// created at slot i: the current revision below a RollingUpdate's partition,
// the update revision otherwise (OnDelete included, scale-ups too). While
// paused, pods are created at the current revision, as in OpenKruise.
//
// On top of that no pod is created at an older revision than its ordinal
// last ran (its record), unless the user asked for it: a rollback renumbers
// the old revision above the record, and a partition raised above the
// ordinal is an explicit step back. A paused set recreates such a pod at the
// update revision, as OpenKruise's isCurrentRevisionNeeded does for pods it
// already updated.
func (r *reconciler) newPodRevision(i int) Revision {
	belowPartition := r.spec.UpdateStrategy == RollingUpdate && i < r.spec.Partition
	if !r.spec.Paused && !belowPartition {
		return r.update
	}
	if belowPartition {
		return r.current
	}
	if rec, ok := r.prevRecord(r.spec.OrdinalsStart + i); ok && rec.Revision != "" && r.current.Number < r.recordNumber(rec) {
		return r.update
	}
	return r.current
}

// recordNumber is the number, as it is now, of the revision a record names:
// a rollback renumbers a revision, and its latest number says how recent the
// user's wish for it is. A revision trimmed since keeps the recorded number.
func (r *reconciler) recordNumber(rec OrdinalRecord) int64 {
	if rev, ok := r.revisionByName(rec.Revision); ok {
		return rev.Number
	}
	return rec.RevisionNumber
}

// deletePod takes pod p down for cause, unless a hold keeps that step from
// happening: the caller then goes on as if it had (the pod stays counted as
// acted on, which can only make the decision more careful). A pod that ended
// with nothing left running is purged.
func (r *reconciler) deletePod(p *Pod, cause DeleteCause, reason string) {
	if disrupts(cause) && !finished(p) {
		if h, ok := r.activeHold(p.Ordinal, StepDisrupt); ok && r.holdApplies(h, p) {
			r.noteHeld(h)
			return
		}
		if r.handingOverTo(p) {
			r.waitOrdinal(p.Ordinal, "to stay up while the leader may be handing leadership to it")
			return
		}
		// The maintenance window comes first: outside it nothing is asked
		// or handed over for a voluntary step (window.go).
		if !r.mayDisruptInWindow(p, cause) {
			return
		}
	}
	r.emitDelete(p, cause, reason)
}

// emitDelete emits the deletion of pod p, which may go now.
func (r *reconciler) emitDelete(p *Pod, cause DeleteCause, reason string) {
	purge := finished(p) && p.AllTerminal
	r.emit(Action{Type: ActionDeletePod, Ordinal: p.Ordinal, Pod: *p, Reason: reason, Cause: cause, Purge: purge})
	// Like the status adjustment in updateStatefulSet: a pod being deleted
	// no longer counts as current or updated.
	if !p.Terminating {
		if p.Revision == r.status.CurrentRevision {
			r.status.CurrentReplicas--
		}
		if p.Revision == r.status.UpdateRevision {
			r.status.UpdatedReplicas--
		}
	}
}

// wait records the first pod the decision waits on (slot i), for the
// condition messages.
func (r *reconciler) wait(i int, why string) {
	r.waitOrdinal(r.spec.OrdinalsStart+i, why)
}

func (r *reconciler) waitOrdinal(ord int, why string) {
	if r.waitPod < 0 {
		r.waitPod, r.waitWhy = ord, why
	}
}

// syncPods is updateStatefulSet: fix duplicates, then process each replica in
// order, then the condemned pods, then the rolling update. In OrderedReady
// (monotonic) mode each phase stops at the first pod it must wait for.
func (r *reconciler) syncPods() {
	if !r.monotonic {
		// Parallel creates every missing pod (and its volumes) at once: size
		// the action list for it rather than grow it a dozen times.
		missing := 0
		for i := range r.slots {
			if r.slots[i].pod == noPod {
				missing++
			}
		}
		if missing > 0 {
			acts := make([]Action, len(r.actions), len(r.actions)+missing*(1+len(r.spec.VolumeClaims))+4)
			copy(acts, r.actions)
			r.actions = acts
		}
	}
	// A bad observation with two pods for one ordinal: delete the extras and
	// touch the ordinal no further until one pod is left.
	if r.dupes {
		for i := range r.in.Pods {
			p := &r.in.Pods[i]
			if !r.inRange(p.Ordinal) {
				continue
			}
			s := &r.slots[p.Ordinal-r.spec.OrdinalsStart]
			if s.extra > 0 && s.pod != int32(i) && !p.Terminating {
				r.deletePod(p, CauseDuplicate, "duplicate pod for one ordinal")
			}
		}
	}

	// A Recreate stops every pod at once, before the walk: neither the
	// budget nor the policy's order applies to the stop (recreate.go).
	if r.rc.active {
		r.recreateStop()
	}

	for i := range r.slots {
		if exit := r.processReplica(i); exit && r.monotonic {
			return
		}
	}

	firstUnhealthy := r.firstUnhealthy()
	for _, pi := range r.condemned {
		if exit := r.processCondemned(pi, firstUnhealthy); exit && r.monotonic {
			return
		}
	}

	budget := r.budget()
	budget = r.evacuate(budget)
	if r.updating() && !r.rc.active {
		r.rollingUpdate(budget)
	}
}

// budget is maxUnavailable minus the unavailable ordinals of the whole
// range: how many healthy pods may still be taken down now.
func (r *reconciler) budget() int {
	budget := MaxUnavailableCount(r.spec.MaxUnavailable, r.spec.Replicas)
	for i := range r.slots {
		if s := &r.slots[i]; s.pod == noPod || s.acted || s.extra > 0 || !s.healthy {
			budget--
		}
	}
	return budget
}

// evacuate takes pods off draining nodes, highest ordinal first, within the
// budget, under every strategy (a drain is the operator's order, not an
// update): Nomad leaves the children to the daemon (their migrate block
// allows no parallel migration), so the set loses no more members at once
// than maxUnavailable however many of its nodes are drained. A draining pod
// that is already unavailable goes first and uses no budget, but a Running
// one only while the set is within its budget, as Kubernetes evicts under a
// PodDisruptionBudget's default unhealthyPodEvictionPolicy, IfHealthyBudget:
// when one member is down for the drain, its peers may be briefly not ready
// (electing a new leader), and taking one of them then would make a blip a
// second member down. It returns the budget left.
func (r *reconciler) evacuate(budget int) int {
	for pass := 0; pass < 2; pass++ {
		for i := len(r.slots) - 1; i >= 0; i-- {
			s := &r.slots[i]
			if s.pod == noPod || s.acted || s.extra > 0 || (pass == 0) == s.healthy {
				continue
			}
			p := &r.in.Pods[s.pod]
			if !p.NodeDraining || p.Terminating {
				continue
			}
			if r.leaderWaits(p, CauseDrain) {
				r.wait(i, "to leave its draining node last, as the leader")
				continue
			}
			if s.healthy {
				if budget <= 0 {
					r.wait(i, "to leave its draining node when the maxUnavailable budget allows")
					continue
				}
				budget--
			} else if p.Phase == PhaseRunning && budget < 0 {
				r.wait(i, "to leave its draining node once no more than maxUnavailable ordinals are down")
				continue
			}
			r.deletePod(p, CauseDrain, "its node is being drained")
			s.acted = true
			r.wait(i, "to leave its draining node")
		}
	}
	return budget
}

// processReplica is Kubernetes' processReplica for slot i. It returns true
// when a monotonic walk must stop here.
func (r *reconciler) processReplica(i int) bool {
	s := &r.slots[i]
	if s.extra > 0 {
		r.wait(i, "to have a single pod")
		return true
	}
	if s.acted {
		// Stopped by a Recreate in this decision.
		r.wait(i, "to terminate (Recreate)")
		return true
	}
	if wait := r.podReplace(i); wait {
		return true
	}
	if s.pod == noPod {
		held, unspread := r.createHeld(r.spec.OrdinalsStart + i)
		if held {
			return true
		}
		rev := r.newPodRevision(i)
		if r.spec.UpdateStrategy == Recreate {
			var ok bool
			if rev, ok = r.recreateRevision(i, rev); !ok {
				r.wait(i, "to be created once no pod at another revision is left (Recreate)")
				return true
			}
		}
		r.createVolumes(i)
		r.expandVolumes(i)
		r.emit(Action{Type: ActionCreatePod, Ordinal: r.spec.OrdinalsStart + i, Revision: rev, Reason: "missing pod", Unspread: unspread})
		s.acted, s.created, s.createdRev, s.createdNum = true, true, rev.Name, rev.Number
		r.wait(i, "to be created")
		return true
	}
	p := &r.in.Pods[s.pod]
	if finished(p) {
		// Delete it; the next reconcile, once it is gone, creates it again.
		if !p.Terminating {
			r.deletePod(p, CauseEnded, "pod "+string(p.Phase)+"; it will be recreated")
			s.acted = true
		}
		r.wait(i, "to be recreated")
		return true
	}
	if p.Terminating {
		r.wait(i, "to terminate")
		return true
	}
	r.createVolumes(i)
	if !runningAndReady(p) {
		// Kubernetes waits for a pod that is not ready. Where waiting cannot
		// help, the pod is replaced now instead: it runs a template that is
		// no longer wanted, either an abandoned revision (neither current
		// nor update: the revert of a broken rollout, Kubernetes issue 67250)
		// or a drifted child. It is unavailable already, so replacing it
		// takes nothing more down. A pod at the current revision that is
		// briefly not ready (restarting) is waited for, as upstream does.
		if r.replaceableNow(i, p) {
			cause, why := CauseUpdate, "not ready at an abandoned revision; replacing it with "+r.update.Name
			switch {
			case p.Drifted:
				cause, why = CauseRepair, "not ready and drifted from its revision; recreating it"
			case p.Revision == r.current.Name:
				why = "not ready at the current revision, and the rollout made no progress for statefulset_progress_deadline; replacing it with " + r.update.Name
			}
			r.deletePod(p, cause, why)
			s.acted = true
			r.wait(i, "to be replaced")
			return true
		}
		r.wait(i, "to be Running and Ready (the rollout waits for it until statefulset_progress_deadline)")
		return true
	}
	if !r.available(p) {
		r.wait(i, "to be available for minReadySeconds")
		return true
	}
	return false
}

// createVolumes emits CreateVolume for each claim whose volume for slot i is
// missing. Volumes are created before their pod, and again for a pending pod
// that lost one, as createMissingPersistentVolumeClaims does.
func (r *reconciler) createVolumes(i int) {
	if r.slots[i].vols == r.maxVols && len(r.spec.VolumeClaims) < 64 {
		return
	}
	ord := r.spec.OrdinalsStart + i
	held, unspread := r.createHeld(ord)
	if held {
		return
	}
	for c, claim := range r.spec.VolumeClaims {
		if r.hasVolume(i, c) {
			continue
		}
		v := Volume{Claim: claim, Ordinal: ord, Name: VolumeName(claim, r.spec.Name, ord)}
		if t, ok := r.claimTemplate(claim); ok {
			// What the claim asks: the provisioner makes it so.
			v.Capacity, v.Class = t.CapacityMin, t.Class
		}
		r.emit(Action{Type: ActionCreateVolume, Ordinal: ord, Volume: v, Reason: "volume for pod", Unspread: unspread})
		if c < 64 {
			r.slots[i].vols |= 1 << c // one CreateVolume per claim, even if called twice
		}
	}
}

// firstUnhealthy is the pod index of the first unhealthy pod: the lowest
// ordinal among the replicas, else the lowest condemned one. In monotonic
// mode only it may be deleted for a scale-down while it is not healthy.
func (r *reconciler) firstUnhealthy() int32 {
	for i := range r.slots {
		s := &r.slots[i]
		if s.pod == noPod || s.acted || s.extra > 0 || !s.healthy {
			if s.pod == noPod {
				return noPod // a missing pod: no existing pod is "first"
			}
			return s.pod
		}
	}
	for j := len(r.condemned) - 1; j >= 0; j-- {
		if !r.healthy(&r.in.Pods[r.condemned[j]]) {
			return r.condemned[j]
		}
	}
	return noPod
}

// processCondemned is Kubernetes' processCondemned: delete a pod outside the
// range, highest ordinal first. It returns true when a monotonic walk must
// stop.
func (r *reconciler) processCondemned(pi, firstUnhealthy int32) bool {
	p := &r.in.Pods[pi]
	if p.Terminating || (r.rc.active && p.Revision != r.update.Name && r.rc.condemned && (r.rc.gated || r.deleting(p.Ordinal))) {
		// A Recreate's stop covers it: stopped by it in this decision
		// already, or waiting with it at its gate (recreate.go).
		r.waitOrdinal(p.Ordinal, "to terminate for scale-down")
		return true
	}
	if !r.healthy(p) && pi != firstUnhealthy && r.monotonic && r.waitableBelow(p.Ordinal) {
		r.waitOrdinal(p.Ordinal, "to be healthy before scale-down")
		return true
	}
	r.deletePod(p, CauseScaleDown, "scale down")
	r.waitOrdinal(p.Ordinal, "to terminate for scale-down")
	return true
}

// waitableBelow reports whether a condemned pod below ord is unhealthy in a
// way worth waiting for: terminating (it will be gone), or at the update
// revision and not finished (it may still become ready). The
// first-unhealthy-pod rule blocks a scale-down on such a pod. A Failed pod,
// or one stuck unready at an outdated revision, is not waited for: it will
// never be ready, and with two of them Kubernetes deadlocks, each waiting on
// the other.
func (r *reconciler) waitableBelow(ord int) bool {
	for _, pi := range r.condemned {
		p := &r.in.Pods[pi]
		if p.Ordinal < ord && !r.healthy(p) && (p.Terminating || (p.Revision == r.update.Name && !finished(p))) {
			return true
		}
	}
	return false
}

// replaceableNow reports whether a pod in slot i that is not ready is to be
// replaced without waiting for it: a rolling update may act on the slot, and
// the pod runs a template nothing wants any more (an abandoned revision, or a
// drifted child), or it is outdated and the rollout is stuck.
func (r *reconciler) replaceableNow(i int, p *Pod) bool {
	if !r.updating() || i < r.spec.Partition {
		return false
	}
	if r.spec.UpdateStrategy == Recreate && p.Revision != r.update.Name {
		// A Recreate's stop takes it down with every other pod
		// (recreate.go); alone it would only come back at its revision.
		return false
	}
	if p.Drifted || (p.Revision != r.update.Name && p.Revision != r.current.Name) {
		return true
	}
	// A pod at the current revision is waited for while there is hope; once
	// the rollout has made no progress for the whole progress deadline,
	// waiting did not help (a first revision that never worked, Kubernetes
	// issue 137409 under OrderedReady), and it is replaced too.
	return p.Revision != r.update.Name && pastDeadline(r.spec, r.in.Previous, r.now)
}

// pastDeadline reports whether the set has made no progress for its whole
// progress deadline, as of the previous status. A set that was at rest
// (restingStatus), or waited for a maintenance window (waitedForWindow), is
// not: its clock kept the time it came to rest, and its work starts with
// this pass.
func pastDeadline(spec Spec, prev Status, now time.Time) bool {
	return !spec.Paused && spec.ProgressDeadline > 0 && !prev.LastProgressTime.IsZero() && !restingStatus(prev) &&
		!waitedForWindow(prev) && now.Sub(prev.LastProgressTime) >= spec.ProgressDeadline
}

// outdated reports whether a rolling update must replace the pod: it is not
// at the update revision, or its child drifted from its revision.
func (r *reconciler) outdated(p *Pod) bool {
	return p.Revision != r.update.Name || p.Drifted || r.resizePending(p.Ordinal)
}

// rollingUpdate deletes outdated pods (not at the update revision, or
// drifted), from the highest ordinal down to the partition, so that the next
// reconciles recreate them at the update revision. It is the maxUnavailable
// algorithm of updateStatefulSetAfterInvariantEstablished (with the
// Kubernetes 1.35 fix of issue 137409), in both policies: every unavailable
// pod in the whole range counts, below the partition too, and a healthy pod
// is taken down only while maxUnavailable - unavailable is above zero. An
// outdated pod that is unavailable already is replaced first and uses no
// budget, because replacing it takes nothing more down: a stuck outdated pod
// never blocks a rollout, and never lets one exceed the budget.
//
// That walk stops, as upstream's does, at a pod on its way up or down: one
// missing or being created, terminating, or at the update revision and not
// healthy yet. An outdated pod below it that is not ready may be so only
// because of it (a Raft member's health fails while a peer restarts), and
// is alive and one of the majority: it waits until the pod above is back.
func (r *reconciler) rollingUpdate(budget int) {
	for i := len(r.slots) - 1; i >= r.spec.Partition; i-- {
		s := &r.slots[i]
		if s.extra > 0 || (s.healthy && !s.acted) {
			continue
		}
		if s.pod == noPod || s.acted {
			break
		}
		p := &r.in.Pods[s.pod]
		if p.Terminating || !r.outdated(p) {
			break
		}
		r.replace(i, p)
	}
	for i := len(r.slots) - 1; i >= r.spec.Partition; i-- {
		s := &r.slots[i]
		if s.pod == noPod || s.acted || s.extra > 0 || !s.healthy {
			continue
		}
		p := &r.in.Pods[s.pod]
		if !r.outdated(p) {
			continue
		}
		if r.leaderWaits(p, CauseUpdate) {
			r.wait(i, "to be updated last, as the leader")
			continue
		}
		if budget <= 0 {
			r.wait(i, "to be updated when the maxUnavailable budget allows")
			continue
		}
		budget--
		r.replace(i, p)
	}
}

// replace deletes the pod of slot i for a rolling update or a drift repair.
func (r *reconciler) replace(i int, p *Pod) {
	switch {
	case p.Revision != r.update.Name:
		r.deletePod(p, CauseUpdate, "rolling update to "+r.update.Name)
	case p.Drifted:
		r.deletePod(p, CauseRepair, "child job drifted from its revision; recreating it")
	default:
		r.deletePod(p, CauseResize, "a volume of its must grow to what its claim asks; it comes back on it")
	}
	r.slots[i].acted = true
	r.wait(i, "to be updated")
}

// cleanupScaledVolumes deletes the volumes of ordinals that a scale-down
// condemned while WhenScaled said Delete, once no pod of that ordinal exists
// any more, terminating ones included, and only while the policy still says
// Delete. Kubernetes gets this from owner references set at the moment of
// the scale-down; here the ordinal records carry it. Volumes kept by an
// earlier scale-down under Retain, or left by an earlier set of the same
// name, are never swept.
func (r *reconciler) cleanupScaledVolumes() {
	if r.spec.WhenScaled != Delete {
		return
	}
	for i := range r.in.Volumes {
		v := &r.in.Volumes[i]
		if r.inRange(v.Ordinal) || r.podExists(v.Ordinal) {
			continue
		}
		if rec, ok := findRecord(r.status.Ordinals, v.Ordinal); ok && rec.DeleteVolumes {
			r.deleteVolume(v, "scaled down while whenScaled=Delete")
		}
	}
}

func (r *reconciler) deleteVolume(v *Volume, reason string) {
	vol := *v
	if vol.Name == "" {
		vol.Name = VolumeName(vol.Claim, r.spec.Name, vol.Ordinal)
	}
	r.emit(Action{Type: ActionDeleteVolume, Ordinal: v.Ordinal, Volume: vol, Reason: reason})
}

// podExists reports whether any observed pod, in any state, has the ordinal.
func (r *reconciler) podExists(ord int) bool {
	for i := range r.in.Pods {
		if r.in.Pods[i].Ordinal == ord {
			return true
		}
	}
	return false
}
