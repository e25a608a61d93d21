package nomad

import (
	"testing"

	"github.com/hashicorp/nomad/api"
)

// TestDeregisterKindOf: a JobDeregistered event's payload was modified at
// the event's index when Nomad stopped the job (it writes a stopped copy),
// and earlier when Nomad purged it (the payload is the deleted job). What
// fits neither is left to Nomad's answer, never guessed.
func TestDeregisterKindOf(t *testing.T) {
	job := func(modify uint64, stop bool) *api.Job {
		return &api.Job{ID: ptr("web-0"), ModifyIndex: ptr(modify), Stop: ptr(stop)}
	}
	for _, tc := range []struct {
		name  string
		job   *api.Job
		index uint64
		want  deregisterKind
	}{
		{"a stop: the stopped job written at the event's index", job(120, true), 120, deregisterStopped},
		{"a purge of a running job", job(100, false), 120, deregisterPurged},
		{"a purge of a stopped job", job(110, true), 120, deregisterPurged},
		{"written at the index but not stopped", job(120, false), 120, deregisterUnknown},
		{"modified after the event", job(130, true), 120, deregisterUnknown},
		{"an event without an index", job(120, true), 0, deregisterUnknown},
		{"a payload without a modify index", &api.Job{ID: ptr("web-0"), Stop: ptr(true)}, 120, deregisterUnknown},
		{"no payload", nil, 120, deregisterUnknown},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := deregisterKindOf(tc.job, tc.index); got != tc.want {
				t.Errorf("deregisterKindOf = %s, want %s", got, tc.want)
			}
		})
	}
}
