package reconciler

import (
	"fmt"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

// The Recreate strategy's invariants (KEP-3541, DESIGN §3b), run by
// checkDecision and checkState after every step of every world, and the
// helpers the other invariants use to judge a Recreate's stop as the one
// step it is. Its table tests are in recreate_table_test.go.

// randomRecreateStops counts the randomized decisions that stopped pods for
// a Recreate, randomRecreateChecks the Recreate checks they asked, and
// randomRecreateGated the decisions whose stop waited at its gate:
// TestRandomized fails when a full run never got there.
var randomRecreateStops, randomRecreateChecks, randomRecreateGated atomic.Int64

// rolls reports whether the spec's strategy moves pods by itself: a
// RollingUpdate, or a Recreate (which repairs drift and grows volumes as a
// rolling update does, and stops every pod for a new revision).
func rolls(spec Spec) bool {
	return spec.UpdateStrategy == RollingUpdate || spec.UpdateStrategy == Recreate
}

// isRecreateStop reports whether action a of the decision out, made from
// in, is part of a Recreate's stop: the strategy is Recreate, the set is
// neither paused nor deleted, and a deletes a pod at another revision than
// the update revision, as an update, a scale-down or a pod that ended.
//
// A condemned pod is the stop's only along with a replica, or once no live
// replica at an older revision is left; otherwise it scales down by the
// ordinary rules, as it does while the stop waits at its gate.
func isRecreateStop(in Input, out Output, a Action) bool {
	spec := in.Spec
	upd := out.Status.UpdateRevision
	if spec.UpdateStrategy != Recreate || spec.Paused || spec.Deleted || a.Type != ActionDeletePod || a.Pod.Revision == upd {
		return false
	}
	inRange := func(o int) bool { return o >= spec.OrdinalsStart && o < spec.OrdinalsStart+spec.Replicas }
	switch {
	case a.Cause == CauseUpdate || a.Cause == CauseEnded:
		return inRange(a.Ordinal)
	case a.Cause != CauseScaleDown || inRange(a.Ordinal):
		return false
	}
	withReplica := slices.ContainsFunc(out.Actions, func(b Action) bool {
		return b.Type == ActionDeletePod && b.Cause == CauseUpdate && inRange(b.Ordinal) && b.Pod.Revision != upd
	})
	replicaLeft := slices.ContainsFunc(in.Pods, func(p Pod) bool {
		return inRange(p.Ordinal) && p.Revision != upd && !p.Terminating && !finishedPod(p)
	})
	return withReplica || !replicaLeft
}

// recreateStep reports whether a is a Recreate's stop, or the one check
// asked for it.
func recreateStep(in Input, out Output, a Action) bool {
	return isRecreateStop(in, out, a) || (a.Type == ActionCheckDisruption && a.Revision.Name != "")
}

// recreateUnderWay reports whether the stored status says a Recreate's stop
// is under way: a member's pod was stopped by one and not created again.
// checkRecreateState checks that the record is never invented.
func recreateUnderWay(in Input) bool {
	start, n := in.Spec.OrdinalsStart, in.Spec.Replicas
	return slices.ContainsFunc(in.Previous.Ordinals, func(r OrdinalRecord) bool {
		return r.RecreateStopped && r.Ordinal >= start && r.Ordinal < start+n
	})
}

// recreateCleared reports whether the Recreate's one check passed for rev
// and is not stale.
func recreateCleared(in Input, rev string) bool {
	return slices.ContainsFunc(in.Cleared, func(c Clearance) bool { return c.Recreate == rev && c.Until.After(in.Now) })
}

// recreateGateNeeded reports whether the Ready pods a decision stops for a
// Recreate needed the operator's approval, as one step: the stop is not
// under way, and a supervised leader is among them, or the disruption check
// is declared and has not passed for the update revision.
func recreateGateNeeded(in Input, out Output, stops []Pod) bool {
	spec := in.Spec
	if len(stops) == 0 || recreateUnderWay(in) {
		return false
	}
	for _, p := range stops {
		if spec.LeaderCheck != "" && spec.LeaderUpdate == LeaderSupervised && p.Leader {
			return true
		}
	}
	return spec.DisruptionCheck != "" && !recreateCleared(in, out.Status.UpdateRevision)
}

// recreateWindowed reports whether a decision made outside every
// maintenance window starts a Recreate's stop of a Ready pod (not on a
// draining node), or asks its check: one voluntary disruption, which needs
// one approval. A stop under way goes on outside the window.
func recreateWindowed(in Input, out Output) bool {
	for _, a := range out.Actions {
		if !recreateStep(in, out, a) || (a.Type == ActionDeletePod && recreateUnderWay(in)) {
			continue
		}
		i := slices.IndexFunc(in.Pods, func(p Pod) bool { return p.Ordinal == a.Ordinal && p.Created.Equal(a.Pod.Created) })
		if i < 0 {
			continue
		}
		if p := in.Pods[i]; p.Phase == PhaseRunning && p.Ready && !p.Terminating && !p.NodeDraining {
			return true
		}
	}
	return false
}

// checkRecreate is KEP-3541's promise on one decision, against the
// observation it was made from: under Recreate no pod is created at a
// revision while a pod at another one still runs or terminates, so two
// revisions never run side by side (the stop waits until every older pod
// has terminated before the first pod is created again). Its stop runs no
// switchover (no follower is left to lead), and its one disruption check is
// asked only before the stop is under way, never in a decision that stops.
// Of the other promises, volumes (kept unless the retention policy said
// Delete) and no downgrade are the world's checks, the same for every
// strategy (world.apply).
func checkRecreate(in Input, out Output) error {
	spec := in.Spec
	if spec.UpdateStrategy != Recreate || spec.Deleted {
		return nil
	}
	stops := slices.ContainsFunc(out.Actions, func(a Action) bool { return isRecreateStop(in, out, a) && a.Cause == CauseUpdate })
	if stops {
		randomRecreateStops.Add(1)
	}
	for _, a := range out.Actions {
		switch a.Type {
		case ActionCreatePod:
			for _, p := range in.Pods {
				if p.Ordinal < 0 || p.Revision == a.Revision.Name {
					continue
				}
				state := "runs"
				if p.Terminating {
					state = "terminates"
				}
				return fmt.Errorf("Recreate: pod %d created at %s while pod %d at %s still %s (KEP-3541: never two revisions side by side)",
					a.Ordinal, a.Revision.Name, p.Ordinal, p.Revision, state)
			}
		case ActionSwitchover:
			if stops {
				return fmt.Errorf("Recreate: switchover of %d in a decision that stops every pod", a.Ordinal)
			}
		case ActionCheckDisruption:
			if a.Revision.Name == "" {
				continue
			}
			randomRecreateChecks.Add(1)
			switch {
			case a.Revision.Name != out.Status.UpdateRevision:
				return fmt.Errorf("Recreate: check asked for %s, the update revision is %s", a.Revision.Name, out.Status.UpdateRevision)
			case stops || recreateUnderWay(in):
				return fmt.Errorf("Recreate: the disruption check asked again while the stop is under way (stops in this decision: %v)", stops)
			case recreateCleared(in, a.Revision.Name):
				return fmt.Errorf("Recreate: the disruption check asked again although it passed for %s", a.Revision.Name)
			}
		}
	}
	if slices.ContainsFunc(out.Held, func(h Hold) bool {
		return h.Reason == HoldWaitingForMaintenanceWindow || h.Reason == HoldWaitingForApproval
	}) || slices.ContainsFunc(out.Actions, func(a Action) bool { return a.Type == ActionCheckDisruption && a.Revision.Name != "" }) {
		randomRecreateGated.Add(1)
	}
	return nil
}

// noteRecreate remembers the ordinals a decision stopped for a Recreate,
// for checkRecreateState.
func (w *world) noteRecreate(in Input, out Output) {
	for _, a := range out.Actions {
		if isRecreateStop(in, out, a) && a.Cause == CauseUpdate && w.inRange(a.Ordinal) {
			if w.recreateEmitted == nil {
				w.recreateEmitted = map[int]bool{}
			}
			w.recreateEmitted[a.Ordinal] = true
		}
	}
}

// checkRecreateState is KEP-3541's promise on the world after a step: under
// Recreate every pod it holds, terminating ones included, runs one
// revision. And the record a Recreate's stop leaves (RecreateStopped, which
// lets the rest of a stop under way pass no gate again) is never made for
// an ordinal no Recreate stopped.
func (w *world) checkRecreateState() error {
	if w.spec.UpdateStrategy != Recreate {
		return nil
	}
	var first *Pod
	for _, p := range w.sortedPods() {
		if first == nil {
			first = &p
			continue
		}
		if p.Revision != first.Revision {
			return fmt.Errorf("Recreate: pod %d at %s and pod %d at %s side by side (terminating: %v, %v)",
				first.Ordinal, first.Revision, p.Ordinal, p.Revision, first.Terminating, p.Terminating)
		}
	}
	for _, rec := range w.status.Ordinals {
		if rec.RecreateStopped && !w.recreateEmitted[rec.Ordinal] {
			return fmt.Errorf("Recreate: ordinal %d recorded as stopped by a Recreate that never stopped it", rec.Ordinal)
		}
	}
	return nil
}

// recreateWorld is a converged 3-replica Recreate set with claim "data",
// made at v1, with spec's leader and check keys.
func recreateWorld(t *testing.T, spec Spec) *world {
	t.Helper()
	spec.Replicas, spec.UpdateStrategy, spec.VolumeClaims = 3, Recreate, []string{"data"}
	if spec.ProgressDeadline == 0 {
		spec.ProgressDeadline = 10 * time.Minute
	}
	w := newWorld(spec, "v1")
	converge(t, w)
	if spec.LeaderCheck != "" {
		w.leader = 1
	}
	return w
}

// recreateRun is what a rollout under Recreate did, decision by decision.
type recreateRun struct {
	// stops are the ordinals each decision stopped, per decision that
	// stopped any; creates likewise.
	stops, creates [][]int
	checks         []Action
	switchovers    int
	// progressing are the Progressing messages while Recreating.
	progressing []string
	held        []string
}

// rollRecreate changes the template to v2 and runs the world until it
// converges, advancing every pod each round but the one right after a
// stop (so that the wait for termination is seen), and playing the
// operator with play (it may approve, open a window, …).
func rollRecreate(t *testing.T, w *world, play func(w *world, out Output)) recreateRun {
	t.Helper()
	w.template = []byte("v2")
	var run recreateRun
	for i := 0; i < 300; i++ {
		out := mustStep(t, w)
		var stops, creates []int
		for _, a := range out.Actions {
			switch a.Type {
			case ActionDeletePod:
				stops = append(stops, a.Ordinal)
			case ActionCreatePod:
				creates = append(creates, a.Ordinal)
			case ActionCheckDisruption:
				run.checks = append(run.checks, a)
			case ActionSwitchover:
				run.switchovers++
			}
		}
		if len(stops) > 0 {
			run.stops = append(run.stops, stops)
		}
		if len(creates) > 0 {
			run.creates = append(run.creates, creates)
		}
		for _, h := range out.Held {
			run.held = append(run.held, h.Reason)
		}
		if c := condition(out.Status, ConditionProgressing); c.Reason == ReasonRecreating {
			run.progressing = append(run.progressing, c.Message)
		}
		if w.converged() {
			return run
		}
		if play != nil {
			play(w, out)
		}
		if len(stops) == 0 {
			w.advanceAll()
		}
		w.now = w.now.Add(time.Second)
	}
	t.Fatalf("not converged after 300 steps\n%s", w.dump())
	return run
}

// TestRecreate: a new revision stops every pod in one decision, whatever
// the budget; no pod is created until all have terminated; they come back
// at the new revision in the policy's order, on the volumes they had, none
// deleted; the status says what the set does at each stage.
func TestRecreate(t *testing.T) {
	forPolicies(t, func(t *testing.T, spec Spec) {
		spec.Replicas, spec.UpdateStrategy, spec.MaxUnavailable = 3, Recreate, IntOrPercent{Value: 1}
		w := newWorld(spec, "v1")
		converge(t, w)
		vols := slices.Clone(w.volumes)
		run := rollRecreate(t, w, nil)

		if len(run.stops) != 1 || !slices.Equal(run.stops[0], []int{2, 1, 0}) {
			t.Fatalf("stops %v, want all three in one decision: [[2 1 0]]", run.stops)
		}
		wantCreates := [][]int{{0}, {1}, {2}}
		if spec.PodManagementPolicy == Parallel {
			wantCreates = [][]int{{0, 1, 2}}
		}
		if fmt.Sprint(run.creates) != fmt.Sprint(wantCreates) {
			t.Fatalf("creates %v, want %v", run.creates, wantCreates)
		}
		v2 := revName("web", "v2")
		if got := podRevisions(w, 0, 3); slices.ContainsFunc(got, func(r string) bool { return r != v2 }) {
			t.Fatalf("revisions %v, want all %s", got, v2)
		}
		if st := w.last.Status; st.CurrentRevision != v2 || st.UpdatedReplicas != 3 {
			t.Fatalf("status %+v", st)
		}
		if w.volumesDeleted != 0 || !slices.Equal(w.volumes, vols) {
			t.Fatalf("volumes %v, want the same %v (%d deleted)", w.volumes, vols, w.volumesDeleted)
		}
		for _, want := range []string{"stopping 3 pods at once to create them again at " + v2,
			"waiting for 3 pods to terminate before creating them again at " + v2, "creating pods again at " + v2} {
			if !slices.ContainsFunc(run.progressing, func(m string) bool { return strings.HasPrefix(m, want) }) {
				t.Errorf("no Progressing Recreating message %q among %q", want, run.progressing)
			}
		}
		if recs := w.status.Ordinals; slices.ContainsFunc(recs, func(r OrdinalRecord) bool { return r.RecreateStopped }) {
			t.Errorf("records still say a Recreate is under way: %+v", recs)
		}
	})
}

// TestRecreateGate: the stop's one gate, by kind. The disruption check is
// asked once for the whole set, in a Ready pod; a supervised leader waits
// for one approval for the whole stop; a switchover is never run (no
// follower is left to lead); outside the maintenance window nothing stops
// until it opens. Each lets every pod go in one decision.
func TestRecreateGate(t *testing.T) {
	v2 := revName("web", "v2")
	for _, tc := range []struct {
		name string
		spec Spec
		// play answers the gate the way the operator would.
		play       func(w *world, out Output)
		checks     int
		held       string
		switchover bool
	}{
		{name: "no gate", spec: Spec{}},
		{name: "disruption check once", spec: Spec{DisruptionCheck: "check"}, checks: 1},
		{name: "leader last", spec: Spec{LeaderCheck: "primary", LeaderUpdate: LeaderLast}},
		{name: "switchover is not run", spec: Spec{LeaderCheck: "primary", LeaderUpdate: LeaderSwitchover, SwitchoverCommand: "x"}},
		{name: "supervised leader waits for one approval",
			spec: Spec{LeaderCheck: "primary", LeaderUpdate: LeaderSupervised, DisruptionCheck: "check"},
			held: HoldWaitingForApproval,
			play: func(w *world, out Output) {
				if slices.ContainsFunc(out.Held, func(h Hold) bool { return h.Reason == HoldWaitingForApproval }) {
					w.spec.Approval = fmt.Sprint("ok-", w.steps)
				}
			}},
		{name: "maintenance window", spec: Spec{MaintenanceWindows: mustWindows(t, saturdayWindow), DisruptionCheck: "check"},
			held: HoldWaitingForMaintenanceWindow, checks: 1,
			play: func(w *world, out Output) {
				if _, ok := windowHeld(out); ok {
					w.now = saturdayStart
				}
			}},
	} {
		for _, policy := range []PodManagementPolicy{OrderedReady, Parallel} {
			t.Run(tc.name+"/"+string(policy), func(t *testing.T) {
				spec := tc.spec
				spec.PodManagementPolicy = policy
				windows := spec.MaintenanceWindows
				spec.MaintenanceWindows = nil
				w := recreateWorld(t, spec)
				w.spec.MaintenanceWindows = windows
				run := rollRecreate(t, w, tc.play)
				if len(run.stops) != 1 || len(run.stops[0]) != 3 {
					t.Fatalf("stops %v, want every pod in one decision", run.stops)
				}
				if len(run.checks) != tc.checks {
					t.Fatalf("%d checks asked, want %d: %+v", len(run.checks), tc.checks, run.checks)
				}
				for _, a := range run.checks {
					if a.Revision.Name != v2 || a.Ordinal != 2 {
						t.Errorf("check %+v: want one about the whole set (revision %s), subject the highest ordinal", a, v2)
					}
				}
				if run.switchovers > 0 {
					t.Errorf("%d switchovers, want none: every pod goes down", run.switchovers)
				}
				if tc.held != "" && !slices.Contains(run.held, tc.held) {
					t.Errorf("holds %v, want %s", run.held, tc.held)
				}
				if got := podRevisions(w, 0, 3); slices.ContainsFunc(got, func(r string) bool { return r != v2 }) {
					t.Fatalf("revisions %v", got)
				}
			})
		}
	}
}

// TestRecreateUnderWayPassesNoGateAgain: once the first pod is stopped,
// the rest of the set is stopped without asking the check again and
// without waiting for a window that closed meanwhile, a new leader's
// decisions too (the ordinal records say so); the pod a hook held goes
// when the hook lets it.
func TestRecreateUnderWayPassesNoGateAgain(t *testing.T) {
	w := recreateWorld(t, Spec{DisruptionCheck: "check", MaintenanceWindows: mustWindows(t, saturdayWindow)})
	w.now = saturdayStart
	w.template = []byte("v2")
	if out := mustStep(t, w); countActions(out, ActionCheckDisruption) != 1 {
		t.Fatalf("want the one check first: %+v", out.Actions)
	}
	// The first stop meets a pre_update hook that says wait: the pass
	// ends there, the stop recorded.
	w.waits = 1
	out := mustStep(t, w)
	if out.Actions[0].Type != ActionRecordOrdinals || countActions(out, ActionDeletePod) != 3 {
		t.Fatalf("want the records stored first, then every pod stopped: %+v", out.Actions)
	}
	for _, r := range w.status.Ordinals {
		if !r.RecreateStopped {
			t.Fatalf("record %+v: want the stop recorded before it is made", r)
		}
	}
	// The window closes and the leader changes: the rest goes anyway.
	w.now = saturdayStart.Add(4 * time.Hour)
	w.memory, w.termStart = Memory{}, w.now
	for i := 0; i < 40 && len(w.pods) > 0; i++ {
		out := mustStep(t, w)
		if n := countActions(out, ActionCheckDisruption); n > 0 {
			t.Fatalf("the check asked again for a stop under way: %+v", out.Actions)
		}
		if _, ok := windowHeld(out); ok {
			t.Fatalf("a stop under way waits for the window: %+v", out.Held)
		}
		w.advanceAll()
		w.now = w.now.Add(5 * time.Second)
	}
	if len(w.pods) != 0 {
		t.Fatalf("pods left: %s", w.dump())
	}
	converge(t, w)
	if got := podRevisions(w, 0, 3); slices.ContainsFunc(got, func(r string) bool { return r != revName("web", "v2") }) {
		t.Fatalf("revisions %v", got)
	}
}

// TestRecreateWhileGated: while the stop waits at its gate, the set stays
// whole: a pod that fails is replaced at the revision every pod runs, never
// at the new one, which would run beside it.
func TestRecreateWhileGated(t *testing.T) {
	w := recreateWorld(t, Spec{MaintenanceWindows: mustWindows(t, saturdayWindow)})
	w.template = []byte("v2")
	mustStep(t, w)
	w.pods[w.podIndex(1)].Phase, w.pods[w.podIndex(1)].Ready = PhaseFailed, false
	w.pods[w.podIndex(1)].AllTerminal = true
	for i := 0; i < 20; i++ {
		out := mustStep(t, w)
		if _, ok := windowHeld(out); !ok {
			t.Fatalf("the stop does not wait for the window: %+v", out.Held)
		}
		for _, a := range out.Actions {
			if a.Type == ActionCreatePod && a.Revision.Name != revName("web", "v1") {
				t.Fatalf("pod %d created at %s while the others run v1", a.Ordinal, a.Revision.Name)
			}
		}
		w.advanceAll()
		w.now = w.now.Add(time.Second)
	}
	if st := w.last.Status; st.ReadyReplicas != 3 {
		t.Fatalf("the set is not whole while it waits: %+v\n%s", st, w.dump())
	}
	if c := condition(w.last.Status, ConditionProgressing); c.Reason != ReasonRecreating || !strings.Contains(c.Message, "waits") {
		t.Fatalf("Progressing %+v, want Recreating, saying the stop waits", c)
	}
}

// TestRecreateStuckRollout is the case KEP-3541 is for: a revision whose
// pods never become ready is replaced by the next template at once, every
// pod together, without asking the check (no Ready pod goes down).
func TestRecreateStuckRollout(t *testing.T) {
	forPolicies(t, func(t *testing.T, spec Spec) {
		spec.Replicas, spec.UpdateStrategy, spec.DisruptionCheck = 3, Recreate, "check"
		w := newWorld(spec, "v1")
		w.broken["bad"] = true
		converge(t, w)
		w.template = []byte("bad")
		for i := 0; i < 40; i++ {
			mustStep(t, w)
			w.advanceAll()
			w.now = w.now.Add(time.Second)
		}
		if w.last.Status.ReadyReplicas != 0 || len(w.pods) == 0 {
			t.Fatalf("want a stuck rollout: %s", w.dump())
		}
		w.template = []byte("v3")
		checks := 0
		for i := 0; i < 200 && !w.converged(); i++ {
			out := mustStep(t, w)
			checks += countActions(out, ActionCheckDisruption)
			w.advanceAll()
			w.now = w.now.Add(time.Second)
		}
		if !w.converged() || checks != 0 {
			t.Fatalf("converged %v with %d checks, want converged with none\n%s", w.converged(), checks, w.dump())
		}
	})
}

// TestRecreateNotANewRevision: what is no new revision goes as a rolling
// update goes, within the budget: a drifted pod is repaired alone, at the
// revision it had; a pod that fails while the set is created again is
// replaced at the new revision; a scale-up creates at the update revision
// and a scale-down removes the highest ordinals.
func TestRecreateNotANewRevision(t *testing.T) {
	v1, v2 := revName("web", "v1"), revName("web", "v2")
	for _, tc := range []struct {
		name   string
		change func(w *world)
		want   []string
	}{
		{"drift repairs one pod", func(w *world) { w.pods[w.podIndex(1)].Drifted = true }, []string{v1, v1, v1}},
		{"scale up", func(w *world) { w.spec.Replicas = 5 }, []string{v1, v1, v1, v1, v1}},
		{"scale down", func(w *world) { w.spec.Replicas = 1 }, []string{v1}},
		{"a pod fails while created again", func(w *world) {
			w.template = []byte("v2")
			readyAtV2 := func() bool {
				i := w.podIndex(0)
				return i >= 0 && w.pods[i].Revision == v2 && w.pods[i].Ready
			}
			for i := 0; i < 50 && !readyAtV2(); i++ {
				mustStep(t, w)
				w.advanceAll()
				w.now = w.now.Add(time.Second)
			}
			if !readyAtV2() {
				t.Fatalf("pod 0 never came back at v2\n%s", w.dump())
			}
			p := &w.pods[w.podIndex(0)]
			p.Phase, p.Ready, p.AllTerminal = PhaseFailed, false, true
		}, []string{v2, v2, v2}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			w := recreateWorld(t, Spec{MaxUnavailable: IntOrPercent{Value: 1}})
			created := map[int]time.Time{}
			for _, p := range w.pods {
				created[p.Ordinal] = p.Created
			}
			tc.change(w)
			for i := 0; i < 300 && !w.converged(); i++ {
				out := mustStep(t, w)
				if tc.name == "drift repairs one pod" {
					for _, a := range out.Actions {
						if a.Type == ActionDeletePod && (a.Ordinal != 1 || a.Cause != CauseRepair) {
							t.Fatalf("drift repair took down %d (%s)", a.Ordinal, a.Cause)
						}
					}
				}
				w.advanceAll()
				w.now = w.now.Add(time.Second)
			}
			if !w.converged() {
				t.Fatalf("not converged\n%s", w.dump())
			}
			if got := podRevisions(w, 0, w.spec.Replicas); !slices.Equal(got, tc.want) {
				t.Fatalf("revisions %v, want %v", got, tc.want)
			}
			if tc.name == "drift repairs one pod" {
				for _, o := range []int{0, 2} {
					if !w.pods[w.podIndex(o)].Created.Equal(created[o]) {
						t.Errorf("pod %d was recreated by the repair of pod 1", o)
					}
				}
			}
		})
	}
}
