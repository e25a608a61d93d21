package nomad

import (
	"slices"
	"strings"

	"github.com/hashicorp/nomad/api"

	"github.com/nomad-statefulset/nomad-statefulset/backend"
)

// NodeState is what the daemon needs to know of a client node; see
// backend.NodeState.
type NodeState = backend.NodeState

// NodeValue is the value on node of a Nomad attribute interpolation that
// statefulset_spread may name ("${node.unique.id}", "${meta.rack}", …); ""
// when the node has none.
func NodeValue(node *api.Node, attr string) string {
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

func nodeStateOfStub(n *api.NodeListStub) NodeState {
	st := NodeState{Draining: n.Drain, Eligible: n.SchedulingEligibility != api.NodeSchedulingIneligible, Status: n.Status}
	if st.Fine() {
		st.FineSince = n.ModifyIndex
	}
	return st
}

// nodePayload is the part of a Node event's payload the cache keeps, with
// api.Node's field names so that it decodes from the same JSON.
type nodePayload struct {
	ID                    string
	Status                string
	SchedulingEligibility string
	DrainStrategy         *api.DrainStrategy
}

func (n *nodePayload) state() NodeState {
	return NodeState{Draining: n.DrainStrategy != nil, Eligible: n.SchedulingEligibility != api.NodeSchedulingIneligible, Status: n.Status}
}

// HasFineNodeOutside reports whether a ready, eligible node that is not
// draining exists whose ID is not in ids.
func (c *Cache) HasFineNodeOutside(ids []string) bool {
	c.mu.RLock()
	defer c.mu.RUnlock()
	for id, n := range c.nodeStates {
		if n.Fine() && !slices.Contains(ids, id) {
			return true
		}
	}
	return false
}

// NodeState returns what the cache knows of a node; ok is false for a node it
// has not seen.
func (c *Cache) NodeState(id string) (NodeState, bool) {
	c.mu.RLock()
	defer c.mu.RUnlock()
	n, ok := c.nodeStates[id]
	return n, ok
}

// replaceNodesLocked swaps the node states for a listing. c.mu is held.
func (c *Cache) replaceNodesLocked(nodes []*api.NodeListStub) {
	c.nodeStates = make(map[string]NodeState, len(nodes))
	for _, n := range nodes {
		c.nodeStates[n.ID] = nodeStateOfStub(n)
	}
}

// upsertNode records a node event and returns the sets to look at again:
// every set, when the node's state changed. A node's drain, eligibility or
// status concerns the sets with pods or volumes on it, and node events are
// rare (a drain, an operator's eligibility change, a node going up or
// down), so looking at every set is simpler than tracking which are there.
// A deregistered node is forgotten.
func (c *Cache) upsertNode(n *nodePayload, deregistered bool, index uint64) []backend.SetKey {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.advanceLocked(index)
	old, known := c.nodeStates[n.ID]
	if deregistered {
		if !known {
			return nil
		}
		delete(c.nodeStates, n.ID)
	} else {
		st := n.state()
		switch {
		case !st.Fine():
		case known && old.Fine():
			st.FineSince = old.FineSince
		default:
			st.FineSince = index
		}
		if known && st == old {
			return nil
		}
		c.nodeStates[n.ID] = st
	}
	return sortedKeys(c.setsLocked())
}
