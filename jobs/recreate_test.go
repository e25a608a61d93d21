package jobs

import (
	"errors"
	"strings"
	"testing"

	"github.com/nomad-statefulset/nomad-statefulset/reconciler"
)

// TestParseRecreate: statefulset_update_strategy = "Recreate" is accepted,
// with max_unavailable (which still bounds drains and repairs) and with a
// partition of 0; a partition above 0 is refused with one problem that
// names both keys, in the form every problem takes.
func TestParseRecreate(t *testing.T) {
	for _, tc := range []struct {
		name string
		meta map[string]string
		want string // the problem, as Problem.String renders it; empty: valid
	}{
		{name: "recreate", meta: map[string]string{KeyUpdateStrategy: "Recreate"}},
		{name: "with max unavailable", meta: map[string]string{KeyUpdateStrategy: "Recreate", KeyMaxUnavailable: "2"}},
		{name: "with partition 0", meta: map[string]string{KeyUpdateStrategy: "Recreate", KeyPartition: "0"}},
		{name: "with a partition", meta: map[string]string{KeyUpdateStrategy: "Recreate", KeyPartition: "2"},
			want: `statefulset_partition: "2" is not allowed with statefulset_update_strategy = "Recreate": ` +
				`a Recreate stops every pod at once, so there is nothing to partition; remove statefulset_partition or set it to 0`},
		{name: "a bad partition is reported once", meta: map[string]string{KeyUpdateStrategy: "Recreate", KeyPartition: "x"},
			want: `statefulset_partition: "x" is not an integer ≥ 0`},
		{name: "a partition with rolling update", meta: map[string]string{KeyUpdateStrategy: "RollingUpdate", KeyPartition: "2"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			spec, err := Parse(newJob(tc.meta))
			if tc.want == "" {
				if err != nil {
					t.Fatalf("Parse: %v", err)
				}
				if s := tc.meta[KeyUpdateStrategy]; spec.UpdateStrategy != reconciler.UpdateStrategy(s) {
					t.Fatalf("strategy %q, want %q", spec.UpdateStrategy, s)
				}
				return
			}
			var ve *ValidationError
			if !errors.As(err, &ve) || len(ve.Problems) != 1 {
				t.Fatalf("Parse: %v, want one problem", err)
			}
			if got := ve.Problems[0].String(); got != tc.want {
				t.Fatalf("problem\n  %s\nwant\n  %s", got, tc.want)
			}
			if !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("error %q does not carry the problem", err)
			}
		})
	}
}
