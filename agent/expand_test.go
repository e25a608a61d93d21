package agent

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/nomad-statefulset/nomad-statefulset/backend"
	"github.com/nomad-statefulset/nomad-statefulset/backend/nomad"
	"github.com/nomad-statefulset/nomad-statefulset/plugin"
	"github.com/nomad-statefulset/nomad-statefulset/reconciler"
)

// fakeCapabilities answers by class: classes in fixed cannot expand, a
// class in down cannot be asked; it records what it was asked.
type fakeCapabilities struct {
	fixed, down []string
	asked       []string
}

func (f *fakeCapabilities) Capabilities(_ context.Context, req *plugin.VolumeRequest) (*plugin.Capabilities, error) {
	f.asked = append(f.asked, req.Class)
	switch {
	case slices.Contains(f.down, req.Class):
		return nil, fmt.Errorf("plugin %q: %w", req.Class, plugin.ErrPluginUnavailable)
	case slices.Contains(f.fixed, req.Class):
		return &plugin.Capabilities{Reason: "plain directories"}, nil
	}
	return &plugin.Capabilities{Expand: true}, nil
}

// TestCannotExpandIsAskedBeforeDeciding: Input.CannotExpand comes from the
// provisioner's answer for each class a claim asks to grow, asked before
// the reconciler decides, so a fresh leadership term (a fresh set state,
// no expansion ever tried) already knows it; only classes with a volume to
// grow are asked; a provisioner that cannot be asked grows nothing for
// now, and the set is looked at again soon.
func TestCannotExpandIsAskedBeforeDeciding(t *testing.T) {
	key := backend.SetKey{Namespace: "default", Name: "db"}
	spec := reconciler.Spec{ClaimTemplates: []reconciler.ClaimTemplate{
		{Claim: "data", CapacityMin: 20, Class: "fast"},
		{Claim: "wal", CapacityMin: 20, Class: "slow"},
		{Claim: "logs", CapacityMin: 10, Class: "down"},
		{Claim: "tmp", CapacityMin: 20, Class: "other"},
	}}
	vol := func(claim, class string, capacity int64) nomad.VolumeDetail {
		return nomad.VolumeDetail{Volume: reconciler.Volume{Claim: claim, Class: class, Capacity: capacity, Name: claim + "-db-0"}}
	}
	for _, tc := range []struct {
		name      string
		vols      []nomad.VolumeDetail
		want      []string
		asked     []string
		unknown   []string // Input.CapabilitiesUnknown
		refused   []string // the memory's CannotExpand: an ExpandVolume refused this term
		wantEvent int
	}{
		{name: "nothing to grow", vols: []nomad.VolumeDetail{vol("data", "fast", 20), vol("wal", "slow", 30)}},
		{name: "a class that can", vols: []nomad.VolumeDetail{vol("data", "fast", 10)}, asked: []string{"fast"}},
		{name: "a class that cannot", vols: []nomad.VolumeDetail{vol("data", "fast", 10), vol("wal", "slow", 10), vol("wal", "slow", 5)},
			want: []string{"slow"}, asked: []string{"fast", "slow"}, wantEvent: 1},
		{name: "a provisioner down", vols: []nomad.VolumeDetail{vol("logs", "down", 5)}, unknown: []string{"down"}, asked: []string{"down"}},
		{name: "unknown size or another class", vols: []nomad.VolumeDetail{vol("wal", "slow", 0), vol("tmp", "fast", 10)}},
		{name: "refused this term", vols: []nomad.VolumeDetail{vol("data", "fast", 10)}, refused: []string{"fast"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			caps := &fakeCapabilities{fixed: []string{"slow"}, down: []string{"down"}}
			c := &controller{log: hclog.NewNullLogger(), sets: newSetStates(nil), capabilities: caps}
			st := c.sets.of(key)
			st.memory.CannotExpand = slices.Clone(tc.refused)
			for round := 0; round < 2; round++ {
				caps.asked = nil
				p := &pass{key: key, st: st, spec: spec, obs: nomad.Observation{Volumes: tc.vols}, now: time.Unix(100, 0)}
				got, unknown := c.cannotExpand(context.Background(), p)
				if fmt.Sprint(got) != fmt.Sprint(tc.want) || fmt.Sprint(caps.asked) != fmt.Sprint(tc.asked) || fmt.Sprint(unknown) != fmt.Sprint(tc.unknown) {
					t.Fatalf("round %d: CannotExpand %v, unknown %v after asking %v; want %v, %v after asking %v",
						round, got, unknown, caps.asked, tc.want, tc.unknown, tc.asked)
				}
			}
			d, _ := c.sets.get(key)
			n := 0
			for _, e := range d.Events {
				if e.Type == "ExpandUnsupported" && strings.Contains(e.Message, `class slow cannot expand volumes (plain directories)`) {
					n++
				}
			}
			if n != tc.wantEvent {
				t.Fatalf("%d ExpandUnsupported events over two passes, want %d: %+v", n, tc.wantEvent, d.Events)
			}
		})
	}
	// Without a capability source (tests that need none) nothing is asked.
	c := &controller{log: hclog.NewNullLogger(), sets: newSetStates(nil)}
	p := &pass{key: key, st: c.sets.of(key), spec: spec, obs: nomad.Observation{Volumes: []nomad.VolumeDetail{vol("wal", "slow", 10)}}}
	if got, _ := c.cannotExpand(context.Background(), p); len(got) != 0 {
		t.Fatalf("CannotExpand %v without a capability source", got)
	}
}
