package reconciler

import (
	"errors"
	"fmt"
	"maps"
	"math/rand/v2"
	"slices"
	"strings"
	"time"
)

// world is a simulated Nomad + Consul for one set: it holds the truth, builds
// the reconciler's Input from it, carries out the actions in order the way the
// agent does (stopping at the first failure), and checks every action against
// the invariants before applying it. Pod deletion is asynchronous, as in
// Nomad: a deleted pod is Terminating until the world advances it.
type world struct {
	spec       Spec
	template   []byte
	jobVersion uint64
	revisions  []Revision
	pods       []Pod
	volumes    []Volume
	status     Status
	now        time.Time
	// stateDeleted is set once DeleteSetState ran.
	stateDeleted bool
	// unannotated is the truth about the parent's annotation: set when the
	// world's user mistypes or removes it (spec.Detached), cleared when it
	// is annotated again. A parent purged meanwhile keeps it set.
	unannotated bool

	// calls counts the actions attempted; failAt fails the action with that
	// number (1-based), once. failAt 0 never fails.
	calls, failAt int
	// failCreatePod makes every CreatePod fail (CreatePodFailure).
	failCreatePod bool
	// dropStatus makes every status write fail (UpdateSetStatusFailure).
	dropStatus bool
	// broken names template data whose pods never become ready.
	broken map[string]bool

	// volumesEverCreated records volumes, to prove Retain never removes one.
	volumesEverCreated int
	volumesDeleted     int
	expansions         int
	// leaderResizes counts the Ready leaders taken down for a volume
	// expansion (CauseResize), so that the randomized drivers can show
	// they exercise the leader-last rule on a growing claim.
	leaderResizes int
	podsCreated   int
	podsDeleted   int

	// checkMonotonic and checkUpdateOrder enable the Kubernetes
	// assertMonotonicInvariants (while creating and scaling) and
	// assertUpdateInvariants (while rolling out) state checks, which hold only
	// when nothing but the controller and ordinary pod start-up changes the
	// pods (no chaos).
	checkMonotonic   bool
	checkUpdateOrder bool
	// userDeletesBroken plays the OnDelete user: it deletes pods stuck at a
	// broken revision so that they are recreated at the update revision.
	userDeletesBroken bool
	// checkBudget enables "in-range unavailable pods <= maxUnavailable"
	// during a rollout that starts from a healthy set, without chaos.
	checkBudget bool

	// podClaims is, per ordinal, the volume claims its pod was created with:
	// a pod whose claims differ from the spec's is drifted, as the agent's
	// storage check finds it (jobs.ChildMatches).
	podClaims map[int]string
	// lastRan is, per ordinal, the revision its last pod was created at:
	// the no-silent-downgrade promise is judged against it.
	lastRan map[int]Revision
	// members are the ordinals in range as of the last step the set's state
	// recorded; condemnedDelete holds the ordinals that left it, and whether
	// the retention policy in force when that was recorded said Delete.
	// Only those volumes may ever be deleted (DESIGN §3).
	members         map[int]bool
	condemnedDelete map[int]bool
	// draining holds the ordinals whose node is being drained. A pod there
	// shows NodeDraining; a pod recreated for such an ordinal with volume
	// claims cannot be placed (its volume lives on that node) until the
	// drain is lifted, while one without claims lands on another node.
	draining map[int]bool
	// onDrainingNode marks the pods (by ordinal) placed on a draining node;
	// waitingForNode those that cannot be placed until a drain is lifted
	// (Nomad blocks them: no node, so no NodeDraining).
	onDrainingNode, waitingForNode map[int]bool
	// nodeBack is, per pod Nomad blocked while its volume's node was
	// drained, the node change that made the node fine again: once the
	// drain is lifted such a pod stays unplaced until the set asks Nomad
	// to evaluate it again (EvaluatePod), as real Nomad does. nodeChanges
	// counts the changes.
	nodeBack    map[int]uint64
	nodeChanges uint64
	// askedEval is, per ordinal, the node change this leadership term
	// asked Nomad to place its pod again for.
	askedEval map[int]uint64
	// memory is the set's decision memory, as the agent keeps it: the
	// last Output.Memory with every action's Result folded in (Fold). A
	// new leadership term (chaos) starts it afresh.
	memory Memory
	// termStart is when the current leadership term began; terms counts
	// the terms.
	termStart time.Time
	terms     int
	// waits is how many of the next effects meet a wait (chaos), each
	// with a reason that effect can meet in the agent.
	waits int
	// stillStopping is, per ordinal whose child was purged while no leader
	// watched, until when its old task may still run on its node: a pod
	// created for it before then would run the ordinal twice.
	stillStopping map[int]time.Time

	// leader is the ordinal whose pod leads (its leader check passes), -1
	// for none; the database elects one among its Ready pods by itself
	// when the leader goes (elect). newLeader is where a switchover that
	// ran hands leadership, which the leader check shows a little later.
	leader, newLeader int
	// everLed holds every ordinal that led since the rollout began: the
	// leader goes last, so each of them may be out of upstream's order.
	everLed map[int]bool
	// appFails makes the application refuse checks and switchovers at
	// random (chaos).
	appFails bool
	// hooks says the set has post_ready hooks: a pod Nomad finds ready
	// counts as Ready once they said done about its allocation, as the
	// agent judges it from the memory's answers; hooksWait makes them
	// say wait at random (chaos).
	hooks, hooksWait bool
	// hookSaid is, per allocation, what its hooks last said, as they know
	// it: done, or not to be asked before a time.
	hookSaid map[string]hookSaid
	// leaderUnknown plays a leader check not read yet (chaos).
	leaderUnknown bool
	// hideLeader plays the moment after a switchover when the old
	// leader's check has stopped passing and the new one's is not seen
	// passing yet: no pod is the Leader in the input.
	hideLeader bool
	// cannotExpand are the classes whose provisioner cannot expand, as
	// the agent reports them: it asks the provisioner before every
	// decision, so they are known before any pod is stopped.
	cannotExpand []string
	rng          *rand.Rand
	// The switchover's candidates (candidates_test.go): lagUntil is, per
	// ordinal, until when its member lags (a standby whose replay is
	// paused), which the switchover command refuses; with appChooses the
	// command picks among its candidates itself, skipping those that lag,
	// instead of taking NSS_TARGET_POD or refusing it. crng draws both,
	// apart from rng, so that the other choices of a seed stay what they
	// were before candidates came. round is the world's own account of
	// the switchover tries since the step was last held, and candidates
	// counts what the runs exercised.
	lagUntil   map[int]time.Time
	appChooses bool
	// leaderMovesAt is when the leader check shows the leadership a
	// switchover handed over (newLeader): a moment after the command, as
	// the checks are read some seconds apart.
	leaderMovesAt time.Time
	crng          *rand.Rand
	round         switchoverRound
	candidates    candidateCounts
	// recreateEmitted holds the ordinals a decision stopped for a
	// Recreate (noteRecreate): only they may be recorded as such.
	recreateEmitted map[int]bool

	last   Output
	lastIn Input
	trace  []string
	steps  int
}

var epoch = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

func newWorld(spec Spec, template string) *world {
	if spec.Name == "" {
		spec.Name = "web"
	}
	if spec.PodManagementPolicy == "" {
		spec.PodManagementPolicy = OrderedReady
	}
	if spec.UpdateStrategy == "" {
		spec.UpdateStrategy = RollingUpdate
	}
	if spec.WhenDeleted == "" {
		spec.WhenDeleted = Retain
	}
	if spec.WhenScaled == "" {
		spec.WhenScaled = Retain
	}
	if spec.RevisionHistoryLimit == 0 {
		spec.RevisionHistoryLimit = 10
	}
	return &world{spec: spec, template: []byte(template), now: epoch, broken: map[string]bool{},
		podClaims: map[int]string{}, lastRan: map[int]Revision{}, members: map[int]bool{}, condemnedDelete: map[int]bool{},
		draining: map[int]bool{}, onDrainingNode: map[int]bool{}, waitingForNode: map[int]bool{}, nodeBack: map[int]uint64{}, askedEval: map[int]uint64{}, stillStopping: map[int]time.Time{}, hookSaid: map[string]hookSaid{},
		leader: -1, newLeader: -1, everLed: map[int]bool{}, cannotExpand: []string{noExpandClass}, rng: rand.New(rand.NewPCG(1, 2)),
		lagUntil: map[int]time.Time{}, crng: rand.New(rand.NewPCG(3, 4)), round: switchoverRound{leader: -1}}
}

// drifted reports whether the agent would find pod p drifted: a hand edit
// (chaos) or a change of the spec's volume claims since it was created.
func (w *world) drifted(p Pod) bool {
	return p.Drifted || w.podClaims[p.Ordinal] != strings.Join(w.spec.VolumeClaims, ",")
}

// judge applies the spec as it is now to the membership: ordinals that left
// the range are condemned under the policy in force (WhenDeleted once the set
// is deleted), and a switch of WhenScaled to Retain keeps whatever an earlier
// scale-down condemned, as Kubernetes drops the claims' owner references
// when the policy changes. With join, the ordinals in range become members.
// It returns the new maps; step keeps them only once the step's decision is
// recorded.
func (w *world) judge(join bool) (members, condemned map[int]bool) {
	members, condemned = maps.Clone(w.members), maps.Clone(w.condemnedDelete)
	policy := w.spec.WhenScaled
	if w.spec.Deleted {
		policy = w.spec.WhenDeleted
	}
	for o := range members {
		if w.spec.Deleted || !w.inRange(o) {
			condemned[o] = policy == Delete
			delete(members, o)
		}
	}
	if w.spec.Deleted {
		return members, condemned
	}
	if w.spec.WhenScaled != Delete {
		for o := range condemned {
			condemned[o] = false
		}
	}
	if !join {
		return members, condemned
	}
	for o := w.spec.OrdinalsStart; o < w.spec.OrdinalsStart+w.spec.Replicas; o++ {
		members[o] = true
		delete(condemned, o)
	}
	return members, condemned
}

func (w *world) input() Input {
	in := Input{
		Spec:       w.spec,
		Revisions:  slices.Clone(w.revisions),
		Pods:       slices.Clone(w.pods),
		Volumes:    slices.Clone(w.volumes),
		Previous:   w.status,
		JobVersion: w.jobVersion,
		Now:        w.now,
		Memory:     w.memory,
		TermStart:  w.termStart,
		// The leader check is unread while nobody leads yet at times
		// (a daemon restart, Consul catching up).
		LeaderUnknown: w.leaderUnknown,
		CannotExpand:  slices.Clone(w.cannotExpand),
	}
	if !w.spec.Deleted {
		in.TemplateData = w.template
	}
	for i := range in.Pods {
		in.Pods[i].Drifted = w.drifted(in.Pods[i])
		in.Pods[i].NodeDraining = w.onDrainingNode[in.Pods[i].Ordinal]
		if in.Pods[i].Phase == PhasePending && !in.Pods[i].Terminating {
			in.Pods[i].NodeChange = w.nodeBack[in.Pods[i].Ordinal]
		}
		in.Pods[i] = w.hooksView(in.Pods[i])
		in.Pods[i].Leader = in.Pods[i].Ordinal == w.leader && w.spec.LeaderCheck != "" && runningAndReady(&in.Pods[i]) && !w.hideLeader
	}
	if !w.memory.TermSeen {
		in.StopGrace = map[int]time.Duration{}
		for _, r := range w.status.Ordinals {
			in.StopGrace[r.Ordinal] = worldStopGrace
		}
	}
	return in
}

// hookSaid is what an allocation's post_ready hooks last said, in a term.
type hookSaid struct {
	done      bool
	notBefore time.Time
	term      int
}

// worldStopGrace is how long a task of the world may run after its stop.
const worldStopGrace = 8 * time.Second

// newTerm plays a change of leader daemon: the new leader starts from no
// memory. Sometimes a child was purged while nobody watched, and its task
// still stops on its node.
func (w *world) newTerm(rng *rand.Rand) {
	w.memory, w.termStart, w.askedEval = Memory{}, w.now, map[int]uint64{}
	w.terms++
	w.round = switchoverRound{leader: -1} // the new leader knows no tries
	w.logf("chaos: a new leadership term")
	if len(w.pods) == 0 || rng.IntN(2) == 0 {
		return
	}
	i := rng.IntN(len(w.pods))
	p := w.pods[i]
	if p.Terminating || w.spec.Deleted {
		return
	}
	w.logf("chaos: pod %d purged while no leader watched", p.Ordinal)
	w.stillStopping[p.Ordinal] = w.now.Add(worldStopGrace)
	w.pods = slices.Delete(w.pods, i, i+1)
	delete(w.nodeBack, p.Ordinal)
}

// replaceNewVolume reports whether a `pod replace -new-volume` request is
// pending for ord: its token not yet recorded as carried out.
func (w *world) replaceNewVolume(ord int) bool {
	for _, req := range w.spec.Replacements {
		if req.Ordinal == ord && req.NewVolume {
			for _, rec := range w.status.Ordinals {
				if rec.Ordinal == ord && rec.Replaced == req.Token {
					return false
				}
			}
			return true
		}
	}
	return false
}

// drain starts draining the node of ordinal ord's pod.
func (w *world) drain(ord int) {
	w.draining[ord] = true
	if w.podIndex(ord) >= 0 {
		w.onDrainingNode[ord] = true
	}
}

// liftDrains ends every drain: the nodes are eligible again. A pod Nomad
// blocked meanwhile stays blocked (nodeBack) until it is evaluated again.
func (w *world) liftDrains() {
	w.nodeChanges++
	for o, waiting := range w.waitingForNode {
		if waiting && w.podIndex(o) >= 0 {
			w.nodeBack[o] = w.nodeChanges
		}
	}
	w.draining = map[int]bool{}
	w.onDrainingNode = map[int]bool{}
}

// activeHold returns the hold in force on ord's step, as the agent would
// honour it: a wait its effects met, or the crash-loop backoff, in the
// memory the decision started from.
func (w *world) activeHold(ord int, step HoldStep) (Hold, bool) {
	for _, h := range append(slices.Clone(w.memory.Holds), w.memory.backoffHolds(w.now)...) {
		if h.Ordinal == ord && h.Step == step && h.Until.After(w.now) {
			return h, true
		}
	}
	return Hold{}, false
}

// checkCreateHold is the hold promise for creates: nothing of an ordinal is
// created while a hold on its creation is in force, except that a soft
// spread that cannot be met lets it be created without the spread rule
// (and only then is the rule dropped).
func (w *world) checkCreateHold(a Action) error {
	h, held := w.activeHold(a.Ordinal, StepCreate)
	soft := held && h.Reason == HoldSpreadUnsatisfiable && !w.spec.SpreadRequired
	switch {
	case held && !soft:
		return fmt.Errorf("%s of ordinal %d while held (%s until %s)", a.Type, a.Ordinal, h.Reason, h.Until.Sub(w.now))
	case soft && !a.Unspread:
		return fmt.Errorf("%s of ordinal %d with the spread rule, which no node can meet (soft spread)", a.Type, a.Ordinal)
	case !soft && a.Unspread:
		return fmt.Errorf("%s of ordinal %d drops the spread rule with no unmet spread", a.Type, a.Ordinal)
	}
	return nil
}

func (w *world) logf(format string, args ...any) {
	w.trace = append(w.trace, fmt.Sprintf(format, args...))
	if len(w.trace) > 40 {
		w.trace = w.trace[len(w.trace)-40:]
	}
}

// dump describes the world and the recent steps, for failure messages.
func (w *world) dump() string {
	var b strings.Builder
	fmt.Fprintf(&b, "spec: %+v\nstatus: cur=%s upd=%s approval used=%q leader=%d\nlast: %d actions, held %+v, wait %q\n", w.spec,
		w.status.CurrentRevision, w.status.UpdateRevision, w.status.ApprovalUsed, w.leader, len(w.last.Actions), w.last.Held, conditionMessages(w.last.Status))
	for _, p := range w.sortedPods() {
		fmt.Fprintf(&b, "  pod %d rev=%s phase=%s ready=%v term=%v drifted=%v\n", p.Ordinal, p.Revision, p.Phase, p.Ready, p.Terminating, w.drifted(p))
	}
	for _, v := range w.volumes {
		fmt.Fprintf(&b, "  vol %s\n", v.Name)
	}
	b.WriteString("recent:\n")
	for _, s := range w.trace {
		b.WriteString("  " + s + "\n")
	}
	return b.String()
}

func (w *world) sortedPods() []Pod {
	ps := slices.Clone(w.pods)
	slices.SortFunc(ps, func(a, b Pod) int { return a.Ordinal - b.Ordinal })
	return ps
}

func (w *world) podIndex(ord int) int {
	for i := range w.pods {
		if w.pods[i].Ordinal == ord {
			return i
		}
	}
	return -1
}

func (w *world) hasVolume(claim string, ord int) bool {
	for _, v := range w.volumes {
		if v.Claim == claim && v.Ordinal == ord {
			return true
		}
	}
	return false
}

func (w *world) revision(name string) *Revision {
	for i := range w.revisions {
		if w.revisions[i].Name == name {
			return &w.revisions[i]
		}
	}
	return nil
}

func (w *world) inRange(ord int) bool {
	return ord >= w.spec.OrdinalsStart && ord < w.spec.OrdinalsStart+w.spec.Replicas
}

// healthy is the test's notion of an available pod that is not
// terminating. Availability itself is judged by Available, the one function
// the reconciler and the agent's views use too: an oracle of its own once
// disagreed with them about a Ready pod without ReadySince.
func (w *world) healthy(p Pod) bool {
	p = w.hooksView(p)
	return !p.Terminating && Available(p, w.spec.MinReadySeconds, w.now)
}

// hooksView is p as the agent shows it to the reconciler when the set has
// post_ready hooks: held by them until they said done about its
// allocation, and ready from when they did, if they held it first.
func (w *world) hooksView(p Pod) Pod {
	if !w.hooks || !runningAndReady(&p) || p.Terminating {
		return p
	}
	a := w.memory.PostReady[p.AllocID]
	if !a.Done {
		p.Ready, p.ReadySince, p.AwaitsPostReady = false, time.Time{}, true
		return p
	}
	if a.DoneAt.After(p.ReadySince) {
		p.ReadySince = a.DoneAt
	}
	return p
}

// step runs one reconcile: it builds the input, decides, checks and applies
// the actions in order, and records the status when every action succeeded.
// It returns an error on an invariant violation; an injected failure is not
// an error.
func (w *world) step() error {
	in := w.input()
	w.round.forgetUnlessLeading(in)
	out := Reconcile(in)
	w.last, w.lastIn = out, in
	w.memory = out.Memory
	noteHolds(out)
	w.steps++
	w.noteRecreate(in, out)
	// The invariants judge the decision by the holds and answers in force:
	// the input's own and its memory's.
	if err := checkDecision(w, withMemory(in, out.Memory), out); err != nil {
		return err
	}
	if err := w.checkCandidates(in, out); err != nil {
		return err
	}
	// The membership judged now counts once the decision is recorded. A
	// condemnation counts from its first action done: the set must not
	// touch what it condemned before it remembers why. New members count
	// from the status write. A decision that failed before doing anything
	// leaves nothing behind.
	condemnedMembers, condemned := w.judge(false)
	members, condemnedAll := w.judge(true)
	// The actions go out in the reconciler's groups (a Parallel set's
	// leading CreatePods in slow-start batches), as the agent carries them
	// out: each result is folded into the memory, and a failure or a wait
	// ends the pass after the rest of its group.
	k := 0
	var done []Action
	for _, batch := range Batches(w.spec, out.Actions) {
		stop := false
		for _, a := range batch {
			res, err := w.effect(in, out, a, k == 0, members, condemnedAll, condemnedMembers, condemned)
			if err != nil {
				return fmt.Errorf("%s %d (%s): %w", a.Type, a.Ordinal, a.Reason, err)
			}
			if res.Err == nil && res.Wait == nil {
				k++
				done = append(done, a)
			}
			var h *Hold
			w.memory, h = Fold(w.spec, w.memory, a, res, w.now)
			if h != nil {
				w.logf("  %s %d: held (%s) until %s", a.Type, a.Ordinal, h.Reason, h.Until.Sub(w.now))
			}
			if err := w.foldRound(a, res, h); err != nil {
				return fmt.Errorf("%s %d (%s): %w", a.Type, a.Ordinal, a.Reason, err)
			}
			stop = stop || res.Err != nil || res.Wait != nil
		}
		if stop {
			// The pass stops early: the pods it created are recorded, as
			// the agent does (RecordsAfter), unless the store fails.
			if recs, changed := RecordsAfter(w.status.Ordinals, done); changed {
				w.calls++
				if w.calls == w.failAt || w.dropStatus {
					w.logf("  RecordOrdinals (after the pass stopped): injected failure")
				} else {
					w.logf("  RecordOrdinals (after the pass stopped)")
					w.status.Ordinals = recs
				}
			}
			return w.checkState()
		}
	}
	// The membership counts from the writes that record it (RecordOrdinals,
	// RecordStatus), as the agent makes them: a decision whose status is
	// already stored writes nothing, and changes nothing of it.
	return w.checkState()
}

// effect carries out one action as the agent does, with the faults the test
// injects: a failure, or a wait (chaos). first says no action of the pass
// was done yet: the membership the decision judged counts from then.
func (w *world) effect(in Input, out Output, a Action, first bool, members, condemnedAll, condemnedMembers, condemned map[int]bool) (Result, error) {
	w.calls++
	if w.calls == w.failAt || (w.failCreatePod && a.Type == ActionCreatePod) ||
		(w.dropStatus && (a.Type == ActionRecordOrdinals || a.Type == ActionRecordStatus)) {
		w.logf("  %s %d: injected failure", a.Type, a.Ordinal)
		return Result{Err: errors.New("injected failure")}, nil
	}
	if w.waits > 0 {
		if wt := w.waitFor(a); wt != nil {
			w.waits--
			w.logf("  %s %d: meets a wait (%s)", a.Type, a.Ordinal, wt.Reason)
			return Result{Wait: wt}, w.checkHoldPromise(a)
		}
	}
	switch {
	case a.Type == ActionRecordOrdinals:
		// The records stored hold the whole membership.
		w.members, w.condemnedDelete = members, condemnedAll
	case a.Type == ActionRecordStatus:
		// So does the status. A detached set's status records no
		// membership (it keeps the records it had): what the spec says
		// meanwhile counts from its adoption on.
		if !w.unannotated {
			w.members, w.condemnedDelete = members, condemnedAll
		}
	case first:
		// The pass's first action done, not merely its first batch's.
		w.members, w.condemnedDelete = condemnedMembers, condemned
	}
	return w.apply(in, out, a)
}

// apply carries out one action after checking it against the world as it is
// at that moment (earlier actions of the same decision already applied).
func (w *world) apply(in Input, out Output, a Action) (Result, error) {
	w.logf("  %s ord=%d rev=%s vol=%s (%s)", a.Type, a.Ordinal, a.Revision.Name, a.Volume.Name, a.Reason)
	switch a.Type {
	case ActionCreateRevision:
		if w.revision(a.Revision.Name) != nil {
			return Result{}, fmt.Errorf("revision %s already exists", a.Revision.Name)
		}
		w.revisions = append(w.revisions, a.Revision)
	case ActionUpdateRevision:
		r := w.revision(a.Revision.Name)
		if r == nil {
			return Result{}, fmt.Errorf("revision %s does not exist", a.Revision.Name)
		}
		r.Number = a.Revision.Number
	case ActionDeleteRevision:
		if a.Revision.Name == out.Status.CurrentRevision || a.Revision.Name == out.Status.UpdateRevision ||
			a.Revision.Name == in.Previous.CurrentRevision {
			return Result{}, fmt.Errorf("deleting live revision %s", a.Revision.Name)
		}
		for _, p := range w.pods {
			if p.Revision == a.Revision.Name {
				return Result{}, fmt.Errorf("deleting revision %s used by pod %d", a.Revision.Name, p.Ordinal)
			}
		}
		i := slices.IndexFunc(w.revisions, func(r Revision) bool { return r.Name == a.Revision.Name })
		if i < 0 {
			return Result{}, fmt.Errorf("deleting missing revision %s", a.Revision.Name)
		}
		// An ordinal that last ran the trimmed revision keeps the number
		// it had last (a rollback may have renumbered it since its pod was
		// created).
		for o, last := range w.lastRan {
			if last.Name == a.Revision.Name {
				last.Number = w.revisions[i].Number
				w.lastRan[o] = last
			}
		}
		w.revisions = slices.Delete(w.revisions, i, i+1)
	case ActionCreateVolume:
		if err := w.checkCreateHold(a); err != nil {
			return Result{}, err
		}
		if w.hasVolume(a.Volume.Claim, a.Volume.Ordinal) {
			return Result{}, fmt.Errorf("volume %s created twice", a.Volume.Name)
		}
		if a.Volume.Name != VolumeName(a.Volume.Claim, w.spec.Name, a.Volume.Ordinal) {
			return Result{}, fmt.Errorf("volume name %q", a.Volume.Name)
		}
		if a.Volume.Capacity != w.claimMin(a.Volume.Claim) || a.Volume.Class != w.claimClass(a.Volume.Claim) {
			return Result{}, fmt.Errorf("volume %s created with %d bytes of class %q, want its claim's %d of %q", a.Volume.Name,
				a.Volume.Capacity, a.Volume.Class, w.claimMin(a.Volume.Claim), w.claimClass(a.Volume.Claim))
		}
		made := a.Volume
		if made.Capacity == 0 {
			made.Capacity = provisionerDefault // the provisioner's own default size
		}
		w.volumes = append(w.volumes, made)
		w.volumesEverCreated++
	case ActionDeleteVolume:
		if w.podIndex(a.Volume.Ordinal) >= 0 {
			return Result{}, fmt.Errorf("volume %s deleted while its pod exists", a.Volume.Name)
		}
		// DESIGN §3, kept data stays kept: only the volume of an ordinal
		// condemned while its policy said Delete may go, or one the user
		// asked to discard (pod replace -new-volume).
		if !w.condemnedDelete[a.Volume.Ordinal] && !w.replaceNewVolume(a.Volume.Ordinal) {
			return Result{}, fmt.Errorf("volume %s deleted, but ordinal %d was not condemned under a Delete policy (whenScaled=%s whenDeleted=%s deleted=%v in range=%v)",
				a.Volume.Name, a.Volume.Ordinal, w.spec.WhenScaled, w.spec.WhenDeleted, w.spec.Deleted, w.inRange(a.Volume.Ordinal))
		}
		i := slices.IndexFunc(w.volumes, func(v Volume) bool { return v.Name == a.Volume.Name })
		if i < 0 {
			return Result{}, fmt.Errorf("deleting missing volume %s", a.Volume.Name)
		}
		w.volumes = slices.Delete(w.volumes, i, i+1)
		w.volumesDeleted++
	case ActionCreatePod:
		if w.spec.Deleted {
			return Result{}, errors.New("pod created for a deleted set")
		}
		if !w.inRange(a.Ordinal) {
			return Result{}, fmt.Errorf("pod created outside the range")
		}
		if w.podIndex(a.Ordinal) >= 0 {
			return Result{}, fmt.Errorf("second pod for ordinal %d", a.Ordinal)
		}
		if err := w.checkCreateHold(a); err != nil {
			return Result{}, err
		}
		if until, ok := w.stillStopping[a.Ordinal]; ok && until.After(w.now) {
			// DESIGN §3: an ordinal never runs twice.
			return Result{}, fmt.Errorf("pod %d created while its child purged unseen may still run on its node for %s", a.Ordinal, until.Sub(w.now))
		}
		if w.revision(a.Revision.Name) == nil {
			return Result{}, fmt.Errorf("pod created at unstored revision %s", a.Revision.Name)
		}
		for _, c := range w.spec.VolumeClaims {
			if !w.hasVolume(c, a.Ordinal) {
				return Result{}, fmt.Errorf("pod created before its volume %s", c)
			}
		}
		// DESIGN §3, no silent downgrade: a pod never starts at an older
		// revision than its ordinal last ran, unless the user stepped back
		// (a rollback renumbers the old revision; a partition raised above
		// the ordinal asks for the current revision).
		rev := *w.revision(a.Revision.Name)
		stepBack := w.spec.UpdateStrategy == RollingUpdate && a.Ordinal-w.spec.OrdinalsStart < w.spec.Partition
		if last, ok := w.lastRanNumber(a.Ordinal); ok && rev.Number < last && !stepBack {
			return Result{}, fmt.Errorf("downgrade: pod %d created at %s (number %d), but the ordinal last ran %s (number %d)",
				a.Ordinal, rev.Name, rev.Number, w.lastRan[a.Ordinal].Name, last)
		}
		w.lastRan[a.Ordinal] = rev
		w.podClaims[a.Ordinal] = strings.Join(w.spec.VolumeClaims, ",")
		// Pinned to its volume's node, a pod of a draining ordinal with
		// claims cannot be placed until the drain is lifted; without claims
		// it is placed on another node.
		w.onDrainingNode[a.Ordinal] = false
		w.waitingForNode[a.Ordinal] = w.draining[a.Ordinal] && len(w.spec.VolumeClaims) > 0
		delete(w.nodeBack, a.Ordinal)
		w.pods = append(w.pods, Pod{Ordinal: a.Ordinal, Revision: a.Revision.Name, Created: w.now, Phase: PhasePending,
			AllocID: fmt.Sprintf("alloc-%d-%d", a.Ordinal, w.podsCreated)})
		w.podsCreated++
	case ActionDeletePod:
		i := -1
		for j, p := range w.pods {
			if p.Ordinal == a.Ordinal && !p.Terminating && p.Created.Equal(a.Pod.Created) && p.Revision == a.Pod.Revision {
				i = j
				break
			}
		}
		if i < 0 {
			return Result{}, fmt.Errorf("deleting a pod that is not there or already terminating")
		}
		p := w.pods[i]
		if err := w.checkDisruptHold(a, p); err != nil {
			return Result{}, err
		}
		if a.Cause == CauseResize && !w.mustGrow(a.Ordinal) {
			return Result{}, fmt.Errorf("pod %d taken down to grow a volume that its provisioner cannot or need not grow", a.Ordinal)
		}
		w.podsDeleted++
		if a.Cause == CauseResize && a.Pod.Leader && runningAndReady(&a.Pod) && w.spec.LeaderCheck != "" {
			w.leaderResizes++
		}
		if a.Purge {
			// A purge removes the child from Nomad at once: safe only when
			// nothing of it runs, or one ordinal could run twice.
			if !finishedPod(p) || !p.AllTerminal {
				return Result{}, fmt.Errorf("pod %d purged while something of it may run (phase %s, all terminal %v)", a.Ordinal, p.Phase, p.AllTerminal)
			}
			w.pods = slices.Delete(w.pods, i, i+1)
			break
		}
		w.pods[i].Terminating = true
	case ActionRecordOrdinals:
		w.status.Ordinals = a.Ordinals
	case ActionPostReady:
		i := slices.IndexFunc(w.pods, func(p Pod) bool { return p.AllocID == a.Pod.AllocID })
		if !w.hooks || i < 0 || w.pods[i].Terminating || !runningAndReady(&w.pods[i]) {
			return Result{}, fmt.Errorf("post_ready hooks asked about %s, which is not a pod Nomad finds ready (hooks %v)", a.Pod.AllocID, w.hooks)
		}
		// The hooks are asked once per answer: not again once they said
		// done, nor before the time they asked to wait (a new leader,
		// which cannot know, may ask once more).
		if said := w.hookSaid[a.Pod.AllocID]; said.term == w.terms && (said.done || w.now.Before(said.notBefore)) {
			return Result{}, fmt.Errorf("post_ready hooks asked again about %s (they said done=%v, not before %s)",
				a.Pod.AllocID, said.done, said.notBefore.Sub(w.now))
		}
		if w.hooksWait && w.rng.IntN(2) == 0 {
			wait := time.Duration(w.rng.IntN(8)) * time.Second
			w.hookSaid[a.Pod.AllocID] = hookSaid{notBefore: w.now.Add(wait), term: w.terms}
			return Result{PostReady: &HookAnswer{RetryAfter: wait}}, nil
		}
		w.hookSaid[a.Pod.AllocID] = hookSaid{done: true, term: w.terms}
		return Result{PostReady: &HookAnswer{Proceed: true}}, nil
	case ActionCheckDisruption, ActionSwitchover:
		return w.applyAsk(a)
	case ActionExpandVolume:
		return Result{}, w.expand(a)
	case ActionRestoreCount:
		i := w.podIndex(a.Ordinal)
		if i < 0 || w.pods[i].Terminating || w.pods[i].ScaledCount < 2 || w.drifted(w.pods[i]) {
			return Result{}, fmt.Errorf("count restored on ordinal %d, which is not a live child scaled by hand", a.Ordinal)
		}
		w.pods[i].ScaledCount = 0
	case ActionEvaluatePod:
		i := w.podIndex(a.Ordinal)
		if i < 0 || w.pods[i].Terminating || w.nodeBack[a.Ordinal] == 0 {
			return Result{}, fmt.Errorf("evaluation asked for ordinal %d, which is not blocked on a node that is back", a.Ordinal)
		}
		if w.askedEval[a.Ordinal] == w.nodeBack[a.Ordinal] {
			// Nomad places it in its own time; asking again for the same
			// node change makes another evaluation for nothing. (A new
			// leader, which cannot know, may ask once more.)
			return Result{}, fmt.Errorf("evaluation of ordinal %d asked twice for node change %d", a.Ordinal, w.nodeBack[a.Ordinal])
		}
		w.askedEval[a.Ordinal] = w.nodeBack[a.Ordinal]
		w.waitingForNode[a.Ordinal] = false
	case ActionRecordStatus:
		if a.Status == nil {
			return Result{}, errors.New("RecordStatus without a status")
		}
		if a.Status.UpdateRevision != "" && w.revision(a.Status.UpdateRevision) == nil {
			return Result{}, fmt.Errorf("status records update revision %s, which the store does not hold", a.Status.UpdateRevision)
		}
		w.status = *a.Status
	case ActionDeleteSetState:
		if len(w.pods) > 0 {
			return Result{}, fmt.Errorf("set state deleted while %d pods remain", len(w.pods))
		}
		for _, v := range w.volumes {
			if w.condemnedDelete[v.Ordinal] {
				return Result{}, fmt.Errorf("set state deleted while volume %s remains to be deleted", v.Name)
			}
		}
		w.revisions, w.status, w.stateDeleted = nil, Status{}, true
		w.lastRan, w.members, w.condemnedDelete = map[int]Revision{}, map[int]bool{}, map[int]bool{}
	default:
		return Result{}, fmt.Errorf("unknown action %q", a.Type)
	}
	return Result{}, nil
}

// provisionerDefault is the size the world's provisioner gives a volume
// whose claim asks none.
const provisionerDefault = 5

// claimMin and claimClass are what the claim's template asks now.
func (w *world) claimMin(claim string) int64 {
	for _, t := range w.spec.ClaimTemplates {
		if t.Claim == claim {
			return t.CapacityMin
		}
	}
	return 0
}

func (w *world) claimClass(claim string) string {
	for _, t := range w.spec.ClaimTemplates {
		if t.Claim == claim {
			return t.Class
		}
	}
	return ""
}

// expand grows a volume as the provisioner does: DESIGN §3b, a volume
// grows only while no pod of its ordinal exists (Nomad refuses to change a
// claimed volume), never shrinks, keeps its class, and stays the same
// volume (its data with it).
func (w *world) expand(a Action) error {
	i := slices.IndexFunc(w.volumes, func(v Volume) bool { return v.Name == a.Volume.Name })
	switch {
	case i < 0:
		return fmt.Errorf("expanding missing volume %s", a.Volume.Name)
	case w.podIndex(a.Volume.Ordinal) >= 0:
		return fmt.Errorf("volume %s expanded while a pod of ordinal %d exists", a.Volume.Name, a.Volume.Ordinal)
	case a.Volume.Capacity <= w.volumes[i].Capacity:
		return fmt.Errorf("volume %s 'expanded' from %d to %d bytes", a.Volume.Name, w.volumes[i].Capacity, a.Volume.Capacity)
	case a.Volume.Class != w.volumes[i].Class:
		return fmt.Errorf("volume %s expanded into class %q from %q", a.Volume.Name, a.Volume.Class, w.volumes[i].Class)
	case w.spec.Paused || (w.spec.UpdateStrategy == RollingUpdate && a.Volume.Ordinal-w.spec.OrdinalsStart < w.spec.Partition):
		// Growing follows pause and the partition as a template change does.
		return fmt.Errorf("volume %s expanded while paused (%v) or below partition %d", a.Volume.Name, w.spec.Paused, w.spec.Partition)
	}
	if slices.Contains(w.cannotExpand, a.Volume.Class) {
		// The provisioner said so up front (Input.CannotExpand): a pod
		// was stopped for a growth it cannot do.
		return fmt.Errorf("volume %s of class %q expanded, whose provisioner said it cannot expand", a.Volume.Name, a.Volume.Class)
	}
	w.volumes[i].Capacity = a.Volume.Capacity
	w.expansions++
	return nil
}

// noExpandClass is the storage class whose provisioner cannot expand
// volumes in the world, as mkdir-like plugins cannot.
const noExpandClass = "slow"

// mustGrow reports whether a volume of ord is smaller than its claim asks,
// of the claim's class, and of a class whose provisioner can expand: the
// only reason to take a pod down for a resize.
func (w *world) mustGrow(ord int) bool {
	for _, v := range w.volumes {
		if v.Ordinal == ord && v.Capacity > 0 && w.claimMin(v.Claim) > v.Capacity && v.Class == w.claimClass(v.Claim) &&
			!slices.Contains(w.cannotExpand, v.Class) {
			return true
		}
	}
	return false
}

// applyAsk carries out a disruption check or a switchover as the agent
// does: it runs in another Ready pod (or the leader), and the application
// answers; a pass or a switchover that ran is an input to the next
// decisions, a refusal a hold with backoff.
func (w *world) applyAsk(a Action) (Result, error) {
	target := w.podIndex(a.Target)
	// A Recreate's one check (Revision set) may run in the pod it is
	// about: every pod goes down, so none is "another" (recreate.go).
	self := a.Target == a.Ordinal && !(a.Type == ActionCheckDisruption && a.Revision.Name != "")
	if self || target < 0 || !runningAndReady(&w.pods[target]) || w.pods[target].Terminating {
		return Result{}, fmt.Errorf("%s of %d run in %d, which is not another Ready pod", a.Type, a.Ordinal, a.Target)
	}
	fails := w.appFails && w.rng.IntN(3) == 0
	if a.Type == ActionCheckDisruption {
		if w.spec.DisruptionCheck == "" {
			return Result{}, errors.New("a disruption check the spec does not declare")
		}
		if fails {
			return Result{Wait: &Wait{Reason: HoldDisruptionCheckFailed, Message: "the application says no"}}, nil
		}
		return Result{}, nil
	}
	if w.spec.LeaderUpdate != LeaderSwitchover || a.Ordinal != w.leader || a.Target == w.leader {
		return Result{}, fmt.Errorf("switchover from %d to %d, but %d leads (leader update %s)", a.Ordinal, a.Target, w.leader, w.spec.LeaderUpdate)
	}
	return w.answerSwitchover(a, fails)
}

// elect moves leadership as the database does by itself: a switchover that
// ran takes effect, and a leader that is no longer Ready (stopping,
// failed, gone) is replaced by a Ready pod.
func (w *world) elect() {
	if w.newLeader >= 0 && !w.now.Before(w.leaderMovesAt) {
		if i := w.podIndex(w.newLeader); i >= 0 && runningAndReady(&w.pods[i]) && !w.pods[i].Terminating {
			w.logf("world: leadership moves from %d to %d", w.leader, w.newLeader)
			w.leader = w.newLeader
		}
		w.newLeader = -1
	}
	defer func() {
		if w.leader >= 0 {
			w.everLed[w.leader] = true
		}
	}()
	if i := w.podIndex(w.leader); i >= 0 && runningAndReady(&w.pods[i]) && !w.pods[i].Terminating {
		return
	}
	var ready []int
	for _, p := range w.pods {
		if runningAndReady(&p) && !p.Terminating {
			ready = append(ready, p.Ordinal)
		}
	}
	w.leader = -1
	if len(ready) > 0 {
		w.leader = ready[w.rng.IntN(len(ready))]
		w.logf("world: %d is elected leader", w.leader)
	}
}

// approveIfWaiting plays the operator who answers a set waiting for
// approval (a supervised leader, a check or switchover that cannot run).
func (w *world) approveIfWaiting() {
	for _, h := range w.last.Held {
		if h.Reason == HoldWaitingForApproval || (h.Until.IsZero() && (h.Reason == HoldDisruptionCheckFailed || h.Reason == HoldSwitchoverFailed)) {
			w.spec.Approval = fmt.Sprint("approve-", w.steps)
			w.logf("user: rollout approve (%s)", w.spec.Approval)
			return
		}
	}
}

// advance moves one pod one step along its life, as Nomad would: Pending to
// Running, Running to Ready, Terminating to gone. It returns false if no pod
// can move.
func (w *world) advance(rng *rand.Rand) bool {
	var movable []int
	for i, p := range w.pods {
		if w.canMove(p) {
			movable = append(movable, i)
		}
	}
	defer w.elect()
	if len(movable) == 0 {
		return false
	}
	w.move(movable[rng.IntN(len(movable))])
	return true
}

func (w *world) canMove(p Pod) bool {
	switch {
	case p.Terminating:
		return true
	case p.Phase == PhasePending:
		// A pod whose volume's node is draining is not placed until the
		// drain is lifted (the node is ineligible) and Nomad is asked again.
		return !w.waitingForNode[p.Ordinal]
	case p.Phase == PhaseRunning && !p.Ready:
		return !w.isBroken(p)
	}
	return false
}

func (w *world) isBroken(p Pod) bool {
	r := w.revision(p.Revision)
	return r != nil && w.broken[string(r.Data)]
}

func (w *world) move(i int) {
	p := &w.pods[i]
	switch {
	case p.Terminating:
		w.logf("world: pod %d gone", p.Ordinal)
		delete(w.nodeBack, p.Ordinal)
		w.pods = slices.Delete(w.pods, i, i+1)
	case p.Phase == PhasePending:
		w.logf("world: pod %d running", p.Ordinal)
		p.Phase = PhaseRunning
		delete(w.nodeBack, p.Ordinal)
	case p.Phase == PhaseRunning && !p.Ready && !w.isBroken(*p):
		w.logf("world: pod %d ready", p.Ordinal)
		p.Ready, p.ReadySince = true, w.now
	}
}

// advanceAll moves every pod one step (deterministic scenario helper).
func (w *world) advanceAll() {
	for i := len(w.pods) - 1; i >= 0; i-- {
		if w.canMove(w.pods[i]) {
			w.move(i)
		}
	}
}

// hold makes the next few effects meet a wait, as the agent's hooks,
// plugins, spreads and volumes do; what each waits for is one its effect
// can meet (waitFor).
func (w *world) hold(rng *rand.Rand) {
	w.waits = 1 + rng.IntN(3)
	w.logf("chaos: the next %d effects meet a wait", w.waits)
}

// waitFor is a wait the effect of a can meet in the agent, or nil for an
// effect that meets none: a volume's provisioner down, a spread no node
// meets, a storage class no provisioner serves, a volume still claimed, a
// pre_update or pre_delete hook that says wait.
func (w *world) waitFor(a Action) *Wait {
	var reasons []string
	switch a.Type {
	case ActionCreateVolume:
		reasons = []string{HoldPluginUnavailable, HoldUnknownClass}
		if !a.Unspread {
			reasons = append(reasons, HoldSpreadUnsatisfiable)
		}
	case ActionCreatePod:
		if len(w.spec.VolumeClaims) == 0 && !a.Unspread {
			reasons = []string{HoldSpreadUnsatisfiable}
		}
	case ActionDeleteVolume:
		reasons = []string{HoldPluginUnavailable}
	case ActionExpandVolume:
		reasons = []string{HoldVolumeInUse, HoldPluginUnavailable}
	case ActionDeletePod:
		if a.Disrupts() {
			reasons = []string{HoldHookWaiting}
		}
	}
	if len(reasons) == 0 {
		return nil
	}
	wt := &Wait{Reason: reasons[w.rng.IntN(len(reasons))], Message: "chaos"}
	if wt.Reason == HoldHookWaiting && w.rng.IntN(2) == 0 {
		wt.RetryAfter = time.Duration(1+w.rng.IntN(20)) * time.Second
	}
	return wt
}

// checkDisruptHold is the hold promise for disruptions: a live member (p,
// as the world has it) is taken down only when no hold on its disruption
// is in force; a switchover in progress holds the old leader only while it
// leads. A pod that ended, or a duplicate, is never held.
func (w *world) checkDisruptHold(a Action, p Pod) error {
	if h, held := w.activeHold(a.Ordinal, StepDisrupt); held && !finishedPod(p) && a.Cause != CauseDuplicate &&
		(h.Reason != HoldSwitchingOver || a.Pod.Leader) {
		return fmt.Errorf("pod %d taken down (%s) while held (%s)", a.Ordinal, a.Cause, h.Reason)
	}
	return nil
}

// checkHoldPromise checks an action that meets a wait against the holds in
// force, as apply does for one carried out.
func (w *world) checkHoldPromise(a Action) error {
	switch a.Type {
	case ActionCreateVolume, ActionCreatePod:
		return w.checkCreateHold(a)
	case ActionDeletePod:
		if i := w.podIndex(a.Ordinal); i >= 0 {
			return w.checkDisruptHold(a, w.pods[i])
		}
	}
	return nil
}

// chaos does something bad to a random pod: it fails, is stopped from
// outside, loses readiness, drifts, or is scaled by hand.
func (w *world) chaos(rng *rand.Rand) {
	if len(w.pods) == 0 {
		return
	}
	i := rng.IntN(len(w.pods))
	p := &w.pods[i]
	switch rng.IntN(5) {
	case 0:
		w.logf("chaos: pod %d failed", p.Ordinal)
		p.Phase, p.Ready, p.ReadySince = PhaseFailed, false, time.Time{}
		// Most failed allocations are over; sometimes one still stops.
		p.AllTerminal = rng.IntN(4) != 0
	case 4:
		if !p.Terminating {
			p.ScaledCount = 2 + rng.IntN(3)
			w.logf("chaos: pod %d scaled by hand to %d", p.Ordinal, p.ScaledCount)
		}
	case 1:
		w.logf("chaos: pod %d stopped", p.Ordinal)
		p.Terminating = true
	case 2:
		w.logf("chaos: pod %d not ready", p.Ordinal)
		p.Ready, p.ReadySince = false, time.Time{}
	case 3:
		w.logf("chaos: pod %d drifted", p.Ordinal)
		p.Drifted = true
	}
}

// setAnnotated plays the user editing the parent's meta statefulset: a typo
// or a removed key (false), or "true" again. The spec the agent would parse
// says Detached while it is not annotated.
func (w *world) setAnnotated(annotated bool) {
	w.unannotated = !annotated
	w.spec.Detached = !annotated
	w.spec.DetachedBecause = ""
	if !annotated {
		w.spec.DetachedBecause = `statefulset = "True"`
	}
	w.logf("user: parent annotated=%v", annotated)
}

// converged reports whether the set is at rest: the last reconcile had
// nothing to do and every desired pod exists, ready, at its target revision.
func (w *world) converged() bool {
	if w.spec.Deleted {
		return w.stateDeleted && len(w.pods) == 0
	}
	if len(w.last.effects()) > 0 || (!w.dropStatus && len(w.last.Actions) > 0) || len(w.last.Held) > 0 || len(w.pods) != w.spec.Replicas || w.newLeader >= 0 {
		return false
	}
	for _, v := range w.volumes {
		t := w.claimMin(v.Claim)
		idx := v.Ordinal - w.spec.OrdinalsStart
		if w.inRange(v.Ordinal) && t > v.Capacity && v.Capacity > 0 && v.Class == w.claimClass(v.Claim) &&
			!slices.Contains(w.cannotExpand, v.Class) &&
			rolls(w.spec) && !w.spec.Paused && idx >= w.spec.Partition {
			return false // its claim asks more, and a rollout would grow it
		}
	}
	for _, p := range w.pods {
		if p.ScaledCount > 1 && !w.drifted(p) {
			return false
		}
		if !w.inRange(p.Ordinal) || !w.healthy(p) || (w.drifted(p) && w.repairable(p)) {
			return false
		}
		if rolls(w.spec) && !w.spec.Paused &&
			p.Ordinal-w.spec.OrdinalsStart >= w.spec.Partition && p.Revision != w.last.Status.UpdateRevision {
			return false
		}
	}
	return true
}

// lastRanNumber is the number, as it is now, of the revision the ordinal
// last ran: a rollback renumbers a revision, and its latest number says how
// recent the user's wish for it is. A trimmed revision keeps the number it
// had.
func (w *world) lastRanNumber(ord int) (int64, bool) {
	last, ok := w.lastRan[ord]
	if !ok {
		return 0, false
	}
	if r := w.revision(last.Name); r != nil {
		return r.Number, true
	}
	return last.Number, true
}

// repairable reports whether a rolling update may replace pod p if it drifted:
// RollingUpdate, not paused, at or above the partition. Elsewhere a drifted
// pod waits for the user to delete it, as an outdated one does (DESIGN §3).
func (w *world) repairable(p Pod) bool {
	return rolls(w.spec) && !w.spec.Paused && p.Ordinal-w.spec.OrdinalsStart >= w.spec.Partition
}

// settle alternates reconcile and advancing random pods until the set
// converges, or fails after limit steps.
func (w *world) settle(rng *rand.Rand, limit int) error {
	for i := 0; i < limit; i++ {
		if err := w.step(); err != nil {
			return err
		}
		if w.converged() {
			return nil
		}
		w.now = w.now.Add(time.Second)
		if !w.advance(rng) && len(w.last.Actions) == 0 && w.last.Requeue > time.Second {
			// Nothing moves and nothing was done: the agent looks again
			// when the decision asked (a hold ending, a backoff).
			// Meanwhile the leader check shows what a switchover did.
			w.now = w.now.Add(w.last.Requeue - time.Second)
			w.elect()
		}
		w.approveIfWaiting()
		w.waitForWindow()
		if w.userDeletesBroken {
			for i, p := range w.pods {
				// A pod stuck at a broken revision is the user's to delete
				// under OnDelete, and under RollingUpdate when that is the
				// current revision: updateStatefulSet waits for such a pod
				// (Kubernetes users delete it by hand, issue 67250). A pod at
				// an abandoned revision is replaced without the user.
				byUser := w.spec.UpdateStrategy == OnDelete || p.Revision == w.status.CurrentRevision
				if byUser && !p.Terminating && !p.Ready && w.isBroken(p) {
					w.logf("user: delete pod %d", p.Ordinal)
					w.pods[i].Terminating = true
				}
			}
		}
	}
	return fmt.Errorf("not converged after %d steps", limit)
}

// conditionMessages joins the messages of a status's true conditions, for
// failure messages.
func conditionMessages(st Status) string {
	var msgs []string
	for _, c := range st.Conditions {
		if c.Status {
			msgs = append(msgs, string(c.Type)+": "+c.Message)
		}
	}
	return strings.Join(msgs, "; ")
}
