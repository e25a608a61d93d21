package reconciler

// Detaching (DESIGN §1, "Detaching is not deleting"). Kubernetes deletes a
// StatefulSet only when the object is deleted, and `--cascade=orphan` leaves
// its pods: nothing a user writes into the object's fields deletes pods by
// itself. Here the parent job is the object, and its annotation is a field:
// a parent that stops being annotated (a typo such as "True", or the key
// removed) detaches the set instead of deleting it. Only stopping or purging
// an annotated parent deletes a set.

// Reasons of the Detached condition.
const (
	// ReasonNotAnnotated: the parent job exists but its meta statefulset is
	// missing or not "true".
	ReasonNotAnnotated = "NotAnnotated"
	// ReasonParentGoneWhileDetached: the parent job was purged while the set
	// was detached. The set stays detached: its children and volumes are
	// left as they are until a job of its name is annotated again.
	ReasonParentGoneWhileDetached = "ParentGoneWhileDetached"
)

// IsDetached reports whether a set is detached: its parent job exists but is
// not annotated, or its parent is gone and the set was detached when last
// recorded (prev is its stored status). A detached set gets no action.
// Stopping an annotated parent still deletes the set; so does purging one
// that was annotated until then.
func IsDetached(spec Spec, prev Status) bool {
	if spec.Detached {
		return true
	}
	return spec.Deleted && spec.ParentGone && StatusDetached(prev)
}

// StatusDetached reports whether st records the set as detached.
func StatusDetached(st Status) bool {
	for _, c := range st.Conditions {
		if c.Type == ConditionDetached {
			return c.Status
		}
	}
	return false
}

// detach is the decision for a detached set: no action of any kind, and the
// last status kept as it was, with the Detached condition set. Its revisions
// and ordinal records stay stored, so that annotating the parent again
// adopts the children where they are, at the revisions they run.
func (r *reconciler) detach() Output {
	st := r.in.Previous
	c := Condition{Type: ConditionDetached, Status: true, Reason: ReasonNotAnnotated}
	switch {
	case r.spec.Detached:
		c.Message = "the parent job is not annotated (" + r.spec.DetachedBecause + "): nothing of the set is changed, " +
			"stopped or deleted until its meta says statefulset = \"true\" again"
	default:
		c.Reason = ReasonParentGoneWhileDetached
		c.Message = "the parent job was purged while the set was detached: its children and volumes are left " +
			"as they are until a job of its name is annotated again"
	}
	st.Conditions = SetCondition(st.Conditions, c, r.now)
	return Output{Status: st}
}
