package agent

import (
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/nomad/api"

	"github.com/nomad-statefulset/nomad-statefulset/backend"
	"github.com/nomad-statefulset/nomad-statefulset/backend/nomad"
	"github.com/nomad-statefulset/nomad-statefulset/jobs"
	"github.com/nomad-statefulset/nomad-statefulset/jobs/specdigest"
	"github.com/nomad-statefulset/nomad-statefulset/reconciler"
)

// TestHandEditedChildIsReplacedAndNamed is issue 20's `nomad job run` of
// an edited child: the drift check compared only the identity env, meta,
// tags and volume sources, so an added env var stood for good. The child
// Nomad has is now compared whole with its revision rendered for its
// ordinal: an edit of any field makes the pod drifted, which the reconciler
// replaces from its revision (CauseRepair, within the budget), and the
// set's events name the fields once per edit. A child as rendered is left
// alone.
func TestHandEditedChildIsReplacedAndNamed(t *testing.T) {
	for _, tc := range []struct {
		name string
		edit func(j *api.Job)
		// field is the one the event must name; "" for no edit.
		field string
	}{
		{"as rendered", func(*api.Job) {}, ""},
		{"an env var added", func(j *api.Job) {
			if j.TaskGroups[0].Tasks[0].Env == nil {
				j.TaskGroups[0].Tasks[0].Env = map[string]string{}
			}
			j.TaskGroups[0].Tasks[0].Env["DEBUG"] = "1"
		}, "Group.Tasks[app].Env"},
		{"the command changed", func(j *api.Job) {
			j.TaskGroups[0].Tasks[0].Config["args"] = []string{"-c", "sleep 3600"}
		}, "Group.Tasks[app].Config"},
		{"spread by the daemon", func(j *api.Job) { jobs.SpreadChild(j, "${node.unique.id}", false, []string{"n2"}) }, ""},
		// A "!=" rule of the user's used to be left out with spreading's.
		{"a user's != affinity added by hand", func(j *api.Job) {
			j.TaskGroups[0].Affinities = append(j.TaskGroups[0].Affinities,
				&api.Affinity{LTarget: "${node.class}", RTarget: "spot", Operand: "!=", Weight: ptr(int8(50))})
		}, "Group.Affinities"},
		{"spread rules of a child registered before the spread record", func(j *api.Job) {
			delete(j.Meta, jobs.MetaSpreadAvoid)
			j.TaskGroups[0].Affinities = append(j.TaskGroups[0].Affinities,
				&api.Affinity{LTarget: "${node.unique.id}", RTarget: "n2", Operand: "!=", Weight: ptr(int8(100))})
		}, ""},
	} {
		for _, recorded := range []bool{true, false} {
			// With the record of what was registered, as this release
			// registers children, and without it, as a child of a release
			// before the record: then this release's rendering is the
			// baseline.
			t.Run(fmt.Sprintf("%s/recorded=%v", tc.name, recorded), func(t *testing.T) {
				handEdited(t, tc.edit, tc.field, recorded)
			})
		}
	}
}

// handEdited syncs a set whose one child was changed by edit (its record
// of what was registered kept when recorded) and checks that the child is
// replaced and field named once, or, for field "", left alone.
func handEdited(t *testing.T, edit func(j *api.Job), field string, recorded bool) {
	parent := parentJob("web", map[string]string{"statefulset_replicas": "1"}, "v1")
	r := newSyncRig(t, parent)
	child := r.firstChild(t, parent, 0)
	if recorded {
		if _, err := jobs.RecordRendering(child); err != nil {
			t.Fatal(err)
		}
	}
	edit(child)
	child.Version, child.JobModifyIndex, child.ModifyIndex, child.CreateIndex = ptr(uint64(1)), ptr(uint64(30)), ptr(uint64(30)), ptr(uint64(20))
	child.SubmitTime = ptr(r.now.Add(-time.Hour).UnixNano())
	alloc := r.healthyAlloc("web-0", 31)
	vol := &api.HostVolumeStub{Namespace: "default", ID: "vol-0", Name: "data-web-0", NodeID: "n1", State: api.HostVolumeStateReady}
	r.cache.Replace(nomad.Snapshot{Index: 100, Jobs: []*api.Job{parent, child},
		Allocs: []*api.AllocationListStub{alloc}, Volumes: []*api.HostVolumeStub{vol}})

	r.sync(t)
	replaced := slices.Contains(r.eff.calls, "DeletePod 0")
	d, _ := r.c.sets.get(r.key)
	if field == "" {
		if replaced || hasEvent(d, "Edited") {
			t.Fatalf("a child as rendered was taken for an edit: calls %v, events %+v", r.eff.calls, d.Events)
		}
		return
	}
	if !replaced {
		t.Fatalf("an edited child was not replaced: calls %v", r.eff.calls)
	}
	if !hasEvent(d, "Edited", "web-0 was changed outside nomad-statefulset", field) {
		t.Fatalf("no event names %s: %+v", field, d.Events)
	}
	// Once per edit, however many passes see it.
	r.sync(t)
	d, _ = r.c.sets.get(r.key)
	n := 0
	for _, e := range d.Events {
		if e.Type == "Edited" {
			n++
		}
	}
	if n != 1 {
		t.Fatalf("%d Edited events for one edit, want 1", n)
	}
}

// TestOwnRegistrationIsNeverAnEdit: should Nomad ever store a child in a
// way the digest's normal form does not model, the child the daemon itself
// registered would read as edited and be replaced, again and again. The
// daemon's own registration, as Nomad holds it, is what later versions are
// compared with instead: it is not replaced, and a hand edit after it is
// still found, named by the fields the edit changed only.
func TestOwnRegistrationIsNeverAnEdit(t *testing.T) {
	parent := parentJob("web", map[string]string{"statefulset_replicas": "1"}, "v1")
	r := newSyncRig(t, parent)
	stored := r.firstChild(t, parent, 0)
	relist := func(child *api.Job, jmi uint64) {
		child.Version, child.JobModifyIndex, child.ModifyIndex, child.CreateIndex = ptr(jmi), ptr(jmi), ptr(jmi), ptr(uint64(20))
		child.SubmitTime = ptr(r.now.Add(-time.Hour).UnixNano())
		alloc := r.healthyAlloc("web-0", jmi+1)
		vol := &api.HostVolumeStub{Namespace: "default", ID: "vol-0", Name: "data-web-0", NodeID: "n1", State: api.HostVolumeStateReady}
		r.cache.Replace(nomad.Snapshot{Index: 100 + jmi, Jobs: []*api.Job{parent, child},
			Allocs: []*api.AllocationListStub{alloc}, Volumes: []*api.HostVolumeStub{vol}})
	}
	// What a future Nomad might add to every child on registration.
	stored.Meta["nomad_added"] = "1"
	r.c.sets.of(r.key).child("web-0").own = 30
	relist(stored, 30)
	r.sync(t)
	d, _ := r.c.sets.get(r.key)
	if slices.Contains(r.eff.calls, "DeletePod 0") || hasEvent(d, "Edited") {
		t.Fatalf("the daemon's own registration was taken for an edit: calls %v, events %+v", r.eff.calls, d.Events)
	}

	edited := r.renderFirst(t, parent, 0)
	edited.Meta["nomad_added"] = "1"
	edited.TaskGroups[0].Tasks[0].Env["DEBUG"] = "1"
	relist(edited, 40)
	r.sync(t)
	d, _ = r.c.sets.get(r.key)
	if !slices.Contains(r.eff.calls, "DeletePod 0") {
		t.Fatalf("a hand edit after the daemon's registration was not replaced: %v", r.eff.calls)
	}
	for _, e := range d.Events {
		if e.Type == "Edited" && (!strings.Contains(e.Message, "Group.Tasks[app].Env") || strings.Contains(e.Message, "Meta")) {
			t.Fatalf("the edit is named %q, want the env only", e.Message)
		}
	}
	if !hasEvent(d, "Edited", "Group.Tasks[app].Env") {
		t.Fatalf("no Edited event: %+v", d.Events)
	}
}

// TestForgetKeepsOtherSetsChildren: forgetting set "web" drops what the
// daemon remembers of web's children only; set "web-db", whose children's
// names also start with "web-", keeps its own.
func TestForgetKeepsOtherSetsChildren(t *testing.T) {
	r := newSyncRig(t, parentJob("web", map[string]string{"statefulset_replicas": "1"}, "v1"))
	db := backend.SetKey{Namespace: "default", Name: "web-db"}
	r.c.sets.of(r.key).child("web-0").own = 30
	*r.c.sets.of(db).child("web-db-0") = childMemo{own: 40, edited: 41}

	r.c.forget(r.key)

	if r.c.sets.of(r.key).isOwn(nomad.PodDetail{JobID: "web-0", JobModifyIndex: 30}) {
		t.Fatal("web-0's registration is still remembered after web was forgotten")
	}
	if got := *r.c.sets.of(db).child("web-db-0"); got != (childMemo{own: 40, edited: 41}) {
		t.Fatalf("forgetting web changed web-db-0's memo: %+v", got)
	}
}

// TestAnUpgradeRestartsNothing: a release that renders children differently
// (here: one more env var in every rendering) must not replace a child that
// an earlier release registered and recorded (DESIGN §2). Kubernetes learnt
// this with the pod-template hash: pods are compared by the revision they
// record, not with what the running controller would make of it. The child
// is shown as carrying an older rendering instead; a hand edit of it is still
// found against its record and named.
func TestAnUpgradeRestartsNothing(t *testing.T) {
	for _, tc := range []struct {
		name  string
		edit  func(j *api.Job)
		field string
	}{
		{"as the earlier release registered it", func(*api.Job) {}, ""},
		{"edited by hand since", func(j *api.Job) { j.TaskGroups[0].Tasks[0].Config["args"] = []string{"-c", "sleep 1"} }, "Group.Tasks[app].Config"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			parent := parentJob("web", map[string]string{"statefulset_replicas": "1"}, "v1")
			r := newSyncRig(t, parent)
			child := r.firstChild(t, parent, 0) // as the earlier release rendered it
			if _, err := jobs.RecordRendering(child); err != nil {
				t.Fatal(err)
			}
			tc.edit(child)
			r.c.render = func(spec reconciler.Spec, rev reconciler.Revision, ord int, spread string, recorded bool) (specdigest.Digest, error) {
				c, err := jobs.RenderChild(spec, rev, ord)
				if err != nil {
					return specdigest.Digest{}, err
				}
				c.TaskGroups[0].Tasks[0].Env["RENDERED_BY"] = "a later release"
				return jobs.DigestChild(c)
			}
			child.Version, child.JobModifyIndex, child.ModifyIndex, child.CreateIndex = ptr(uint64(1)), ptr(uint64(30)), ptr(uint64(30)), ptr(uint64(20))
			child.SubmitTime = ptr(r.now.Add(-time.Hour).UnixNano())
			vol := &api.HostVolumeStub{Namespace: "default", ID: "vol-0", Name: "data-web-0", NodeID: "n1", State: api.HostVolumeStateReady}
			r.cache.Replace(nomad.Snapshot{Index: 100, Jobs: []*api.Job{parent, child},
				Allocs: []*api.AllocationListStub{r.healthyAlloc("web-0", 31)}, Volumes: []*api.HostVolumeStub{vol}})

			r.sync(t)
			replaced := slices.Contains(r.eff.calls, "DeletePod 0")
			d, _ := r.c.sets.get(r.key)
			if tc.field == "" {
				if replaced || hasEvent(d, "Edited") {
					t.Fatalf("the upgrade replaced a child: calls %v, events %+v", r.eff.calls, d.Events)
				}
				if len(d.Pods) != 1 || !d.Pods[0].OlderRendering {
					t.Fatalf("the child is not shown as carrying an older rendering: %+v", d.Pods)
				}
				return
			}
			if !replaced || !hasEvent(d, "Edited", tc.field) {
				t.Fatalf("a hand edit went unseen: calls %v, events %+v", r.eff.calls, d.Events)
			}
			for _, e := range d.Events {
				if e.Type == "Edited" && strings.Contains(e.Message, "Env") {
					t.Fatalf("the edit is named by what the new release renders, not what was registered: %s", e.Message)
				}
			}
		})
	}
}
