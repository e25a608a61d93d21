package reconciler

import (
	"errors"
	"slices"
	"testing"
	"time"
)

// TestFoldWaitPolicies: each wait an effect meets becomes a hold on the
// step it is, for as long as the reason's policy says; refusals back off
// exponentially and a pass resets them.
func TestFoldWaitPolicies(t *testing.T) {
	now := epoch
	spec := Spec{Name: "web"}
	for _, tc := range []struct {
		name  string
		act   ActionType
		wait  Wait
		prior int // refusals before
		step  HoldStep
		want  time.Duration
	}{
		{"hook asks a time", ActionDeletePod, Wait{Reason: HoldHookWaiting, RetryAfter: 7 * time.Second}, 0, StepDisrupt, 7 * time.Second},
		{"hook asks none", ActionDeletePod, Wait{Reason: HoldHookWaiting}, 0, StepDisrupt, HookRetry},
		{"plugin down", ActionCreateVolume, Wait{Reason: HoldPluginUnavailable}, 0, StepCreate, PluginRetry},
		{"spread", ActionCreatePod, Wait{Reason: HoldSpreadUnsatisfiable}, 0, StepCreate, SpreadRetry},
		{"volume in use", ActionExpandVolume, Wait{Reason: HoldVolumeInUse}, 0, StepCreate, VolumeInUseRetry},
		{"unknown class", ActionCreateVolume, Wait{Reason: HoldUnknownClass}, 0, StepCreate, UnknownClassRetry},
		{"first refusal", ActionCheckDisruption, Wait{Reason: HoldDisruptionCheckFailed}, 0, StepDisrupt, AskBackoffBase},
		{"third refusal", ActionSwitchover, Wait{Reason: HoldSwitchoverFailed}, 2, StepDisrupt, 4 * AskBackoffBase},
		{"refusals capped", ActionCheckDisruption, Wait{Reason: HoldDisruptionCheckFailed}, 30, StepDisrupt, AskBackoffMax},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m := Memory{AskFailures: map[int]int{2: tc.prior}}
			next, h := Fold(spec, m, Action{Type: tc.act, Ordinal: 2}, Result{Wait: &tc.wait}, now)
			if h == nil || h.Step != tc.step || h.Reason != tc.wait.Reason || h.Until.Sub(now) != tc.want {
				t.Fatalf("hold %+v, want %s %s for %s", h, tc.step, tc.wait.Reason, tc.want)
			}
			if len(next.Holds) != 1 || next.Holds[0] != *h {
				t.Fatalf("memory holds %+v", next.Holds)
			}
			if m.AskFailures[2] != tc.prior || len(m.Holds) != 0 {
				t.Fatalf("Fold changed the memory it was given: %+v", m)
			}
		})
	}
}

// TestFoldSuccesses: what a success teaches the memory.
func TestFoldSuccesses(t *testing.T) {
	now := epoch
	spec := Spec{Name: "web", ExecTimeout: 40 * time.Second}
	m := Memory{AskFailures: map[int]int{1: 3}}
	m, _ = Fold(spec, m, Action{Type: ActionCheckDisruption, Ordinal: 1}, Result{}, now)
	if m.AskFailures[1] != 0 || len(m.Cleared) != 1 || m.Cleared[0].Until != now.Add(ClearanceTTL) {
		t.Fatalf("a passing check: %+v", m)
	}
	m, _ = Fold(spec, m, Action{Type: ActionSwitchover, Ordinal: 1, Target: 2}, Result{}, now)
	if m.Switchover == nil || m.Switchover.To != 2 || len(m.Holds) != 1 || m.Holds[0].Reason != HoldSwitchingOver ||
		m.Holds[0].Until != now.Add(40*time.Second) {
		t.Fatalf("a switchover that ran: %+v", m)
	}
	failed := Pod{Ordinal: 3, Phase: PhaseFailed, AllTerminal: true}
	purge := Action{Type: ActionDeletePod, Ordinal: 3, Pod: failed, Purge: true, Cause: CauseEnded}
	m, _ = Fold(spec, m, purge, Result{Err: errors.New("boom")}, now)
	if m.Crashes[3].Count != 0 {
		t.Fatal("a purge that failed counted a crash")
	}
	m, _ = Fold(spec, m, purge, Result{}, now)
	m, _ = Fold(spec, m, purge, Result{}, now)
	if hs := m.backoffHolds(now); m.Crashes[3].Count != 2 || len(hs) != 1 || hs[0].Until != now.Add(CrashBackoffBase) {
		t.Fatalf("two crashes: %+v, holds %+v", m.Crashes, hs)
	}
	m, _ = Fold(spec, m, Action{Type: ActionEvaluatePod, Ordinal: 4, Pod: Pod{Ordinal: 4, NodeChange: 9}}, Result{}, now)
	if m.Evaluated[4] != 9 {
		t.Fatalf("evaluated %+v", m.Evaluated)
	}
	m, _ = Fold(spec, m, Action{Type: ActionExpandVolume, Volume: Volume{Class: "slow"}}, Result{Unsupported: true}, now)
	if len(m.CannotExpand) != 1 || m.CannotExpand[0] != "slow" {
		t.Fatalf("cannot expand %+v", m.CannotExpand)
	}
}

// TestMemoryBeginsEachDecision: holds and answers end at their time,
// failures are forgotten after CrashBackoffReset, the ordinals missing at a
// term's first pass wait out their stop grace, and a switchover closes once
// another pod leads and the old leader does not.
func TestMemoryBeginsEachDecision(t *testing.T) {
	now := epoch.Add(time.Hour)
	m := Memory{
		Holds:      []Hold{{Ordinal: 0, Step: StepCreate, Until: now}, {Ordinal: 1, Step: StepDisrupt, Until: now.Add(time.Second), Reason: HoldSwitchingOver}},
		Cleared:    []Clearance{{Ordinal: 0, Until: now.Add(-time.Second)}},
		Crashes:    map[int]CrashRecord{0: {Count: 3, Last: now.Add(-CrashBackoffReset - time.Second)}},
		Switchover: &Switchover{From: 1, To: 2, Started: now.Add(-3 * time.Second)},
	}
	in := Input{Now: now, TermStart: now.Add(-time.Second), StopGrace: map[int]time.Duration{5: 10 * time.Second},
		Spec:     Spec{Name: "web", Replicas: 2},
		Previous: Status{Ordinals: []OrdinalRecord{{Ordinal: 1, Revision: "r"}, {Ordinal: 5, Condemned: true}}},
		Pods:     []Pod{{Ordinal: 1, Leader: true}, {Ordinal: 2, Leader: true}}}
	got, change := m.begin(in)
	if change == nil || change.To != 2 || change.Took != 3*time.Second || got.Switchover == nil || !got.Switchover.Seen {
		t.Fatalf("both lead: change %+v, switchover %+v", change, got.Switchover)
	}
	if len(got.Cleared) != 0 || len(got.Crashes) != 0 || !got.TermSeen {
		t.Fatalf("begin kept stale entries: %+v", got)
	}
	if len(got.Holds) != 2 || got.Holds[0].Reason != HoldSwitchingOver || got.Holds[1].Reason != HoldKillGrace || got.Holds[1].Ordinal != 5 ||
		got.Holds[1].Until != in.TermStart.Add(10*time.Second) {
		t.Fatalf("holds %+v", got.Holds)
	}
	in.Pods[0].Leader = false
	again, change := got.begin(in)
	if change != nil || again.Switchover != nil || len(again.Holds) != 1 {
		t.Fatalf("the old leader no longer leads: change %+v, memory %+v", change, again)
	}
}

// TestCrashBackoffWaitsLongerAfterEachFailure: the first failure is
// re-created at once, each later one waits twice as long, another ordinal
// does not wait, and failures older than CrashBackoffReset are forgotten.
func TestCrashBackoffWaitsLongerAfterEachFailure(t *testing.T) {
	var m Memory
	now := epoch
	wait := func(ord int, at time.Time) time.Duration {
		mem, _ := m.begin(Input{Now: at})
		for _, h := range mem.backoffHolds(at) {
			if h.Ordinal == ord && h.Step == StepCreate && h.Reason == HoldBackOff {
				return h.Until.Sub(at)
			}
		}
		return 0
	}
	m.crashed(2, now)
	if w := wait(2, now); w != 0 {
		t.Fatalf("the first failure is recreated at once, got a wait of %v", w)
	}
	m.crashed(2, now)
	m.crashed(2, now)
	if w := wait(2, now); w != 2*time.Second {
		t.Fatalf("after three failures wait %v, want 2s", w)
	}
	if w := wait(1, now); w != 0 {
		t.Fatalf("another ordinal must not wait: %v", w)
	}
	if w := wait(2, now.Add(CrashBackoffReset+time.Second)); w != 0 {
		t.Fatalf("failures older than the reset window must be forgotten: %v", w)
	}
}

// TestRecordsAfter: the pods a stopped pass created are recorded at their
// revision, other records are kept as they are, and nothing changes when
// the records already say so.
func TestRecordsAfter(t *testing.T) {
	r2 := Revision{Name: "web-2", Number: 2}
	recs := []OrdinalRecord{{Ordinal: 0, Revision: "web-1", RevisionNumber: 1}, {Ordinal: 3, Revision: "web-1", RevisionNumber: 1, Condemned: true}}
	done := []Action{{Type: ActionRecordOrdinals}, {Type: ActionCreatePod, Ordinal: 0, Revision: r2}, {Type: ActionCreateVolume, Ordinal: 2},
		{Type: ActionCreatePod, Ordinal: 2, Revision: r2}}
	got, changed := RecordsAfter(recs, done)
	want := []OrdinalRecord{{Ordinal: 0, Revision: "web-2", RevisionNumber: 2}, {Ordinal: 2, Revision: "web-2", RevisionNumber: 2},
		{Ordinal: 3, Revision: "web-1", RevisionNumber: 1, Condemned: true}}
	if !changed || !slices.Equal(got, want) {
		t.Fatalf("RecordsAfter = %+v, %v; want %+v", got, changed, want)
	}
	if recs[0].Revision != "web-1" {
		t.Fatal("RecordsAfter changed the records it was given")
	}
	if again, changed := RecordsAfter(got, done); changed || !slices.Equal(again, got) {
		t.Fatalf("records that already say so changed: %+v", again)
	}
}

// TestExponentialBackoffDoublesAndCaps: the backoff of the wait policies
// and of the agent's work queue.
func TestExponentialBackoffDoublesAndCaps(t *testing.T) {
	for n, want := range []time.Duration{10, 20, 40, 80, 80} {
		if got := Exponential(10*time.Millisecond, 80*time.Millisecond, n); got != want*time.Millisecond {
			t.Errorf("failure %d: backoff %v, want %v", n, got, want*time.Millisecond)
		}
	}
	if got := Exponential(time.Second, time.Minute, 1000); got != time.Minute {
		t.Errorf("many failures: %v, want the cap (no overflow)", got)
	}
}
