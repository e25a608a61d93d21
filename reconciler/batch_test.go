package reconciler

import (
	"slices"
	"testing"
)

// TestSlowStartBatches is upstream's slowStartBatch(1, n, …): batches
// double from one, up to MaxBatchSize (500).
func TestSlowStartBatches(t *testing.T) {
	for _, tc := range []struct {
		n    int
		want []int
	}{
		{0, nil}, {1, []int{1}}, {5, []int{1, 2, 2}}, {7, []int{1, 2, 4}},
		{1200, []int{1, 2, 4, 8, 16, 32, 64, 128, 256, 500, 189}},
	} {
		if got := SlowStartBatches(tc.n); !slices.Equal(got, tc.want) {
			t.Errorf("SlowStartBatches(%d) = %v, want %v", tc.n, got, tc.want)
		}
	}
}

// TestBurstCreates: only a Parallel set's leading run of CreatePod actions
// goes out in batches (upstream: monotonic = !allowsBurst(set)).
func TestBurstCreates(t *testing.T) {
	create, vol := Action{Type: ActionCreatePod}, Action{Type: ActionCreateVolume}
	for _, tc := range []struct {
		policy  PodManagementPolicy
		actions []Action
		want    int
	}{
		{Parallel, []Action{create, create, create, vol, create}, 3},
		{Parallel, []Action{vol, create, create}, 0},
		{OrderedReady, []Action{create, create}, 0},
	} {
		if got := BurstCreates(Spec{PodManagementPolicy: tc.policy}, tc.actions); got != tc.want {
			t.Errorf("BurstCreates(%s, %v) = %d, want %d", tc.policy, tc.actions, got, tc.want)
		}
	}
}
