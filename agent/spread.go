package agent

import (
	"context"
	"fmt"
	"slices"

	"github.com/nomad-statefulset/nomad-statefulset/backend"
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

// usedSpreadValues returns the values of the set's spread attribute on the
// nodes that hold its other ordinals: their live allocations and their
// volumes, observed or created in this pass (placed). Reading a node other than by ID costs a GetNode, made only when a
// pod or volume is created.
func (e *podControl) usedSpreadValues(ctx context.Context, spec reconciler.Spec, obs backend.Observation, placed map[int][]string, ord int) ([]string, error) {
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
			var err error
			val, err = e.nomad.NodeValue(ctx, id, spec.Spread)
			if backend.IsNotFound(err) {
				continue // a node gone for good constrains nothing
			}
			if err != nil {
				return nil, err
			}
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

// spreadUnmet reports that no node with a spread value of its own takes the
// ordinal; the reconciler decides what follows (Hold SpreadUnsatisfiable).
func spreadUnmet(ord int, spec reconciler.Spec, used []string, err error) error {
	return &waitError{reason: reconciler.HoldSpreadUnsatisfiable,
		msg: fmt.Sprintf("ordinal %d needs a node whose %s is none of %v: %v", ord, spec.Spread, used, err)}
}
