package agent

import (
	"context"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/nomad/api"

	"github.com/nomad-statefulset/nomad-statefulset/backend/nomad"
	"github.com/nomad-statefulset/nomad-statefulset/reconciler"
)

// TestSwitchoverEnvNamesItsCandidates: the switchover command gets
// NSS_CANDIDATE_PODS, the candidates' pod names in the reconciler's order,
// separated by single spaces, and NSS_TARGET_POD is the first of them; an
// action with no candidate list (made before there were any) names its
// target alone.
func TestSwitchoverEnvNamesItsCandidates(t *testing.T) {
	for _, tc := range []struct {
		name       string
		act        reconciler.Action
		candidates string
		target     string
	}{
		{"two candidates", reconciler.Action{Type: reconciler.ActionSwitchover, Ordinal: 0, Target: 2, Candidates: []int{2, 1}}, "pg-2 pg-1", "pg-2"},
		{"one candidate", reconciler.Action{Type: reconciler.ActionSwitchover, Ordinal: 1, Target: 0, Candidates: []int{0}}, "pg-0", "pg-0"},
		{"target alone", reconciler.Action{Type: reconciler.ActionSwitchover, Ordinal: 1, Target: 2}, "pg-2", "pg-2"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e, p, run := askRig(func(string, string, map[string]string) (int, string, error) { return 0, "", nil })
			runAsk(t, e, p, tc.act)
			env := run.ran[0]
			if env["NSS_CANDIDATE_PODS"] != tc.candidates || env["NSS_TARGET_POD"] != tc.target || env["NSS_POD"] != reconciler.PodName("pg", tc.act.Ordinal) {
				t.Fatalf("env %v, want NSS_CANDIDATE_PODS=%q NSS_TARGET_POD=%q", env, tc.candidates, tc.target)
			}
		})
	}
	// The disruption check gets no candidates.
	e, p, run := askRig(func(string, string, map[string]string) (int, string, error) { return 0, "", nil })
	runAsk(t, e, p, reconciler.Action{Type: reconciler.ActionCheckDisruption, Ordinal: 2, Target: 0})
	if _, ok := run.ran[0]["NSS_CANDIDATE_PODS"]; ok {
		t.Fatalf("the disruption check got NSS_CANDIDATE_PODS: %v", run.ran[0])
	}
}

// TestFailedSwitchoverMovesOn: a switchover that fails with one candidate
// is announced (SwitchoverFailed, the command's answer and the candidate
// tried next, with no time: nothing waits) and holds nothing; once it
// failed with every candidate, the step is held with backoff, and the
// event gives each candidate's answer.
func TestFailedSwitchoverMovesOn(t *testing.T) {
	e, p, _ := askRig(func(_, _ string, env map[string]string) (int, string, error) {
		return 1, "switchover failed: " + env["NSS_TARGET_POD"] + " lags\n", nil
	})
	c := &controller{log: hclog.NewNullLogger(), clock: e.clock, sets: newSetStates(nil), effector: e, expectTTL: time.Minute}
	settle := func(act reconciler.Action) acted {
		var res acted
		if err := c.settle(p, act, e.execute(context.Background(), p, act), &res); err != nil {
			t.Fatal(err)
		}
		return res
	}
	res := settle(reconciler.Action{Type: reconciler.ActionSwitchover, Ordinal: 0, Target: 1, Candidates: []int{1, 2}})
	if len(res.held) != 1 || !res.held[0].Until.IsZero() || len(p.st.memory.Holds) != 0 {
		t.Fatalf("the first candidate's failure: held %+v, memory %+v; want a hold that holds nothing", res.held, p.st.memory)
	}
	d, _ := c.sets.get(p.key)
	if ev := d.Events[len(d.Events)-1]; ev.Type != reconciler.HoldSwitchoverFailed ||
		ev.Message != "pg-0: the switchover from pg-0 to pg-1 failed (exit 1): switchover failed: pg-1 lags; trying pg-2 next" {
		t.Fatalf("event %+v", ev)
	}
	res = settle(reconciler.Action{Type: reconciler.ActionSwitchover, Ordinal: 0, Target: 2, Candidates: []int{2, 1}})
	if len(res.held) != 1 || res.held[0].Until != p.now.Add(reconciler.AskBackoffBase) || len(p.st.memory.Holds) != 1 {
		t.Fatalf("every candidate failed: held %+v, memory %+v; want the step held %s", res.held, p.st.memory, reconciler.AskBackoffBase)
	}
	d, _ = c.sets.get(p.key)
	ev := d.Events[len(d.Events)-1]
	for _, want := range []string{"pg-1: the switchover from pg-0 to pg-1 failed (exit 1): switchover failed: pg-1 lags",
		"pg-2: the switchover from pg-0 to pg-2 failed (exit 1): switchover failed: pg-2 lags", "trying again in 5s"} {
		if ev.Type != reconciler.HoldSwitchoverFailed || !strings.Contains(ev.Message, want) {
			t.Fatalf("event %+v, want it to say %q", ev, want)
		}
	}
}

// TestSwitchoverCandidatesOnSimulatedNomad: the whole agent on the
// simulated Nomad, with a Nomad-native leader check on pg-2 and a
// switchover command that refuses pg-0 (a standby that lags) and promotes
// any other candidate it is given first. The rollout takes pg-1 and pg-0
// down first; the switchover is then offered both, pg-0 first, refuses it,
// and is tried next with pg-1 first, which it promotes; the old leader
// goes last, once pg-1 leads.
func TestSwitchoverCandidatesOnSimulatedNomad(t *testing.T) {
	var mu sync.Mutex
	var offered []string
	h, rec := startNativeLeaderSetWith(t, map[string]string{"statefulset_leader_update": "switchover", "statefulset_switchover_command": "promote"})
	h.sim.SetExec(func(allocID, task string, command []string, env map[string]string) (int, string, error) {
		mu.Lock()
		offered = append(offered, env["NSS_CANDIDATE_PODS"])
		mu.Unlock()
		target := env["NSS_TARGET_POD"]
		if target == "pg-0" {
			return 1, "pg-0 lags", nil
		}
		// Promote the target: its "primary" passes, and the old leader's
		// no longer does.
		for _, pod := range []string{env["NSS_POD"], target} {
			for _, a := range h.sim.Allocs("default", pod) {
				if a.ClientStatus == api.AllocClientStatusRunning {
					if err := h.sim.SetAllocChecks(a.ID, map[string]bool{"primary": pod == target}); err != nil {
						return 1, err.Error(), nil
					}
				}
			}
		}
		return 0, "promoted " + target, nil
	})
	h.setLeader("pg", 2)
	h.waitLeader("pg", 2)
	first := h.healthyChildren("pg")[0]
	h.register(nativeLeaderJob("pg", map[string]string{"statefulset_leader_update": "switchover", "statefulset_switchover_command": "promote"}, "v2"))
	h.waitConverged("pg", 3, func(rev string) bool { return rev != first })
	h.waitLeader("pg", 1)
	mu.Lock()
	defer mu.Unlock()
	if want := []string{"pg-0 pg-1", "pg-1 pg-0"}; !slices.Equal(offered, want) {
		t.Fatalf("switchovers offered %q, want %q", offered, want)
	}
	if got, want := rec.order(), []string{"pg-1", "pg-0", "pg-2"}; !slices.Equal(got, want) {
		t.Fatalf("children stopped in the order %v, want %v: the leader (pg-2) last", got, want)
	}
	var failed, led []string
	for _, ev := range h.view("pg").Events {
		switch {
		case ev.Type == reconciler.HoldSwitchoverFailed:
			failed = append(failed, ev.Message)
		case ev.Type == "Switchover" && strings.Contains(ev.Message, "leads, after a switchover"):
			led = append(led, ev.Message)
		}
	}
	if len(failed) != 1 || !strings.Contains(failed[0], "pg-0 lags; trying pg-1 next") || len(led) != 1 || !strings.HasPrefix(led[0], "pg-1 leads, after a switchover from pg-2") {
		t.Fatalf("SwitchoverFailed events %q, leader changes %q; want one failure moving on to pg-1, and pg-1 leading", failed, led)
	}
}

// startNativeLeaderSetWith is startNativeLeaderSet with more meta.
func startNativeLeaderSetWith(t *testing.T, meta map[string]string) (*harness, *takedowns) {
	t.Helper()
	var rec *takedowns
	h := startAgentWith(t, fastSim(), func(o *Options) {
		wrapNomad(o, func(a nomad.API) nomad.API {
			rec = &takedowns{API: a}
			return rec
		})
	})
	h.register(nativeLeaderJob("pg", meta, "v1"))
	h.waitConverged("pg", 3, nil)
	return h, rec
}
