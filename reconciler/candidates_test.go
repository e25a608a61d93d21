package reconciler

import (
	"cmp"
	"fmt"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

// The best candidate (DESIGN §3b): a switchover is offered every Ready
// follower the step does not take down, those at the update revision
// first; one that fails is tried next with the following candidate, and
// the step is held only once every candidate failed. This file holds the
// world's part of it (a switchover command that refuses a lagging
// follower, or chooses among its candidates itself), the invariants the
// randomized drivers check on every decision, and the scenarios.

// switchoverRound is the world's own account of the switchover tries of
// one leader since its step was last held, kept apart from the
// reconciler's memory so that the invariants can judge it: the candidates
// the round's first try was offered, and those whose switchover failed
// since, in the order tried. It mirrors how long the reconciler may
// remember them (a leadership term, while the leader leads) and nothing
// else.
type switchoverRound struct {
	leader int
	cands  []int
	failed []int
}

// same reports whether a switchover of a belongs to the round: the same
// leader, offered the same candidates.
func (r *switchoverRound) same(a Action) bool {
	return r.leader == a.Ordinal && sameSet(r.cands, a.Candidates)
}

// forgetUnlessLeading ends the round once its leader does not lead in the
// input: a leader that no longer leads forgets its tries.
func (r *switchoverRound) forgetUnlessLeading(in Input) {
	if r.leader >= 0 && !slices.ContainsFunc(in.Pods, func(p Pod) bool { return p.Ordinal == r.leader && p.Leader }) {
		*r = switchoverRound{leader: -1}
	}
}

// candidateCounts counts what the runs exercised: switchovers decided,
// failed tries that moved on to the next candidate, steps held after
// every candidate failed, and handovers to another candidate than the
// first.
type candidateCounts struct {
	switchovers, movedOn, heldAfterAll, notFirst int
}

// randomCandidates sums candidateCounts over the randomized runs.
var randomCandidates struct{ switchovers, movedOn, heldAfterAll, notFirst atomic.Int64 }

func (c candidateCounts) addTo() {
	randomCandidates.switchovers.Add(int64(c.switchovers))
	randomCandidates.movedOn.Add(int64(c.movedOn))
	randomCandidates.heldAfterAll.Add(int64(c.heldAfterAll))
	randomCandidates.notFirst.Add(int64(c.notFirst))
}

// lagging reports whether ord's member lags now: its switchover is refused.
func (w *world) lagging(ord int) bool {
	return w.lagUntil[ord].After(w.now)
}

// lag makes ord's member lag for d, as a standby whose replay is paused.
func (w *world) lag(ord int, d time.Duration) {
	w.lagUntil[ord] = w.now.Add(d)
	w.logf("world: %d lags for %s", ord, d)
}

// answerSwitchover plays the switchover command: it hands leadership to a
// candidate that does not lag. Taking NSS_TARGET_POD, it refuses a
// target that lags; choosing (appChooses), it skips those that lag and
// takes one of the others, not always the first, and refuses only when
// all of them lag. fails makes it fail whatever the candidates.
func (w *world) answerSwitchover(a Action, fails bool) (Result, error) {
	if len(a.Candidates) == 0 || a.Candidates[0] != a.Target {
		return Result{}, fmt.Errorf("switchover to %d with candidates %v: the target is the first candidate", a.Target, a.Candidates)
	}
	for _, c := range a.Candidates {
		i := w.podIndex(c)
		if c == w.leader || i < 0 || !runningAndReady(&w.pods[i]) || w.pods[i].Terminating {
			return Result{}, fmt.Errorf("switchover offers %d (candidates %v), which is not a Ready follower now", c, a.Candidates)
		}
	}
	refuse := func(msg string) (Result, error) {
		return Result{Wait: &Wait{Reason: HoldSwitchoverFailed, Message: msg}}, nil
	}
	if fails {
		return refuse("the switchover command failed")
	}
	choice := a.Target
	if w.appChooses {
		ok := slices.DeleteFunc(slices.Clone(a.Candidates), w.lagging)
		if len(ok) == 0 {
			return refuse(fmt.Sprintf("every candidate lags (%v)", a.Candidates))
		}
		choice = ok[0]
		if len(ok) > 1 && w.crng.IntN(2) == 0 {
			choice = ok[1+w.crng.IntN(len(ok)-1)]
		}
	} else if w.lagging(a.Target) {
		return refuse(fmt.Sprintf("%d lags: refused", a.Target))
	}
	if choice != a.Target {
		w.candidates.notFirst++
		w.logf("  the switchover command chose %d among %v", choice, a.Candidates)
	}
	w.newLeader = choice
	// The leader check passes there a moment later, now and then.
	w.leaderMovesAt = w.now.Add(time.Duration(w.crng.IntN(4)) * time.Second)
	return Result{}, nil
}

// candidateChaos makes a member lag now and then, or switches how the
// switchover command chooses.
func candidateChaos(w *world) {
	switch w.crng.IntN(8) {
	case 0:
		if w.spec.Replicas > 0 {
			w.lag(w.spec.OrdinalsStart+w.crng.IntN(w.spec.Replicas), time.Duration(10+w.crng.IntN(80))*time.Second)
		}
	case 1:
		w.appChooses = !w.appChooses
		w.logf("world: the switchover command chooses its candidate: %v", w.appChooses)
	}
}

// lagFirstCandidate makes the follower a switchover of the current leader
// would be offered first lag (the lowest ordinal but the leader's, all
// being at one revision), for the rollout that follows.
func lagFirstCandidate(w *world) {
	for o := w.spec.OrdinalsStart; o < w.spec.OrdinalsStart+w.spec.Replicas; o++ {
		if o != w.leader {
			w.lag(o, time.Duration(30+w.crng.IntN(60))*time.Second)
			return
		}
	}
}

// checkCandidates checks the candidates of every switchover the decision
// makes, against the observation it was made from and the world's round:
// every Ready follower the decision leaves up is offered, no other pod;
// those at the update revision first, then by ordinal; and within a round
// over the same candidates, those whose switchover failed come last, so
// that the first candidate was not tried yet. (checkLeaderAndAsking checks
// that each candidate is a Ready follower the decision does not take
// down.)
func (w *world) checkCandidates(in Input, out Output) error {
	for i, a := range out.Actions {
		if a.Type != ActionSwitchover {
			continue
		}
		w.candidates.switchovers++
		pods := map[int][]Pod{}
		for _, p := range in.Pods {
			pods[p.Ordinal] = append(pods[p.Ordinal], p)
		}
		// What the step leaves up: pods it does not delete, ask about or
		// hold (a held disruption counts as taken down: it keeps its
		// place).
		gone := map[int]bool{}
		for _, b := range out.Actions {
			if b.Type == ActionDeletePod || b.Type == ActionCheckDisruption {
				gone[b.Ordinal] = true
			}
		}
		for _, h := range out.Held {
			gone[h.Ordinal] = true
		}
		for o := w.spec.OrdinalsStart; o < w.spec.OrdinalsStart+w.spec.Replicas; o++ {
			if ps := pods[o]; o != a.Ordinal && len(ps) == 1 && w.healthy(ps[0]) && !ps[0].Leader && !gone[o] && !slices.Contains(a.Candidates, o) {
				return fmt.Errorf("switchover %d of %d (candidates %v) leaves out the Ready follower %d", i, a.Ordinal, a.Candidates, o)
			}
		}
		updated := func(o int) bool {
			ps := pods[o]
			return len(ps) == 1 && ps[0].Revision == out.Status.UpdateRevision && !ps[0].Drifted
		}
		daemonOrder := func(x, y int) int {
			if ux, uy := updated(x), updated(y); ux != uy {
				if ux {
					return -1
				}
				return 1
			}
			return cmp.Compare(x, y)
		}
		k := len(a.Candidates)
		if w.round.same(a) {
			k = 0
			for _, c := range a.Candidates {
				if !slices.Contains(w.round.failed, c) {
					k++
				}
			}
			if k == 0 {
				return fmt.Errorf("switchover of %d offered %v again, every one of which failed since the step was last held", a.Ordinal, a.Candidates)
			}
			for _, c := range a.Candidates[k:] {
				if !slices.Contains(w.round.failed, c) {
					return fmt.Errorf("switchover of %d offers %v: %d, not tried since the step was last held, comes after a candidate that failed since (%v)",
						a.Ordinal, a.Candidates, c, w.round.failed)
				}
			}
		}
		if !slices.IsSortedFunc(a.Candidates[:k], daemonOrder) || !slices.IsSortedFunc(a.Candidates[k:], daemonOrder) {
			return fmt.Errorf("switchover of %d offers %v, not in the daemon's order (update revision %s first, then by ordinal; %d failed since the last hold)",
				a.Ordinal, a.Candidates, out.Status.UpdateRevision, len(a.Candidates)-k)
		}
	}
	return nil
}

// foldRound takes a switchover's result into the world's round and checks
// what Fold made of it: a failure holds the step (SwitchoverFailed, with
// a time) exactly when every candidate of the round has failed since the
// step was last held, and that hold gives each candidate's answer.
func (w *world) foldRound(a Action, res Result, h *Hold) error {
	if a.Type != ActionSwitchover || res.Err != nil {
		return nil
	}
	if res.Wait == nil {
		w.round = switchoverRound{leader: -1}
		return nil
	}
	if !w.round.same(a) {
		w.round = switchoverRound{leader: a.Ordinal, cands: slices.Clone(a.Candidates)}
	}
	if !slices.Contains(w.round.failed, a.Target) {
		w.round.failed = append(w.round.failed, a.Target)
	}
	var left []int
	for _, c := range w.round.cands {
		if !slices.Contains(w.round.failed, c) {
			left = append(left, c)
		}
	}
	held := h != nil && h.Until.After(w.now)
	switch {
	case h == nil || h.Reason != HoldSwitchoverFailed:
		return fmt.Errorf("a failed switchover became %+v, want a SwitchoverFailed hold", h)
	case held && len(left) > 0:
		return fmt.Errorf("held (SwitchoverFailed) with %v not tried since the step was last held (tried %v)", left, w.round.failed)
	case !held && len(left) == 0:
		return fmt.Errorf("every candidate failed since the step was last held (%v), but the step is not held", w.round.failed)
	case !held:
		w.candidates.movedOn++
		return nil
	}
	for _, c := range w.round.cands {
		if !strings.Contains(h.Message, PodName(w.spec.Name, c)+": ") {
			return fmt.Errorf("the SwitchoverFailed hold does not give %d's answer: %s", c, h.Message)
		}
	}
	w.candidates.heldAfterAll++
	w.round = switchoverRound{leader: -1}
	return nil
}

// candidateWorld is a converged set of n pods whose leader is ord
// leader, with leader_update = switchover.
func candidateWorld(t *testing.T, n, leader int, mutate func(*Spec)) *world {
	t.Helper()
	spec := Spec{Name: "web", Replicas: n, LeaderCheck: "primary", LeaderUpdate: LeaderSwitchover, ProgressDeadline: 10 * time.Minute}
	if mutate != nil {
		mutate(&spec)
	}
	w := newWorld(spec, "v1")
	converge(t, w)
	w.leader = leader
	return w
}

// switchoversUntilSettled steps w until it converges, playing along with
// play, and returns every switchover decided, in order.
func switchoversUntilSettled(t *testing.T, w *world, play func(w *world, out Output)) []Action {
	t.Helper()
	var asked []Action
	for i := 0; i < 400; i++ {
		out := mustStep(t, w)
		for _, a := range out.Actions {
			if a.Type == ActionSwitchover {
				asked = append(asked, a)
			}
		}
		if play != nil {
			play(w, out)
		}
		if w.converged() {
			return asked
		}
		w.advanceAll()
		w.elect()
		w.now = w.now.Add(time.Second)
		if len(out.Actions) == 0 && out.Requeue > time.Second {
			// A hold: the agent looks again at its end, the leader check
			// showing meanwhile what a switchover did.
			w.now = w.now.Add(out.Requeue - time.Second)
			w.elect()
		}
	}
	t.Fatalf("not converged\n%s", w.dump())
	return nil
}

// TestSwitchoverCandidates: the candidates a switchover is offered, in the
// daemon's order: every Ready follower the step leaves up, those at the
// update revision first, then by ordinal.
func TestSwitchoverCandidates(t *testing.T) {
	for _, tc := range []struct {
		name   string
		n      int
		leader int
		// partition is the rollout's: ordinals below it keep the old
		// revision.
		partition int
		// unready are followers that are not Ready when the leader's
		// turn comes (Parallel, two may be down: the leader's turn still
		// comes).
		unready []int
		want    []int
	}{
		{name: "all updated", n: 4, leader: 1, want: []int{0, 2, 3}},
		{name: "leader highest", n: 3, leader: 2, want: []int{0, 1}},
		{name: "below the partition last", n: 4, leader: 3, partition: 2, want: []int{2, 0, 1}},
		{name: "not ready left out", n: 4, leader: 3, partition: 1, unready: []int{1}, want: []int{2, 0}},
		{name: "one follower", n: 2, leader: 0, want: []int{1}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			w := candidateWorld(t, tc.n, tc.leader, func(s *Spec) {
				s.Partition = tc.partition
				if len(tc.unready) > 0 {
					s.PodManagementPolicy, s.MaxUnavailable = Parallel, IntOrPercent{Value: 2}
				}
			})
			w.template = []byte("v2")
			var got []int
			for i := 0; i < 200 && got == nil; i++ {
				out := mustStep(t, w)
				for _, a := range out.Actions {
					if a.Type == ActionSwitchover {
						got = a.Candidates
					}
				}
				// The followers are updated first; then some stop being
				// Ready just before the leader's turn.
				w.advanceAll()
				followersDone := len(w.pods) == tc.n && !slices.ContainsFunc(w.pods, func(p Pod) bool {
					return p.Ordinal != tc.leader && (!runningAndReady(&p) ||
						(p.Ordinal >= tc.partition && p.Revision != w.last.Status.UpdateRevision))
				})
				if followersDone {
					for _, o := range tc.unready {
						w.pods[w.podIndex(o)].Ready = false
					}
				}
				w.now = w.now.Add(time.Second)
			}
			if !slices.Equal(got, tc.want) {
				t.Fatalf("candidates %v, want %v\n%s", got, tc.want, w.dump())
			}
		})
	}
}

// TestSwitchoverMovesToTheNextCandidate: a switchover that fails is tried
// next with the following candidate at once, the one that failed going
// last, and the step is held only once every candidate failed, the hold
// giving each one's answer; after the backoff every candidate is offered
// again, in the daemon's order.
func TestSwitchoverMovesToTheNextCandidate(t *testing.T) {
	for _, tc := range []struct {
		name    string
		lagging []int
		chooses bool
		// tries are the candidates of each switchover, in order, until
		// the one that succeeds (or the test's end).
		tries  [][]int
		leader int
		holds  int
	}{
		{name: "first refuses", lagging: []int{0}, tries: [][]int{{0, 1, 2}, {1, 2, 0}}, leader: 1},
		{name: "two refuse", lagging: []int{0, 1}, tries: [][]int{{0, 1, 2}, {1, 2, 0}, {2, 0, 1}}, leader: 2},
		{name: "the command skips the lagging ones", lagging: []int{0, 1}, chooses: true, tries: [][]int{{0, 1, 2}}, leader: 2},
		{name: "all refuse, then one catches up", lagging: []int{0, 1, 2},
			tries: [][]int{{0, 1, 2}, {1, 2, 0}, {2, 0, 1}, {0, 1, 2}}, leader: 0, holds: 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			w := candidateWorld(t, 4, 3, nil)
			w.appChooses = tc.chooses
			for _, o := range tc.lagging {
				w.lagUntil[o] = w.now.Add(time.Hour)
			}
			w.template = []byte("v2")
			var holds []Hold
			asked := switchoversUntilSettled(t, w, func(w *world, out Output) {
				for _, h := range out.Held {
					if h.Reason == HoldSwitchoverFailed && !slices.Contains(holds, h) {
						holds = append(holds, h)
						// 0 catches up during the backoff.
						delete(w.lagUntil, 0)
					}
				}
			})
			var tries [][]int
			for _, a := range asked {
				tries = append(tries, a.Candidates)
			}
			if fmt.Sprint(tries) != fmt.Sprint(tc.tries) || w.leader != tc.leader || len(holds) != tc.holds {
				t.Fatalf("tries %v, leader %d, holds %+v; want tries %v, leader %d, %d hold(s)", tries, w.leader, holds, tc.tries, tc.leader, tc.holds)
			}
			for _, h := range holds {
				for _, o := range []int{0, 1, 2} {
					if !strings.Contains(h.Message, fmt.Sprintf("web-%d: %d lags: refused", o, o)) {
						t.Errorf("the SwitchoverFailed hold does not give web-%d's answer: %s", o, h.Message)
					}
				}
				if !h.Until.After(epoch) {
					t.Errorf("the SwitchoverFailed hold has no backoff: %+v", h)
				}
			}
		})
	}
}

// TestSwitchoverDoneOnAnyCandidate: the command may hand leadership to any
// of its candidates; the step is done, and the old leader taken down, once
// the leader check passes on any of them, and the change is announced
// with the pod that leads.
func TestSwitchoverDoneOnAnyCandidate(t *testing.T) {
	spec := Spec{Name: "web"}
	sw := Action{Type: ActionSwitchover, Ordinal: 3, Target: 0, Candidates: []int{0, 1, 2}}
	m, _ := Fold(spec, Memory{}, sw, Result{}, epoch)
	if len(m.Holds) != 1 || m.Holds[0].Reason != HoldSwitchingOver || !strings.Contains(m.Holds[0].Message, "web-0 web-1 web-2") {
		t.Fatalf("after the switchover: %+v", m.Holds)
	}
	pods := func(leader int) []Pod {
		var ps []Pod
		for o := 0; o < 4; o++ {
			ps = append(ps, Pod{Ordinal: o, Phase: PhaseRunning, Ready: true, Leader: o == leader})
		}
		return ps
	}
	m, change := m.begin(Input{Spec: spec, Now: epoch.Add(3 * time.Second), Pods: pods(2)})
	if change == nil || change.From != 3 || change.To != 2 || change.Took != 3*time.Second {
		t.Fatalf("leader change %+v, want 3 -> 2 in 3s", change)
	}
	if m.Switchover != nil || len(m.Holds) != 0 {
		t.Fatalf("the switch is done once web-2 alone leads: %+v", m)
	}

	// The same through the world: the command picks the last candidate.
	w := candidateWorld(t, 4, 3, nil)
	w.appChooses = true
	w.lagUntil[0], w.lagUntil[1] = epoch.Add(time.Hour), epoch.Add(time.Hour)
	w.template = []byte("v2")
	var changes []LeaderChange
	switchoversUntilSettled(t, w, func(w *world, out Output) {
		if out.LeaderChange != nil {
			changes = append(changes, *out.LeaderChange)
		}
	})
	if len(changes) != 1 || changes[0].From != 3 || changes[0].To != 2 || w.leader != 2 {
		t.Fatalf("leader changes %+v, leader %d; want one, 3 -> 2", changes, w.leader)
	}
}

// TestFoldSwitchoverRounds: how Fold counts a round of failed switchovers.
func TestFoldSwitchoverRounds(t *testing.T) {
	spec := Spec{Name: "web"}
	fail := func(m Memory, cands ...int) (Memory, *Hold) {
		// An action without candidates (made before they came) has its
		// Target alone.
		a := Action{Type: ActionSwitchover, Ordinal: 9, Target: 4, Candidates: cands}
		if len(cands) > 0 {
			a.Target = cands[0]
		}
		return Fold(spec, m, a, Result{Wait: &Wait{Reason: HoldSwitchoverFailed, Message: fmt.Sprintf("no to %d", a.Target)}}, epoch)
	}
	for _, tc := range []struct {
		name  string
		tries [][]int
		// held is whether the last try holds the step; failed are the
		// candidates remembered as failed after it.
		held   bool
		failed []int
	}{
		{name: "one of two", tries: [][]int{{1, 2}}, failed: []int{1}},
		{name: "both of two", tries: [][]int{{1, 2}, {2, 1}}, held: true},
		{name: "the only one", tries: [][]int{{1}}, held: true},
		{name: "a new follower starts a new round", tries: [][]int{{1, 2}, {2, 3, 1}}, failed: []int{2}},
		{name: "a follower gone starts a new round", tries: [][]int{{1, 2, 3}, {2, 3}}, failed: []int{2}},
		{name: "no candidates (an older action)", tries: [][]int{nil}, held: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var m Memory
			var h *Hold
			for _, c := range tc.tries {
				m, h = fail(m, c...)
			}
			var failed []int
			for _, c := range m.Tries[9].Failed {
				failed = append(failed, c.Ordinal)
			}
			if held := h.Until.After(epoch); held != tc.held || !slices.Equal(failed, tc.failed) || h.Reason != HoldSwitchoverFailed {
				t.Fatalf("hold %+v, failed %v; want held %v, failed %v", h, failed, tc.held, tc.failed)
			}
			if tc.held && (len(m.Holds) != 1 || m.Holds[0] != *h || m.AskFailures[9] != 1) {
				t.Fatalf("a held step: memory %+v", m)
			}
			if !tc.held && (len(m.Holds) != 0 || m.AskFailures[9] != 0 || !strings.Contains(h.Message, "next")) {
				t.Fatalf("a step that moves on: hold %+v, memory %+v", h, m)
			}
		})
	}
	// The tries of a pod that no longer leads are forgotten.
	m, _ := fail(Memory{}, 1, 2)
	m, _ = m.begin(Input{Spec: spec, Now: epoch, Pods: []Pod{{Ordinal: 9, Phase: PhaseRunning, Ready: true}, {Ordinal: 1, Leader: true}}})
	if len(m.Tries) != 0 {
		t.Fatalf("tries of a pod that does not lead: %+v", m)
	}
}
