package reconciler

import (
	"bytes"
	"strconv"
)

// safeAlphabet is the alphabet of Kubernetes' rand.SafeEncodeString: no
// vowels (so no words), no 0/1/3 (easily confused with o/l/e). Hashes encoded
// with it are valid in job IDs, DNS labels and Consul keys.
const safeAlphabet = "bcdfghjklmnpqrstvwxz2456789"

// FNV-1a 32-bit parameters (hash/fnv), inlined so hashing allocates nothing.
const (
	fnvOffset32 = 2166136261
	fnvPrime32  = 16777619
)

// HashRevision returns the hash that names a revision: FNV-32a over data
// followed by the decimal collision count, printed in decimal and mapped onto
// a safe lowercase alphanumeric alphabet, as Kubernetes'
// HashControllerRevision does. Different collision counts give different
// names for the same data, which is how a hash collision is escaped.
func HashRevision(data []byte, collisionCount int) string {
	h := uint32(fnvOffset32)
	for _, b := range data {
		h ^= uint32(b)
		h *= fnvPrime32
	}
	var num [20]byte
	for _, b := range strconv.AppendInt(num[:0], int64(collisionCount), 10) {
		h ^= uint32(b)
		h *= fnvPrime32
	}
	var buf [10]byte
	dec := strconv.AppendUint(buf[:0], uint64(h), 10)
	for i, b := range dec {
		dec[i] = safeAlphabet[int(b)%len(safeAlphabet)]
	}
	return string(dec)
}

// RevisionName is the name of a set's revision with the given hash:
// "<set>-<hash>", as ControllerRevision names are built.
func RevisionName(set, hash string) string {
	return set + "-" + hash
}

// VolumeName is the name of the per-ordinal volume of a claim:
// "<claim>-<set>-<ordinal>", as PVC names are built from claim templates.
func VolumeName(claim, set string, ordinal int) string {
	// Built in a stack buffer: one allocation instead of two, which counts
	// when a large set creates a volume per ordinal.
	var buf [96]byte
	b := append(buf[:0], claim...)
	b = append(b, '-')
	b = append(b, set...)
	b = append(b, '-')
	return string(strconv.AppendInt(b, int64(ordinal), 10))
}

// PodName is the name of the pod (child job) for an ordinal: "<set>-<ordinal>".
func PodName(set string, ordinal int) string {
	var buf [96]byte
	b := append(buf[:0], set...)
	b = append(b, '-')
	return string(strconv.AppendInt(b, int64(ordinal), 10))
}

// selectRevisions picks the current and update revisions, the way
// getStatefulSetRevisions does: the update revision is the newest stored
// revision whose data equals the template (bumped to the highest number when
// it is not already the newest: a rollback), or else a new revision, named
// with the first collision count whose name is free.
func (r *reconciler) selectRevisions() {
	in := &r.in
	revs := in.Revisions
	r.collisionCount = max(in.Previous.CollisionCount, 0)

	var maxNum int64
	eq := -1
	for i := range revs {
		if i == 0 || revs[i].Number > maxNum {
			maxNum = revs[i].Number
		}
		if bytes.Equal(revs[i].Data, in.TemplateData) && (eq < 0 || revs[i].Number >= revs[eq].Number) {
			eq = i
		}
	}

	switch {
	case eq >= 0:
		newest := true
		for i := range revs {
			if i != eq && revs[i].Number >= revs[eq].Number {
				newest = false
				break
			}
		}
		r.update = revs[eq]
		if newest {
			break
		}
		// A template equal to an older revision is a rollback: reuse that
		// revision, so pods at it are already up to date, and give it the
		// highest number so the history shows it as the latest.
		r.update.Number = maxNum + 1
		r.emit(Action{Type: ActionUpdateRevision, Revision: r.update, Reason: "rollback to an earlier revision"})
	default:
		// The name may be taken by a revision with different data (eq < 0
		// means no stored revision has this data): a hash collision. Bump the
		// count and hash again. The loop is bounded so that a pathological
		// input cannot spin forever; the last candidate is then used.
		cc := r.collisionCount
		hash := HashRevision(in.TemplateData, cc)
		name := RevisionName(in.Spec.Name, hash)
		for tries := 0; r.findRevision(name) != nil && tries <= len(revs); tries++ {
			cc++
			hash = HashRevision(in.TemplateData, cc)
			name = RevisionName(in.Spec.Name, hash)
		}
		r.collisionCount = cc
		number := maxNum + 1
		if len(revs) == 0 {
			number = 1
		}
		r.update = Revision{
			Name:       name,
			Hash:       hash,
			Number:     number,
			Data:       in.TemplateData,
			CreatedAt:  in.Now,
			JobVersion: in.JobVersion,
		}
		r.emit(Action{Type: ActionCreateRevision, Revision: r.update, Reason: "new template"})
	}

	// The current revision is the one the last status named, if it still
	// exists. Kubernetes falls back to the update revision, which after a
	// lost status write would turn a partitioned rollout into a full one;
	// here the revision of the lowest-ordinal pod (the last one a rollout
	// reaches) is used when it is stored, and the update revision only for a
	// set with no such pod.
	r.current = r.update
	var c *Revision
	if name := in.Previous.CurrentRevision; name != "" {
		c = r.findRevision(name)
	}
	if c == nil {
		lowest := -1
		for i := range in.Pods {
			if o := in.Pods[i].Ordinal; o >= 0 && (lowest < 0 || o < in.Pods[lowest].Ordinal) {
				lowest = i
			}
		}
		if lowest >= 0 {
			c = r.findRevision(in.Pods[lowest].Revision)
		}
	}
	if c != nil && c.Name != r.update.Name {
		r.current = *c
	}
}

// findRevision returns the stored revision with the given name, or nil.
func (r *reconciler) findRevision(name string) *Revision {
	for i := range r.in.Revisions {
		if r.in.Revisions[i].Name == name {
			return &r.in.Revisions[i]
		}
	}
	return nil
}

// revisionByName resolves a name against the revision chosen (possibly
// created) in this reconcile and the stored revisions.
func (r *reconciler) revisionByName(name string) (Revision, bool) {
	if r.update.Name == name {
		return r.update, true
	}
	if c := r.findRevision(name); c != nil {
		return *c, true
	}
	return Revision{}, false
}

// trimHistory deletes the oldest revisions beyond RevisionHistoryLimit, like
// truncateHistory. Live revisions are never deleted and do not count against
// the limit: the current and update revisions (before and after a completed
// rollout) and every revision an observed pod, terminating or not, still uses.
func (r *reconciler) trimHistory(finalCurrent string) {
	revs := r.in.Revisions
	live := func(name string) bool {
		if name == r.update.Name || name == r.current.Name || name == finalCurrent {
			return true
		}
		for i := range r.in.Pods {
			if r.in.Pods[i].Revision == name {
				return true
			}
		}
		return false
	}
	nonLive := 0
	for i := range revs {
		if !live(revs[i].Name) {
			nonLive++
		}
	}
	excess := nonLive - r.spec.RevisionHistoryLimit
	if excess <= 0 {
		return
	}
	// Delete the excess oldest (lowest number, then name) non-live revisions.
	// Selection by repeated minimum keeps this allocation-free; excess is
	// small in practice (one per new revision).
	deleted := make([]bool, len(revs))
	for ; excess > 0; excess-- {
		best := -1
		for i := range revs {
			if deleted[i] || live(revs[i].Name) {
				continue
			}
			if best < 0 || revs[i].Number < revs[best].Number ||
				(revs[i].Number == revs[best].Number && revs[i].Name < revs[best].Name) {
				best = i
			}
		}
		if best < 0 {
			return
		}
		deleted[best] = true
		r.emit(Action{Type: ActionDeleteRevision, Revision: revs[best], Reason: "revision history limit"})
	}
}
