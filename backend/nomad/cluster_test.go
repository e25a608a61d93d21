package nomad_test

import (
	"context"
	"errors"
	"testing"

	"github.com/hashicorp/nomad/api"

	"github.com/nomad-statefulset/nomad-statefulset/backend"
	"github.com/nomad-statefulset/nomad-statefulset/backend/nomad"
	"github.com/nomad-statefulset/nomad-statefulset/internal/nomadsim"
	"github.com/nomad-statefulset/nomad-statefulset/jobs"
	"github.com/nomad-statefulset/nomad-statefulset/reconciler"
)

// clusterSet is a Cluster over a fresh simulated Nomad, and a parsed
// three-replica set without volumes and its first revision, as the agent
// holds them when it creates a pod.
func clusterSet(t *testing.T) (*nomadsim.Nomad, *nomad.Cluster, reconciler.Spec, reconciler.Revision) {
	t.Helper()
	sim := nomadsim.NewNomad(nomadsim.NomadConfig{Manual: true})
	t.Cleanup(sim.Close)
	parent := &api.Job{
		ID: ptr("web"), Namespace: ptr("default"), Type: ptr("service"), Datacenters: []string{"*"},
		Meta: map[string]string{"statefulset": "true", "statefulset_replicas": "3"},
		TaskGroups: []*api.TaskGroup{{
			Name: ptr("app"), Count: ptr(0),
			Tasks: []*api.Task{{Name: "app", Driver: "exec", Config: map[string]any{"command": "sleep"}}},
		}},
	}
	spec, err := jobs.Parse(parent)
	if err != nil {
		t.Fatal(err)
	}
	data, err := jobs.RevisionData(parent)
	if err != nil {
		t.Fatal(err)
	}
	return sim, nomad.NewCluster(sim), spec, reconciler.Revision{Name: reconciler.HashRevision(data, 0), Data: data}
}

// TestClusterCarriesOutChildWrites: each of backend.Children's writes, as
// the agent's pod actions make them, on the simulated Nomad: the fence of
// a register, a spread's rules, a restore of the count that Nomad has
// moved past, and the deletes and evaluations of children that are gone.
func TestClusterCarriesOutChildWrites(t *testing.T) {
	ctx := context.Background()
	sim, c, spec, rev := clusterSet(t)

	reg, err := c.RegisterChild(ctx, spec, rev, 0, &backend.Spread{Attr: "${node.unique.id}", Used: []string{"n1"}}, 0)
	idx := reg.JobModifyIndex
	if err != nil || idx == 0 {
		t.Fatalf("registering web-0: index %d, %v", idx, err)
	}
	job, err := sim.GetJob(ctx, "default", "web-0")
	if err != nil {
		t.Fatal(err)
	}
	if !jobs.ChildMatches(spec, rev, 0, job) {
		t.Fatal("the registered child does not match its rendering")
	}
	if len(job.TaskGroups[0].Affinities) != 1 || job.TaskGroups[0].Affinities[0].RTarget != "n1" {
		t.Fatalf("a soft spread away from n1 should add one affinity, got %+v", job.TaskGroups[0].Affinities)
	}

	// Registering over a child that exists, as if it were new, is refused.
	if _, err := c.RegisterChild(ctx, spec, rev, 0, nil, 0); !errors.Is(err, backend.ErrConflict) || !backend.IsConflict(err) {
		t.Fatalf("a register fenced on a stale index: %v, want a backend.ErrConflict", err)
	}

	// Nothing to restore: not scaled. Scaled by hand: back to 1, in place.
	if got, err := c.RestoreCount(ctx, "default", "web-0", idx); err != nil || got != 0 {
		t.Fatalf("restoring an unscaled child: index %d, %v; want nothing done", got, err)
	}
	job.TaskGroups[0].Count = ptr(3)
	resp, err := sim.RegisterJob(ctx, job, false, 0)
	if err != nil {
		t.Fatal(err)
	}
	if got, err := c.RestoreCount(ctx, "default", "web-0", idx); err != nil || got != 0 {
		t.Fatalf("restoring at an index Nomad has moved past: index %d, %v; want nothing done", got, err)
	}
	got, err := c.RestoreCount(ctx, "default", "web-0", resp.JobModifyIndex)
	if err != nil || got <= resp.JobModifyIndex {
		t.Fatalf("restoring the scaled child: index %d, %v", got, err)
	}
	if job, _ := sim.GetJob(ctx, "default", "web-0"); *job.TaskGroups[0].Count != 1 {
		t.Fatalf("count after the restore: %d, want 1", *job.TaskGroups[0].Count)
	}

	if err := c.EvaluateChild(ctx, "default", "web-0"); err != nil {
		t.Fatalf("evaluating web-0: %v", err)
	}
	for _, purge := range []bool{false, true} {
		if err := c.DeregisterChild(ctx, "default", "web-0", purge); err != nil {
			t.Fatalf("deregistering web-0 (purge %v): %v", purge, err)
		}
	}
	if _, err := sim.GetJob(ctx, "default", "web-0"); !backend.IsNotFound(err) {
		t.Fatalf("web-0 after its purge: %v, want not found", err)
	}
	// Gone already: Nomad 1.10.5 answers the deregister with success
	// (nomad/job_endpoint.go Deregister: a nil job returns nil), and the
	// evaluation has nothing to place.
	if err := c.DeregisterChild(ctx, "default", "web-0", true); err != nil {
		t.Fatalf("deregistering a child that is gone: %v", err)
	}
	if err := c.EvaluateChild(ctx, "default", "web-0"); err != nil {
		t.Fatalf("evaluating a child that is gone: %v", err)
	}
	if _, err := c.NodeValue(ctx, "no-such-node", "${meta.rack}"); !backend.IsNotFound(err) {
		t.Fatalf("the value on a node that is gone: %v, want not found", err)
	}
}

// TestClusterRendersWhatItRegisters: the digest the agent compares a
// child with (RenderedDigest) is the digest of what RegisterChild
// registered, spread rules and all, read back from Nomad.
func TestClusterRendersWhatItRegisters(t *testing.T) {
	ctx := context.Background()
	sim, c, spec, rev := clusterSet(t)
	if _, err := c.RegisterChild(ctx, spec, rev, 1, &backend.Spread{Attr: "${node.unique.id}", Used: []string{"n1", "n2"}}, 0); err != nil {
		t.Fatal(err)
	}
	job, err := sim.GetJob(ctx, "default", "web-1")
	if err != nil {
		t.Fatal(err)
	}
	have, err := jobs.DigestChild(job)
	if err != nil {
		t.Fatal(err)
	}
	record, recorded := job.Meta[jobs.MetaSpreadAvoid]
	want, err := c.RenderedDigest(spec, rev, 1, record, recorded)
	if err != nil {
		t.Fatal(err)
	}
	if !want.Equal(have) {
		t.Fatalf("the registered child reads as edited in %v", want.Changed(have))
	}
}

// TestRegistrationRecordsItsRendering: the digest RegisterChild
// returns is the child's own record of its rendering as Nomad holds it,
// and the digest RenderedDigest gives its revision with its spread
// record, so the agent may keep it instead of rendering the child again.
func TestRegistrationRecordsItsRendering(t *testing.T) {
	for _, tc := range []struct {
		name   string
		spread *backend.Spread
	}{
		{"no spread", nil},
		{"soft spread", &backend.Spread{Attr: "${node.unique.id}", Used: []string{"n1", "n2"}}},
		{"required spread", &backend.Spread{Attr: "${meta.rack}", Required: true, Used: []string{"r1"}}},
		{"spread over nothing", &backend.Spread{Attr: "${node.unique.id}"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx := context.Background()
			sim, c, spec, rev := clusterSet(t)
			reg, err := c.RegisterChild(ctx, spec, rev, 2, tc.spread, 0)
			if err != nil {
				t.Fatal(err)
			}
			job, err := sim.GetJob(ctx, "default", "web-2")
			if err != nil {
				t.Fatal(err)
			}
			rec := jobs.NewChildRecord(job)
			if reg.JobModifyIndex != *job.JobModifyIndex {
				t.Errorf("JobModifyIndex %d, Nomad has %d", reg.JobModifyIndex, *job.JobModifyIndex)
			}
			if !reg.Rendered.Known() || !reg.Rendered.Equal(rec.Rendered()) {
				t.Fatalf("the registration's digest %v is not the child's record %v", reg.Rendered, rec.Rendered())
			}
			record, recorded := rec.SpreadRecord()
			if !recorded || record != reg.SpreadRecord {
				t.Fatalf("spread record %q (recorded %v), the registration says %q", record, recorded, reg.SpreadRecord)
			}
			want, err := c.RenderedDigest(spec, rev, 2, record, recorded)
			if err != nil {
				t.Fatal(err)
			}
			if !want.Equal(reg.Rendered) {
				t.Fatalf("the registration's digest differs from the rendering in %v", want.Changed(reg.Rendered))
			}
		})
	}
}
