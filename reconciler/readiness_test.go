package reconciler

import (
	"testing"
	"time"
)

func TestAvailable(t *testing.T) {
	now := epoch.Add(time.Hour)
	ready := func(since time.Time) Pod { return Pod{Phase: PhaseRunning, Ready: true, ReadySince: since} }
	cases := []struct {
		name     string
		pod      Pod
		minReady int
		want     bool
	}{
		{"not ready", Pod{Phase: PhaseRunning}, 0, false},
		{"ready but not running", Pod{Phase: PhasePending, Ready: true, ReadySince: epoch}, 0, false},
		{"ready, no min_ready_seconds", ready(now), 0, true},
		{"ready without ReadySince, no min_ready_seconds", ready(time.Time{}), 0, true},
		{"ready without ReadySince under min_ready_seconds", ready(time.Time{}), 10, false},
		{"ready for exactly min_ready_seconds", ready(now.Add(-10 * time.Second)), 10, true},
		{"ready a second short", ready(now.Add(-9 * time.Second)), 10, false},
		{"negative min_ready_seconds counts as none", ready(time.Time{}), -5, true},
		{"terminating is still available (the budget counts it apart)", Pod{Phase: PhaseRunning, Ready: true, ReadySince: epoch, Terminating: true}, 10, true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			if got := Available(tc.pod, tc.minReady, now); got != tc.want {
				t.Fatalf("Available = %v, want %v", got, tc.want)
			}
		})
	}
}

// TestAvailabilityAgrees: the test oracle (world.healthy) and the status the
// reconciler reports count the same pods as available. They once did not:
// the oracle took a Ready pod without ReadySince under min_ready_seconds as
// available, which the reconciler (rightly) does not, since nothing says
// the pod has been ready that long.
func TestAvailabilityAgrees(t *testing.T) {
	now := epoch.Add(time.Hour)
	cases := []struct {
		name     string
		minReady int
		pod      Pod
	}{
		{"ready without ReadySince under min_ready_seconds", 10, Pod{Phase: PhaseRunning, Ready: true}},
		{"ready without ReadySince, no min_ready_seconds", 0, Pod{Phase: PhaseRunning, Ready: true}},
		{"ready long enough", 10, Pod{Phase: PhaseRunning, Ready: true, ReadySince: now.Add(-time.Minute)}},
		{"ready too recently", 10, Pod{Phase: PhaseRunning, Ready: true, ReadySince: now.Add(-time.Second)}},
		{"not ready", 10, Pod{Phase: PhaseRunning}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			in := baseInput()
			in.Now = now
			in.Spec.MinReadySeconds = tc.minReady
			p := tc.pod
			p.Ordinal, p.Revision, p.Created = 0, in.Pods[0].Revision, epoch
			in.Pods[0] = p
			w := newWorld(in.Spec, "v1")
			w.now = now
			oracle := w.healthy(p)
			reported := Reconcile(in).Status.AvailableReplicas == 3
			if oracle != reported || Available(p, tc.minReady, now) != reported {
				t.Fatalf("available: oracle %v, Available %v, reconciler's status %v",
					oracle, Available(p, tc.minReady, now), reported)
			}
		})
	}
}
