package reconciler

import (
	"flag"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

var (
	flagSeed = flag.Uint64("seed", 0, "replay the randomized run with this seed (printed on failure)")
	flagRuns = flag.Int("runs", 10240, "number of randomized runs in TestRandomized")
	flagFrom = flag.Int("seedfrom", 0, "first run number per cell, to explore seeds beyond the default ones")
)

// cell is one combination of the matrix the randomized runs cover.
type cell struct {
	policy      PodManagementPolicy
	strategy    UpdateStrategy
	whenScaled  RetentionPolicy
	whenDeleted RetentionPolicy
}

func cells() []cell {
	var cs []cell
	// Recreate comes last, so that the seeds of the cells before it (the
	// cell is the seed's high half) replay as they did before it came.
	for _, s := range [][]UpdateStrategy{{RollingUpdate, OnDelete}, {Recreate}} {
		for _, p := range []PodManagementPolicy{OrderedReady, Parallel} {
			for _, s := range s {
				for _, ws := range []RetentionPolicy{Retain, Delete} {
					for _, wd := range []RetentionPolicy{Retain, Delete} {
						cs = append(cs, cell{p, s, ws, wd})
					}
				}
			}
		}
	}
	return cs
}

// TestRandomized drives many random sets through creation, a clean rollout,
// a stretch of chaos (random spec changes, failing and stopped pods, a broken
// template, injected action failures), a calm phase that must converge, and
// often a cascading delete. Every step is checked by checkDecision and
// checkState. A failure prints the seed; -seed=N replays that one run.
func TestRandomized(t *testing.T) {
	if *flagSeed != 0 {
		if err := randomRun(*flagSeed); err != nil {
			t.Fatalf("seed %d: %v", *flagSeed, err)
		}
		return
	}
	cs := cells()
	per := max(*flagRuns/len(cs), 1)
	t.Cleanup(func() {
		t.Logf("%d randomized runs, %d reconciles, each checked; %d volumes grown, %d of them a leader's",
			per*len(cs), randomSteps.Load(), randomExpansions.Load(), randomLeaderResizes.Load())
		// The default run count must reach a leader's expansion; a short
		// -runs may not, and says nothing about it.
		if *flagRuns >= 1024 && !t.Failed() && randomLeaderResizes.Load() == 0 {
			t.Errorf("no randomized run took a leader down to grow its volume: the leader-last rule of a growing claim went unexercised")
		}
		t.Logf("maintenance windows: %d decisions held a step, %d waits sat out, %d steps approved outside a window",
			randomWindowHolds.Load(), randomWindowWaits.Load(), randomWindowApproved.Load())
		var seen []string
		for _, r := range HoldReasons {
			if n, ok := randomHoldReasons.Load(r); ok {
				seen = append(seen, fmt.Sprintf("%s %d", r, n.(*atomic.Int64).Load()))
			} else if *flagRuns >= 1024 && !t.Failed() {
				t.Errorf("no randomized decision was held for %s: its wait policy went unexercised", r)
			}
		}
		t.Logf("holds by reason: %s", strings.Join(seen, ", "))
		if *flagRuns >= 1024 && !t.Failed() && (randomWindowWaits.Load() == 0 || randomWindowApproved.Load() == 0) {
			t.Errorf("the randomized runs never waited for a maintenance window, or never approved a step outside one: the window promise went unexercised")
		}
		rc := &randomCandidates
		t.Logf("switchovers: %d decided, %d failed tries moved on to the next candidate, %d steps held after every candidate failed, %d handed to another candidate than the first",
			rc.switchovers.Load(), rc.movedOn.Load(), rc.heldAfterAll.Load(), rc.notFirst.Load())
		if *flagRuns >= 1024 && !t.Failed() && (rc.movedOn.Load() == 0 || rc.heldAfterAll.Load() == 0 || rc.notFirst.Load() == 0) {
			t.Errorf("the randomized runs never moved on to a next candidate, never held a step after every candidate failed, or never handed over to another candidate than the first: the best-candidate promise went unexercised")
		}
		t.Logf("Recreate: %d decisions stopped pods, %d checks asked for a whole set, %d stops waited at their gate",
			randomRecreateStops.Load(), randomRecreateChecks.Load(), randomRecreateGated.Load())
		if *flagRuns >= 1024 && !t.Failed() && (randomRecreateStops.Load() == 0 || randomRecreateChecks.Load() == 0 || randomRecreateGated.Load() == 0) {
			t.Errorf("the randomized runs never stopped a set for a Recreate, never asked its check, or never held its stop: the Recreate promise went unexercised")
		}
	})
	for ci, c := range cs {
		t.Run(fmt.Sprintf("%s/%s/scaled=%s/deleted=%s", c.policy, c.strategy, c.whenScaled, c.whenDeleted), func(t *testing.T) {
			t.Parallel()
			for k := 0; k < per; k++ {
				seed := uint64(ci)<<32 | uint64(*flagFrom+k+1)
				if err := randomRun(seed); err != nil {
					t.Fatalf("seed %d: %v\nreplay: go test ./reconciler -run TestRandomized -seed=%d", seed, err, seed)
				}
			}
		})
	}
}

// randomSteps counts the reconciles of all randomized runs,
// randomExpansions the volumes they grew, for the log, and
// randomLeaderResizes the Ready leaders they took down to grow a volume
// (checked by checkLeaderAndAsking to go last, and never while the leader
// is unknown): TestRandomized fails when a full run never got there.
var randomSteps, randomExpansions, randomLeaderResizes atomic.Int64

// randomHoldReasons counts, per hold reason, the decisions of the
// randomized runs that held a step for it: the wait policies are under the
// invariants only for the reasons the chaos makes happen.
var randomHoldReasons sync.Map // reason → *atomic.Int64

// noteHolds counts the hold reasons of one decision.
func noteHolds(out Output) {
	for _, h := range out.Held {
		n, _ := randomHoldReasons.LoadOrStore(h.Reason, new(atomic.Int64))
		n.(*atomic.Int64).Add(1)
	}
}

var templates = []string{"v1", "v2", "v3", "bad"}

func randomMaxUnavailable(rng *rand.Rand) IntOrPercent {
	switch rng.IntN(4) {
	case 0:
		return IntOrPercent{Value: 2}
	case 1:
		return IntOrPercent{Value: []int{25, 50, 100}[rng.IntN(3)], Percent: true}
	default:
		return IntOrPercent{Value: 1}
	}
}

// randomRun is one randomized run; everything in it derives from seed, whose
// high half selects the matrix cell.
func randomRun(seed uint64) (err error) {
	rng := rand.New(rand.NewPCG(seed, 0x5eed))
	cs := cells()
	c := cs[int(seed>>32)%len(cs)]
	replicas := rng.IntN(5)
	claims := [][]string{nil, {"data"}, {"data", "logs"}}[rng.IntN(3)]
	spec := Spec{
		Name:                 "web",
		Replicas:             replicas,
		OrdinalsStart:        rng.IntN(3),
		PodManagementPolicy:  c.policy,
		UpdateStrategy:       c.strategy,
		Partition:            rng.IntN(replicas + 2),
		MaxUnavailable:       randomMaxUnavailable(rng),
		MinReadySeconds:      rng.IntN(3),
		RevisionHistoryLimit: 1 + rng.IntN(3),
		VolumeClaims:         claims,
		WhenScaled:           c.whenScaled,
		WhenDeleted:          c.whenDeleted,
		ProgressDeadline:     10 * time.Minute,
	}
	if rng.IntN(2) == 0 || c.strategy == Recreate {
		// (A partition with Recreate is refused by the parser.)
		spec.Partition = 0
	}
	if rng.IntN(2) == 0 {
		spec.LeaderCheck = "primary"
		spec.LeaderUpdate = []LeaderUpdate{LeaderLast, LeaderSwitchover, LeaderSupervised}[rng.IntN(3)]
	}
	if rng.IntN(2) == 0 {
		spec.DisruptionCheck = "check"
	}
	// Maintenance windows draw from a stream of their own, so that the
	// other choices of a seed stay what they were before windows came.
	wrng := rand.New(rand.NewPCG(seed, 0x3a1d))
	if wrng.IntN(3) == 0 {
		spec.MaintenanceWindows = randomWindows(wrng)
	}
	w := newWorld(spec, "v1")
	w.hooks = rng.IntN(3) == 0
	w.rng = rand.New(rand.NewPCG(seed, 0x1ead))
	// The switchover's candidates draw from a stream of their own too.
	w.crng = rand.New(rand.NewPCG(seed, 0xca4d))
	w.appChooses = w.crng.IntN(2) == 0
	w.broken["bad"] = true
	phase := "create"
	defer func() {
		randomSteps.Add(int64(w.steps))
		randomExpansions.Add(int64(w.expansions))
		randomLeaderResizes.Add(int64(w.leaderResizes))
		w.candidates.addTo()
		if err != nil {
			err = fmt.Errorf("phase %s: %w\n%s", phase, err, w.dump())
		}
	}()
	calm := func() int { return 60 + 30*w.spec.Replicas }

	// Creation, without chaos: the Kubernetes monotonic and update
	// invariants hold at every step.
	w.checkMonotonic, w.checkUpdateOrder = true, true
	if err := w.settle(rng, calm()); err != nil {
		return err
	}
	w.checkMonotonic = false

	// A clean rollout from a healthy set: the budget invariant holds too.
	phase = "rollout"
	if rng.IntN(3) == 0 && slices.Contains(w.spec.VolumeClaims, "data") {
		// The rollout is a claim growing, within the same budget.
		w.spec.ClaimTemplates = []ClaimTemplate{{Claim: "data", CapacityMin: 20}}
		phase = "rollout (volume growth)"
	} else {
		w.template = []byte("v2")
	}
	w.everLed = map[int]bool{}
	if w.leader >= 0 {
		w.everLed[w.leader] = true
	}
	if w.crng.IntN(2) == 0 {
		// The follower the leader's switchover is offered first lags:
		// the switchover must move on, or the command skip it.
		lagFirstCandidate(w)
	}
	// DESIGN §3b, KEP-3541: the budget does not apply to a Recreate's
	// rollout of a new revision, which takes every pod down at once; its
	// promise, no two revisions side by side, is checked at every step
	// (checkRecreate, checkRecreateState). A volume growth is no new
	// revision and keeps the budget under Recreate too.
	w.checkBudget = c.strategy != Recreate || phase == "rollout (volume growth)"
	if err := w.settle(rng, calm()); err != nil {
		return err
	}
	w.checkUpdateOrder, w.checkBudget = false, false

	// Chaos.
	phase = "chaos"
	for i := 0; i < 20+rng.IntN(40); i++ {
		switch rng.IntN(19) {
		case 18:
			// The leader daemon changes: the next one starts from no
			// memory, and may find a child purged unseen.
			w.newTerm(rng)
		case 17:
			// The parent's annotation is mistyped or removed, or put
			// back: the set detaches and is adopted again.
			w.setAnnotated(w.unannotated)
		case 0:
			w.spec.Replicas = rng.IntN(6)
			w.logf("spec: replicas=%d", w.spec.Replicas)
		case 1:
			w.template = []byte(templates[rng.IntN(len(templates))])
			w.logf("spec: template=%s", w.template)
		case 2:
			if w.spec.UpdateStrategy == Recreate {
				break // refused by the parser with Recreate
			}
			w.spec.Partition = rng.IntN(w.spec.Replicas + 2)
			w.logf("spec: partition=%d", w.spec.Partition)
		case 3:
			w.spec.Paused = !w.spec.Paused
			w.logf("spec: paused=%v", w.spec.Paused)
		case 4:
			w.spec.MaxUnavailable = randomMaxUnavailable(rng)
		case 5, 6:
			w.chaos(rng)
		case 7:
			w.failAt = w.calls + 1 + rng.IntN(4)
		case 8:
			w.spec.OrdinalsStart = rng.IntN(3)
			w.logf("spec: start=%d", w.spec.OrdinalsStart)
		case 9:
			// A claims change: every pod made before it drifts.
			w.spec.VolumeClaims = [][]string{nil, {"data"}, {"data", "logs"}}[rng.IntN(3)]
			w.logf("spec: claims=%v", w.spec.VolumeClaims)
		case 11:
			// A node drain: the ordinal's node goes ineligible; or, as
			// often, every drain is lifted.
			if rng.IntN(2) == 0 && w.spec.Replicas > 0 {
				o := w.spec.OrdinalsStart + rng.IntN(w.spec.Replicas)
				w.drain(o)
				w.logf("drain: the node of ordinal %d", o)
			} else {
				w.liftDrains()
				w.logf("drain: lifted")
			}
		case 12:
			// An operator's pod replace, sometimes on a fresh volume.
			if w.spec.Replicas > 0 {
				req := Replacement{Ordinal: w.spec.OrdinalsStart + rng.IntN(w.spec.Replicas),
					Token: fmt.Sprint("r", w.steps), NewVolume: rng.IntN(2) == 0}
				w.spec.Replacements = []Replacement{req}
				w.logf("user: pod replace %d new-volume=%v", req.Ordinal, req.NewVolume)
			}
		case 16:
			// A claim's size grows (most often), or its class or its
			// maximum changes; only growth touches existing volumes.
			t := ClaimTemplate{Claim: "data", CapacityMin: int64(10 * (1 + rng.IntN(4)))}
			switch rng.IntN(4) {
			case 0:
				t.Class = "fast"
			case 1:
				t.Class = noExpandClass // its provisioner cannot expand
			}
			if rng.IntN(4) == 0 {
				t.CapacityMax = 15
			}
			w.spec.ClaimTemplates = []ClaimTemplate{t}
			w.logf("spec: claim data %+v", t)
		case 15:
			// The application refuses now and then; the operator
			// sometimes approves a step.
			w.appFails = !w.appFails
			w.hooksWait = w.hooks && rng.IntN(2) == 0
			w.leaderUnknown = rng.IntN(3) == 0
			if rng.IntN(3) == 0 {
				w.spec.Approval = fmt.Sprint("approve-", w.steps)
			}
		case 13, 14:
			// A wait from outside the algorithm, and sometimes a
			// required spread.
			w.hold(rng)
			if rng.IntN(4) == 0 {
				w.spec.SpreadRequired = !w.spec.SpreadRequired
			}
		case 10:
			// The retention policies may be switched at any time; only
			// ordinals condemned while a policy said Delete lose data.
			w.spec.WhenScaled = []RetentionPolicy{Retain, Delete}[rng.IntN(2)]
			w.spec.WhenDeleted = []RetentionPolicy{Retain, Delete}[rng.IntN(2)]
			w.logf("spec: whenScaled=%s whenDeleted=%s", w.spec.WhenScaled, w.spec.WhenDeleted)
		}
		if err := w.step(); err != nil {
			return err
		}
		for k := rng.IntN(3); k > 0; k-- {
			w.advance(rng)
		}
		w.elect()
		w.now = w.now.Add(time.Duration(rng.IntN(3)) * time.Second)
		windowChaos(w, wrng)
		candidateChaos(w)
	}

	// Calm: a good template (a revert, if it was broken), the drains
	// lifted, and the set must converge with nothing else changing.
	phase = "calm"
	if w.unannotated {
		w.setAnnotated(true)
	}
	w.liftDrains()
	w.appFails, w.leaderUnknown, w.waits, w.hooksWait = false, false, 0, false
	clear(w.lagUntil)
	w.template = []byte(templates[rng.IntN(len(templates)-1)])
	w.failAt = 0
	if rng.IntN(2) == 0 || w.spec.UpdateStrategy == Recreate {
		// A paused Recreate never creates a pod beside one of another
		// revision, nor at an older revision than its ordinal ran: after
		// chaos an ordinal may have no revision it can come back at until
		// the rollout resumes (recreate.go). Resuming lets it converge.
		w.spec.Paused = false
	}
	// Pods below the partition, and all new pods while paused, are created
	// at the current revision. If that is the broken one they can never be
	// ready, which is the contract (the partition protects them), so the
	// run opens the partition and resumes to let the set converge.
	stuck := false
	for _, p := range w.pods {
		stuck = stuck || w.isBroken(p)
	}
	if r := w.revision(w.status.CurrentRevision); stuck || (r != nil && w.broken[string(r.Data)]) {
		w.spec.Partition, w.spec.Paused = 0, false
	}
	w.userDeletesBroken = true
	if err := w.settle(rng, calm()); err != nil {
		return err
	}
	if err := checkConverged(w); err != nil {
		return err
	}

	// Detached, a quarter of the time: the annotation is removed and the
	// parent is purged while detached, which deletes nothing, and some time
	// later a job of the set's name is annotated again. Then, half of the
	// time, the cascading delete.
	if rng.IntN(4) == 0 {
		phase = "detach"
		w.setAnnotated(false)
		for i := 0; i < 3+rng.IntN(5); i++ {
			if i == 2 {
				// The agent sees no parent at all now, so it cannot tell
				// the set is detached: only the stored status says so.
				w.spec.Deleted, w.spec.ParentGone, w.spec.Detached = true, true, false
				w.logf("user: the unannotated parent is purged")
			}
			if err := w.step(); err != nil {
				return err
			}
			w.advance(rng)
			w.now = w.now.Add(time.Second)
		}
		// Its status may still be written (why it is detached changes
		// when its parent is purged), nothing else.
		if acts := w.last.effects(); len(acts) > 0 {
			return fmt.Errorf("a detached set acted: %d actions, first %s", len(acts), acts[0].Type)
		}
		phase = "re-annotated"
		w.setAnnotated(true)
		w.spec.Deleted, w.spec.ParentGone = false, false
		if err := w.settle(rng, calm()); err != nil {
			return err
		}
	}
	if rng.IntN(2) == 0 {
		phase = "delete"
		w.spec.Deleted = true
		if err := w.settle(rng, 40+20*len(w.pods)); err != nil {
			return err
		}
		// Volumes to delete were checked when the set state went
		// (DeleteSetState); any left were kept by the promise.
	}
	return nil
}

// checkConverged checks the settled world against the status and the
// retention policy.
func checkConverged(w *world) error {
	st := w.last.Status
	if st.ReadyReplicas != w.spec.Replicas || st.Replicas != w.spec.Replicas || st.AvailableReplicas != w.spec.Replicas {
		return fmt.Errorf("converged with status %+v", st)
	}
	for _, c := range st.Conditions {
		if c.Type == ConditionAvailable && !c.Status {
			return fmt.Errorf("converged but %+v", c)
		}
		if c.Type == ConditionRolloutStuck && c.Status {
			return fmt.Errorf("converged but %+v", c)
		}
	}
	for _, v := range w.volumes {
		if !w.inRange(v.Ordinal) && w.spec.WhenScaled == Delete && w.condemnedDelete[v.Ordinal] {
			return fmt.Errorf("whenScaled=Delete left volume %s of an ordinal condemned under Delete", v.Name)
		}
	}
	for o := w.spec.OrdinalsStart; o < w.spec.OrdinalsStart+w.spec.Replicas; o++ {
		for _, c := range w.spec.VolumeClaims {
			if !w.hasVolume(c, o) {
				return fmt.Errorf("ordinal %d has no volume %s", o, c)
			}
		}
	}
	return nil
}
