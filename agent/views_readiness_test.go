package agent

import (
	"reflect"
	"testing"

	"github.com/nomad-statefulset/nomad-statefulset/backend/nomad"
	"github.com/nomad-statefulset/nomad-statefulset/client"
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
