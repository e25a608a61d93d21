package reconciler

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"sync/atomic"
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

// randomWindows is a maintenance window list for the randomized drivers:
// a few short windows near the world's epoch (00:00 UTC), so that a run's
// clock crosses some, in UTC or in Berlin (01:00 there), on every day or
// on some. Built as text, it goes through the parser too.
func randomWindows(rng *rand.Rand) Windows {
	var parts []string
	for n := 1 + rng.IntN(2); n > 0; n-- {
		start := rng.IntN(12)
		end := start + 1 + rng.IntN(4)
		hour, zone := 0, "UTC"
		if rng.IntN(3) == 0 {
			hour, zone = 1, "Europe/Berlin"
		}
		days := []string{"", "Thu ", "Wed-Fri ", "Fri ", "Sat-Thu "}[rng.IntN(5)]
		parts = append(parts, fmt.Sprintf("%s%02d:%02d-%02d:%02d %s", days, hour, start, hour, end, zone))
	}
	if rng.IntN(8) == 0 {
		parts = append(parts, "23:59-00:01 UTC") // across midnight
	}
	ws, err := ParseMaintenanceWindows(strings.Join(parts, ", "))
	if err != nil {
		panic(err)
	}
	return ws
}

// windowChaos is the randomized drivers' part of the windows: now and
// then a set gets windows or loses them, and the clock jumps ahead by
// minutes or hours (a quiet stretch with no event), crossing windows.
func windowChaos(w *world, rng *rand.Rand) {
	switch rng.IntN(16) {
	case 0:
		w.spec.MaintenanceWindows = randomWindows(rng)
		w.logf("spec: maintenance windows %s", w.spec.MaintenanceWindows)
	case 1:
		w.spec.MaintenanceWindows = nil
		w.logf("spec: no maintenance windows")
	case 2, 3:
		d := time.Duration(1+rng.IntN(180)) * time.Minute
		w.now = w.now.Add(d)
		w.logf("world: %s pass quietly; now %s", d, w.now.Format(time.RFC3339))
	}
}

// waitForWindow plays the agent's requeue: a set waiting for its
// maintenance window is looked at again when the window opens (with no
// event in between). Now and then the operator approves one step instead.
func (w *world) waitForWindow() {
	h, ok := windowHeld(w.last)
	if !ok || !h.Until.After(w.now) {
		return
	}
	if w.rng.IntN(4) == 0 {
		w.spec.Approval = fmt.Sprint("window-", w.steps)
		w.logf("user: rollout approve outside the window (%s)", w.spec.Approval)
		return
	}
	w.now = h.Until
	randomWindowWaits.Add(1)
	w.logf("world: waited for the maintenance window; now %s", w.now.Format(time.RFC3339))
}

// randomWindowWaits counts the waits for a window the randomized drivers
// sat out, randomWindowHolds the decisions that held a step for one, and
// randomWindowApproved the steps an approval let through outside one:
// TestRandomized fails when a full run never got there.
var randomWindowWaits, randomWindowHolds, randomWindowApproved atomic.Int64

// checkMaintenanceWindow is DESIGN §3b's window promise on one decision:
// outside every maintenance window no voluntary disruption starts, except
// one approved step. It is judged from the observation, not from the
// causes the decision gives: a Ready pod taken down, asked about (the
// disruption check) or made to hand leadership over counts, unless it is on
// a draining node, the user asked to replace its ordinal, or the set is
// being deleted. One approval is good for one pod, whatever else it
// answered for (a supervised leader, a disruption check).
//
// While a step waits for the window, the set says so
// (WaitingForMaintenanceWindow, naming the next start), is not stuck, and
// is looked at again by the time the window opens.
func checkMaintenanceWindow(in Input, out Output) error {
	spec := in.Spec
	if StatusDetached(out.Status) {
		// A detached set acts on nothing and keeps its last status as it
		// was, conditions and all (checked in checkDecision).
		return nil
	}
	if h, ok := windowHeld(out); ok {
		randomWindowHolds.Add(1)
		next := spec.MaintenanceWindows.NextStart(in.Now)
		switch {
		case spec.MaintenanceWindows.Open(in.Now):
			return fmt.Errorf("ordinal %d held for the window %s, which is open at %s", h.Ordinal, spec.MaintenanceWindows, in.Now)
		case !h.Until.Equal(next):
			return fmt.Errorf("held until %s, but the next window opens at %s", h.Until, next)
		case !next.IsZero() && (out.Requeue <= 0 || out.Requeue > next.Sub(in.Now)):
			// (Windows built by hand that never open hold for good.)
			return fmt.Errorf("requeue %v while waiting for the window %v away", out.Requeue, next.Sub(in.Now))
		case condition(out.Status, ConditionRolloutStuck).Status:
			return fmt.Errorf("RolloutStuck while waiting for the window: %s", conditionMessages(out.Status))
		}
		c := condition(out.Status, ConditionWaitingForMaintenanceWindow)
		if !c.Status || (!next.IsZero() && !strings.Contains(c.Message, next.Format(time.RFC3339))) {
			return fmt.Errorf("waiting for the window without a WaitingForMaintenanceWindow condition naming %s: %+v", next.Format(time.RFC3339), c)
		}
	} else if condition(out.Status, ConditionWaitingForMaintenanceWindow).Status {
		return fmt.Errorf("WaitingForMaintenanceWindow, but nothing is held for it: %s", conditionMessages(out.Status))
	}
	if len(spec.MaintenanceWindows) == 0 || spec.Deleted || spec.MaintenanceWindows.Open(in.Now) {
		return nil
	}
	approvals := 0
	if out.Status.ApprovalUsed != in.Previous.ApprovalUsed {
		approvals = 1
	}
	cleared := func(o int) bool {
		return slices.ContainsFunc(in.Cleared, func(c Clearance) bool { return c.Ordinal == o && c.Until.After(in.Now) })
	}
	windowed := map[int]bool{} // Ready pods disrupted on purpose outside the window
	approved := map[int]bool{} // pods an approval had to answer for, for any reason
	for _, a := range out.Actions {
		if a.Type != ActionDeletePod && a.Type != ActionCheckDisruption && a.Type != ActionSwitchover {
			continue
		}
		if recreateStep(in, out, a) {
			// A Recreate's stop is one step, judged once below.
			continue
		}
		i := slices.IndexFunc(in.Pods, func(p Pod) bool { return p.Ordinal == a.Ordinal && p.Created.Equal(a.Pod.Created) })
		if i < 0 {
			continue
		}
		p := in.Pods[i]
		if p.Terminating || p.Phase != PhaseRunning || !p.Ready {
			continue // down already: replaced at any time
		}
		replace := slices.ContainsFunc(spec.Replacements, func(r Replacement) bool { return r.Ordinal == a.Ordinal })
		if !p.NodeDraining && !replace {
			windowed[a.Ordinal] = true
			approved[a.Ordinal] = true
		}
		if a.Type == ActionDeletePod {
			leaderAsks := spec.LeaderCheck != "" && p.Leader && a.Cause != CauseReplace &&
				(spec.LeaderUpdate == LeaderSwitchover || spec.LeaderUpdate == LeaderSupervised)
			if leaderAsks || (spec.DisruptionCheck != "" && !cleared(a.Ordinal)) {
				approved[a.Ordinal] = true
			}
		}
	}
	if recreateWindowed(in, out) {
		// The whole stop, and the check asked for it, is one step (the
		// key -1 stands for it); one that is under way goes on.
		windowed[-1], approved[-1] = true, true
	}
	if len(windowed) > approvals {
		return fmt.Errorf("outside the maintenance window %s at %s: Ready pods %v disrupted on purpose with %d approvals",
			spec.MaintenanceWindows, in.Now.Format(time.RFC3339), mapKeys(windowed), approvals)
	}
	if len(windowed) > 0 && len(approved) > approvals {
		return fmt.Errorf("outside the maintenance window: one approval let pods %v through", mapKeys(approved))
	}
	if len(windowed) > 0 {
		randomWindowApproved.Add(1)
	}
	return nil
}

func mapKeys(m map[int]bool) []int {
	var ks []int
	for k := range m {
		ks = append(ks, k)
	}
	slices.Sort(ks)
	return ks
}
