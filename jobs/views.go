package jobs

import (
	"time"

	"github.com/hashicorp/nomad/api"

	"github.com/nomad-statefulset/nomad-statefulset/backend"
	"github.com/nomad-statefulset/nomad-statefulset/reconciler"
)

// Parent is a set's parent job as the agent reads it (backend.ParentJob):
// each answer is this package's reading of Nomad's job, so the agent never
// handles the job itself.
type Parent struct{ job *api.Job }

// ParentOf returns job as a backend.ParentJob; nil for a nil job, so that
// an observation without a parent has a nil Parent.
func ParentOf(job *api.Job) backend.ParentJob {
	if job == nil {
		return nil
	}
	return Parent{job: job}
}

// Job returns the parent job. Only backend/nomad and tests read it.
func (p Parent) Job() *api.Job { return p.job }

// Managed implements backend.ParentJob (IsManaged).
func (p Parent) Managed() bool { return IsManaged(p.job) }

// NotAnnotatedBecause implements backend.ParentJob (NotAnnotatedBecause).
func (p Parent) NotAnnotatedBecause() string { return NotAnnotatedBecause(p.job) }

// Spec implements backend.ParentJob (Parse).
func (p Parent) Spec() (reconciler.Spec, error) { return Parse(p.job) }

// Version implements backend.ParentJob (Version).
func (p Parent) Version() (version, modifyIndex uint64) { return Version(p.job) }

// RevisionData implements backend.ParentJob (RevisionData).
func (p Parent) RevisionData() ([]byte, error) { return RevisionData(p.job) }

// KillGrace implements backend.ParentJob (KillGrace).
func (p Parent) KillGrace() time.Duration { return KillGrace(p.job) }

// KillGraceOf implements backend.ParentJob: KillGrace of the job with a
// revision's data applied (ApplyRevision).
func (p Parent) KillGraceOf(revisionData []byte) (time.Duration, error) {
	old, err := ApplyRevision(p.job, revisionData)
	if err != nil {
		return 0, err
	}
	return KillGrace(old), nil
}

// NativeLeaderCheck implements backend.ParentJob (NativeLeaderCheck).
func (p Parent) NativeLeaderCheck(leaderCheck string) (time.Duration, bool) {
	return NativeLeaderCheck(p.job, leaderCheck)
}

// ConsulServices implements backend.ParentJob (ConsulServices).
func (p Parent) ConsulServices() []string { return ConsulServices(p.job) }

// Placement implements backend.ParentJob (PlacementOf).
func (p Parent) Placement(claim string) backend.ClaimPlacement { return PlacementOf(p.job, claim) }

// Matches implements backend.ChildJob: ChildMatches of the compact job.
func (r *ChildRecord) Matches(spec reconciler.Spec, rev reconciler.Revision, ordinal int) bool {
	return ChildMatches(spec, rev, ordinal, r.Job())
}

// ScaledCount implements backend.ChildJob: ScaledChild, read from the
// record without rebuilding the job (a steady pass asks it of every pod).
func (r *ChildRecord) ScaledCount() int {
	if len(r.groups) != 1 || r.groups[0] == nil {
		return 0
	}
	if n := r.groups[0].count.v; r.groups[0].count.ok && n > 1 {
		return n
	}
	return 0
}

// SpreadRecord implements backend.ChildJob: the child's MetaSpreadAvoid.
func (r *ChildRecord) SpreadRecord() (string, bool) {
	return r.meta.lookup(MetaSpreadAvoid)
}

// RenderedDigest is the digest of ordinal's child rendered from rev, with
// the spread record a child carries (recorded false: none, as a child
// registered before the record existed): the digest drift detection
// compares with the child's own. The rendering leaves out the "!=" rules
// the child's digest leaves out: those its spread record names, or, for a
// child without the record, all of them.
func RenderedDigest(spec reconciler.Spec, rev reconciler.Revision, ordinal int, spread string, recorded bool) (SpecDigest, error) {
	child, err := RenderChild(spec, rev, ordinal)
	if err != nil {
		return SpecDigest{}, err
	}
	if recorded {
		child.Meta[MetaSpreadAvoid] = spread
	} else {
		delete(child.Meta, MetaSpreadAvoid)
	}
	return digestOwned(child)
}

var _ backend.ChildJob = (*ChildRecord)(nil)
var _ backend.ParentJob = Parent{}
