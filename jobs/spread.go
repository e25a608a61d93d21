package jobs

import (
	"encoding/json"
	"slices"

	"github.com/hashicorp/nomad/api"
)

// MetaSpreadAvoid is the child meta key in which SpreadChild records the
// rules it added (spreadRecord as JSON), so that a child's digest leaves out
// exactly those and still sees the template's own "!=" rules, and their
// hand edits. RenderChild sets it empty-handed on every child.
const MetaSpreadAvoid = "statefulset_spread_avoid"

// spreadRecord is what MetaSpreadAvoid holds: the attribute spread over and
// the values the child was told to avoid.
type spreadRecord struct {
	Attr   string   `json:"attr,omitempty"`
	Values []string `json:"values,omitempty"`
}

// emptySpreadRecord is MetaSpreadAvoid of a child with no spread rules.
const emptySpreadRecord = "{}"

// SpreadChild makes a child without volumes avoid the values of attr
// (statefulset_spread) that its set's other ordinals use: "!=" affinities
// when soft, "!=" constraints when required. A child with claims follows
// its volumes, which were spread already. The rules are recorded in
// MetaSpreadAvoid, and DigestChild leaves them out, since the child's
// revision alone cannot say them.
func SpreadChild(child *api.Job, attr string, required bool, used []string) {
	g := child.TaskGroups[0]
	for _, v := range used {
		if required {
			g.Constraints = append(g.Constraints, &api.Constraint{LTarget: attr, RTarget: v, Operand: operandNotEqual})
		} else {
			g.Affinities = append(g.Affinities, &api.Affinity{LTarget: attr, RTarget: v, Operand: operandNotEqual, Weight: ptr(int8(100))})
		}
	}
	if child.Meta == nil {
		child.Meta = map[string]string{}
	}
	rec := emptySpreadRecord
	if len(used) > 0 {
		b, _ := json.Marshal(spreadRecord{Attr: attr, Values: used}) // strings only: cannot fail
		rec = string(b)
	}
	child.Meta[MetaSpreadAvoid] = rec
}

// spreadRulesOf returns the test for the "!=" rules a child's digest leaves
// out. A child with a spread record: exactly the recorded ones. A child
// without one (registered before the record existed), or with one that
// does not decode: every "!=" rule, as before, so that such a child is not
// taken for an edited one.
func spreadRulesOf(meta map[string]string) func(attr, value string) bool {
	raw, ok := meta[MetaSpreadAvoid]
	var rec spreadRecord
	if !ok || json.Unmarshal([]byte(raw), &rec) != nil {
		return func(string, string) bool { return true }
	}
	return func(attr, value string) bool { return attr == rec.Attr && slices.Contains(rec.Values, value) }
}
