package agent

import (
	"testing"

	"github.com/hashicorp/nomad/api"

	"github.com/nomad-statefulset/nomad-statefulset/reconciler"
)

// TestSpreadValue reads every attribute statefulset_spread may name.
func TestSpreadValue(t *testing.T) {
	n := &api.Node{ID: "id-1", Name: "n1", Datacenter: "dc2", NodeClass: "big", NodePool: "pool-a",
		Meta: map[string]string{"rack": "r7"}, Attributes: map[string]string{"kernel.name": "linux"}}
	for attr, want := range map[string]string{
		"${node.unique.id}": "id-1", "${node.unique.name}": "n1", "${node.datacenter}": "dc2",
		"${node.class}": "big", "${node.pool}": "pool-a", "${meta.rack}": "r7", "${attr.kernel.name}": "linux",
		"${meta.missing}": "",
	} {
		if got := spreadValue(attr, n); got != want {
			t.Errorf("spreadValue(%s) = %q, want %q", attr, got, want)
		}
	}
}

// TestSpreadChild: a soft spread prefers nodes outside the values in use
// (affinities), a hard one requires it (constraints); nothing else changes.
func TestSpreadChild(t *testing.T) {
	for _, required := range []bool{false, true} {
		child := &api.Job{TaskGroups: []*api.TaskGroup{{}}}
		spreadChild(child, reconciler.Spec{Spread: "${meta.rack}", SpreadRequired: required}, []string{"r0", "r1"})
		g := child.TaskGroups[0]
		if required {
			if len(g.Constraints) != 2 || len(g.Affinities) != 0 || g.Constraints[1].RTarget != "r1" || g.Constraints[1].Operand != "!=" {
				t.Fatalf("hard spread: constraints %+v affinities %+v", g.Constraints, g.Affinities)
			}
			continue
		}
		if len(g.Affinities) != 2 || len(g.Constraints) != 0 || g.Affinities[0].LTarget != "${meta.rack}" || *g.Affinities[0].Weight != 100 {
			t.Fatalf("soft spread: constraints %+v affinities %+v", g.Constraints, g.Affinities)
		}
	}
}
