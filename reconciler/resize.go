package reconciler

import (
	"slices"
	"sort"
	"strconv"
	"strings"
)

// Claim templates (DESIGN §3b): each claim has a size and a class. Raising
// a claim's minimum capacity grows every ordinal's volume; Nomad refuses to
// change a volume an allocation claims, so a volume grows only while its
// pod is gone. Growing is therefore a disruption like a rolling update's:
// the pod is taken down within the budget, highest ordinal first, the
// leader last, after the disruption check, and the volume is expanded just
// before the pod is created again on it, with its data. It follows
// OnDelete, pause and the partition as a template change does, and it is
// not a new revision. Shrinking, and a class change of a volume that
// exists, touch nothing: a condition says so.

// claimTemplate returns the template of claim, if the spec sets one.
func (r *reconciler) claimTemplate(claim string) (ClaimTemplate, bool) {
	for _, t := range r.spec.ClaimTemplates {
		if t.Claim == claim {
			return t, true
		}
	}
	return ClaimTemplate{}, false
}

// mustGrow reports whether volume v is smaller than its claim now asks,
// and of the class the claim names (a volume of another class is not
// changed at all). A capacity Nomad does not report says nothing.
func (r *reconciler) mustGrow(v *Volume) bool {
	t, ok := r.claimTemplate(v.Claim)
	return ok && v.Capacity > 0 && t.CapacityMin > v.Capacity && v.Class == t.Class && !slices.Contains(r.in.CannotExpand, v.Class)
}

// resizePending reports whether a volume of ord must grow.
func (r *reconciler) resizePending(ord int) bool {
	if len(r.spec.ClaimTemplates) == 0 {
		return false
	}
	for i := range r.in.Volumes {
		if v := &r.in.Volumes[i]; v.Ordinal == ord && r.mustGrow(v) {
			return true
		}
	}
	return false
}

// growsOnCreate reports whether a pod created for slot i now takes the
// claims as they are: when it is created at the update revision (not below
// a RollingUpdate's partition, not while paused), as a template change
// would reach it.
func (r *reconciler) growsOnCreate(i int) bool {
	return !r.spec.Paused && !(r.spec.UpdateStrategy == RollingUpdate && i < r.spec.Partition)
}

// expandVolumes emits ExpandVolume for each volume of slot i that must grow,
// before the slot's pod is created on it.
func (r *reconciler) expandVolumes(i int) {
	if len(r.spec.ClaimTemplates) == 0 || !r.growsOnCreate(i) {
		return
	}
	ord := r.spec.OrdinalsStart + i
	for j := range r.in.Volumes {
		v := &r.in.Volumes[j]
		if v.Ordinal != ord || !r.mustGrow(v) {
			continue
		}
		t, _ := r.claimTemplate(v.Claim)
		grown := *v
		grown.Capacity = t.CapacityMin
		r.emit(Action{Type: ActionExpandVolume, Ordinal: ord, Volume: grown,
			Reason: "its claim asks " + strconv.FormatInt(t.CapacityMin, 10) + " bytes, the volume has " + strconv.FormatInt(v.Capacity, 10)})
	}
}

// claimRefusals describes the volumes a claim template asks something of
// that is not done: a volume over the claim's maximum (volumes do not
// shrink) or of another class than the claim names (its class stays; the
// class applies to volumes made after the change). Empty when none.
func (r *reconciler) claimRefusals() string {
	var shrink, class, stuck, unknown []string
	for i := range r.in.Volumes {
		v := &r.in.Volumes[i]
		t, ok := r.claimTemplate(v.Claim)
		if !ok || !r.inRange(v.Ordinal) {
			continue
		}
		if t.CapacityMax > 0 && v.Capacity > t.CapacityMax {
			shrink = append(shrink, v.Name)
		}
		if v.Class != t.Class {
			class = append(class, v.Name)
		}
		if v.Class == t.Class && v.Capacity > 0 && t.CapacityMin > v.Capacity && slices.Contains(r.in.CannotExpand, v.Class) {
			stuck = append(stuck, v.Name)
		}
		if v.Class == t.Class && v.Capacity == 0 && t.CapacityMin > 0 {
			unknown = append(unknown, v.Name)
		}
	}
	sort.Strings(stuck)
	sort.Strings(unknown)
	sort.Strings(shrink)
	sort.Strings(class)
	var msgs []string
	if len(shrink) > 0 {
		msgs = append(msgs, "volumes do not shrink; larger than their claim's maximum: "+strings.Join(shrink, ", "))
	}
	if len(class) > 0 {
		msgs = append(msgs, "a class applies to volumes made after it; of another class: "+strings.Join(class, ", "))
	}
	if len(stuck) > 0 {
		msgs = append(msgs, "their provisioner cannot expand volumes, so they keep their size: "+strings.Join(stuck, ", "))
	}
	if len(unknown) > 0 {
		// mkdir reports no size: what the claim asks cannot be checked,
		// so nothing is grown, and the operator must be told.
		msgs = append(msgs, "their provisioner reports no size, so they are not grown to what the claim asks: "+strings.Join(unknown, ", "))
	}
	return strings.Join(msgs, "; ")
}

// claimCondition is the VolumeClaimRefused condition while a claim asks
// something of a volume that is not done, or nothing.
func (r *reconciler) claimCondition() (Condition, bool) {
	msg := r.claimRefusals()
	if msg == "" {
		return Condition{}, false
	}
	return r.keepTransition(Condition{Type: ConditionVolumeClaimRefused, Status: true, Reason: "VolumeUnchanged", Message: msg}), true
}
