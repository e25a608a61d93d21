package reconciler

import (
	"fmt"
	"reflect"
	"slices"
	"time"
)

// checkSafety checks the properties every decision must have, whatever the
// observation: it is what the fuzzer and the bad-observation tests assert.
//   - under OrderedReady, at most one CreatePod, and only once every lower
//     ordinal has exactly one Running, Ready and available pod;
//   - never a CreatePod for an ordinal that has a pod (terminating included),
//     outside the range, twice, for a deleted set, or before its volumes;
//   - never a DeletePod of a terminating pod or of a pod that is not observed;
//   - never a DeleteVolume while a pod of its ordinal exists, against the
//     retention policy, for an ordinal in the range of a live set, or for
//     one that was not condemned while its policy said Delete;
//   - never a DeleteRevision of a live revision;
//   - DeleteSetState only last, when no pod is left;
//   - nothing created, and no live pod taken down, while a hold on that
//     step is in force (but for a soft spread, created without its rule);
//   - a purge only of a pod that ended with nothing running; a count
//     restored only on a live, undrifted child scaled by hand; an
//     evaluation only of a pending child blocked on a node that is back;
//   - the decision is deterministic and leaves the input unchanged.
func checkSafety(in Input) (Output, error) {
	before := cloneInput(in)
	out := Reconcile(in)
	if !reflect.DeepEqual(before, in) {
		return out, fmt.Errorf("Reconcile modified its input")
	}
	if again := Reconcile(in); !reflect.DeepEqual(out, again) {
		return out, fmt.Errorf("Reconcile is not deterministic")
	}
	// The rest is judged by the input as the decision read it: the
	// holds, answers and node changes of its memory among the input's.
	in = withMemory(in, out.Memory)
	spec := normalize(in.Spec)
	inRange := func(o int) bool { return o >= spec.OrdinalsStart && o-spec.OrdinalsStart < spec.Replicas }
	hasPod := map[int]bool{}
	for _, p := range in.Pods {
		hasPod[p.Ordinal] = true
	}
	vols := map[[2]any]bool{}
	for _, v := range in.Volumes {
		vols[[2]any{v.Claim, v.Ordinal}] = true
	}
	podsAt := map[int][]Pod{}
	for _, p := range in.Pods {
		podsAt[p.Ordinal] = append(podsAt[p.Ordinal], p)
	}
	healthy := func(p Pod) bool {
		if p.Terminating || p.Phase != PhaseRunning || !p.Ready {
			return false
		}
		return spec.MinReadySeconds == 0 ||
			(!p.ReadySince.IsZero() && !in.Now.Before(p.ReadySince.Add(time.Duration(spec.MinReadySeconds)*time.Second)))
	}
	if err := checkLeaderAndAsking(in, out); err != nil {
		return out, err
	}
	if err := checkMaintenanceWindow(in, out); err != nil {
		return out, err
	}
	monotonic := spec.PodManagementPolicy == OrderedReady
	created := map[int]bool{}
	for i, a := range out.Actions {
		if err := checkHoldsAndFixes(in, spec, a); err != nil {
			return out, err
		}
		switch a.Type {
		case ActionCreatePod:
			if monotonic && len(created) > 0 {
				return out, fmt.Errorf("OrderedReady: two CreatePod in one decision")
			}
			for o := spec.OrdinalsStart; monotonic && o < a.Ordinal; o++ {
				if ps := podsAt[o]; len(ps) != 1 || !healthy(ps[0]) {
					return out, fmt.Errorf("OrderedReady: CreatePod %d while %d is not one healthy pod", a.Ordinal, o)
				}
			}
			switch {
			case spec.Deleted:
				return out, fmt.Errorf("CreatePod for a deleted set")
			case hasPod[a.Ordinal]:
				return out, fmt.Errorf("CreatePod %d while a pod of that ordinal exists", a.Ordinal)
			case created[a.Ordinal]:
				return out, fmt.Errorf("CreatePod %d twice", a.Ordinal)
			case !inRange(a.Ordinal):
				return out, fmt.Errorf("CreatePod %d outside the range", a.Ordinal)
			}
			for _, c := range spec.VolumeClaims {
				if !vols[[2]any{c, a.Ordinal}] {
					return out, fmt.Errorf("CreatePod %d before volume %s", a.Ordinal, c)
				}
			}
			created[a.Ordinal] = true
		case ActionCreateVolume:
			if vols[[2]any{a.Volume.Claim, a.Volume.Ordinal}] {
				return out, fmt.Errorf("CreateVolume %s that exists", a.Volume.Name)
			}
			vols[[2]any{a.Volume.Claim, a.Volume.Ordinal}] = true
		case ActionDeletePod:
			found := false
			for _, p := range in.Pods {
				found = found || (p == a.Pod && !p.Terminating)
			}
			if !found {
				return out, fmt.Errorf("DeletePod of a pod not observed or terminating: %+v", a.Pod)
			}
		case ActionDeleteVolume:
			prev, had := findRecord(in.Previous.Ordinals, a.Volume.Ordinal)
			// pod replace -new-volume: the user asked to discard it.
			asked := slices.ContainsFunc(spec.Replacements, func(r Replacement) bool {
				return r.Ordinal == a.Volume.Ordinal && r.NewVolume && r.Token != prev.Replaced
			})
			switch {
			case hasPod[a.Volume.Ordinal]:
				return out, fmt.Errorf("DeleteVolume %s while its pod exists", a.Volume.Name)
			case asked:
			case !spec.Deleted && (spec.WhenScaled != Delete || inRange(a.Volume.Ordinal)):
				return out, fmt.Errorf("DeleteVolume %s against whenScaled=%s", a.Volume.Name, spec.WhenScaled)
			case !had || (prev.Condemned && !prev.DeleteVolumes):
				// Only an ordinal condemned while the policy said Delete:
				// one recorded so before, or a member until this decision.
				return out, fmt.Errorf("DeleteVolume %s of an ordinal not condemned under Delete (record %+v, found %v)", a.Volume.Name, prev, had)
			}
		case ActionDeleteRevision:
			name := a.Revision.Name
			if name == out.Status.CurrentRevision || name == out.Status.UpdateRevision || name == in.Previous.CurrentRevision {
				return out, fmt.Errorf("DeleteRevision of live revision %s", name)
			}
			for _, p := range in.Pods {
				if p.Revision == name {
					return out, fmt.Errorf("DeleteRevision of %s used by pod %d", name, p.Ordinal)
				}
			}
		case ActionDeleteSetState:
			if len(in.Pods) > 0 || i != len(out.Actions)-1 {
				return out, fmt.Errorf("DeleteSetState with %d pods left, at %d of %d", len(in.Pods), i, len(out.Actions))
			}
		}
	}
	return out, nil
}

func cloneInput(in Input) Input {
	c := in
	c.Spec.VolumeClaims = slices.Clone(in.Spec.VolumeClaims)
	c.TemplateData = slices.Clone(in.TemplateData)
	c.Revisions = slices.Clone(in.Revisions)
	for i := range c.Revisions {
		c.Revisions[i].Data = slices.Clone(c.Revisions[i].Data)
	}
	c.Pods = slices.Clone(in.Pods)
	c.Volumes = slices.Clone(in.Volumes)
	c.Previous.Conditions = slices.Clone(in.Previous.Conditions)
	c.Previous.Ordinals = slices.Clone(in.Previous.Ordinals)
	c.Holds = slices.Clone(in.Holds)
	c.Cleared = slices.Clone(in.Cleared)
	c.CannotExpand = slices.Clone(in.CannotExpand)
	return c
}

// checkHoldsAndFixes checks one action against the holds in force and the
// facts RestoreCount, EvaluatePod and a purge depend on.
func checkHoldsAndFixes(in Input, spec Spec, a Action) error {
	held := func(step HoldStep) (Hold, bool) {
		for _, h := range in.Holds {
			if h.Ordinal == a.Ordinal && h.Step == step && h.Until.After(in.Now) {
				return h, true
			}
		}
		return Hold{}, false
	}
	switch a.Type {
	case ActionCreatePod, ActionCreateVolume:
		h, ok := held(StepCreate)
		soft := ok && h.Reason == HoldSpreadUnsatisfiable && !spec.SpreadRequired
		if ok && !soft {
			return fmt.Errorf("%s %d while held (%s)", a.Type, a.Ordinal, h.Reason)
		}
		if soft != a.Unspread {
			return fmt.Errorf("%s %d: Unspread %v, soft spread unmet %v", a.Type, a.Ordinal, a.Unspread, soft)
		}
	case ActionDeletePod:
		ended := a.Pod.Phase == PhaseFailed || a.Pod.Phase == PhaseSucceeded
		if h, ok := held(StepDisrupt); ok && !ended && a.Cause != CauseDuplicate && (h.Reason != HoldSwitchingOver || a.Pod.Leader) {
			return fmt.Errorf("DeletePod %d (%s) while held (%s)", a.Ordinal, a.Cause, h.Reason)
		}
		if a.Purge && (!ended || !a.Pod.AllTerminal) {
			return fmt.Errorf("DeletePod %d purges a pod that may still run: %+v", a.Ordinal, a.Pod)
		}
	case ActionExpandVolume:
		grown := false
		for _, v := range in.Volumes {
			if v.Name == a.Volume.Name || (v.Claim == a.Volume.Claim && v.Ordinal == a.Volume.Ordinal) {
				grown = a.Volume.Capacity > v.Capacity && v.Class == a.Volume.Class && v.Capacity > 0 &&
					!slices.Contains(in.CannotExpand, v.Class)
			}
		}
		for _, p := range in.Pods {
			if p.Ordinal == a.Ordinal {
				return fmt.Errorf("ExpandVolume %s while a pod of ordinal %d exists", a.Volume.Name, a.Ordinal)
			}
		}
		if !grown || spec.Paused {
			return fmt.Errorf("ExpandVolume %s does not grow a volume of its class, or the set is paused: %+v", a.Volume.Name, a.Volume)
		}
	case ActionRestoreCount:
		if a.Pod.ScaledCount < 2 || a.Pod.Terminating || a.Pod.Drifted || spec.Deleted {
			return fmt.Errorf("RestoreCount %d of a pod that is not a live, undrifted child scaled by hand: %+v", a.Ordinal, a.Pod)
		}
	case ActionEvaluatePod:
		if !a.Pod.NodeBack || a.Pod.Terminating || a.Pod.Phase != PhasePending || spec.Deleted {
			return fmt.Errorf("EvaluatePod %d of a pod not blocked on a node that is back: %+v", a.Ordinal, a.Pod)
		}
	}
	if a.Type == ActionRestoreCount || a.Type == ActionEvaluatePod {
		found := false
		for _, p := range in.Pods {
			found = found || p == a.Pod
		}
		if !found {
			return fmt.Errorf("%s of a pod not observed: %+v", a.Type, a.Pod)
		}
	}
	return nil
}
