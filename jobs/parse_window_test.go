package jobs

import (
	"errors"
	"strings"
	"testing"
)

// TestParseMaintenanceWindow: statefulset_maintenance_window becomes
// Spec.MaintenanceWindows; a value that does not parse is a problem of its
// own key, naming the window and what is wrong with it, in the form users
// see (`key: "value" rule`).
func TestParseMaintenanceWindow(t *testing.T) {
	cases := []struct {
		name, value string
		want        string // the windows' String when valid
		problem     string // the problem's String when not
	}{
		{name: "one window", value: "Sat 02:00-05:00 UTC", want: "Sat 02:00-05:00 UTC"},
		{name: "two windows and a zone", value: " Sat 02:00-05:00 UTC, Mon-Fri 22:00-23:30 Europe/Berlin ",
			want: "Sat 02:00-05:00 UTC, Mon-Fri 22:00-23:30 Europe/Berlin"},
		{name: "every day", value: "02:00-03:00 America/Sao_Paulo", want: "02:00-03:00 America/Sao_Paulo"},
		{name: "an hour out of range", value: "Sat 02:00-25:00 UTC",
			problem: `statefulset_maintenance_window: "Sat 02:00-25:00 UTC" window 1: end "25:00" is not a time of day HH:MM (00:00 to 24:00)`},
		{name: "an unknown zone", value: "Sat 02:00-05:00 UTC, Sun 02:00-05:00 Europe/Berln",
			problem: `statefulset_maintenance_window: "Sat 02:00-05:00 UTC, Sun 02:00-05:00 Europe/Berln" window 2: zone "Europe/Berln" is not a time zone (UTC, or an IANA name such as Europe/Berlin): unknown time zone Europe/Berln`},
		{name: "days as a list", value: "Sat,Sun 02:00-05:00 UTC",
			problem: `statefulset_maintenance_window: "Sat,Sun 02:00-05:00 UTC" window 1: "Sat" is not "[<days>] HH:MM-HH:MM <zone>", such as "Sat 02:00-05:00 UTC" or "Mon-Fri 22:00-23:30 Europe/Berlin"`},
		{name: "empty", value: " ",
			problem: `statefulset_maintenance_window: " " names no window: write one or more windows "[<days>] HH:MM-HH:MM <zone>", such as "Sat 02:00-05:00 UTC" or "Mon-Fri 22:00-23:30 Europe/Berlin", separated by commas`},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			spec, err := Parse(newJob(map[string]string{KeyMaintenanceWindow: tc.value}))
			if tc.problem == "" {
				if err != nil {
					t.Fatalf("Parse: %v", err)
				}
				if got := spec.MaintenanceWindows.String(); got != tc.want {
					t.Fatalf("windows %q, want %q", got, tc.want)
				}
				return
			}
			var verr *ValidationError
			if !errors.As(err, &verr) || len(verr.Problems) != 1 {
				t.Fatalf("Parse: err = %v, want one problem", err)
			}
			if got := verr.Problems[0].String(); got != tc.problem {
				t.Fatalf("problem\n %s\nwant\n %s", got, tc.problem)
			}
		})
	}
	spec, err := Parse(newJob(nil))
	if err != nil || spec.MaintenanceWindows != nil {
		t.Fatalf("without the key: windows %v, err %v; want none (disruptions at any time)", spec.MaintenanceWindows, err)
	}
	if _, err := Parse(newJob(map[string]string{"statefulset_maintenance_windows": "Sat 02:00-05:00 UTC"})); err == nil ||
		!strings.Contains(err.Error(), `did you mean "statefulset_maintenance_window"?`) {
		t.Fatalf("a typo of the key: %v", err)
	}
}
