package reconciler

import (
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"
)

// Memory is what a set's decisions remember from one pass to the next that
// the cluster does not show: the waits the effects met, the failures to back
// off from, the answers of the disruption check, a switchover in flight. It
// is the reconciler's, as a value: the caller passes the last one in
// (Input.Memory), gets the next in Output.Memory, and folds the result of
// every action it carries out into it with Fold. The caller keeps it for a
// leadership term only; a new leader starts from the zero Memory, which is
// always safe (it waits out what it cannot know: Vanished).
type Memory struct {
	// Holds are the waits the effects met (a hook that said wait, a plugin
	// that is down, a spread no node meets, a switchover in flight), each
	// until its Until.
	Holds []Hold
	// Crashes counts, per ordinal, the recent failures of its pod: the
	// crash-loop backoff.
	Crashes map[int]CrashRecord
	// AskFailures counts, per ordinal, the disruption checks and
	// switchovers refused in a row: their backoff.
	AskFailures map[int]int
	// Cleared are the passing disruption checks, until they go stale.
	Cleared []Clearance
	// Switchover is the switchover whose command ran, until another pod is
	// seen to lead and the old leader no longer does.
	Switchover *Switchover
	// Tries are, per leader, the switchovers that failed since its step
	// was last held: each failure moves on to the next candidate, and
	// only once every candidate failed is the step held (DESIGN §3b, the
	// best candidate). A leader that no longer leads forgets its tries.
	Tries map[int]SwitchoverTries
	// TermSeen says the set's first pass of the term happened: the
	// ordinals missing then were given their kill grace (HoldKillGrace,
	// in Holds), and later losses are seen as they happen.
	TermSeen bool
	// CannotExpand are the storage classes whose ExpandVolume refused
	// although their provisioner said it could expand: a pod was stopped
	// for it once, and no other is for the rest of the term.
	CannotExpand []string
	// PostReady is what the post_ready hooks last said, per allocation of
	// the set's pods.
	PostReady map[string]PostReadyAnswer
	// Evaluated is, per ordinal, the node change (Pod.NodeChange) for which
	// Nomad was last asked to place its child again: it is asked once per
	// change.
	Evaluated map[int]uint64
}

// PostReadyAnswer is what the post_ready hooks said about one allocation.
type PostReadyAnswer struct {
	// Done: every hook said done, or failed under failure_policy "ignore".
	Done bool
	// DoneAt is when they said done after having held the pod at least
	// once (the pod counts as ready from then); zero when they said done
	// at the first asking.
	DoneAt time.Time
	// RetryAt is when to ask again while the pod is held.
	RetryAt time.Time
}

// Hooks returns the readiness facts of the answer about allocID, for a set
// whose post_ready hooks gate readiness.
func (m Memory) Hooks(allocID string) HookFacts {
	a := m.PostReady[allocID]
	return HookFacts{Configured: true, Done: a.Done, DoneAt: a.DoneAt}
}

// CrashRecord counts an ordinal's recent pod failures.
type CrashRecord struct {
	Count int
	Last  time.Time
}

// Switchover is a switchover whose command ran.
type Switchover struct {
	// From is the leader it ran in, To the first of its candidates: the
	// command may have handed over to any of them (Candidates).
	From, To   int
	Candidates []int
	Started    time.Time
	// Seen is set once another pod is seen to lead.
	Seen bool
}

// SwitchoverTries are the failed switchovers of one leader's step since
// it was last held: one round over its candidates.
type SwitchoverTries struct {
	// Candidates are the candidates of the round, as its first switchover
	// was offered them. A decision that finds other candidates (a follower
	// that came or went) starts a new round.
	Candidates []int
	// Failed are the candidates whose switchover failed in the round, in
	// the order tried, each with its answer (the Wait message).
	Failed []CandidateAnswer
}

// CandidateAnswer is what a switchover to one candidate answered.
type CandidateAnswer struct {
	Ordinal int
	Answer  string
}

// failed reports whether the switchover to ord failed in the round.
func (t SwitchoverTries) failed(ord int) bool {
	return slices.ContainsFunc(t.Failed, func(c CandidateAnswer) bool { return c.Ordinal == ord })
}

// sameSet reports whether a and b hold the same ordinals, whatever their
// order (neither holds one twice).
func sameSet(a, b []int) bool {
	if len(a) != len(b) {
		return false
	}
	for _, o := range a {
		if !slices.Contains(b, o) {
			return false
		}
	}
	return true
}

// LeaderChange is a switchover seen to take effect in this decision: the
// pod To leads, Took after the command ran in From. The caller announces it.
type LeaderChange struct {
	From, To int
	Took     time.Duration
}

// The wait policies: how long each kind of wait lasts. They are the
// reconciler's, so that the randomized drivers check them under the
// invariants like every other decision.
const (
	// CrashBackoffBase and CrashBackoffMax space the re-creations of a pod
	// that ends Failed again and again. Kubernetes leaves this to the
	// kubelet's CrashLoopBackOff; with Nomad the controller re-creates the
	// child job itself, so it must not do that in a hot loop.
	CrashBackoffBase = time.Second
	CrashBackoffMax  = 5 * time.Minute
	// CrashBackoffReset forgets the failures of an ordinal that has not
	// failed for this long.
	CrashBackoffReset = 10 * time.Minute
	// AskBackoffBase and AskBackoffMax space the retries of a disruption
	// check or a switchover that failed.
	AskBackoffBase = 5 * time.Second
	AskBackoffMax  = 5 * time.Minute
	// ClearanceTTL is how long a passing disruption check lets its pod be
	// taken down: long enough for the pass that acts on it, short enough
	// that the answer still describes the cluster.
	ClearanceTTL = 30 * time.Second
	// DefaultCheckTimeout and DefaultSwitchoverTimeout bound one command
	// when statefulset_exec_timeout is not set (DESIGN §3b). A switchover
	// that ran holds the old leader (HoldSwitchingOver) for as long.
	DefaultCheckTimeout      = 30 * time.Second
	DefaultSwitchoverTimeout = 2 * time.Minute
	// HookRetry is how soon a pre_update or pre_delete hook that said wait
	// without saying for how long is asked again.
	HookRetry = 10 * time.Second
	// PluginRetry is how soon a step held by a provisioner that is down is
	// tried again.
	PluginRetry = 15 * time.Second
	// SpreadRetry is how long a spread no node meets holds the ordinal's
	// creation (required spread) or lets it go without the rule (soft
	// spread) before the rule is tried again; a node event looks at the
	// set sooner.
	SpreadRetry = 30 * time.Second
	// VolumeInUseRetry is how soon an expansion is tried again on a volume
	// Nomad still counts as claimed (the old allocation being released).
	VolumeInUseRetry = 5 * time.Second
	// UnknownClassRetry is how soon a volume of a storage class no
	// provisioner serves is tried again (the agent's config may be fixed
	// and reloaded meanwhile).
	UnknownClassRetry = time.Minute
	// PostReadyRetry is how soon a post_ready hook that said wait without
	// saying for how long is asked again.
	PostReadyRetry = 10 * time.Second
	// MaxPostReadyCalls bounds the post_ready hook calls carried out at
	// once: a set of a thousand fresh pods must not start a thousand.
	MaxPostReadyCalls = 8
	// CapabilitiesRetry is how soon a set is looked at again after a
	// provisioner could not be asked whether a class can expand
	// (Input.CapabilitiesUnknown).
	CapabilitiesRetry = 15 * time.Second
)

// ExecTimeout is how long one of spec's commands may run: the switchover
// command, or the disruption check.
func ExecTimeout(spec Spec, switchover bool) time.Duration {
	switch {
	case spec.ExecTimeout > 0:
		return spec.ExecTimeout
	case switchover:
		return DefaultSwitchoverTimeout
	}
	return DefaultCheckTimeout
}

// Exponential is base doubled n times, capped at limit (and safe from
// overflow): the wait after the (n+1)-th failure in a row. The agent's work
// queue backs off by it too.
func Exponential(base, limit time.Duration, n int) time.Duration {
	d := base << min(max(n, 0), 30)
	if d > limit || d <= 0 {
		return limit
	}
	return d
}

// Result is what carrying out one action did, as the caller reports it to
// Fold. The zero Result is a success.
type Result struct {
	// Err is set when the action failed: the caller stops the pass, and
	// the next one decides again from fresh observations.
	Err error
	// Wait is set when the step could not be taken now and must wait.
	Wait *Wait
	// Unsupported is set by an ExpandVolume whose provisioner refused to
	// expand the volume's class: the volume keeps its size.
	Unsupported bool
	// PostReady is the post_ready hooks' answer to an ActionPostReady.
	PostReady *HookAnswer
}

// HookAnswer is what the post_ready hooks said about an allocation.
type HookAnswer struct {
	// Proceed: every hook said done (or failed under failure_policy
	// "ignore").
	Proceed bool
	// RetryAfter is how long a hook that holds the pod asked to wait;
	// zero leaves it to PostReadyRetry.
	RetryAfter time.Duration
}

// Wait is a step that met something it must wait for.
type Wait struct {
	// Reason is one of the Hold* reasons.
	Reason string
	// Message says what was met, for a human.
	Message string
	// RetryAfter is how long the world asked to wait (a hook's answer);
	// zero leaves it to the reason's wait policy.
	RetryAfter time.Duration
}

// Held reports whether the result is a wait.
func (r Result) Held() bool { return r.Err == nil && r.Wait != nil }

// clone copies m deeply, so that a fold never changes a memory the caller
// still holds.
func (m Memory) clone() Memory {
	m.Holds = slices.Clone(m.Holds)
	m.Crashes = maps.Clone(m.Crashes)
	m.AskFailures = maps.Clone(m.AskFailures)
	m.Cleared = slices.Clone(m.Cleared)
	if m.Switchover != nil {
		sw := *m.Switchover
		m.Switchover = &sw
	}
	m.CannotExpand = slices.Clone(m.CannotExpand)
	m.Evaluated = maps.Clone(m.Evaluated)
	if m.Tries != nil {
		tries := make(map[int]SwitchoverTries, len(m.Tries))
		for ord, t := range m.Tries {
			tries[ord] = SwitchoverTries{Candidates: slices.Clone(t.Candidates), Failed: slices.Clone(t.Failed)}
		}
		m.Tries = tries
	}
	m.PostReady = maps.Clone(m.PostReady)
	return m
}

// stepOf is the kind of step an action is, for the hold a wait makes.
func stepOf(t ActionType) HoldStep {
	switch t {
	case ActionDeletePod, ActionCheckDisruption, ActionSwitchover:
		return StepDisrupt
	}
	return StepCreate
}

// waitFor is how long a wait for reason lasts, by the wait policies.
func (m *Memory) waitFor(ord int, w Wait) time.Duration {
	switch w.Reason {
	case HoldDisruptionCheckFailed, HoldSwitchoverFailed:
		if m.AskFailures == nil {
			m.AskFailures = map[int]int{}
		}
		m.AskFailures[ord]++
		return Exponential(AskBackoffBase, AskBackoffMax, m.AskFailures[ord]-1)
	case HoldHookWaiting:
		if w.RetryAfter > 0 {
			return w.RetryAfter
		}
		return HookRetry
	case HoldPluginUnavailable:
		return PluginRetry
	case HoldSpreadUnsatisfiable:
		return SpreadRetry
	case HoldVolumeInUse:
		return VolumeInUseRetry
	case HoldUnknownClass:
		return UnknownClassRetry
	}
	if w.RetryAfter > 0 {
		return w.RetryAfter
	}
	return PluginRetry
}

// Fold takes the result of carrying out action a at now into the memory,
// and returns the next memory and, when the step met a wait, the hold it
// became. It is the only way the memory changes besides Reconcile.
//
// A switchover that failed while other candidates are left holds nothing:
// the hold returned then has no Until, and says what the candidate
// answered and which one is tried next, for the caller to announce.
func Fold(spec Spec, m Memory, a Action, r Result, now time.Time) (Memory, *Hold) {
	m = m.clone()
	if r.Err != nil {
		return m, nil
	}
	if r.Wait != nil && a.Type == ActionSwitchover && r.Wait.Reason == HoldSwitchoverFailed {
		return m, m.switchoverFailed(spec, a, *r.Wait, now)
	}
	if r.Wait != nil {
		h := Hold{Ordinal: a.Ordinal, Step: stepOf(a.Type), Reason: r.Wait.Reason, Message: r.Wait.Message}
		h.Until = now.Add(m.waitFor(a.Ordinal, *r.Wait))
		m.addHold(h)
		return m, &h
	}
	switch a.Type {
	case ActionDeletePod:
		if a.Purge && a.Pod.Phase == PhaseFailed {
			// Counted once the failed pod is really gone, so that a retry
			// of a purge that failed does not count it again.
			m.crashed(a.Ordinal, now)
		}
	case ActionCheckDisruption:
		delete(m.AskFailures, a.Ordinal)
		// A Recreate's one check clears the whole set for its revision.
		m.Cleared = append(m.Cleared, Clearance{Ordinal: a.Ordinal, Until: now.Add(ClearanceTTL), Recreate: a.Revision.Name})
	case ActionSwitchover:
		delete(m.AskFailures, a.Ordinal)
		delete(m.Tries, a.Ordinal)
		msg := "handed leadership to " + PodName(spec.Name, a.Target) + "; waiting for the leader check to pass there"
		if len(a.Candidates) > 1 {
			msg = "handed leadership to one of " + podNames(spec.Name, a.Candidates) + "; waiting for the leader check to pass on one of them"
		}
		m.addHold(Hold{Ordinal: a.Ordinal, Step: StepDisrupt, Until: now.Add(ExecTimeout(spec, true)), Reason: HoldSwitchingOver, Message: msg})
		m.Switchover = &Switchover{From: a.Ordinal, To: a.Target, Candidates: a.Candidates, Started: now}
		if len(a.Candidates) == 0 {
			m.Switchover.Candidates = []int{a.Target}
		}
	case ActionEvaluatePod:
		if m.Evaluated == nil {
			m.Evaluated = map[int]uint64{}
		}
		m.Evaluated[a.Ordinal] = a.Pod.NodeChange
	case ActionExpandVolume:
		if r.Unsupported && !slices.Contains(m.CannotExpand, a.Volume.Class) {
			m.CannotExpand = append(m.CannotExpand, a.Volume.Class)
		}
	case ActionPostReady:
		if r.PostReady != nil && a.Pod.AllocID != "" {
			m.answered(a.Pod.AllocID, *r.PostReady, now)
		}
	}
	return m, nil
}

// switchoverFailed takes in a switchover of the leader a.Ordinal that
// failed with its first candidate (DESIGN §3b, the best candidate). While
// candidates of the round are left, the step is not held: the next
// decision offers them first (switchoverCandidates), and the hold returned
// ends at once, only to say so. Once every candidate of the round has
// failed, the step is held with the ask backoff, its message giving each
// candidate's answer, and the round is over: the next try, once the hold
// ends, offers every candidate again.
func (m *Memory) switchoverFailed(spec Spec, a Action, w Wait, now time.Time) *Hold {
	cands := a.Candidates
	if len(cands) == 0 {
		cands = []int{a.Target}
	}
	t, ok := m.Tries[a.Ordinal]
	if !ok || !sameSet(t.Candidates, cands) {
		// A new round: the first failure since the last hold, or the
		// candidates changed.
		t = SwitchoverTries{Candidates: slices.Clone(cands)}
	}
	t.Failed = slices.DeleteFunc(t.Failed, func(c CandidateAnswer) bool { return c.Ordinal == cands[0] })
	t.Failed = append(t.Failed, CandidateAnswer{Ordinal: cands[0], Answer: w.Message})
	h := Hold{Ordinal: a.Ordinal, Step: StepDisrupt, Reason: HoldSwitchoverFailed}
	for _, c := range t.Candidates {
		if !t.failed(c) {
			if m.Tries == nil {
				m.Tries = map[int]SwitchoverTries{}
			}
			m.Tries[a.Ordinal] = t
			h.Message = w.Message + "; trying " + PodName(spec.Name, c) + " next"
			return &h
		}
	}
	delete(m.Tries, a.Ordinal)
	answers := make([]string, len(t.Failed))
	for i, c := range t.Failed {
		answers[i] = PodName(spec.Name, c.Ordinal) + ": " + c.Answer
	}
	h.Message = "the switchover failed with every candidate (" + strings.Join(answers, "; ") + ")"
	h.Until = now.Add(m.waitFor(a.Ordinal, w))
	m.addHold(h)
	return &h
}

// podNames names the pods of ords, space-separated (as NSS_CANDIDATE_PODS).
func podNames(set string, ords []int) string {
	names := make([]string, len(ords))
	for i, o := range ords {
		names[i] = PodName(set, o)
	}
	return strings.Join(names, " ")
}

// answered records the post_ready hooks' answer about allocID at now.
func (m *Memory) answered(allocID string, ans HookAnswer, now time.Time) {
	if m.PostReady == nil {
		m.PostReady = map[string]PostReadyAnswer{}
	}
	prev, asked := m.PostReady[allocID]
	if ans.Proceed {
		next := PostReadyAnswer{Done: true}
		if asked && !prev.Done {
			// Held before: the pod counts as ready from now, not from
			// when Nomad found it healthy.
			next.DoneAt = now
		}
		m.PostReady[allocID] = next
		return
	}
	wait := ans.RetryAfter
	if wait <= 0 {
		wait = PostReadyRetry
	}
	m.PostReady[allocID] = PostReadyAnswer{RetryAt: now.Add(wait)}
}

// postReadyActions are the post_ready hooks to ask now: for every pod that
// awaits them and whose allocation they were not asked about yet, or held
// and are due again, unless the decision takes it down (decided). It also
// returns how soon a held pod is due, 0 if none.
func (m Memory) postReadyActions(in Input, decided []Action) ([]Action, time.Duration) {
	var out []Action
	var next time.Duration
	for _, p := range in.Pods {
		if !p.AwaitsPostReady || p.AllocID == "" || p.Terminating ||
			slices.ContainsFunc(decided, func(a Action) bool { return a.Type == ActionDeletePod && a.Ordinal == p.Ordinal }) {
			continue
		}
		a, asked := m.PostReady[p.AllocID]
		switch {
		case a.Done:
		case !asked || !in.Now.Before(a.RetryAt):
			out = append(out, Action{Type: ActionPostReady, Ordinal: p.Ordinal, Pod: p, Reason: "its post_ready hooks decide whether it counts as ready"})
		default:
			next = soonestOf(next, a.RetryAt.Sub(in.Now))
		}
	}
	slices.SortFunc(out, func(a, b Action) int { return a.Ordinal - b.Ordinal })
	return out, next
}

// addHold records a wait, replacing an earlier one on the same ordinal and
// step.
func (m *Memory) addHold(h Hold) {
	for i := range m.Holds {
		if m.Holds[i].Ordinal == h.Ordinal && m.Holds[i].Step == h.Step {
			m.Holds[i] = h
			return
		}
	}
	m.Holds = append(m.Holds, h)
}

// crashed counts a failure of ord's pod, removed at now to be re-created.
func (m *Memory) crashed(ord int, now time.Time) {
	if m.Crashes == nil {
		m.Crashes = map[int]CrashRecord{}
	}
	r := m.Crashes[ord]
	if now.Sub(r.Last) > CrashBackoffReset {
		r.Count = 0
	}
	r.Count++
	r.Last = now
	m.Crashes[ord] = r
}

// backoffHolds are the holds the crash-loop backoff puts on creating pods:
// the first failure is re-created at once, as Kubernetes does, and each
// later one waits twice as long, up to CrashBackoffMax.
func (m Memory) backoffHolds(now time.Time) []Hold {
	if len(m.Crashes) == 0 {
		return nil // a steady decision sorts no keys
	}
	var out []Hold
	for _, ord := range slices.Sorted(maps.Keys(m.Crashes)) {
		r := m.Crashes[ord]
		if r.Count < 2 {
			continue
		}
		wait := Exponential(CrashBackoffBase, CrashBackoffMax, r.Count-2)
		if until := r.Last.Add(wait); until.After(now) {
			out = append(out, Hold{Ordinal: ord, Step: StepCreate, Until: until, Reason: HoldBackOff,
				Message: fmt.Sprintf("the pod failed %d times in a row; it is created again after a backoff of %s", r.Count, wait)})
		}
	}
	return out
}

// begin is the memory a decision at in.Now starts from: ended holds and
// stale answers dropped, old failures forgotten, the ordinals that
// vanished before the term began given their kill grace, the switchover
// tries of a pod that no longer leads dropped, and a switchover that took
// effect closed. It also returns the switchover seen to take effect now,
// if any.
func (m Memory) begin(in Input) (Memory, *LeaderChange) {
	m = m.clone()
	now := in.Now
	m.Holds = dropEnded(m.Holds, now, func(h Hold) time.Time { return h.Until })
	m.Cleared = dropEnded(m.Cleared, now, func(c Clearance) time.Time { return c.Until })
	for ord, r := range m.Crashes {
		if now.Sub(r.Last) > CrashBackoffReset {
			delete(m.Crashes, ord)
		}
	}
	if len(m.PostReady) > 0 {
		// The answers about allocations the set no longer has have served.
		live := make(map[string]bool, len(in.Pods))
		for _, p := range in.Pods {
			live[p.AllocID] = true
		}
		maps.DeleteFunc(m.PostReady, func(id string, _ PostReadyAnswer) bool { return !live[id] })
	}
	firstOfTerm := !m.TermSeen && !in.Spec.Deleted && !in.TermStart.IsZero()
	if firstOfTerm || slices.ContainsFunc(m.Holds, func(h Hold) bool { return h.Reason == HoldKillGrace }) {
		// Only then: a steady decision of a large set builds no map.
		present := make(map[int]bool, len(in.Pods)+len(in.Stopped))
		for _, p := range in.Pods {
			present[p.Ordinal] = true
		}
		for _, s := range in.Stopped {
			present[s.Ordinal] = true
		}
		// A kill grace for an ordinal whose child is back has served.
		m.Holds = slices.DeleteFunc(m.Holds, func(h Hold) bool { return h.Reason == HoldKillGrace && present[h.Ordinal] })
		if firstOfTerm {
			m.TermSeen = true
			m.vanishedHolds(in, present)
		}
	}
	if len(m.Tries) > 0 {
		for ord := range m.Tries {
			if !slices.ContainsFunc(in.Pods, func(p Pod) bool { return p.Ordinal == ord && p.Leader }) {
				delete(m.Tries, ord)
			}
		}
	}
	return m, m.closeSwitchover(in)
}

// vanishedHolds gives every ordinal missing at the set's first pass of the
// term its kill grace from the start of the term.
//
// A purge makes Nomad forget the child's allocations at once while their
// client may still be killing the task; a new child is a new job, whose
// allocation does not wait for the old one. A purge seen by a leader is
// held as a stopping pod for the task's kill grace by the agent's cache. A
// purge made while no leader watched (the daemon restarting, leadership
// moving) left nothing to see: the child is simply missing. Such an
// ordinal (one the set's status records, missing at the set's first pass
// in the term) waits out the kill
// grace from the start of the term, the earliest moment the purge can be
// known to have happened by. The cost is a few seconds' delay for a child
// that vanished long before; the gain is never running two copies of one
// ordinal.
func (m *Memory) vanishedHolds(in Input, present map[int]bool) {
	for _, r := range in.Previous.Ordinals {
		// Every ordinal the status records counts, whatever the spec says
		// now: one recorded as never run (Revision "") may have had its
		// pod created by a pass that then held or failed before the
		// status was written, and one out of the range or condemned may
		// come back into it while its old task still stops. A hold on an
		// ordinal that is not created anyway costs nothing.
		if present[r.Ordinal] {
			continue
		}
		until := in.TermStart.Add(in.StopGrace[r.Ordinal])
		if !until.After(in.Now) {
			continue
		}
		m.addHold(Hold{Ordinal: r.Ordinal, Step: StepCreate, Until: until, Reason: HoldKillGrace,
			Message: "its child vanished from Nomad while no leader watched (a purge?), and its old task may still be stopping on its node"})
	}
}

// closeSwitchover follows a switchover whose command ran: once another pod
// is seen to lead, the change is reported (once); once the old leader no
// longer leads either, the switch is complete and its SwitchingOver hold
// has served: it is dropped, as left to its timeout it would hold that pod
// again, saying it hands leadership over, should it lead again meanwhile.
// Not before: the checks of both pods may pass for a moment, and while the
// old leader still looks like the leader the hold keeps the reconciler from
// asking it for another switchover.
func (m *Memory) closeSwitchover(in Input) *LeaderChange {
	sw := m.Switchover
	if sw == nil {
		return nil
	}
	fromLeads, other := false, -1
	for _, p := range in.Pods {
		switch {
		case !p.Leader:
		case p.Ordinal == sw.From:
			fromLeads = true
		case other < 0 || p.Ordinal < other:
			other = p.Ordinal
		}
	}
	var change *LeaderChange
	if other >= 0 && !sw.Seen {
		sw.Seen = true
		change = &LeaderChange{From: sw.From, To: other, Took: in.Now.Sub(sw.Started)}
	}
	if sw.Seen && !fromLeads {
		m.Switchover = nil
		m.Holds = slices.DeleteFunc(m.Holds, func(h Hold) bool { return h.Ordinal == sw.From && h.Reason == HoldSwitchingOver })
	}
	return change
}

// dropEnded keeps the entries of list whose end is after now.
func dropEnded[T any](list []T, now time.Time, end func(T) time.Time) []T {
	return slices.DeleteFunc(list, func(x T) bool { return !end(x).After(now) })
}
