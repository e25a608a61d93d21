package agent

import (
	"testing"
	"time"

	"github.com/hashicorp/nomad/api"

	"github.com/nomad-statefulset/nomad-statefulset/backend"
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

// TestPodStateOfAPlacementWait: a pod Nomad could not place is Blocked with
// Nomad's reason; one that waits for Nomad to mark its new volume ready
// (backend.PodDetail.Waiting) is Pending and says so.
func TestPodStateOfAPlacementWait(t *testing.T) {
	key := backend.SetKey{Namespace: "default", Name: "web"}
	pending := reconciler.Pod{Ordinal: 0, Phase: reconciler.PhasePending}
	const failure = `Nomad could not place it: group "web": 1 of 1 nodes filtered (${meta.rack} = nowhere: 1)`
	for _, tc := range []struct {
		name          string
		pod           nomad.PodDetail
		state, reason string
	}{
		{"a placement failure", nomad.PodDetail{Pod: pending, Blocked: failure}, "Blocked", failure},
		{"its new volume not ready yet", nomad.PodDetail{Pod: pending, Waiting: "waiting for data-web-0"}, "Pending", "waiting for data-web-0"},
		{"pending with nothing to say", nomad.PodDetail{Pod: pending}, "Pending", ""},
	} {
		s := newSetStates(nil)
		s.update(key, reconciler.Spec{Name: "web", Replicas: 1}, reconciler.Status{}, backend.Observation{Pods: []backend.PodDetail{tc.pod}}, nil, time.Unix(1000, 0))
		d, _ := s.get(key)
		if len(d.Pods) != 1 || d.Pods[0].State != tc.state || d.Pods[0].NotReady != tc.reason {
			t.Errorf("%s: pods %+v, want state %q, reason %q", tc.name, d.Pods, tc.state, tc.reason)
		}
	}
}
