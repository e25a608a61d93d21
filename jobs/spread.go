package jobs

import "github.com/hashicorp/nomad/api"

// SpreadChild makes a child without volumes avoid the values of attr
// (statefulset_spread) that its set's other ordinals use: "!=" affinities
// when soft, "!=" constraints when required. A child with claims follows
// its volumes, which were spread already. DigestChild leaves these rules
// out, since the child's revision alone cannot say them.
func SpreadChild(child *api.Job, attr string, required bool, used []string) {
	g := child.TaskGroups[0]
	for _, v := range used {
		if required {
			g.Constraints = append(g.Constraints, &api.Constraint{LTarget: attr, RTarget: v, Operand: operandNotEqual})
		} else {
			g.Affinities = append(g.Affinities, &api.Affinity{LTarget: attr, RTarget: v, Operand: operandNotEqual, Weight: ptr(int8(100))})
		}
	}
}
