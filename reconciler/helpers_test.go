package reconciler

import (
	"fmt"
	"testing"
	"time"
)

// forPolicies runs a scenario as /OrderedReady (monotonic) and /Parallel
// (burst), each under every volume retention combination, the way
// TestStatefulSetControl runs its matrix.
func forPolicies(t *testing.T, f func(t *testing.T, spec Spec)) {
	t.Helper()
	for _, p := range []PodManagementPolicy{OrderedReady, Parallel} {
		for _, ws := range []RetentionPolicy{Retain, Delete} {
			for _, wd := range []RetentionPolicy{Retain, Delete} {
				spec := Spec{Name: "web", PodManagementPolicy: p, WhenScaled: ws, WhenDeleted: wd,
					VolumeClaims: []string{"data"}, ProgressDeadline: 10 * time.Minute}
				t.Run(fmt.Sprintf("%s/scaled=%s/deleted=%s", p, ws, wd), func(t *testing.T) { f(t, spec) })
			}
		}
	}
}

// mustStep runs one reconcile and fails the test on an invariant violation.
func mustStep(t *testing.T, w *world) Output {
	t.Helper()
	if err := w.step(); err != nil {
		t.Fatalf("%v\n%s", err, w.dump())
	}
	return w.last
}

// converge reconciles and moves every pod one step forward, with a second
// passing each round, until the set is at rest. It returns the number of
// reconciles it took.
func converge(t *testing.T, w *world) int {
	t.Helper()
	for i := 1; i <= 500; i++ {
		mustStep(t, w)
		if w.converged() {
			return i
		}
		w.advanceAll()
		w.now = w.now.Add(time.Second)
	}
	t.Fatalf("not converged after 500 steps\n%s", w.dump())
	return 0
}

// revisions returns the revision of each pod, by ordinal, "" where there is
// none.
func podRevisions(w *world, from, to int) []string {
	var revs []string
	for o := from; o < to; o++ {
		if i := w.podIndex(o); i >= 0 {
			revs = append(revs, w.pods[i].Revision)
		} else {
			revs = append(revs, "")
		}
	}
	return revs
}

func condition(st Status, typ ConditionType) Condition {
	for _, c := range st.Conditions {
		if c.Type == typ {
			return c
		}
	}
	return Condition{}
}

func countActions(out Output, typ ActionType) int {
	n := 0
	for _, a := range out.Actions {
		if a.Type == typ {
			n++
		}
	}
	return n
}

// revName is the name the reconciler gives template data with no collision.
func revName(set, data string) string {
	return RevisionName(set, HashRevision([]byte(data), 0))
}

// effects is out's actions without its status write (ActionRecordStatus,
// always the last), for the tests about what a decision does to the world.
// The status write's own rules are tested in TestStatusWrite.
func (o Output) effects() []Action {
	if n := len(o.Actions); n > 0 && o.Actions[n-1].Type == ActionRecordStatus {
		return o.Actions[:n-1]
	}
	return o.Actions
}
