package command

import (
	"errors"
	"strconv"
	"strings"
	"testing"

	"github.com/nomad-statefulset/nomad-statefulset/jobs"
)

// TestScaleBoundIsTheParsers: the most scale accepts is the most the
// statefulset_replicas annotation takes, so that no count the CLI writes
// leaves the set InvalidSpec.
func TestScaleBoundIsTheParsers(t *testing.T) {
	for _, tc := range []struct {
		replicas int64
		valid    bool
	}{{maxReplicas, true}, {maxReplicas + 1, false}} {
		j := parentJob("web")
		j.Meta[jobs.KeyReplicas] = strconv.FormatInt(tc.replicas, 10)
		_, err := jobs.Parse(j)
		if (err == nil) != tc.valid {
			t.Errorf("jobs.Parse with %s = %d: %v; want valid %v", jobs.KeyReplicas, tc.replicas, err, tc.valid)
		}
		var verr *jobs.ValidationError
		if !tc.valid && (!errors.As(err, &verr) || !strings.Contains(err.Error(), strconv.Itoa(maxReplicas))) {
			t.Errorf("the parser's rule does not name the bound %d: %v", maxReplicas, err)
		}
	}
}

// TestScaleRefusesWhatTheParserWould: a count the annotation cannot take,
// or one that would make the job invalid, is refused with the rule it
// breaks, and nothing is written to Nomad.
func TestScaleRefusesWhatTheParserWould(t *testing.T) {
	long := strings.Repeat("a", 60) // a-…-99 is 63 characters, a-…-999 is 64
	for _, tc := range []struct {
		name     string
		set      string
		replicas string
		code     int
		want     string
	}{
		{"beyond the bound", "web", "99999999999", ExitUsage, "replicas 99999999999 is more than 2147483647, the most statefulset_replicas takes"},
		{"beyond int64", "web", "99999999999999999999999", ExitUsage, "is more than 2147483647"},
		{"one past the bound", "web", "2147483648", ExitUsage, "is more than 2147483647"},
		{"a sign", "web", "+3", ExitUsage, `replicas must be an integer from 0 to 2147483647, not "+3"`},
		{"a fraction", "web", "1.5", ExitUsage, `not "1.5"`},
		{"a pod name too long", long, "1000", ExitError, `not scaling statefulset "` + long + `" to 1000 replicas: the job would be invalid`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			nomad := newFakeNomad(t)
			nomad.put(parentJob(tc.set), 12)
			code, out, errOut := runWrite(t, scaleCmd, nomad, tc.set, tc.replicas)
			if code != tc.code || !strings.Contains(errOut, tc.want) {
				t.Fatalf("exit %d, stderr %q; want exit %d and %q", code, errOut, tc.code, tc.want)
			}
			if len(nomad.registers()) != 0 || strings.Contains(out, "re-registered") {
				t.Errorf("a refused scale was written: %d registers, stdout %q", len(nomad.registers()), out)
			}
		})
	}
	// Within the rules, the same long name scales.
	nomad := newFakeNomad(t)
	nomad.put(parentJob(long), 12)
	if code, _, errOut := runWrite(t, scaleCmd, nomad, long, "100"); code != ExitOK || len(nomad.registers()) != 1 {
		t.Fatalf("scale to 100: exit %d, %d registers, stderr %q", code, len(nomad.registers()), errOut)
	}
}

// TestScaleOfAnInvalidJobStillWrites: scale refuses to make a job
// invalid, not to touch one that already is (a fix may come from anyone).
func TestScaleOfAnInvalidJobStillWrites(t *testing.T) {
	j := parentJob("web")
	j.Meta[jobs.KeyUpdateStrategy] = "Rolling"
	nomad := newFakeNomad(t)
	nomad.put(j, 12)
	if code, _, errOut := runWrite(t, scaleCmd, nomad, "web", "5"); code != ExitOK || len(nomad.registers()) != 1 {
		t.Fatalf("exit %d, %d registers, stderr %q", code, len(nomad.registers()), errOut)
	}
}
