package agent

import (
	"time"

	"testing"

	"github.com/hashicorp/nomad/api"

	"github.com/nomad-statefulset/nomad-statefulset/backend/nomad"
	"github.com/nomad-statefulset/nomad-statefulset/reconciler"
)

// TestNodeReason: status names why a pod is down or moving because of its
// nodes, from the allocation's node or, for a pod not placed yet, from its
// volume's node; a pod whose nodes are fine gets no node reason.
func TestNodeReason(t *testing.T) {
	nodes := map[string]nomad.NodeState{
		"draining": {Draining: true, Status: api.NodeStatusReady},
		"down":     {Eligible: true, Status: api.NodeStatusDown},
		"cordoned": {Status: api.NodeStatusReady},
	}
	running := reconciler.Pod{Phase: reconciler.PhaseRunning, Ready: true}
	pending := reconciler.Pod{Phase: reconciler.PhasePending}
	for _, tc := range []struct {
		name    string
		pod     nomad.PodDetail
		volumes []string
		want    string
	}{
		{"running on a draining node", nomad.PodDetail{Pod: running, NodeID: "draining"}, nil, "NodeDraining"},
		{"running on a node that went down", nomad.PodDetail{Pod: running, NodeID: "down"}, nil, "NodeDown"},
		{"not placed, its volume's node ineligible", nomad.PodDetail{Pod: pending}, []string{"cordoned"}, "WaitingForNode"},
		{"not placed, its volume's node draining", nomad.PodDetail{Pod: pending}, []string{"draining"}, "WaitingForNode"},
		{"not placed, its volume's node down", nomad.PodDetail{Pod: pending}, []string{"down"}, "NodeDown"},
		{"running on a fine node", nomad.PodDetail{Pod: running, NodeID: "fine"}, []string{"fine"}, ""},
		{"pending on a fine node", nomad.PodDetail{Pod: pending, NodeID: "fine"}, []string{"fine"}, ""},
	} {
		if got := nodeReason(tc.pod, nodes, tc.volumes); got != tc.want {
			t.Errorf("%s: %q, want %q", tc.name, got, tc.want)
		}
	}
}

// TestStoppedChildIsNotSucceeded: a child of a live set whose allocation
// completed was stopped from outside; it shows as Stopped, never Succeeded.
func TestStoppedChildIsNotSucceeded(t *testing.T) {
	if got := podState(reconciler.Pod{Phase: reconciler.PhaseSucceeded}, 0, time.Time{}); got != "Stopped" {
		t.Fatalf("state %q, want Stopped", got)
	}
}
