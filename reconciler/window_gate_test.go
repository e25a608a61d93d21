package reconciler

import (
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"
)

// The world starts at epoch, Thursday 2026-01-01 00:00 UTC: a Saturday
// window is closed then, and opens on 2026-01-03 at 02:00.
const saturdayWindow = "Sat 02:00-05:00 UTC"

var saturdayStart = time.Date(2026, 1, 3, 2, 0, 0, 0, time.UTC)

// windowWorld is a converged 3-replica set with claim "data", made before
// the windows are set, so that its creation is not what is tested.
func windowWorld(t *testing.T, policy PodManagementPolicy, windows string) *world {
	t.Helper()
	w := newWorld(Spec{Replicas: 3, PodManagementPolicy: policy, VolumeClaims: []string{"data"},
		MaxUnavailable: IntOrPercent{Value: 1}, ProgressDeadline: 5 * time.Minute}, "v1")
	converge(t, w)
	w.spec.MaintenanceWindows = mustWindows(t, windows)
	return w
}

// liveTakedowns lists the Ready pods a decision takes down, by ordinal,
// with their causes.
func liveTakedowns(in Input, out Output) []string {
	var got []string
	for _, a := range out.Actions {
		if a.Type == ActionDeletePod && runningAndReady(&a.Pod) && !a.Pod.Terminating {
			got = append(got, fmt.Sprintf("%d:%s", a.Ordinal, a.Cause))
		}
	}
	return got
}

func windowHeld(out Output) (Hold, bool) {
	for _, h := range out.Held {
		if h.Reason == HoldWaitingForMaintenanceWindow {
			return h, true
		}
	}
	return Hold{}, false
}

// TestMaintenanceWindowGate: every kind of voluntary disruption waits for
// the window, and starts inside one; what is not voluntary (a pod down
// already, a create, a scale-up, a drain, a pod replace, the set's
// deletion) goes on outside it.
func TestMaintenanceWindowGate(t *testing.T) {
	cases := []struct {
		name   string
		policy PodManagementPolicy
		change func(w *world)
		// voluntary: held outside the window, and the action inside it.
		voluntary bool
		// want is an action the decision must emit outside the window
		// (when not voluntary), or inside it (when voluntary): type and
		// cause.
		want   ActionType
		cause  DeleteCause
		wantOn int
	}{
		{"rollout", OrderedReady, func(w *world) { w.template = []byte("v2") }, true, ActionDeletePod, CauseUpdate, 2},
		{"rollout restart", Parallel, func(w *world) { w.template = []byte("v1\nrestarted_at=2026-01-01T00:10:00Z") }, true, ActionDeletePod, CauseUpdate, 2},
		{"drift repair", OrderedReady, func(w *world) { w.pods[w.podIndex(1)].Drifted = true }, true, ActionDeletePod, CauseRepair, 1},
		{"volume expansion", OrderedReady, func(w *world) {
			w.spec.ClaimTemplates = []ClaimTemplate{{Claim: "data", CapacityMin: 20}}
		}, true, ActionDeletePod, CauseResize, 2},
		{"scale-down", OrderedReady, func(w *world) { w.spec.Replicas = 2 }, true, ActionDeletePod, CauseScaleDown, 2},
		{"scale-down, parallel", Parallel, func(w *world) { w.spec.Replicas = 1 }, true, ActionDeletePod, CauseScaleDown, 2},

		{"a failed pod", OrderedReady, func(w *world) {
			p := &w.pods[w.podIndex(1)]
			p.Phase, p.Ready, p.AllTerminal = PhaseFailed, false, true
		}, false, ActionDeletePod, CauseEnded, 1},
		{"a pod that is gone", OrderedReady, func(w *world) { w.pods = slices.Delete(w.pods, w.podIndex(1), w.podIndex(1)+1) }, false, ActionCreatePod, "", 1},
		{"scale-up", OrderedReady, func(w *world) { w.spec.Replicas = 4 }, false, ActionCreatePod, "", 3},
		{"a drain", OrderedReady, func(w *world) { w.drain(1) }, false, ActionDeletePod, CauseDrain, 1},
		{"a drifted pod that is down", OrderedReady, func(w *world) {
			p := &w.pods[w.podIndex(2)]
			p.Drifted, p.Ready, p.ReadySince = true, false, time.Time{}
		}, false, ActionDeletePod, CauseRepair, 2},
		{"an outdated pod that is down", Parallel, func(w *world) {
			w.template = []byte("v2")
			p := &w.pods[w.podIndex(0)]
			p.Ready, p.ReadySince = false, time.Time{}
		}, false, ActionDeletePod, CauseUpdate, 0},
		{"pod replace", OrderedReady, func(w *world) {
			w.spec.Replacements = []Replacement{{Ordinal: 1, Token: "r1"}}
		}, false, ActionDeletePod, CauseReplace, 1},
		{"the set's deletion", OrderedReady, func(w *world) { w.spec.Deleted = true }, false, ActionDeletePod, CauseSetDeleted, 2},
	}
	has := func(out Output, typ ActionType, cause DeleteCause, ord int) bool {
		return slices.ContainsFunc(out.Actions, func(a Action) bool { return a.Type == typ && a.Cause == cause && a.Ordinal == ord })
	}
	for _, c := range cases {
		t.Run(c.name+"/outside", func(t *testing.T) {
			w := windowWorld(t, c.policy, saturdayWindow)
			c.change(w)
			in := w.input()
			out := mustStep(t, w)
			if !c.voluntary {
				if !has(out, c.want, c.cause, c.wantOn) {
					t.Fatalf("want %s %s of %d outside the window, got %+v", c.want, c.cause, c.wantOn, out.Actions)
				}
				if _, held := windowHeld(out); held {
					t.Fatalf("held by the window: %+v", out.Held)
				}
				return
			}
			if got := liveTakedowns(in, out); len(got) > 0 {
				t.Fatalf("Ready pods taken down outside the window: %v", got)
			}
			h, held := windowHeld(out)
			if !held || h.Ordinal != c.wantOn || !h.Until.Equal(saturdayStart) || h.Step != StepDisrupt {
				t.Fatalf("want ordinal %d held until %v, held %+v", c.wantOn, saturdayStart, out.Held)
			}
			cond := condition(out.Status, ConditionWaitingForMaintenanceWindow)
			if !cond.Status || cond.Reason != ReasonOutsideMaintenanceWindow ||
				!strings.Contains(cond.Message, "2026-01-03T02:00:00Z (Sat 02:00 UTC)") || !strings.Contains(cond.Message, saturdayWindow) {
				t.Fatalf("condition %+v", cond)
			}
			if left := saturdayStart.Sub(w.now); out.Requeue <= 0 || out.Requeue > left {
				t.Fatalf("requeue %v, want at most %v (the window's start)", out.Requeue, left)
			}
			// And once the window opens, the step is taken.
			w.now = saturdayStart
			out = mustStep(t, w)
			if !has(out, c.want, c.cause, c.wantOn) {
				t.Fatalf("inside the window: want %s %s of %d, got %+v", c.want, c.cause, c.wantOn, out.Actions)
			}
			if condition(out.Status, ConditionWaitingForMaintenanceWindow).Status {
				t.Fatalf("still waiting inside the window: %+v", out.Status.Conditions)
			}
		})
		if !c.voluntary {
			continue
		}
		t.Run(c.name+"/inside", func(t *testing.T) {
			w := windowWorld(t, c.policy, "Thu 00:00-01:00 UTC")
			c.change(w)
			if out := mustStep(t, w); !has(out, c.want, c.cause, c.wantOn) {
				t.Fatalf("want %s %s of %d inside the window, got %+v, held %+v", c.want, c.cause, c.wantOn, out.Actions, out.Held)
			}
		})
	}
}

// TestMaintenanceWindowRolloutCrossesWindows: a rollout started inside a
// window stops when it closes, with the pods already updated kept, and
// finishes in the next one.
func TestMaintenanceWindowRolloutCrossesWindows(t *testing.T) {
	w := windowWorld(t, OrderedReady, "Thu 00:00-00:02 UTC, Fri 00:00-01:00 UTC")
	w.template = []byte("v2")
	v2 := revName("web", "v2")
	for w.now.Before(time.Date(2026, 1, 1, 0, 2, 0, 0, time.UTC)) {
		mustStep(t, w)
		w.advanceAll()
		w.now = w.now.Add(20 * time.Second)
	}
	// Steps of 20 seconds: a pod takes a minute or so to be replaced, so
	// two minutes are not enough for three.
	mustStep(t, w)
	before := podRevisions(w, 0, 3)
	if n := countOf(before, v2); n == 0 || n == 3 {
		t.Fatalf("the first window did not hold part of the rollout: %v", before)
	}
	for i := 0; i < 30; i++ {
		in := w.input()
		out := mustStep(t, w)
		if got := liveTakedowns(in, out); len(got) > 0 {
			t.Fatalf("Ready pods taken down after the window closed: %v", got)
		}
		w.advanceAll()
		w.now = w.now.Add(time.Minute)
	}
	if got := podRevisions(w, 0, 3); !slices.Equal(got, before) {
		t.Fatalf("revisions moved from %v to %v outside the window", before, got)
	}
	w.now = time.Date(2026, 1, 2, 0, 0, 0, 0, time.UTC)
	converge(t, w)
	if got := podRevisions(w, 0, 3); slices.ContainsFunc(got, func(r string) bool { return r != v2 }) {
		t.Fatalf("revisions %v after the Friday window", got)
	}
}

// TestMaintenanceWindowApprove: outside the window, `rollout approve` lets
// exactly one step through, even where the budget would allow more, and
// each new approval one more.
func TestMaintenanceWindowApprove(t *testing.T) {
	for _, policy := range []PodManagementPolicy{OrderedReady, Parallel} {
		t.Run(string(policy), func(t *testing.T) {
			w := windowWorld(t, policy, saturdayWindow)
			w.spec.MaxUnavailable = IntOrPercent{Value: 3}
			w.template = []byte("v2")
			in := w.input()
			if got := liveTakedowns(in, mustStep(t, w)); len(got) > 0 {
				t.Fatalf("taken down before any approval: %v", got)
			}
			for k, token := range []string{"a1", "a2"} {
				w.spec.Approval = token
				in = w.input()
				out := mustStep(t, w)
				if got := liveTakedowns(in, out); len(got) != 1 {
					t.Fatalf("approval %s: taken down %v, want one pod", token, got)
				}
				if out.Status.ApprovalUsed != token {
					t.Fatalf("approval %s not recorded as used: %q", token, out.Status.ApprovalUsed)
				}
				// The same token lets nothing more through.
				for i := 0; i < 20; i++ {
					w.advanceAll()
					w.now = w.now.Add(time.Second)
					in = w.input()
					if got := liveTakedowns(in, mustStep(t, w)); len(got) > 0 {
						t.Fatalf("approval %s used twice (step %d after it): %v", token, i, got)
					}
				}
				if got := podRevisions(w, 0, 3); countOf(got, revName("web", "v2")) != k+1 {
					t.Fatalf("after approval %s: revisions %v", token, got)
				}
				if !condition(w.last.Status, ConditionWaitingForMaintenanceWindow).Status {
					t.Fatalf("not waiting for the window after the approved step: %+v", w.last.Status.Conditions)
				}
			}
		})
	}
}

func countOf(xs []string, x string) int {
	n := 0
	for _, y := range xs {
		if y == x {
			n++
		}
	}
	return n
}

// TestMaintenanceWindowApproveAnswersTheWholeStep: one approval lets one
// supervised leader through the window and its own approval wait alike,
// not two pods.
func TestMaintenanceWindowApproveAnswersTheWholeStep(t *testing.T) {
	w := windowWorld(t, OrderedReady, saturdayWindow)
	w.spec.LeaderCheck, w.spec.LeaderUpdate = "primary", LeaderSupervised
	w.spec.DisruptionCheck = "check"
	w.leader = 2 // the highest ordinal goes first: the leader's own step
	w.template = []byte("v2")
	mustStep(t, w)
	w.spec.Approval = "a1"
	in := w.input()
	out := mustStep(t, w)
	if got := liveTakedowns(in, out); len(got) > 1 {
		t.Fatalf("one approval took down %v", got)
	}
}

// TestMaintenanceWindowProgressDeadline: days of waiting for the window are
// not a lack of progress; once the window opens the deadline counts from
// then, and fires for a rollout that then truly makes none.
func TestMaintenanceWindowProgressDeadline(t *testing.T) {
	w := windowWorld(t, OrderedReady, saturdayWindow)
	w.broken["bad"] = true
	w.template = []byte("bad")
	first := mustStep(t, w)
	for _, d := range []time.Duration{time.Minute, 6 * time.Minute, time.Hour, 49 * time.Hour} {
		w.now = epoch.Add(d)
		out := mustStep(t, w)
		if c := condition(out.Status, ConditionRolloutStuck); c.Status {
			t.Fatalf("stuck %v into the wait: %+v", d, c)
		}
		if c := condition(out.Status, ConditionProgressing); !c.Status || !strings.Contains(c.Message, HoldWaitingForMaintenanceWindow) {
			t.Fatalf("Progressing %+v", c)
		}
		if !StatusEqual(out.Status, first.Status) {
			// A long wait stores nothing new on every pass.
			t.Fatalf("the status changed while waiting:\n%+v\n%+v", first.Status, out.Status)
		}
		if out.Requeue <= 0 || out.Requeue > saturdayStart.Sub(w.now) {
			t.Fatalf("requeue %v at %v, want by the window's start", out.Requeue, w.now)
		}
	}
	w.now = saturdayStart
	out := mustStep(t, w)
	if c := condition(out.Status, ConditionRolloutStuck); c.Status {
		t.Fatalf("stuck as the window opens: %+v", c)
	}
	if !out.Status.LastProgressTime.Equal(saturdayStart) {
		t.Fatalf("the deadline counts from %v, want the window's start %v", out.Status.LastProgressTime, saturdayStart)
	}
	if got := countActions(out, ActionDeletePod); got != 1 {
		t.Fatalf("%d deletes as the window opens", got)
	}
	// The bad pod never becomes ready: the deadline, counted from the
	// opening, fires.
	for i := 0; i < 3; i++ {
		w.advanceAll()
		w.now = w.now.Add(time.Second)
		mustStep(t, w)
	}
	w.now = saturdayStart.Add(4 * time.Minute)
	if c := condition(mustStep(t, w).Status, ConditionRolloutStuck); c.Status {
		t.Fatalf("stuck within the deadline from the opening: %+v", c)
	}
	// (Its creation at the bad revision was the last progress.)
	w.now = saturdayStart.Add(6 * time.Minute)
	if c := condition(mustStep(t, w).Status, ConditionRolloutStuck); !c.Status {
		t.Fatalf("not stuck a deadline after the opening: %+v\n%s", c, w.dump())
	}
}

// TestMaintenanceWindowBadInput: windows built by hand with values the
// parser never gives (no zone, days and times out of range) decide
// without a panic.
func TestMaintenanceWindowBadInput(t *testing.T) {
	in := baseInput()
	in.TemplateData = []byte("v2")
	for _, ws := range []Windows{
		{{}},
		{{From: 9, To: 200, Start: -5, End: 9000}},
		{{EveryDay: true, Start: 100, End: 100}},
	} {
		in.Spec.MaintenanceWindows = ws
		safe(t, in)
		_ = ws.String()
	}
}
