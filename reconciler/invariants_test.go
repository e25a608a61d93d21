package reconciler

import (
	"fmt"
	"slices"
	"strings"
)

// checkDecision checks one decision against the observation it was made from,
// before any of its actions is applied: ordering (monotonic, one at a time),
// the revision a new pod gets, and the maxUnavailable budget.
func checkDecision(w *world, in Input, out Output) error {
	spec := in.Spec
	// DESIGN §1: a set whose parent is not annotated gets no action but the
	// write of its status (which says it is detached), and neither does
	// one whose parent was purged after the detachment was recorded:
	// detaching is not deleting.
	if acts := out.effects(); w.unannotated && (spec.Detached || StatusDetached(w.status)) && len(acts) > 0 {
		return fmt.Errorf("detached (parent not annotated, detached=%v deleted=%v gone=%v): %d actions, first %s %d (%s)",
			spec.Detached, spec.Deleted, spec.ParentGone, len(acts), acts[0].Type, acts[0].Ordinal, acts[0].Reason)
	}
	if err := checkStatusWrite(in, out); err != nil {
		return err
	}
	if w.unannotated && spec.Detached && !StatusDetached(out.Status) {
		return fmt.Errorf("detached, but the status has no Detached condition: %s", conditionMessages(out.Status))
	}
	start, n := spec.OrdinalsStart, spec.Replicas
	inRange := func(o int) bool { return o >= start && o < start+n }
	byOrd := map[int][]Pod{}
	maxOrd, maxCondemned := -1, -1
	for _, p := range in.Pods {
		byOrd[p.Ordinal] = append(byOrd[p.Ordinal], p)
		maxOrd = max(maxOrd, p.Ordinal)
		if !inRange(p.Ordinal) {
			maxCondemned = max(maxCondemned, p.Ordinal)
		}
	}
	creates, scaleDowns := 0, 0
	for _, a := range out.Actions {
		switch a.Type {
		case ActionCreatePod:
			creates++
			if len(byOrd[a.Ordinal]) > 0 {
				return fmt.Errorf("CreatePod %d while a pod of that ordinal exists", a.Ordinal)
			}
			if spec.PodManagementPolicy == OrderedReady {
				for o := start; o < a.Ordinal; o++ {
					if ps := byOrd[o]; len(ps) != 1 || !w.healthy(ps[0]) {
						return fmt.Errorf("monotonic: CreatePod %d while predecessor %d is not Running, Ready and available", a.Ordinal, o)
					}
				}
			}
			// newVersionedStatefulSetPod: the current revision below a
			// RollingUpdate's partition, the update revision otherwise
			// (OnDelete and scale-ups included). A paused set creates at the
			// current revision, or at the update revision for an ordinal that
			// already ran something newer (OpenKruise; no silent downgrade).
			idx := a.Ordinal - start
			cur, upd := out.Status.CurrentRevision, out.Status.UpdateRevision
			switch {
			case spec.UpdateStrategy == Recreate:
				// Under Recreate, the update revision, or while the stop
				// waits (or the set is paused) the revision every pod
				// runs: checkRecreate judges which.
				if a.Revision.Name != cur && a.Revision.Name != upd {
					return fmt.Errorf("Recreate: pod %d created at %s, neither current %s nor update %s", a.Ordinal, a.Revision.Name, cur, upd)
				}
			case spec.UpdateStrategy == RollingUpdate && idx < spec.Partition:
				if a.Revision.Name != cur {
					return fmt.Errorf("pod %d below partition %d created at %s, want current %s", a.Ordinal, spec.Partition, a.Revision.Name, cur)
				}
			case spec.Paused:
				last, ran := w.lastRanNumber(a.Ordinal)
				if l, ok := w.lastRan[a.Ordinal]; ok {
					last = numberAfter(w, out, l.Name, last)
				}
				newer := ran && w.revision(cur) != nil && last > numberAfter(w, out, cur, w.revision(cur).Number)
				if a.Revision.Name != cur && !(newer && a.Revision.Name == upd) {
					return fmt.Errorf("paused: pod %d created at %s, want current %s", a.Ordinal, a.Revision.Name, cur)
				}
			default:
				if a.Revision.Name != upd {
					return fmt.Errorf("pod %d created at %s, want update %s", a.Ordinal, a.Revision.Name, upd)
				}
			}
		case ActionDeletePod:
			if spec.Deleted {
				if spec.PodManagementPolicy == OrderedReady && a.Ordinal != maxOrd {
					return fmt.Errorf("teardown: deleting pod %d before pod %d", a.Ordinal, maxOrd)
				}
				continue
			}
			if isRecreateStop(in, out, a) {
				// KEP-3541: a Recreate stops every pod at once, replicas
				// and condemned pods alike, in no order and outside the
				// budget; its gates are checkLeaderAndAsking's and
				// checkMaintenanceWindow's, its promise checkRecreate's.
				continue
			}
			if !inRange(a.Ordinal) {
				scaleDowns++
				if spec.PodManagementPolicy == OrderedReady {
					if a.Ordinal != maxCondemned {
						return fmt.Errorf("monotonic: scale-down deletes %d before %d", a.Ordinal, maxCondemned)
					}
					for o := start; o < start+n; o++ {
						if ps := byOrd[o]; len(ps) != 1 || !w.healthy(ps[0]) {
							return fmt.Errorf("monotonic: scale-down of %d while replica %d is not healthy", a.Ordinal, o)
						}
					}
				}
				continue
			}
			ps := byOrd[a.Ordinal]
			if len(ps) != 1 || finishedPod(ps[0]) {
				continue // a duplicate, or a pod that ended: replaced
			}
			if a.Cause == CauseReplace {
				// The user's explicit delete (pod replace), like `kubectl
				// delete pod`: only for a requested ordinal.
				if !slices.ContainsFunc(spec.Replacements, func(r Replacement) bool { return r.Ordinal == a.Ordinal }) {
					return fmt.Errorf("pod %d deleted for a replace nobody asked for", a.Ordinal)
				}
				continue
			}
			if err := checkReplacement(w, in, out, ps[0], byOrd); err != nil {
				return err
			}
		}
	}
	if err := checkLeaderAndAsking(in, out); err != nil {
		return err
	}
	// KEP-3541: under Recreate no two revisions ever run side by side.
	if err := checkRecreate(in, out); err != nil {
		return err
	}
	// DESIGN §3b: outside a maintenance window no voluntary disruption
	// starts, except one approved step (window_gate_test.go).
	if err := checkMaintenanceWindow(in, out); err != nil {
		return err
	}
	if spec.PodManagementPolicy == OrderedReady && (creates > 1 || scaleDowns > 1) {
		return fmt.Errorf("monotonic: %d creates and %d scale-down deletes in one decision", creates, scaleDowns)
	}
	if !spec.Deleted {
		return checkBudget(w, in, out, byOrd)
	}
	return nil
}

func finishedPod(p Pod) bool { return p.Phase == PhaseFailed || p.Phase == PhaseSucceeded }

// checkReplacement checks the deletion of a live in-range pod p (not a
// duplicate, not ended). Only a rolling update may take one down (RollingUpdate,
// not paused, at or above the partition), and only an outdated one: not at
// the update revision, or drifted. Under OrderedReady it follows the
// monotonic walk of updateStatefulSet, which reaches the rolling update only
// once every replica is Running, Ready and available, and which waits for a
// pod that is not ready. One departure, on purpose: a pod that is not ready
// at an abandoned revision (neither current nor update), or drifted, is
// replaced without waiting, because waiting cannot help (Kubernetes issue
// 67250; processReplica would wait for ever); so is an outdated one once the
// rollout made no progress for the whole progress deadline.
func checkReplacement(w *world, in Input, out Output, p Pod, byOrd map[int][]Pod) error {
	spec := in.Spec
	start := spec.OrdinalsStart
	idx := p.Ordinal - start
	cur, upd := out.Status.CurrentRevision, out.Status.UpdateRevision
	if p.NodeDraining {
		// DESIGN §3: a drain is carried out by the daemon, under every
		// strategy, within the budget (checkBudget), and under OrderedReady
		// only once every other replica is healthy, like an update.
		return checkMonotonicTakedown(w, spec, p, byOrd)
	}
	switch {
	case spec.UpdateStrategy == OnDelete:
		return fmt.Errorf("OnDelete: live pod %d deleted", p.Ordinal)
	case spec.Paused:
		return fmt.Errorf("paused: live pod %d deleted", p.Ordinal)
	case idx < spec.Partition:
		return fmt.Errorf("live pod %d below partition %d deleted", p.Ordinal, spec.Partition)
	case p.Revision == upd && !p.Drifted && !mustGrowIn(in, p.Ordinal):
		return fmt.Errorf("pod %d at the update revision, not drifted, its volumes as large as their claims, deleted", p.Ordinal)
	}
	if spec.PodManagementPolicy != OrderedReady {
		return nil
	}
	if !w.healthy(p) {
		if p.Terminating || p.Drifted || (p.Revision != cur && p.Revision != upd) {
			return nil
		}
		// A set that was at rest (settled, or paused) was not stuck: its
		// work starts with this pass.
		prog := condition(in.Previous, ConditionProgressing)
		resting := !prog.Status && (prog.Reason == ReasonComplete || prog.Reason == ReasonPaused)
		if p.Revision != upd && !spec.Paused && spec.ProgressDeadline > 0 && !in.Previous.LastProgressTime.IsZero() && !resting &&
			in.Now.Sub(in.Previous.LastProgressTime) >= spec.ProgressDeadline {
			return nil // the rollout is stuck: waiting did not help
		}
		return fmt.Errorf("monotonic: pod %d at %s is not ready but may still become ready; updateStatefulSet waits for it", p.Ordinal, p.Revision)
	}
	return checkMonotonicTakedown(w, spec, p, byOrd)
}

// checkMonotonicTakedown: under OrderedReady a healthy pod is taken down only
// when every other replica is healthy and nothing is condemned, as
// updateStatefulSet reaches its rolling update only then.
func checkMonotonicTakedown(w *world, spec Spec, p Pod, byOrd map[int][]Pod) error {
	if spec.PodManagementPolicy != OrderedReady || !w.healthy(p) {
		return nil
	}
	start := spec.OrdinalsStart
	for o := start; o < start+spec.Replicas; o++ {
		if ps := byOrd[o]; o != p.Ordinal && (len(ps) != 1 || !w.healthy(ps[0])) {
			return fmt.Errorf("monotonic: healthy pod %d taken down while replica %d is unavailable", p.Ordinal, o)
		}
	}
	for o, ps := range byOrd {
		if (o < start || o >= start+spec.Replicas) && len(ps) > 0 {
			return fmt.Errorf("monotonic: healthy pod %d taken down while condemned pod %d remains", p.Ordinal, o)
		}
	}
	return nil
}

// checkBudget checks DESIGN §3's budget the way the upstream fix of issue
// 137409 counts it: every unavailable ordinal in the whole range counts
// (missing, terminating, not ready, not yet available; below the partition
// too), and healthy pods are taken down only while maxUnavailable minus
// that count is above zero. Replacing a pod that is already unavailable
// takes nothing more down and is not limited here.
func checkBudget(w *world, in Input, out Output, byOrd map[int][]Pod) error {
	spec := in.Spec
	start := spec.OrdinalsStart
	committed := 0
	for o := start; o < start+spec.Replicas; o++ {
		if ps := byOrd[o]; len(ps) != 1 || !w.healthy(ps[0]) {
			committed++
		}
	}
	deleted := 0
	for _, a := range out.Actions {
		if a.Type != ActionDeletePod || a.Ordinal < start || a.Ordinal >= start+spec.Replicas || a.Cause == CauseReplace {
			continue // the user's own deletes (pod replace) are not the daemon's
		}
		if isRecreateStop(in, out, a) {
			// DESIGN §3b, KEP-3541: the budget does not apply to a
			// Recreate, which takes every pod down at once by
			// definition. (Its drift repairs, volume growth and drains
			// are counted: they are not its stop.)
			continue
		}
		if ps := byOrd[a.Ordinal]; len(ps) == 1 && w.healthy(ps[0]) {
			deleted++
		}
	}
	maxUnavailable := MaxUnavailableCount(spec.MaxUnavailable, spec.Replicas)
	budget := max(maxUnavailable-committed, 0)
	if deleted > budget {
		return fmt.Errorf("maxUnavailable: %d healthy pods deleted with %d already unavailable, max %d",
			deleted, committed, maxUnavailable)
	}
	return checkDrainOfUnhealthy(w, out, byOrd, committed, maxUnavailable)
}

// checkDrainOfUnhealthy checks a drain the way Kubernetes evicts under a
// PodDisruptionBudget with its default unhealthyPodEvictionPolicy,
// IfHealthyBudget (pkg/registry/core/pod/storage/eviction.go): a Running pod
// that is not healthy is evicted only while the set is within its budget
// (currentHealthy >= desiredHealthy); Pending, finished and terminating pods
// always may be. Taking such a pod while the set is over its budget turns a
// blip (a member briefly not ready while its peers elect a new leader)
// into one more member down.
func checkDrainOfUnhealthy(w *world, out Output, byOrd map[int][]Pod, committed, maxUnavailable int) error {
	if committed <= maxUnavailable {
		return nil
	}
	for _, a := range out.Actions {
		if a.Type != ActionDeletePod || a.Cause != CauseDrain {
			continue
		}
		if ps := byOrd[a.Ordinal]; len(ps) == 1 && ps[0].Phase == PhaseRunning && !ps[0].Terminating && !w.healthy(ps[0]) {
			return fmt.Errorf("drain: running pod %d, not healthy, taken off its node with %d ordinals unavailable, max %d",
				a.Ordinal, committed, maxUnavailable)
		}
	}
	return nil
}

// checkState checks the world after a step: at most one pod per ordinal,
// the burst invariants of assertBurstInvariants (every pod has its storage;
// identity is the ordinal itself here), a consistent status, and, when
// enabled, the Kubernetes monotonic and update
// invariants and the maxUnavailable bound.
func (w *world) checkState() error {
	seen := map[int]bool{}
	for _, p := range w.pods {
		if seen[p.Ordinal] {
			return fmt.Errorf("two pods for ordinal %d", p.Ordinal)
		}
		seen[p.Ordinal] = true
		// A pod mounts the volumes of the claims it was created with; a
		// claim added later reaches it only when it is replaced.
		for _, c := range strings.Split(w.podClaims[p.Ordinal], ",") {
			if c != "" && !w.hasVolume(c, p.Ordinal) {
				return fmt.Errorf("pod %d has no volume %s", p.Ordinal, c)
			}
		}
	}
	// KEP-3541: under Recreate the world never holds pods of two revisions.
	if err := w.checkRecreateState(); err != nil {
		return err
	}
	st := w.last.Status
	if st.ReadyReplicas > st.Replicas || st.AvailableReplicas > st.ReadyReplicas ||
		st.CurrentReplicas > st.Replicas || st.UpdatedReplicas > st.Replicas {
		return fmt.Errorf("inconsistent status %+v", st)
	}
	if w.spec.Deleted {
		return nil
	}
	start, n := w.spec.OrdinalsStart, w.spec.Replicas
	var live []Pod // in-range pods that are not terminating, by ordinal
	for _, p := range w.sortedPods() {
		if p.Ordinal >= start && p.Ordinal < start+n && !p.Terminating {
			live = append(live, p)
		}
	}
	if w.checkMonotonic && w.spec.PodManagementPolicy == OrderedReady {
		var ps []Pod
		for _, p := range w.sortedPods() {
			if p.Ordinal >= start && p.Ordinal < start+n {
				ps = append(ps, p)
			}
		}
		for i, p := range ps {
			if p.Ordinal != start+i {
				return fmt.Errorf("monotonic: pods are not contiguous from %d: found %d at position %d", start, p.Ordinal, i)
			}
			if i > 0 && runningAndReady(&ps[i]) && !runningAndReady(&ps[i-1]) {
				return fmt.Errorf("monotonic: successor %d is Running and Ready while %d is not", p.Ordinal, ps[i-1].Ordinal)
			}
		}
	}
	if w.checkUpdateOrder {
		live, current, updated := live, st.CurrentReplicas, st.UpdatedReplicas
		if w.spec.LeaderCheck != "" {
			// DESIGN §3b: the leader goes last, and leadership may move
			// during the rollout; the others keep assertUpdateInvariants'
			// order, which is checked without every pod that led.
			var rest []Pod
			for _, p := range live {
				switch {
				case !w.everLed[p.Ordinal]:
					rest = append(rest, p)
				case p.Revision == st.CurrentRevision:
					current--
				case p.Revision == st.UpdateRevision:
					updated--
				}
			}
			live = rest
		}
		if w.spec.UpdateStrategy == RollingUpdate {
			for i := 0; i < current && i < len(live); i++ {
				if live[i].Revision != st.CurrentRevision {
					return fmt.Errorf("update: pod %d at %s, want current revision %s", live[i].Ordinal, live[i].Revision, st.CurrentRevision)
				}
			}
			for i, j := len(live)-1, 0; j < updated && i >= 0; i, j = i-1, j+1 {
				if live[i].Revision != st.UpdateRevision {
					return fmt.Errorf("update: pod %d at %s, want update revision %s", live[i].Ordinal, live[i].Revision, st.UpdateRevision)
				}
			}
		}
	}
	if w.checkBudget {
		unavailable := n
		for _, p := range live {
			if w.healthy(p) {
				unavailable--
			}
		}
		if m := MaxUnavailableCount(w.spec.MaxUnavailable, n); unavailable > m {
			return fmt.Errorf("maxUnavailable: %d of %d unavailable, max %d", unavailable, n, m)
		}
	}
	return nil
}

// numberAfter is the number revision name has once the decision's revision
// actions are applied (a rollback renumbers it), else def.
func numberAfter(w *world, out Output, name string, def int64) int64 {
	for _, a := range out.Actions {
		if (a.Type == ActionUpdateRevision || a.Type == ActionCreateRevision) && a.Revision.Name == name {
			def = a.Revision.Number
		}
	}
	return def
}

// checkLeaderAndAsking checks the three promises of DESIGN §3b on one
// decision, against the observation it was made from:
//   - the leader is never taken down (a rollout, a repair, a volume
//     expansion, a drain) while another pod that must go for the same
//     reason is still up;
//   - under switchover or supervised, a Ready leader is never taken down
//     (it must first stop leading), unless the operator approved this step;
//   - while the leader is unknown, no Ready pod is taken down for a
//     reason the leader rules order (it may be the leader);
//   - with a disruption check declared, no Ready pod is taken down on
//     purpose without a passing answer for it, unless the operator approved
//     this step;
//   - a switchover's candidates are Ready followers that the decision does
//     not take down, none twice, the first its target (the best
//     candidate; their order is checked by checkCandidates).
//
// An approval is good for one step of one decision.
func checkLeaderAndAsking(in Input, out Output) error {
	spec := in.Spec
	approvals := 0
	if out.Status.ApprovalUsed != in.Previous.ApprovalUsed {
		if out.Status.ApprovalUsed != spec.Approval || spec.Approval == "" {
			return fmt.Errorf("approval %q used, but the spec's is %q", out.Status.ApprovalUsed, spec.Approval)
		}
		approvals = 1
	}
	inRange := func(o int) bool { return o >= spec.OrdinalsStart && o < spec.OrdinalsStart+spec.Replicas }
	outdated := func(q Pod) bool {
		return q.Revision != out.Status.UpdateRevision || q.Drifted || mustGrowIn(in, q.Ordinal)
	}
	cleared := func(o int) bool {
		return slices.ContainsFunc(in.Cleared, func(c Clearance) bool { return c.Ordinal == o && c.Until.After(in.Now) })
	}
	needApproval := 0
	if err := checkCandidateMembers(in, out); err != nil {
		return err
	}
	var recreateStops []Pod
	for _, a := range out.Actions {
		// DESIGN §3b: the disruption check first, then the switchover.
		// Leadership is never handed over for a step that the application
		// has not cleared (or the operator approved).
		if a.Type == ActionSwitchover && spec.DisruptionCheck != "" && !cleared(a.Ordinal) && approvals == 0 {
			return fmt.Errorf("switchover of leader %d without a passing disruption check for its step", a.Ordinal)
		}
		if a.Type != ActionDeletePod {
			continue
		}
		p := a.Pod
		if p.Terminating || p.Phase != PhaseRunning || !p.Ready {
			continue // down already: replaced without asking
		}
		leader := spec.LeaderCheck != "" && p.Leader
		if isRecreateStop(in, out, a) {
			// A Recreate stops the leader with the rest: no order, no
			// switchover (no follower is left to lead), so which pod
			// leads does not matter. Its one gate is counted once below.
			recreateStops = append(recreateStops, p)
			continue
		}
		if spec.LeaderCheck != "" && in.LeaderUnknown && (a.Cause == CauseUpdate || a.Cause == CauseRepair ||
			a.Cause == CauseResize || a.Cause == CauseDrain || a.Cause == CauseScaleDown) {
			return fmt.Errorf("Ready pod %d taken down (%s) while the leader is unknown", p.Ordinal, a.Cause)
		}
		switch a.Cause {
		case CauseUpdate, CauseRepair, CauseResize, CauseDrain:
			// A volume expansion (Resize) is a rolling disruption like an
			// update: what must go with it is every outdated pod, a volume
			// smaller than its claim included (outdated).
			for _, q := range in.Pods {
				if !leader || q.Ordinal == p.Ordinal || q.Terminating || !inRange(q.Ordinal) {
					continue
				}
				mustGo := q.NodeDraining
				if a.Cause != CauseDrain {
					mustGo = rolls(spec) && !spec.Paused &&
						q.Ordinal-spec.OrdinalsStart >= spec.Partition && outdated(q)
				}
				if mustGo {
					return fmt.Errorf("leader %d taken down (%s) while %d, which must go too, is still up", p.Ordinal, a.Cause, q.Ordinal)
				}
			}
		}
		// One approval lets one pod's step through, whatever it lacked.
		leaderAsks := leader && a.Cause != CauseReplace && a.Cause != CauseSetDeleted &&
			(spec.LeaderUpdate == LeaderSwitchover || spec.LeaderUpdate == LeaderSupervised)
		checkAsks := spec.DisruptionCheck != "" && a.Cause != CauseSetDeleted && !cleared(p.Ordinal)
		if leaderAsks || checkAsks {
			needApproval++
		}
	}
	if recreateGateNeeded(in, out, recreateStops) {
		// The whole stop is one step: one approval answers for it.
		needApproval++
	}
	if needApproval > approvals {
		return fmt.Errorf("%d Ready pods taken down without a switchover, an approval or a passing disruption check (%d approvals)", needApproval, approvals)
	}
	return nil
}

// checkCandidateMembers checks that every candidate of a switchover is a
// Ready follower (available for minReadySeconds, not leading, in range,
// the only pod of its ordinal) that no DeletePod of the decision takes
// down, that none is offered twice, and that the target is the first.
func checkCandidateMembers(in Input, out Output) error {
	spec := in.Spec
	for _, a := range out.Actions {
		if a.Type != ActionSwitchover {
			continue
		}
		if len(a.Candidates) == 0 || a.Target != a.Candidates[0] {
			return fmt.Errorf("switchover of %d to %d with candidates %v: the target must be the first candidate", a.Ordinal, a.Target, a.Candidates)
		}
		for i, c := range a.Candidates {
			var ps []Pod
			for _, p := range in.Pods {
				if p.Ordinal == c {
					ps = append(ps, p)
				}
			}
			switch {
			case slices.Contains(a.Candidates[:i], c):
				return fmt.Errorf("switchover of %d offers %d twice: %v", a.Ordinal, c, a.Candidates)
			case c == a.Ordinal || c < spec.OrdinalsStart || c >= spec.OrdinalsStart+spec.Replicas || len(ps) != 1:
				return fmt.Errorf("switchover of %d offers %d (candidates %v): not one in-range pod other than the leader", a.Ordinal, c, a.Candidates)
			case ps[0].Terminating || !Available(ps[0], spec.MinReadySeconds, in.Now) || ps[0].Leader:
				return fmt.Errorf("switchover of %d offers %d (candidates %v), which is not a Ready follower", a.Ordinal, c, a.Candidates)
			case slices.ContainsFunc(out.Actions, func(b Action) bool { return b.Type == ActionDeletePod && b.Ordinal == c }):
				return fmt.Errorf("switchover of %d offers %d (candidates %v), which the same decision takes down", a.Ordinal, c, a.Candidates)
			}
		}
	}
	return nil
}

// mustGrowIn reports whether a volume of ord is smaller than its claim
// template asks, in a class the claim names: DESIGN §3b's expansion, which
// takes the pod down like a rolling update. A class whose provisioner
// cannot expand grows nothing, so its pods need not go.
func mustGrowIn(in Input, ord int) bool {
	for _, v := range in.Volumes {
		if v.Ordinal != ord || v.Capacity == 0 {
			continue
		}
		for _, t := range in.Spec.ClaimTemplates {
			if t.Claim == v.Claim && t.CapacityMin > v.Capacity && t.Class == v.Class && !slices.Contains(in.CannotExpand, v.Class) {
				return true
			}
		}
	}
	return false
}

// checkStatusWrite checks the status write of a decision (ActionRecordStatus):
// it is the last action, carries the decision's status, and is there exactly
// when that status says something the stored one does not, except when a
// cascading delete removes the set's state (or finds none), which a write
// would bring back.
func checkStatusWrite(in Input, out Output) error {
	writes := 0
	for k, a := range out.Actions {
		if a.Type != ActionRecordStatus {
			continue
		}
		writes++
		if k != len(out.Actions)-1 {
			return fmt.Errorf("RecordStatus is action %d of %d, not the last", k+1, len(out.Actions))
		}
		if a.Status == nil || !StatusEqual(*a.Status, out.Status) {
			return fmt.Errorf("RecordStatus writes %+v, not the decision's status %+v", a.Status, out.Status)
		}
	}
	deletesState := slices.ContainsFunc(out.Actions, func(a Action) bool { return a.Type == ActionDeleteSetState })
	want := !out.Gone && !deletesState && (in.StatusMissing || !StatusEqual(in.Previous, out.Status))
	if (writes == 1) != want || writes > 1 {
		return fmt.Errorf("%d status writes, want %d (gone %v, deletes the state %v, status missing %v, changed %v)",
			writes, map[bool]int{true: 1}[want], out.Gone, deletesState, in.StatusMissing, !StatusEqual(in.Previous, out.Status))
	}
	return nil
}
