package reconciler

import (
	"strconv"
	"time"
)

// disrupts reports whether a deletion for cause takes a live member down on
// purpose, and so waits on a hold of StepDisrupt. Removing a pod that ended,
// or a duplicate, disrupts nothing and never waits.
func disrupts(cause DeleteCause) bool {
	return cause != CauseEnded && cause != CauseDuplicate
}

// activeHold returns the hold on ord's step that is still in force at Now.
func (r *reconciler) activeHold(ord int, step HoldStep) (Hold, bool) {
	for _, h := range r.in.Holds {
		if h.Ordinal == ord && h.Step == step && h.Until.After(r.now) {
			return h, true
		}
	}
	return Hold{}, false
}

// createHeld reports whether creating ord's pod or volumes must wait. A
// spread that cannot be met holds the create only when the spread is
// required; under a soft spread the create goes ahead without the spread
// rule, and unspread says so.
func (r *reconciler) createHeld(ord int) (held, unspread bool) {
	h, ok := r.activeHold(ord, StepCreate)
	if !ok {
		return false, false
	}
	if h.Reason == HoldSpreadUnsatisfiable && !r.spec.SpreadRequired {
		return false, true
	}
	r.noteHeld(h)
	return true, false
}

// noteHeld records a hold that kept a step from happening, once per ordinal
// and step, and the wait it imposes.
func (r *reconciler) noteHeld(h Hold) {
	for _, o := range r.held {
		if o.Ordinal == h.Ordinal && o.Step == h.Step {
			return
		}
	}
	r.held = append(r.held, h)
	r.waitOrdinal(h.Ordinal, "held ("+h.Reason+"): "+h.Message)
}

// holdRequeue is how long until the first hold that kept a step from
// happening ends, or 0.
func (r *reconciler) holdRequeue() time.Duration {
	var next time.Duration
	for _, h := range r.held {
		if d := h.Until.Sub(r.now); d > 0 && (next == 0 || d < next) {
			next = d
		}
	}
	return next
}

// soonestOf returns the sooner of two waits, a zero wait meaning none.
func soonestOf(a, b time.Duration) time.Duration {
	if a <= 0 || (b > 0 && b < a) {
		return b
	}
	return a
}

// fixChildren puts right what is wrong with a live child but needs no
// disruption: a count scaled up by hand goes back to 1 in place, and a child
// Nomad blocked while its volume's node was ineligible is placed again once
// that node is back. Neither takes a member down, so neither is budgeted; a
// pod this decision already acts on, or a drifted one (repaired whole), is
// left alone.
func (r *reconciler) fixChildren() {
	for i := range r.slots {
		s := &r.slots[i]
		if s.pod == noPod || s.acted || s.extra > 0 {
			continue
		}
		p := &r.in.Pods[s.pod]
		if p.Terminating {
			continue
		}
		if p.ScaledCount > 1 && !p.Drifted {
			r.emit(Action{Type: ActionRestoreCount, Ordinal: p.Ordinal, Pod: *p,
				Reason: "its child was scaled to " + strconv.Itoa(p.ScaledCount) + " outside nomad-statefulset; back to 1 in place"})
		}
		r.evaluateIfBack(p)
	}
	// A condemned pod is waited for until it is healthy before a lower one
	// goes (the first-unhealthy rule), so a blocked one is placed again too.
	for _, pi := range r.condemned {
		if p := &r.in.Pods[pi]; !p.Terminating {
			r.evaluateIfBack(p)
		}
	}
}

// evaluateIfBack asks Nomad to place pod p again when Nomad blocked it while
// its volume's node was ineligible and that node is back.
func (r *reconciler) evaluateIfBack(p *Pod) {
	if p.NodeBack && p.Phase == PhasePending && !r.deleting(p.Ordinal) {
		r.emit(Action{Type: ActionEvaluatePod, Ordinal: p.Ordinal, Pod: *p,
			Reason: "its volume's node is eligible again; asking Nomad to place it"})
	}
}

// deleting reports whether this decision already takes ord's pod down.
func (r *reconciler) deleting(ord int) bool {
	for i := range r.actions {
		if a := &r.actions[i]; a.Type == ActionDeletePod && a.Ordinal == ord {
			return true
		}
	}
	return false
}

// Disrupts reports whether the action takes a live member down on purpose:
// a DeletePod of a pod that has not ended, for a cause that is not a
// duplicate's. Only such a step waits on a hold of StepDisrupt, and only
// such a step runs the pre_update and pre_delete hooks.
func (a Action) Disrupts() bool {
	return a.Type == ActionDeletePod && disrupts(a.Cause) && !finished(&a.Pod)
}
