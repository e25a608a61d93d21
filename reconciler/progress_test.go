package reconciler

import (
	"slices"
	"testing"
	"time"
)

// startBrokenRollout converges a 3-replica set at v1 and starts a rollout to
// a template whose pods never become ready.
func startBrokenRollout(t *testing.T, p PodManagementPolicy) *world {
	t.Helper()
	w := newWorld(Spec{Replicas: 3, PodManagementPolicy: p, ProgressDeadline: 5 * time.Minute}, "v1")
	w.broken["bad"] = true
	converge(t, w)
	w.template = []byte("bad")
	for i := 0; i < 6; i++ {
		mustStep(t, w)
		w.advanceAll()
	}
	return w
}

// TestProgressDeadline: a rollout that makes no progress for the deadline
// sets RolloutStuck, with a transition time that then stays put.
func TestProgressDeadline(t *testing.T) {
	w := startBrokenRollout(t, OrderedReady)
	start := w.now
	out := mustStep(t, w)
	if c := condition(out.Status, ConditionProgressing); !c.Status || c.Reason != ReasonRollingUpdate {
		t.Fatalf("Progressing %+v", c)
	}
	if out.Requeue <= 0 || out.Requeue > 5*time.Minute {
		t.Fatalf("requeue %v, want the time left to the deadline", out.Requeue)
	}
	w.now = start.Add(4 * time.Minute)
	if out := mustStep(t, w); condition(out.Status, ConditionRolloutStuck).Status {
		t.Fatal("stuck before the deadline")
	}
	w.now = start.Add(out.Requeue)
	out = mustStep(t, w)
	stuck := condition(out.Status, ConditionRolloutStuck)
	if !stuck.Status || stuck.Reason != ReasonProgressDeadlineExceeded || !stuck.LastTransitionTime.Equal(w.now) {
		t.Fatalf("RolloutStuck %+v at %v", stuck, w.now)
	}
	if c := condition(out.Status, ConditionProgressing); c.Status || c.Reason != ReasonProgressDeadlineExceeded {
		t.Fatalf("Progressing %+v", c)
	}
	if c := condition(out.Status, ConditionAvailable); c.Status {
		t.Fatalf("Available %+v with a pod down", c)
	}
	w.now = w.now.Add(time.Minute)
	if c := condition(mustStep(t, w).Status, ConditionRolloutStuck); !c.LastTransitionTime.Equal(stuck.LastTransitionTime) {
		t.Fatalf("transition time moved from %v to %v", stuck.LastTransitionTime, c.LastTransitionTime)
	}
}

// TestStuckRolloutRecoveredByRevert is Kubernetes issue 67250: once the
// template goes back to a working revision (or on to a new working one), the
// pod stuck not-ready at the abandoned revision is replaced without anyone
// deleting it.
func TestStuckRolloutRecoveredByRevert(t *testing.T) {
	for _, p := range []PodManagementPolicy{OrderedReady, Parallel} {
		for _, fix := range []string{"v1", "v3"} {
			t.Run(string(p)+"/"+fix, func(t *testing.T) {
				w := startBrokenRollout(t, p)
				w.now = w.now.Add(10 * time.Minute)
				if out := mustStep(t, w); !condition(out.Status, ConditionRolloutStuck).Status {
					t.Fatal("rollout not stuck")
				}
				w.template = []byte(fix)
				converge(t, w)
				if got := podRevisions(w, 0, 3); slices.ContainsFunc(got, func(r string) bool { return r != revName("web", fix) }) {
					t.Fatalf("revisions %v", got)
				}
				st := w.last.Status
				if condition(st, ConditionRolloutStuck).Status || !condition(st, ConditionAvailable).Status {
					t.Fatalf("conditions after recovery %+v", st.Conditions)
				}
			})
		}
	}
}

// TestConditionTransitionTimesKept: an unchanged condition keeps its
// transition time across reconciles.
func TestConditionTransitionTimesKept(t *testing.T) {
	w := newWorld(Spec{Replicas: 1, ProgressDeadline: time.Minute}, "v1")
	converge(t, w)
	before := w.last.Status.Conditions
	w.now = w.now.Add(time.Hour)
	after := mustStep(t, w).Status.Conditions
	for i := range before {
		if !before[i].LastTransitionTime.Equal(after[i].LastTransitionTime) {
			t.Fatalf("%s transition time moved: %v -> %v", before[i].Type, before[i].LastTransitionTime, after[i].LastTransitionTime)
		}
	}
	if c := condition(w.last.Status, ConditionRolloutStuck); c.Status {
		t.Fatalf("a settled set is stuck: %+v", c)
	}
}

// TestRestingSetKeepsItsClock: a set at rest computes, pass after pass, the
// status it already has, so the agent stores nothing. Its progress clock
// was rewritten on every pass, which made a status write of every pass
// after a set settled (events about its pods keep coming: a 1,000-child
// create made about 2,000 Consul writes). The deadline then counts from
// when the set leaves rest, not from when it came to rest: a rollout that
// starts an hour later is not past its deadline at once, so under
// OrderedReady it waits for a pod at the current revision that is not
// ready (replaceableNow), as upstream's DeploymentTimedOut never times out
// a Deployment whose Progressing condition says it is complete.
func TestRestingSetKeepsItsClock(t *testing.T) {
	for _, p := range []PodManagementPolicy{OrderedReady, Parallel} {
		t.Run(string(p), func(t *testing.T) {
			w := newWorld(Spec{Replicas: 3, PodManagementPolicy: p, ProgressDeadline: 5 * time.Minute}, "v1")
			converge(t, w)
			rest := w.last.Status
			if c := condition(rest, ConditionProgressing); c.Reason != ReasonComplete {
				t.Fatalf("converged, Progressing is %+v", c)
			}
			for i := 0; i < 3; i++ {
				w.now = w.now.Add(20 * time.Minute)
				if out := mustStep(t, w); !StatusEqual(rest, out.Status) {
					t.Fatalf("a pass of a resting set %v later changed its status to %+v, from %+v", time.Duration(i+1)*20*time.Minute, out.Status, rest)
				}
			}

			// An hour after it came to rest, a pod stops being ready and a
			// new template arrives in the same pass.
			w.now = w.now.Add(time.Minute)
			w.pods[w.podIndex(1)].Ready = false
			w.template = []byte("v2")
			out := mustStep(t, w)
			if !out.Status.LastProgressTime.Equal(w.now) {
				t.Fatalf("leaving rest, the clock reads %v, want now (%v)", out.Status.LastProgressTime, w.now)
			}
			if c := condition(out.Status, ConditionRolloutStuck); c.Status {
				t.Fatalf("stuck on the first pass after an hour at rest: %+v", c)
			}
			// Under Parallel a pod that is not available is the first to be
			// replaced anyway: replacing it takes nothing more down.
			for _, a := range out.Actions {
				if p == OrderedReady && a.Type == ActionDeletePod && a.Ordinal == 1 {
					t.Fatalf("the not-ready pod at the current revision was replaced at once, as if the rollout were past its deadline: %+v", a)
				}
			}
		})
	}
}

// TestStatusEqualByMeaning: a status read back from the store differs from
// the one just computed in representation only (a time's location and
// monotonic reading, a nil list for an empty one). The agent used to
// compare them with reflect.DeepEqual, which took that for a change and
// wrote the status again; StatusEqual compares what they say.
func TestStatusEqualByMeaning(t *testing.T) {
	at := time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC)
	computed := Status{
		ReadyReplicas: 3, CurrentRevision: "web-1", UpdateRevision: "web-1", LastProgressTime: at.Local(),
		Conditions: []Condition{{Type: ConditionAvailable, Status: true, Reason: "r", LastTransitionTime: at.In(time.FixedZone("x", 3600))}},
		Ordinals:   []OrdinalRecord{},
	}
	stored := Status{
		ReadyReplicas: 3, CurrentRevision: "web-1", UpdateRevision: "web-1", LastProgressTime: at,
		Conditions: []Condition{{Type: ConditionAvailable, Status: true, Reason: "r", LastTransitionTime: at}},
	}
	if !StatusEqual(computed, stored) {
		t.Fatal("statuses that say the same thing compare unequal")
	}
	for name, change := range map[string]func(*Status){
		"a counter":  func(s *Status) { s.ReadyReplicas = 2 },
		"a revision": func(s *Status) { s.UpdateRevision = "web-2" },
		"a time":     func(s *Status) { s.LastProgressTime = at.Add(time.Second) },
		"a condition": func(s *Status) {
			s.Conditions = []Condition{{Type: ConditionAvailable, Status: false, Reason: "r", LastTransitionTime: at}}
		},
		"an ordinal record": func(s *Status) { s.Ordinals = []OrdinalRecord{{Ordinal: 0, Revision: "web-1"}} },
	} {
		changed := stored
		change(&changed)
		if StatusEqual(computed, changed) {
			t.Errorf("a change of %s compares equal", name)
		}
	}
}
