package agent

import (
	"reflect"
	"testing"
	"time"

	"github.com/nomad-statefulset/nomad-statefulset/backend/nomad"
	"github.com/nomad-statefulset/nomad-statefulset/client"
	"github.com/nomad-statefulset/nomad-statefulset/reconciler"
)

// Readiness changes of a pod whose allocation stays the same are events;
// a new allocation's first readiness, a post_ready hook's release (it has
// its own event) and a pod being replaced are not.
func TestReadinessEvents(t *testing.T) {
	pod := func(alloc, state, why string) client.Pod {
		return client.Pod{Ordinal: 0, Name: "web-0", AllocID: alloc, State: state, NotReady: why}
	}
	cases := []struct {
		name          string
		before, after client.Pod
		want          [][2]string
	}{
		{"a check turns critical", pod("a1", "Available", ""), pod("a1", "Running", `check "c" of service "web" is critical`),
			[][2]string{{EventPodNotReady, `web-0 is no longer ready: check "c" of service "web" is critical`}}},
		{"a task restarts", pod("a1", "Ready", ""), pod("a1", "Running", "task app is restarting (1 restarts)"),
			[][2]string{{EventPodNotReady, "web-0 is no longer ready: task app is restarting (1 restarts)"}}},
		{"ready again", pod("a1", "Running", "task app failed"), pod("a1", "Ready", ""),
			[][2]string{{EventPodReady, "web-0 is ready again (it was not: task app failed)"}}},
		{"first readiness of an allocation", pod("a1", "Running", nomad.WaitingForHealth), pod("a1", "Ready", ""), nil},
		{"released by a post_ready hook", pod("a1", "Running", notReadyHookHeld), pod("a1", "Ready", ""), nil},
		{"a new allocation", pod("a1", "Available", ""), pod("a2", "Running", nomad.WaitingForHealth), nil},
		{"stopped by the daemon", pod("a1", "Available", ""), pod("a1", "Terminating", ""), nil},
		{"unchanged", pod("a1", "Available", ""), pod("a1", "Available", ""), nil},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got := readinessEvents([]client.Pod{tc.before}, []client.Pod{tc.after})
			if !reflect.DeepEqual(got, tc.want) {
				t.Fatalf("events %q, want %q", got, tc.want)
			}
		})
	}
}

// A pod the view shows as Available is one the reconciler counts as
// available, and the other way round. They once disagreed about a Ready pod
// without ReadySince under min_ready_seconds: the view showed it Available
// while the status (rightly) did not count it.
func TestPodStateAgreesWithTheReconciler(t *testing.T) {
	now := time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC)
	ready := func(since time.Time) reconciler.Pod {
		return reconciler.Pod{Revision: "web-1", Phase: reconciler.PhaseRunning, Ready: true, ReadySince: since}
	}
	cases := []struct {
		name     string
		minReady int
		pod      reconciler.Pod
	}{
		{"ready without ReadySince under min_ready_seconds", 10, ready(time.Time{})},
		{"ready without ReadySince, no min_ready_seconds", 0, ready(time.Time{})},
		{"ready long enough", 10, ready(now.Add(-10 * time.Second))},
		{"ready too recently", 10, ready(now.Add(-9 * time.Second))},
		{"running, not ready", 0, reconciler.Pod{Revision: "web-1", Phase: reconciler.PhaseRunning}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			out := reconciler.Reconcile(reconciler.Input{
				Spec:         reconciler.Spec{Name: "web", Replicas: 1, MinReadySeconds: tc.minReady},
				TemplateData: []byte("v1"), Pods: []reconciler.Pod{tc.pod}, Now: now,
			})
			counted := out.Status.AvailableReplicas == 1
			if shown := podState(tc.pod, tc.minReady, now) == "Available"; shown != counted {
				t.Fatalf("the view shows the pod %s; the reconciler counts it available: %v",
					podState(tc.pod, tc.minReady, now), counted)
			}
		})
	}
}
