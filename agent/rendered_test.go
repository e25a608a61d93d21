package agent

import (
	"context"
	"maps"
	"slices"
	"testing"

	"github.com/hashicorp/nomad/api"

	"github.com/nomad-statefulset/nomad-statefulset/backend"
	"github.com/nomad-statefulset/nomad-statefulset/backend/nomad"
	"github.com/nomad-statefulset/nomad-statefulset/internal/nomadsim"
	"github.com/nomad-statefulset/nomad-statefulset/jobs"
	"github.com/nomad-statefulset/nomad-statefulset/jobs/specdigest"
	"github.com/nomad-statefulset/nomad-statefulset/reconciler"
)

// TestRegisteredChildIsNotRenderedAgain: the digest a registration
// records is kept, so the first look at a new child renders nothing, and
// finds what rendering it would have found (an edit, an older rendering,
// neither), whatever happened to the child between its registration and
// that look.
func TestRegisteredChildIsNotRenderedAgain(t *testing.T) {
	for _, tc := range []struct {
		name   string
		spread *backend.Spread
		// edit changes the child as Nomad holds it before it is first seen.
		edit func(j *api.Job)
		// claims are the claims of the pass that sees it, when they changed.
		claims []string
		// renders is how often the look renders.
		renders int
		// edited and older are what the look finds when the child is not
		// the daemon's own registration.
		edited, older bool
	}{
		{name: "as registered"},
		{name: "spread", spread: &backend.Spread{Attr: "${node.unique.id}", Used: []string{"n1", "n2"}}},
		{name: "edited", edit: func(j *api.Job) { j.TaskGroups[0].Tasks[0].Env["DEBUG"] = "1" }, edited: true},
		{name: "its spread record edited", spread: &backend.Spread{Attr: "${node.unique.id}", Used: []string{"n1"}},
			edit: func(j *api.Job) { j.Meta[jobs.MetaSpreadAvoid] = "{}" }, renders: 1, edited: true},
		{name: "its spread record removed", edit: func(j *api.Job) { delete(j.Meta, jobs.MetaSpreadAvoid) }, renders: 1},
		{name: "registered before the record", edit: func(j *api.Job) { delete(j.Meta, jobs.MetaRendered) }},
		{name: "an older rendering", edit: olderRendering, older: true},
		{name: "claims changed since", claims: []string{"data", "logs"}, renders: 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			parent := parentJob("web", map[string]string{"statefulset_replicas": "2"}, "v1")
			spec, err := jobs.Parse(parent)
			if err != nil {
				t.Fatal(err)
			}
			data, err := jobs.RevisionData(parent)
			if err != nil {
				t.Fatal(err)
			}
			rev := reconciler.Revision{Name: reconciler.HashRevision(data, 0), Data: data}
			sim := nomadsim.NewNomad(nomadsim.NomadConfig{Manual: true})
			t.Cleanup(sim.Close)
			ctx := context.Background()
			reg, err := nomad.NewCluster(sim).RegisterChild(ctx, spec, rev, 1, tc.spread, 0)
			if err != nil {
				t.Fatal(err)
			}
			job, err := sim.GetJob(ctx, "default", "web-1")
			if err != nil {
				t.Fatal(err)
			}
			if tc.edit != nil {
				tc.edit(job)
			}
			digest, err := jobs.DigestChild(job)
			if err != nil {
				t.Fatal(err)
			}
			d := backend.PodDetail{Pod: reconciler.Pod{Ordinal: 1, Revision: rev.Name}, JobID: "web-1",
				JobModifyIndex: reg.JobModifyIndex, Job: jobs.NewChildRecord(job), Digest: digest}
			seen := spec
			if tc.claims != nil {
				seen.VolumeClaims = tc.claims
			}
			renders := 0
			counted := func(spec reconciler.Spec, rev reconciler.Revision, ord int, spread string, recorded bool) (specdigest.Digest, error) {
				renders++
				return jobs.RenderedDigest(spec, rev, ord, spread, recorded)
			}
			for _, own := range []bool{false, true} {
				var rendered, kept renderedDigests
				rendered.begin(seen)
				wantChanged, wantOlder := rendered.changed(jobs.RenderedDigest, seen, rev, d, own)

				kept.begin(spec)
				kept.registered(spec, rev.Name, 1, reg)
				kept.begin(seen)
				renders = 0
				changed, older := kept.changed(counted, seen, rev, d, own)
				if !slices.Equal(changed, wantChanged) || older != wantOlder {
					t.Errorf("own %v: changed %v, older %v; rendering finds %v, %v", own, changed, older, wantChanged, wantOlder)
				}
				if !own && (len(wantChanged) > 0 != tc.edited || wantOlder != tc.older) {
					t.Errorf("rendering finds changed %v, older %v; want edited %v, older %v", wantChanged, wantOlder, tc.edited, tc.older)
				}
				if renders != tc.renders {
					t.Errorf("own %v: rendered %d times, want %d", own, renders, tc.renders)
				}
			}
		})
	}
}

// olderRendering makes j a child an older release registered: its record
// of the rendering is of a child with another env, which it runs.
func olderRendering(j *api.Job) {
	env := j.TaskGroups[0].Tasks[0].Env
	env["RELEASE"] = "old"
	old := *j
	old.Meta = maps.Clone(j.Meta)
	if _, err := jobs.RecordRendering(&old); err != nil {
		panic(err)
	}
	j.Meta[jobs.MetaRendered] = old.Meta[jobs.MetaRendered]
}
