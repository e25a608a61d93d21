package reconciler

import "time"

// Available reports whether pod p counts as available at now: Running and
// Ready for at least minReadySeconds (DESIGN §2). The reconciler, the
// agent's views and the tests all judge it here, so that a pod the status
// counts as available is the one the user sees as Available.
//
// A Ready pod whose ReadySince is unknown (zero) is available only when
// minReadySeconds is 0: nothing says it has been ready that long, and
// counting it would let a rollout spend the budget on a pod that may have
// just come up.
func Available(p Pod, minReadySeconds int, now time.Time) bool {
	if p.Phase != PhaseRunning || !p.Ready {
		return false
	}
	if minReadySeconds <= 0 {
		return true
	}
	if p.ReadySince.IsZero() {
		return false
	}
	return !now.Before(p.ReadySince.Add(time.Duration(minReadySeconds) * time.Second))
}
