package reconciler

import (
	"slices"
	"sort"
)

// findRecord returns the record of ord in recs, which is sorted by ordinal.
func findRecord(recs []OrdinalRecord, ord int) (OrdinalRecord, bool) {
	i, ok := slices.BinarySearchFunc(recs, ord, func(r OrdinalRecord, o int) int { return r.Ordinal - o })
	if !ok {
		return OrdinalRecord{}, false
	}
	return recs[i], true
}

// prevRecord returns the record of ord as the previous status left it.
func (r *reconciler) prevRecord(ord int) (OrdinalRecord, bool) {
	return findRecord(r.in.Previous.Ordinals, ord)
}

// nextRecords computes Status.Ordinals from the previous records, the range,
// what is observed and, with withCreates, what this decision creates.
// setDeleted marks every
// ordinal as out of range (the cascading delete), judged under WhenDeleted.
//
// An ordinal is condemned the first time a reconcile sees it outside the
// range after it was a member; it is marked DeleteVolumes only if the policy
// in force at that moment says Delete. An ordinal that was never a member
// (volumes of an earlier set of the same name, or records lost with the
// status) is condemned without DeleteVolumes: when in doubt, data is kept.
// A condemned ordinal with neither pod nor volume left is forgotten.
//
// The result shares the previous slice when nothing changed, so a steady
// reconcile allocates nothing here.
func (r *reconciler) nextRecords(setDeleted, withCreates bool) []OrdinalRecord {
	prev := r.in.Previous.Ordinals
	if !sort.SliceIsSorted(prev, func(a, b int) bool { return prev[a].Ordinal < prev[b].Ordinal }) {
		// A hand-edited or corrupt status: sort a copy rather than trust it.
		prev = slices.Clone(prev)
		slices.SortStableFunc(prev, func(a, b OrdinalRecord) int { return a.Ordinal - b.Ordinal })
		prev = slices.CompactFunc(prev, func(a, b OrdinalRecord) bool { return a.Ordinal == b.Ordinal })
	}
	outside := r.outsideOrdinals(setDeleted)

	var out []OrdinalRecord
	changed := len(r.in.Previous.Ordinals) != len(prev) // the sorted copy differs
	n := 0                                              // records produced so far
	emit := func(rec OrdinalRecord, keep bool) {
		if !keep {
			if !changed {
				changed = true
				out = append(make([]OrdinalRecord, 0, len(prev)+1), prev[:n]...)
			}
			return
		}
		if !changed && n < len(prev) && prev[n] == rec {
			n++
			return
		}
		if !changed {
			changed = true
			out = append(make([]OrdinalRecord, 0, len(prev)+1), prev[:n]...)
		}
		out = append(out, rec)
		n++
	}

	start, end := r.spec.OrdinalsStart, r.spec.OrdinalsStart+r.spec.Replicas
	if setDeleted {
		end = start
	}
	pi, oi := 0, 0
	for o := start; ; {
		// The next ordinal is the smallest of the next previous record, the
		// next range ordinal and the next ordinal observed outside the range.
		next, any := 0, false
		pick := func(c int) {
			if !any || c < next {
				next, any = c, true
			}
		}
		if pi < len(prev) {
			pick(prev[pi].Ordinal)
		}
		if o < end {
			pick(o)
		}
		if oi < len(outside) {
			pick(outside[oi])
		}
		if !any {
			break
		}
		var rec OrdinalRecord
		had := pi < len(prev) && prev[pi].Ordinal == next
		if had {
			rec = prev[pi]
			pi++
		} else {
			rec = OrdinalRecord{Ordinal: next}
		}
		if o < end && o == next {
			o++
		}
		if oi < len(outside) && outside[oi] == next {
			oi++
		}
		emit(r.record(rec, had, setDeleted, withCreates))
	}
	if !changed {
		return r.in.Previous.Ordinals
	}
	if len(out) == 0 {
		return nil
	}
	return out
}

// record updates one ordinal's record and says whether to keep it.
func (r *reconciler) record(rec OrdinalRecord, had, setDeleted, withCreates bool) (OrdinalRecord, bool) {
	ord := rec.Ordinal
	member := !setDeleted && r.inRange(ord)
	switch {
	case member:
		rec.Condemned, rec.DeleteVolumes = false, false
	case !rec.Condemned:
		policy := r.spec.WhenScaled
		if setDeleted {
			policy = r.spec.WhenDeleted
		}
		rec.Condemned = true
		rec.DeleteVolumes = had && policy == Delete
	case !setDeleted && r.spec.WhenScaled != Delete:
		// A switch to Retain keeps what is still there, as Kubernetes drops
		// the claims' owner references when the policy changes; a later
		// switch back to Delete does not condemn them again.
		rec.DeleteVolumes = false
	}
	if name, num, ok := r.ranRevision(ord, member, withCreates); ok {
		rec.Revision, rec.RevisionNumber = name, num
	} else if rec.Revision != "" {
		// Keep the number current while the revision exists (a rollback
		// renumbers it), so that the number kept once it is trimmed is its
		// last one.
		if num, ok := r.revisionNumber(rec.Revision); ok {
			rec.RevisionNumber = num
		}
	}
	if member {
		if t := r.slots[ord-r.spec.OrdinalsStart].replaced; t != "" {
			rec.Replaced = t
		}
	}
	rec.RecreateStopped = r.recreateRecord(rec, member, withCreates)
	// A condemned ordinal with nothing left is forgotten, unless it ran a
	// revision: that is kept for the no-downgrade promise, should the
	// ordinal come back (the records of one revision compress to a run).
	if !member && rec.Revision == "" && !r.podExists(ord) && !r.volumeExists(ord) {
		return rec, false
	}
	return rec, true
}

// ranRevision is the revision ordinal ord runs: with withCreates, the one
// this decision creates it at; else the one its observed pod runs.
func (r *reconciler) ranRevision(ord int, member, withCreates bool) (string, int64, bool) {
	var p *Pod
	if member {
		s := &r.slots[ord-r.spec.OrdinalsStart]
		if s.created && withCreates {
			return s.createdRev, s.createdNum, true
		}
		if s.pod != noPod {
			p = &r.in.Pods[s.pod]
		}
	} else {
		for i := range r.in.Pods {
			if q := &r.in.Pods[i]; q.Ordinal == ord && (p == nil || (p.Terminating && !q.Terminating)) {
				p = q
			}
		}
	}
	if p == nil || p.Revision == "" {
		return "", 0, false
	}
	num, ok := r.revisionNumber(p.Revision)
	if !ok {
		return "", 0, false
	}
	return p.Revision, num, true
}

// revisionNumber is the number revision name has in this decision (after a
// rollback's renumbering). The update and current revisions, which nearly
// every record names, are looked up without a scan.
func (r *reconciler) revisionNumber(name string) (int64, bool) {
	switch name {
	case r.update.Name:
		return r.update.Number, true
	case r.current.Name:
		return r.current.Number, true
	}
	if rev := r.findRevision(name); rev != nil {
		return rev.Number, true
	}
	return 0, false
}

// volumeExists reports whether any observed volume has the ordinal.
func (r *reconciler) volumeExists(ord int) bool {
	for i := range r.in.Volumes {
		if r.in.Volumes[i].Ordinal == ord {
			return true
		}
	}
	return false
}

// outsideOrdinals lists, sorted and without repeats, the non-negative
// ordinals of observed pods and volumes outside the range (all of them when
// the set is deleted). It is empty, and allocates nothing, for a set with
// nothing condemned.
func (r *reconciler) outsideOrdinals(setDeleted bool) []int {
	var out []int
	for i := range r.in.Pods {
		if o := r.in.Pods[i].Ordinal; o >= 0 && (setDeleted || !r.inRange(o)) {
			out = append(out, o)
		}
	}
	for i := range r.in.Volumes {
		if o := r.in.Volumes[i].Ordinal; o >= 0 && (setDeleted || !r.inRange(o)) {
			out = append(out, o)
		}
	}
	slices.Sort(out)
	return slices.Compact(out)
}

// recordMembership puts a RecordOrdinals action first when the decision acts
// and the membership changed: an ordinal joined, a member was condemned, a
// condemned ordinal's volumes' fate changed, a `pod replace` request was
// carried out (so that it is not carried out twice), or a Recreate stops a
// member (so that its stop is known to be under way: recreate.go). That must be durable before the
// decision touches the pods or volumes concerned: a volume made for a new
// member whose membership was never stored would be kept for ever if the
// ordinal left again under Delete, and a condemnation must be stored before
// what it allows is done. A decision without actions leaves it to the status
// write. Revision changes wait for the status write too: a lost one is
// observed again from the pod itself.
func (r *reconciler) recordMembership() {
	next, prev := r.status.Ordinals, r.in.Previous.Ordinals
	if len(r.actions) == 0 || (len(next) == len(prev) && (len(next) == 0 || &next[0] == &prev[0])) {
		return
	}
	changed := false
	for _, rec := range next {
		p, ok := findRecord(prev, rec.Ordinal)
		if (!ok && !rec.Condemned) || (ok && (p.Condemned != rec.Condemned || p.DeleteVolumes != rec.DeleteVolumes || p.Replaced != rec.Replaced)) ||
			(rec.RecreateStopped && !p.RecreateStopped) {
			changed = true
			break
		}
	}
	if !changed {
		return
	}
	// What is recorded first is what runs now, not what this decision is
	// about to create: a create that fails must not leave a record of a
	// revision the ordinal never ran. The final status adds the creates.
	r.actions = slices.Insert(r.actions, 0, Action{Type: ActionRecordOrdinals, Ordinals: r.nextRecords(r.spec.Deleted, false),
		Reason: "remember which ordinals are members and which were condemned, before acting on them"})
}
