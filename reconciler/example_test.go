package reconciler_test

import (
	"fmt"
	"time"

	"github.com/nomad-statefulset/nomad-statefulset/reconciler"
)

// The first reconcile of a new OrderedReady set stores its first revision,
// then creates the volume and the pod of ordinal 0 only: ordinal 1 waits
// until pod 0 is Running and Ready. The status of the decision is its last
// write.
func ExampleReconcile() {
	out := reconciler.Reconcile(reconciler.Input{
		Spec: reconciler.Spec{
			Name:                "web",
			Replicas:            2,
			PodManagementPolicy: reconciler.OrderedReady,
			UpdateStrategy:      reconciler.RollingUpdate,
			VolumeClaims:        []string{"data"},
			ProgressDeadline:    10 * time.Minute,
		},
		TemplateData: []byte(`{"group":"web"}`),
		Now:          time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC),
	})
	for _, a := range out.Actions {
		switch a.Type {
		case reconciler.ActionRecordOrdinals:
			fmt.Println(a.Type, len(a.Ordinals), "members")
		case reconciler.ActionCreateVolume:
			fmt.Println(a.Type, a.Ordinal, a.Volume.Name)
		case reconciler.ActionRecordStatus:
			fmt.Println(a.Type, "update revision", a.Status.UpdateRevision)
		default:
			fmt.Println(a.Type, a.Ordinal, a.Revision.Name)
		}
	}
	fmt.Println(out.Status.UpdateRevision, out.Requeue)
	// The revision name is pinned on purpose: revision names are visible to
	// users (rollout history, the statefulset_revision meta of every child)
	// and must not change from one release to the next.

	// Output:
	// RecordOrdinals 2 members
	// CreateRevision 0 web-555694f64b
	// CreateVolume 0 data-web-0
	// CreatePod 0 web-555694f64b
	// RecordStatus update revision web-555694f64b
	// web-555694f64b 10m0s
}
