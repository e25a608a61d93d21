package reconciler

// replacement returns the pending `pod replace` request for ordinal ord: one
// whose token the ordinal's record does not hold yet.
func (r *reconciler) replacement(ord int) (Replacement, bool) {
	for _, req := range r.spec.Replacements {
		if req.Ordinal != ord || req.Token == "" {
			continue
		}
		if rec, ok := r.prevRecord(ord); ok && rec.Replaced == req.Token {
			return Replacement{}, false
		}
		return req, true
	}
	return Replacement{}, false
}

// podReplace carries out a pending `pod replace` request for slot i, the
// way `kubectl delete pod` (and, with NewVolume, deleting its claims) does:
// the pod is deleted (pre_delete hooks run; an explicit delete is not held
// by the budget), then with NewVolume its volumes, and once both are gone
// the request is recorded as done and the ordinal is created afresh by the
// ordinary walk. It returns true while the walk must wait here.
func (r *reconciler) podReplace(i int) bool {
	ord := r.spec.OrdinalsStart + i
	req, ok := r.replacement(ord)
	if !ok {
		return false
	}
	s := &r.slots[i]
	if s.pod != noPod {
		p := &r.in.Pods[s.pod]
		if !p.Terminating {
			r.deletePod(p, CauseReplace, "pod replace requested")
			s.acted = true
		}
		r.wait(i, "to be replaced as requested")
		return true
	}
	if req.NewVolume {
		gone := true
		for j := range r.in.Volumes {
			if v := &r.in.Volumes[j]; v.Ordinal == ord {
				r.deleteVolume(v, "pod replace -new-volume: its data is discarded as requested")
				gone = false
			}
		}
		if !gone {
			// Observed again once deleted; recreated on fresh volumes then.
			s.vols = 0
			s.acted = true
			r.wait(i, "to have its volumes deleted as requested")
			return true
		}
	}
	// Done: the record keeps the token (stored before the create that
	// follows, by RecordOrdinals), and the walk creates the pod.
	s.replaced = req.Token
	return false
}
