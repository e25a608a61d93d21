package agent

import (
	"testing"
	"time"

	"github.com/nomad-statefulset/nomad-statefulset/reconciler"
)

// A hold with a retry time says when; one without (the supervised leader
// waiting for `rollout approve`) says nothing of a retry. It used to print
// the zero time's distance: "trying again in -2562047h47m16.854775808s".
func TestHeldMessage(t *testing.T) {
	now := time.Date(2026, 11, 26, 2, 21, 50, 0, time.UTC)
	for _, tc := range []struct {
		hold reconciler.Hold
		want string
	}{
		{reconciler.Hold{Ordinal: 2, Reason: reconciler.HoldDisruptionCheckFailed, Message: "no: disruptions are held", Until: now.Add(5 * time.Second)},
			"pg-2: no: disruptions are held; trying again in 5s"},
		{reconciler.Hold{Ordinal: 1, Reason: reconciler.HoldWaitingForApproval, Message: "the leader is taken down only once approved"},
			"pg-1: the leader is taken down only once approved"},
	} {
		if got := heldMessage("pg", tc.hold, now); got != tc.want {
			t.Errorf("heldMessage(%+v) = %q, want %q", tc.hold, got, tc.want)
		}
	}
}
