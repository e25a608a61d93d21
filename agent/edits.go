package agent

import (
	"fmt"
	"strings"

	"github.com/nomad-statefulset/nomad-statefulset/backend"
	"github.com/nomad-statefulset/nomad-statefulset/jobs/specdigest"
	"github.com/nomad-statefulset/nomad-statefulset/reconciler"
)

// renderedDigests are the digests of a set's revisions rendered for its
// ordinals. Rendering and digesting a child costs about as much as a whole
// steady pass, and a revision's rendering for an ordinal never changes, so
// each is computed once and kept while a pass uses it. A steady pass
// allocates nothing here.
type renderedDigests struct {
	m map[renderKey]renderedDigest
	// pass numbers the passes, to drop what the last one did not use.
	pass uint64
	// claims is the set's claims of the current pass, joined.
	claims string
	// older are the children, by job ID, whose record of what the daemon
	// registered differs from this release's rendering of their revision:
	// status shows them, and they take this rendering at their next
	// replacement (a rollout, `rollout restart`), never by themselves.
	older map[string]bool
}

// noteOlder records whether child jobID carries an older rendering.
func (r *renderedDigests) noteOlder(jobID string, older bool) {
	switch {
	case older && r.older == nil:
		r.older = map[string]bool{jobID: true}
	case older:
		r.older[jobID] = true
	default:
		delete(r.older, jobID)
	}
}

type renderedDigest struct {
	digest specdigest.Digest
	pass   uint64
}

// renderKey names one rendering: a revision (immutable under its name) for
// one ordinal with the set's claims, which set the volume sources.
type renderKey struct {
	revision string
	ordinal  int
	claims   string
	// spread is the child's spread record (ChildJob.SpreadRecord), and
	// legacy says it has none: the "!=" rules its digest leaves out.
	spread string
	legacy bool
}

// changed returns the fields of pod d's child that differ from what the
// daemon registered for it: a hand edit (`nomad job run` of a changed
// child, `nomad job revert`). Nil when they match, or when a digest is
// unknown: an unreadable spec is never a reason to replace a pod.
//
// What was registered is the child's own record of it (jobs.MetaRendered),
// not what this release would render for its revision today: a release
// that renders children differently must not restart every pod it finds
// (DESIGN §2). older reports whether that record differs from this
// release's rendering, which the child takes at its next replacement. A
// child registered before the record existed is compared with this
// release's rendering, as it was then.
//
// own says the child Nomad holds is the daemon's own registration. Its
// digest is then what Nomad made of this rendering, and becomes the one
// later versions are compared with: should Nomad ever store a child in a
// way the normal form does not model, that is learnt from the daemon's own
// registration instead of being replaced, again and again, as an edit.
func (r *renderedDigests) changed(render renderFunc, spec reconciler.Spec, rev reconciler.Revision, d backend.PodDetail, own bool) (changed []string, older bool) {
	if !d.Digest.Known() {
		return nil, false
	}
	spread, recorded := "", false
	var registered specdigest.Digest
	if d.Job != nil {
		spread, recorded = d.Job.SpreadRecord()
		registered = d.Job.Rendered()
	}
	k := renderKey{revision: rev.Name, ordinal: d.Pod.Ordinal, claims: r.claims, spread: spread, legacy: !recorded}
	e, ok := r.m[k]
	if !ok {
		// An error leaves the digest unknown, which matches: the
		// revision's own rendering errors show when a pod is created.
		e.digest, _ = render(spec, rev, d.Pod.Ordinal, spread, recorded)
	}
	if !ok || e.pass != r.pass {
		e.pass = r.pass
		r.m[k] = e
	}
	if registered.Known() {
		older = e.digest.Known() && !e.digest.Equal(registered)
		if own || registered.Equal(d.Digest) {
			return nil, older
		}
		return registered.Changed(d.Digest), older
	}
	if own && !e.digest.Equal(d.Digest) {
		e.digest = d.Digest
		r.m[k] = e
	}
	if e.digest.Equal(d.Digest) {
		return nil, false
	}
	return e.digest.Changed(d.Digest), false
}

// registered keeps the digest of the rendering a CreatePod registered for
// ordinal at revision, as the child records it: the same digest changed
// would render for the child when it is first observed (RenderedDigest of
// the revision with the child's spread record, which is how the record was
// computed), so that a new child is rendered once, to be registered, and
// not once more to be compared. A registration without a known digest
// keeps nothing.
func (r *renderedDigests) registered(spec reconciler.Spec, revision string, ordinal int, reg backend.Registration) {
	if !reg.Rendered.Known() {
		return
	}
	if r.m == nil {
		r.m = map[renderKey]renderedDigest{}
	}
	k := renderKey{revision: revision, ordinal: ordinal, claims: claimsKey(spec), spread: reg.SpreadRecord}
	r.m[k] = renderedDigest{digest: reg.Rendered, pass: r.pass}
}

// claimsKey is a spec's claims as a renderKey names them.
func claimsKey(spec reconciler.Spec) string {
	if len(spec.VolumeClaims) == 1 {
		return spec.VolumeClaims[0]
	}
	return strings.Join(spec.VolumeClaims, ",")
}

// renderFunc is the digest of rev rendered for ordinal, with a child's
// spread record (backend.Cluster's RenderedDigest).
type renderFunc func(spec reconciler.Spec, rev reconciler.Revision, ordinal int, spread string, recorded bool) (specdigest.Digest, error)

// begin starts a pass over the set's pods: entries not used by this pass
// are dropped at its end (trim).
func (r *renderedDigests) begin(spec reconciler.Spec) *renderedDigests {
	if r.m == nil {
		r.m = map[renderKey]renderedDigest{}
	}
	r.pass++
	r.claims = claimsKey(spec)
	return r
}

// trim drops the digests this pass did not use once there are clearly more
// than the pods need (a rollout leaves the old revision's behind), so the
// cache stays bounded by the set's size.
func (r *renderedDigests) trim(pods int) {
	if len(r.m) <= 2*pods+8 {
		return
	}
	for k, e := range r.m {
		if e.pass != r.pass {
			delete(r.m, k)
		}
	}
}

// isOwn reports whether the child Nomad holds is at the index of the
// daemon's own last registration of it.
func (st *setState) isOwn(d backend.PodDetail) bool {
	m, ok := st.children[d.JobID]
	return ok && m.own == d.JobModifyIndex
}

// noteEdit says once per edit, in the set's events and the log, that a
// child was changed by hand and which fields, before the reconciler
// replaces it from its revision (a budgeted, ordered repair): the parent
// job is the one source of truth.
func (c *controller) noteEdit(p *pass, d backend.PodDetail, rev reconciler.Revision, changed []string) {
	m := p.st.child(d.JobID)
	if m.edited == d.JobModifyIndex {
		return
	}
	m.edited = d.JobModifyIndex
	c.sets.event(p.key, p.now, "Edited", fmt.Sprintf(
		"%s was changed outside nomad-statefulset (%s); it is replaced from its revision %s, as the parent job says",
		d.JobID, strings.Join(changed, ", "), rev.Name))
	c.log.Info("a child was edited by hand; replacing it from its revision", "set", p.key.String(), "child", d.JobID, "fields", changed)
}
