package reconciler

import (
	"slices"
	"testing"
	"time"
)

// TestClaimGrowthIsARollingDisruption: raising a claim's capacity grows
// every ordinal's volume as a rolling update would move it: one pod at a
// time within the budget, highest ordinal first, each volume expanded only
// once its pod is gone and before the pod comes back on it; a pod whose
// volume is already large enough is never restarted, and no revision is
// made.
func TestClaimGrowthIsARollingDisruption(t *testing.T) {
	forPolicies(t, func(t *testing.T, spec Spec) {
		spec.Replicas = 3
		w := newWorld(spec, "v1")
		converge(t, w)
		revisions := len(w.revisions)
		// Ordinal 1's volume is already large enough.
		w.volumes[slices.IndexFunc(w.volumes, func(v Volume) bool { return v.Ordinal == 1 })].Capacity = 50
		w.spec.ClaimTemplates = []ClaimTemplate{{Claim: "data", CapacityMin: 20}}
		w.checkBudget = true
		var order []string
		for i := 0; i < 300 && (i == 0 || !w.converged()); i++ {
			for _, a := range mustStep(t, w).effects() {
				switch a.Type {
				case ActionDeletePod:
					order = append(order, "delete "+itoa(a.Ordinal))
				case ActionExpandVolume:
					order = append(order, "expand "+itoa(a.Ordinal))
				case ActionCreatePod:
					order = append(order, "create "+itoa(a.Ordinal))
				}
			}
			w.advanceAll()
			w.now = w.now.Add(time.Second)
		}
		want := []string{"delete 2", "expand 2", "create 2", "delete 0", "expand 0", "create 0"}
		if !slices.Equal(order, want) {
			t.Fatalf("order %v, want %v", order, want)
		}
		for _, v := range w.volumes {
			if v.Capacity < 20 {
				t.Fatalf("volume %s has %d bytes after the growth", v.Name, v.Capacity)
			}
		}
		if len(w.revisions) != revisions || w.volumesDeleted != 0 {
			t.Fatalf("%d revisions (was %d), %d volumes deleted: a growth is neither a revision nor a new volume", len(w.revisions), revisions, w.volumesDeleted)
		}
	})
}

// TestClaimShrinkAndClassChangeTouchNothing: a maximum below a volume's size
// and a class other than a volume's are refused with a condition naming
// the volumes, and no pod is taken down.
func TestClaimShrinkAndClassChangeTouchNothing(t *testing.T) {
	spec := Spec{Name: "web", Replicas: 2, VolumeClaims: []string{"data"}, ProgressDeadline: time.Minute}
	w := newWorld(spec, "v1")
	converge(t, w)
	for _, tc := range []struct {
		name string
		tmpl ClaimTemplate
		want string
	}{
		{"shrink", ClaimTemplate{Claim: "data", CapacityMax: 2}, "volumes do not shrink; larger than their claim's maximum: data-web-0, data-web-1"},
		{"class", ClaimTemplate{Claim: "data", Class: "fast", CapacityMin: 100}, "a class applies to volumes made after it; of another class: data-web-0, data-web-1"},
	} {
		w.spec.ClaimTemplates = []ClaimTemplate{tc.tmpl}
		out := mustStep(t, w)
		if len(out.effects()) != 0 {
			t.Fatalf("%s: acted %+v", tc.name, out.effects())
		}
		c := slices.IndexFunc(out.Status.Conditions, func(c Condition) bool { return c.Type == ConditionVolumeClaimRefused && c.Status })
		if c < 0 || out.Status.Conditions[c].Message != tc.want {
			t.Fatalf("%s: conditions %+v, want VolumeClaimRefused %q", tc.name, out.Status.Conditions, tc.want)
		}
	}
}

func itoa(n int) string { return string(rune('0' + n)) }
