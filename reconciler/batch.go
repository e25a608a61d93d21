package reconciler

// MaxCreateBatch bounds how many pods are created at once, as upstream's
// MaxBatchSize does.
const MaxCreateBatch = 500

// BurstCreates returns how many CreatePod actions lead actions when the set
// allows bursts (Parallel): the run that is carried out in slow-start
// batches (SlowStartBatches), as upstream's runForAll creates a bursting
// set's pods with slowStartBatch. It returns 0 for OrderedReady. The agent
// and the test worlds both carry out a decision by it.
func BurstCreates(spec Spec, actions []Action) int {
	if spec.PodManagementPolicy != Parallel {
		return 0
	}
	n := 0
	for n < len(actions) && actions[n].Type == ActionCreatePod {
		n++
	}
	return n
}

// SlowStartBatches splits n creations into batches of 1, 2, 4 … (at most
// MaxCreateBatch). Every batch finishes before the next starts, and a batch
// with a failure is the last.
func SlowStartBatches(n int) []int {
	var sizes []int
	for size := 1; n > 0; size = min(2*size, MaxCreateBatch) {
		b := min(size, n)
		sizes = append(sizes, b)
		n -= b
	}
	return sizes
}

// Batches splits a decision's actions into the groups they are carried out
// in: each run of a bursting set's CreatePods in slow-start batches
// (BurstCreates, SlowStartBatches), each run of PostReady asks in groups
// of MaxPostReadyCalls, every other action alone. The actions
// of one group may run at once; a group ends before the next starts, and
// the caller runs a prefix of the groups: it stops after the first group
// in which an action failed or met a wait, and decides again. The agent and
// the test worlds both carry a decision out by it.
func Batches(spec Spec, actions []Action) [][]Action {
	out := make([][]Action, 0, len(actions))
	for next := 0; next < len(actions); {
		if actions[next].Type == ActionPostReady {
			// The hooks of many pods are asked side by side (a Parallel
			// set may have many become ready at once), so the wait is the
			// slowest pod's, not the sum; but no more than
			// MaxPostReadyCalls at once.
			end := next
			for end < len(actions) && end-next < MaxPostReadyCalls && actions[end].Type == ActionPostReady {
				end++
			}
			out = append(out, actions[next:end])
			next = end
			continue
		}
		n := BurstCreates(spec, actions[next:])
		if n < 2 {
			out = append(out, actions[next:next+1])
			next++
			continue
		}
		for _, size := range SlowStartBatches(n) {
			out = append(out, actions[next:next+size])
			next += size
		}
	}
	return out
}
