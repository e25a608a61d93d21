package reconciler

import (
	"testing"
	"time"
)

// TestDetachIsNotDelete: a parent that stops being annotated detaches the
// set (DESIGN §1). Kubernetes deletes a StatefulSet's pods only when the
// object itself is deleted (and `--cascade=orphan` keeps them then); no
// field of the object does. Each case starts from a converged set under
// whenDeleted=Delete, the policy that would lose data if a typo deleted it.
func TestDetachIsNotDelete(t *testing.T) {
	type step struct {
		annotated  bool
		deleted    bool // the parent is stopped (annotated) or purged
		gone       bool // purged: Nomad has no parent job at all
		wantAction bool
		wantCond   bool // the Detached condition
		wantReason string
	}
	cases := []struct {
		name  string
		steps []step
	}{
		{"mistyped: nothing is touched", []step{
			{annotated: false, wantCond: true, wantReason: ReasonNotAnnotated},
			{annotated: false, wantCond: true, wantReason: ReasonNotAnnotated},
		}},
		{"re-annotated: adopted without re-registering", []step{
			{annotated: false, wantCond: true, wantReason: ReasonNotAnnotated},
			{annotated: true},
			{annotated: true},
		}},
		{"purged while detached: stays detached", []step{
			{annotated: false, wantCond: true, wantReason: ReasonNotAnnotated},
			{deleted: true, gone: true, wantCond: true, wantReason: ReasonParentGoneWhileDetached},
			{deleted: true, gone: true, wantCond: true, wantReason: ReasonParentGoneWhileDetached},
		}},
		{"re-annotated and stopped: deleted", []step{
			{annotated: false, wantCond: true, wantReason: ReasonNotAnnotated},
			{annotated: true, deleted: true, wantAction: true},
		}},
		{"purged while annotated: deleted", []step{
			{annotated: true, deleted: true, gone: true, wantAction: true},
		}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			w := newWorld(Spec{Replicas: 3, VolumeClaims: []string{"data"}, WhenDeleted: Delete, WhenScaled: Delete}, "v1")
			converge(t, w)
			settled := w.status
			for i, s := range tc.steps {
				w.setAnnotated(s.annotated)
				if s.gone {
					// The agent sees no parent: it cannot say Detached.
					w.spec.Detached = false
				}
				w.spec.Deleted, w.spec.ParentGone = s.deleted, s.gone
				out := mustStep(t, w)
				if got := len(out.effects()) > 0; got != s.wantAction {
					t.Fatalf("step %d: %d actions (%v), want actions=%v\n%s", i, len(out.effects()), out.effects(), s.wantAction, w.dump())
				}
				c := condition(out.Status, ConditionDetached)
				if c.Status != s.wantCond || (s.wantCond && c.Reason != s.wantReason) {
					t.Fatalf("step %d: Detached condition %+v, want status %v reason %q", i, c, s.wantCond, s.wantReason)
				}
				if s.wantCond {
					// The stored state is kept as it was: revisions, counters,
					// and the ordinals' records.
					if out.Status.CurrentRevision != settled.CurrentRevision || len(out.Status.Ordinals) != len(settled.Ordinals) ||
						out.Status.ReadyReplicas != settled.ReadyReplicas {
						t.Fatalf("step %d: a detached set's status changed: %+v, was %+v", i, out.Status, settled)
					}
				}
				w.now = w.now.Add(time.Second)
			}
			if len(w.volumes) != 3 && !tc.steps[len(tc.steps)-1].wantAction {
				t.Fatalf("volumes lost: %d left", len(w.volumes))
			}
		})
	}
}
