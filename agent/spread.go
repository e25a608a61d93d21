package agent

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/hashicorp/nomad/api"

	"github.com/nomad-statefulset/nomad-statefulset/backend/nomad"
	"github.com/nomad-statefulset/nomad-statefulset/plugin"
	"github.com/nomad-statefulset/nomad-statefulset/reconciler"
)

// Spreading. Each child is its own Nomad job, so the template's own
// distinct_hosts or spread cannot act across ordinals. The daemon spreads a
// set's ordinals itself, from what is already placed: a new ordinal (its
// volume, or, without claims, its child) avoids the values of
// statefulset_spread that the set's other ordinals use, like Kubernetes'
// default topology spreading. It is soft unless statefulset_spread_required:
// when no node with a value of its own can take it, it goes where it can.
// Nothing running, and no existing volume, is ever moved.

// spreadValue is the value of attr ("${meta.rack}", …) on node.
func spreadValue(attr string, node *api.Node) string {
	name := strings.TrimSuffix(strings.TrimPrefix(attr, "${"), "}")
	switch {
	case name == "node.unique.id":
		return node.ID
	case name == "node.unique.name":
		return node.Name
	case name == "node.datacenter":
		return node.Datacenter
	case name == "node.class":
		return node.NodeClass
	case name == "node.pool":
		return node.NodePool
	case strings.HasPrefix(name, "meta."):
		return node.Meta[strings.TrimPrefix(name, "meta.")]
	case strings.HasPrefix(name, "attr."):
		return node.Attributes[strings.TrimPrefix(name, "attr.")]
	}
	return ""
}

// usedSpreadValues returns the values of the set's spread attribute on the
// nodes that hold its other ordinals: their live allocations and their
// volumes, observed or created in this pass (placed). Reading a node other than by ID costs a GetNode, made only when a
// pod or volume is created.
func (c *controller) usedSpreadValues(ctx context.Context, spec reconciler.Spec, obs nomad.Observation, placed map[int][]string, ord int) ([]string, error) {
	nodes := map[string]bool{}
	for _, d := range obs.Pods {
		if d.Pod.Ordinal != ord && d.NodeID != "" && !d.AllTerminal {
			nodes[d.NodeID] = true
		}
	}
	for _, v := range obs.Volumes {
		if v.Volume.Ordinal != ord && v.NodeID != "" {
			nodes[v.NodeID] = true
		}
	}
	for o, ids := range placed {
		for _, id := range ids {
			if o != ord && id != "" {
				nodes[id] = true
			}
		}
	}
	var out []string
	for id := range nodes {
		val := id
		if spec.Spread != "${node.unique.id}" {
			n, err := c.api.GetNode(ctx, id)
			if errors.Is(err, nomad.ErrNotFound) {
				continue // a node gone for good constrains nothing
			}
			if err != nil {
				return nil, err
			}
			val = spreadValue(spec.Spread, n)
		}
		if val != "" && !slices.Contains(out, val) {
			out = append(out, val)
		}
	}
	slices.Sort(out)
	return out, nil
}

// spreadConstraints are "attr != value" for every value in use.
func spreadConstraints(attr string, used []string) []plugin.Constraint {
	out := make([]plugin.Constraint, 0, len(used))
	for _, v := range used {
		out = append(out, plugin.Constraint{LTarget: attr, RTarget: v, Operand: "!="})
	}
	return out
}

// spreadChild makes a child without volumes avoid the spread values its
// set's other ordinals use: affinities when soft, constraints when hard.
// (A child with claims follows its volumes, which were spread already.)
func spreadChild(child *api.Job, spec reconciler.Spec, used []string) {
	g := child.TaskGroups[0]
	for _, v := range used {
		if spec.SpreadRequired {
			g.Constraints = append(g.Constraints, &api.Constraint{LTarget: spec.Spread, RTarget: v, Operand: "!="})
		} else {
			g.Affinities = append(g.Affinities, &api.Affinity{LTarget: spec.Spread, RTarget: v, Operand: "!=", Weight: ptrInt8(100)})
		}
	}
}

func ptrInt8(v int8) *int8 { return &v }

// spreadRetry is how soon a step held by a hard spread is tried again; a
// node event (a node joining, a drain ending) looks at the set sooner.
const spreadRetry = 30 * time.Second

// spreadUnsatisfiable holds a step whose hard spread cannot be met.
func spreadUnsatisfiable(ord int, spec reconciler.Spec, used []string, err error) error {
	return &deferError{wait: spreadRetry, kind: "SpreadUnsatisfiable",
		reason: fmt.Sprintf("ordinal %d needs a node whose %s is none of %v (statefulset_spread_required): %v", ord, spec.Spread, used, err)}
}
