package e2e

import (
	"fmt"
	"strings"
	"testing"
	"time"

	nomadapi "github.com/hashicorp/nomad/api"
)

// TestPostgresBestCandidate runs the PostgreSQL example's switchover with
// a standby that must not be promoted: its WAL replay is paused
// (pg_wal_replay_pause()), as an operator holds a copy back, so it would
// never replay the primary's last WAL. With a client writing the whole
// time:
//
//  1. a rollout with statefulset_partition = 1 updates both standbys
//     (postgres-2, then postgres-1) and leaves the primary postgres-0;
//  2. replay is paused on both standbys and the partition is lowered: the
//     switchover is offered postgres-1 then postgres-2 (both at the update
//     revision, by ordinal), the example's switchover.sh refuses both, the
//     daemon tries again with postgres-2 first, and then holds the step
//     (Held, SwitchoverFailed) with each candidate's answer; the primary
//     stays up and keeps the old revision;
//  3. replay is resumed on postgres-2 alone. postgres-1, the daemon's first
//     candidate, is still paused: switchover.sh skips it and promotes
//     postgres-2, and the rollout ends with postgres-0 updated as a
//     standby of postgres-2.
//
// postgres-1 is never a primary; once its replay is resumed, every
// acknowledged write is read back from the primary and every member.
func TestPostgresBestCandidate(t *testing.T) {
	pc := startPostgres(t)
	pc.startWriter(t)
	pc.m.Watchdog.TrackDown(pgSet, 3)
	paused := map[string]bool{}
	replay := func(pod string, pause bool) {
		t.Helper()
		fn := "pg_wal_replay_resume()"
		if pause {
			fn = "pg_wal_replay_pause()"
		}
		code, out := pc.execIn(t, pod, fmt.Sprintf(". /local/lib.sh; sql -c 'select %s' && sql -c 'select pg_is_wal_replay_paused()'", fn), time.Minute)
		if code != 0 || !strings.HasSuffix(strings.TrimSpace(out), map[bool]string{true: "t", false: "f"}[pause]) {
			t.Fatalf("%s on %s: exit %d: %s", fn, pod, code, out)
		}
		paused[pod] = pause
		t.Logf("%s: %s", pod, fn)
	}
	t.Cleanup(func() {
		// A member left paused would hold the next test's cluster (and
		// the read-back) up: resume it whatever happened.
		for pod, p := range paused {
			if p {
				pc.execIn(t, pod, ". /local/lib.sh; sql -c 'select pg_wal_replay_resume()'", time.Minute)
			}
		}
	})

	st, err := setStatus(pc.d, pgSet)
	if err != nil {
		t.Fatal(err)
	}
	old := st.Status.UpdateRevision
	start := time.Now()

	// 1. The standbys only.
	updateParent(t, pc.m.Cluster, pgSet, func(j *nomadapi.Job) {
		task := j.TaskGroups[0].Tasks[0]
		if task.Env == nil {
			task.Env = map[string]string{}
		}
		task.Env["NSS_E2E_ROLLOUT"] = "candidates"
		j.Meta["statefulset_partition"] = "1"
	})
	var rev string
	Eventually(t, pgWaitLong, "postgres-1 and postgres-2 to be updated, postgres-0 not (partition 1)", func() error {
		st, err := setStatus(pc.d, pgSet)
		if err != nil {
			return err
		}
		rev = st.Status.UpdateRevision
		if rev == old || st.Status.ReadyReplicas != 3 || st.Status.UpdatedReplicas != 2 {
			return fmt.Errorf("update %s, ready %d, updated %d; pods %s", rev, st.Status.ReadyReplicas, st.Status.UpdatedReplicas, podLine(st))
		}
		for _, p := range st.Pods {
			if (p.Ordinal == 0) == (p.Revision == rev) || (p.State != "Running" && p.State != "Available") || (p.Ordinal == 0) != p.Leader {
				return fmt.Errorf("pods %s", podLine(st))
			}
		}
		return nil
	})
	pc.waitFormed(t)

	// 2. Every standby paused: the switchover can hand over to none.
	replay(pgSet+"-1", true)
	replay(pgSet+"-2", true)
	lowered := time.Now()
	updateParent(t, pc.m.Cluster, pgSet, func(j *nomadapi.Job) { delete(j.Meta, "statefulset_partition") })
	var held string
	Eventually(t, 4*time.Minute, "the primary's step to be held: the switchover failed with both candidates", func() error {
		c, ok, st := pc.condition("Held", "SwitchoverFailed")
		if !ok || !strings.Contains(c.Message, "with every candidate") {
			return fmt.Errorf("conditions %+v; pods %s", st.Status.Conditions, podLine(st))
		}
		held = c.Message
		return nil
	})
	t.Logf("held: %s", held)
	for _, want := range []string{pgSet + "-1: ", pgSet + "-2: ", pgSet + "-1's WAL replay is paused", pgSet + "-2's WAL replay is paused"} {
		if !strings.Contains(held, want) {
			t.Errorf("the SwitchoverFailed condition does not say %q: %s", want, held)
		}
	}
	// Each try is a SwitchoverFailed event; the first moved on to the
	// next candidate, the second held the step. (The events are polled:
	// the held condition may be seen first.)
	Eventually(t, 30*time.Second, "a SwitchoverFailed event for each try", func() error {
		var failed []string
		for _, e := range pc.ev.since(lowered) {
			if e.Type == "SwitchoverFailed" {
				failed = append(failed, e.Message)
			}
		}
		if len(failed) < 2 || !strings.Contains(failed[0], "from "+pgSet+"-0 to "+pgSet+"-1 failed") || !strings.HasSuffix(failed[0], "; trying "+pgSet+"-2 next") ||
			!strings.Contains(failed[1], "the switchover failed with every candidate ("+pgSet+"-1: ") {
			return fmt.Errorf("SwitchoverFailed events %q: want a try with postgres-1 first that moves on to postgres-2, then the step held", failed)
		}
		return nil
	})
	st, err = setStatus(pc.d, pgSet)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range st.Pods {
		if p.Ordinal == 0 && (p.Revision == rev || !p.Leader) {
			t.Fatalf("the primary went although no standby could take over: %s", podLine(st))
		}
	}

	// 3. postgres-2 catches up; postgres-1, the first candidate, stays
	// paused and must be skipped.
	replay(pgSet+"-2", false)
	pc.waitRollout(t, old, pgWaitLong)
	pc.waitLeader(t, 2)
	evs := pc.ev.since(start)
	var leads []string
	for _, e := range evs {
		if e.Type == "Switchover" && strings.Contains(e.Message, "leads, after a switchover") {
			leads = append(leads, e.Message)
		}
	}
	if len(leads) != 1 || !strings.HasPrefix(leads[0], pgSet+"-2 leads, after a switchover from "+pgSet+"-0") {
		t.Errorf("leader changes %q, want one: postgres-2, from postgres-0", leads)
	}
	if want := []string{"2", "1", "switchover", "0"}; strings.Join(steps(evs), ",") != strings.Join(want, ",") {
		t.Errorf("steps %v, want %v", steps(evs), want)
	}
	pc.w.mu.Lock()
	for _, s := range pc.w.switches {
		if strings.HasSuffix(s, " "+pgSet+"-1") {
			t.Errorf("the writer found postgres-1 primary (%s); primaries: %v", s, pc.w.switches)
		}
	}
	pc.w.mu.Unlock()
	t.Logf("events:%s", eventLines(evs))

	// Every acknowledged write, once postgres-1 replays again.
	replay(pgSet+"-1", false)
	pc.waitFormed(t)
	pc.w.verify(t)
}
