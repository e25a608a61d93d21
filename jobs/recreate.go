package jobs

import (
	"fmt"

	"github.com/nomad-statefulset/nomad-statefulset/reconciler"
)

// checkRecreate applies the rule statefulset_update_strategy = "Recreate"
// sets on the other keys (DESIGN §3b, KEP-3541). A Recreate stops every
// pod at once on a new revision, so a partition has nothing to hold back:
// a non-zero statefulset_partition is refused, as Kubernetes refuses
// rollingUpdate settings for a strategy that is not RollingUpdate, and
// the problem names both keys. statefulset_max_unavailable is accepted:
// the Recreate's stop does not use it, but it still bounds what the set
// does one pod at a time under every strategy (a drain's evacuation, the
// repair of a drifted child, a volume growing), so it keeps a meaning.
func checkRecreate(spec reconciler.Spec, meta map[string]string, ps *problems) {
	if spec.UpdateStrategy != reconciler.Recreate || spec.Partition == 0 {
		return
	}
	ps.add(KeyPartition, meta[KeyPartition], fmt.Sprintf(
		"is not allowed with %s = %q: a Recreate stops every pod at once, so there is nothing to partition; remove %s or set it to 0",
		KeyUpdateStrategy, reconciler.Recreate, KeyPartition))
}
