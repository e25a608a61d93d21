package reconciler

import (
	"testing"
	"time"
)

// TestStatusWrite: the status of a decision is written by its last action,
// ActionRecordStatus, exactly when it says something the stored status does
// not (or none is stored), and never by a cascading delete that removes the
// set's state or finds nothing left: that write would bring the state back.
// A pass that stops before the write leaves the stored status as it was
// (the randomized world injects failures and waits into it too).
func TestStatusWrite(t *testing.T) {
	steady := baseInput()
	steady.Previous = Reconcile(steady).Status

	deleted := baseInput()
	deleted.Spec.Deleted = true
	deleted.Pods, deleted.Volumes = nil, nil

	deletedAbsent := deleted
	deletedAbsent.StateAbsent = true

	deletedStopped := deletedAbsent
	deletedStopped.Stopped = []StoppedChild{{JobID: "web-1", Ordinal: 1}}

	tearingDown := baseInput()
	tearingDown.Spec.Deleted = true

	missing := steady
	missing.StatusMissing = true

	for _, tc := range []struct {
		name      string
		in        Input
		wantWrite bool
		wantGone  bool
	}{
		{"converged: the stored status says it all", steady, false, false},
		{"converged, no status stored: written", missing, true, false},
		{"changed: written last", baseInput(), true, false},
		{"a cascade that still deletes pods: written", tearingDown, true, false},
		{"a cascade that deletes the state: not written", deleted, false, true},
		{"a cascade with nothing left: not written", deletedAbsent, false, true},
		{"a cascade that purges stopped children with the state: not written", deletedStopped, false, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			out := Reconcile(tc.in)
			if err := checkStatusWrite(tc.in, out); err != nil {
				t.Fatal(err)
			}
			n := len(out.Actions)
			wrote := n > 0 && out.Actions[n-1].Type == ActionRecordStatus
			if wrote != tc.wantWrite || out.Gone != tc.wantGone {
				t.Fatalf("status written %v, gone %v; want %v, %v (actions %+v)", wrote, out.Gone, tc.wantWrite, tc.wantGone, out.Actions)
			}
		})
	}
}

// TestInvalidDecision: a spec that does not parse leaves the set untouched;
// its decision only records the InvalidSpec condition, once.
func TestInvalidDecision(t *testing.T) {
	now := epoch.Add(time.Hour)
	first := InvalidDecision(Status{}, false, `statefulset_replicas = "x": not a number`, now)
	if len(first.Actions) != 1 || first.Actions[0].Type != ActionRecordStatus || !StatusEqual(*first.Actions[0].Status, first.Status) {
		t.Fatalf("first invalid decision: %+v", first.Actions)
	}
	if c := condition(first.Status, ConditionInvalidSpec); !c.Status || c.Message == "" {
		t.Fatalf("no InvalidSpec condition: %+v", first.Status.Conditions)
	}
	again := InvalidDecision(first.Status, false, `statefulset_replicas = "x": not a number`, now.Add(time.Minute))
	if len(again.Actions) != 0 {
		t.Fatalf("the same invalid spec again writes: %+v", again.Actions)
	}
	if missing := InvalidDecision(first.Status, true, `statefulset_replicas = "x": not a number`, now); len(missing.Actions) != 1 {
		t.Fatalf("no status stored: not written: %+v", missing.Actions)
	}
}
