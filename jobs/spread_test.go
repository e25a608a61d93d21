package jobs

import (
	"testing"

	"github.com/hashicorp/nomad/api"
)

// TestSpreadChild: a soft spread prefers nodes outside the values in use
// (affinities), a hard one requires it (constraints); nothing else changes,
// and the child's digest does not see the rules.
func TestSpreadChild(t *testing.T) {
	for _, required := range []bool{false, true} {
		child := &api.Job{TaskGroups: []*api.TaskGroup{{}}}
		SpreadChild(child, "${meta.rack}", required, []string{"r0", "r1"})
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
