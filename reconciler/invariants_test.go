package reconciler

import "fmt"

// checkDecision checks one decision against the observation it was made from,
// before any of its actions is applied: ordering (monotonic, one at a time),
// the revision a new pod gets, and the maxUnavailable budget.
func checkDecision(w *world, in Input, out Output) error {
	spec := in.Spec
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
			idx := a.Ordinal - start
			cur, upd := out.Status.CurrentRevision, out.Status.UpdateRevision
			switch {
			case spec.Paused:
				if a.Revision.Name != cur {
					return fmt.Errorf("paused: pod %d created at %s, want current %s", a.Ordinal, a.Revision.Name, cur)
				}
			case spec.UpdateStrategy == OnDelete:
				if a.Revision.Name != cur && a.Revision.Name != upd {
					return fmt.Errorf("OnDelete: pod %d created at %s", a.Ordinal, a.Revision.Name)
				}
			case idx < spec.Partition:
				if a.Revision.Name != cur {
					return fmt.Errorf("pod %d below partition %d created at %s, want current %s", a.Ordinal, spec.Partition, a.Revision.Name, cur)
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
			if len(ps) != 1 || !w.healthy(ps[0]) {
				continue // replacing a failed, unready or duplicate pod
			}
			p := ps[0]
			switch {
			case spec.UpdateStrategy == OnDelete:
				return fmt.Errorf("OnDelete: healthy pod %d deleted", a.Ordinal)
			case spec.Paused:
				return fmt.Errorf("paused: healthy pod %d deleted", a.Ordinal)
			case a.Ordinal-start < spec.Partition:
				return fmt.Errorf("healthy pod %d below partition %d deleted", a.Ordinal, spec.Partition)
			case p.Revision == out.Status.UpdateRevision:
				return fmt.Errorf("healthy pod %d at the update revision deleted", a.Ordinal)
			}
		}
	}
	if spec.PodManagementPolicy == OrderedReady && (creates > 1 || scaleDowns > 1) {
		return fmt.Errorf("monotonic: %d creates and %d scale-down deletes in one decision", creates, scaleDowns)
	}
	if !spec.Deleted {
		return checkBudget(w, in, out, byOrd)
	}
	return nil
}

// checkBudget checks that a rolling update removes healthy pods only while
// the pods it already made unavailable (missing, terminating, or not yet
// available at the update revision) leave room under maxUnavailable.
// Unavailable pods at an old revision do not count (issue 137409).
func checkBudget(w *world, in Input, out Output, byOrd map[int][]Pod) error {
	spec := in.Spec
	start := spec.OrdinalsStart
	committed := 0
	for o := start; o < start+spec.Replicas; o++ {
		ps := byOrd[o]
		switch {
		case len(ps) != 1 || ps[0].Terminating:
			committed++
		case !w.healthy(ps[0]) && ps[0].Revision == out.Status.UpdateRevision:
			committed++
		}
	}
	deleted := 0
	for _, a := range out.Actions {
		if a.Type != ActionDeletePod || a.Ordinal < start || a.Ordinal >= start+spec.Replicas {
			continue
		}
		if ps := byOrd[a.Ordinal]; len(ps) == 1 && w.healthy(ps[0]) {
			deleted++
		}
	}
	budget := max(MaxUnavailableCount(spec.MaxUnavailable, spec.Replicas)-committed, 0)
	if deleted > budget {
		return fmt.Errorf("maxUnavailable: %d healthy pods deleted with %d already unavailable, max %d",
			deleted, committed, MaxUnavailableCount(spec.MaxUnavailable, spec.Replicas))
	}
	return nil
}

// checkState checks the world after a step: at most one pod per ordinal,
// the burst invariants of assertBurstInvariants (every pod has its storage;
// identity is the ordinal itself here), a consistent status, no volume lost
// under Retain, and, when enabled, the Kubernetes monotonic and update
// invariants and the maxUnavailable bound.
func (w *world) checkState() error {
	seen := map[int]bool{}
	for _, p := range w.pods {
		if seen[p.Ordinal] {
			return fmt.Errorf("two pods for ordinal %d", p.Ordinal)
		}
		seen[p.Ordinal] = true
		for _, c := range w.spec.VolumeClaims {
			if !w.hasVolume(c, p.Ordinal) {
				return fmt.Errorf("pod %d has no volume %s", p.Ordinal, c)
			}
		}
	}
	st := w.last.Status
	if st.ReadyReplicas > st.Replicas || st.AvailableReplicas > st.ReadyReplicas ||
		st.CurrentReplicas > st.Replicas || st.UpdatedReplicas > st.Replicas {
		return fmt.Errorf("inconsistent status %+v", st)
	}
	if w.spec.WhenScaled == Retain && w.spec.WhenDeleted == Retain && w.volumesDeleted > 0 {
		return fmt.Errorf("a volume was deleted under Retain")
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
		if w.spec.UpdateStrategy == RollingUpdate {
			for i := 0; i < st.CurrentReplicas && i < len(live); i++ {
				if live[i].Revision != st.CurrentRevision {
					return fmt.Errorf("update: pod %d at %s, want current revision %s", live[i].Ordinal, live[i].Revision, st.CurrentRevision)
				}
			}
			for i, j := len(live)-1, 0; j < st.UpdatedReplicas && i >= 0; i, j = i-1, j+1 {
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
