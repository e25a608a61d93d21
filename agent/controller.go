package agent

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/nomad-statefulset/nomad-statefulset/agent/config"
	"github.com/nomad-statefulset/nomad-statefulset/backend"
	"github.com/nomad-statefulset/nomad-statefulset/reconciler"
)

// effectTimeout bounds one Nomad or store call made on behalf of an action.
// Effects run on a context detached from shutdown so that a SIGTERM never
// leaves a write half-done; this keeps a hung call from blocking shutdown.
// Every effect is idempotent or check-and-set, so one cut short by the
// timeout is simply redone from fresh observations.
const effectTimeout = StopTimeout - time.Second

// StopTimeout is the longest the agent takes to stop acting once its
// leadership context is cancelled: the one effect in flight, plus slack. The
// leader election's lock-delay arithmetic is built on it, and config
// validation checks the timing rule against the same value.
const StopTimeout = config.LeaderStopTimeout

// defaultExpectationTTL is how long a write may stay unobserved before the
// cache is distrusted and re-listed.
const defaultExpectationTTL = 2 * time.Minute

// controller reconciles sets: it observes a set in the cache, asks the
// reconciler what to do and has the actions carried out. Every write it
// makes is an action of the reconciler's output, the status included (the
// last action, ActionRecordStatus); it carries out a prefix of the
// actions, and what they met is folded into the set's decision memory
// (reconciler.Memory), which the next decision reads.
type controller struct {
	log   hclog.Logger
	store backend.Store
	// term is this leadership term's cache of Nomad and its watcher.
	term    backend.Term
	queue   workQueue
	clock   func() time.Time
	metrics *metrics
	// sets is everything kept per set in this term: the one map keyed by
	// set.
	sets *setStates
	// effector carries out actions: a podControl, but for tests.
	effector effector
	// render is the digest of a revision rendered for an ordinal, which
	// drift detection compares with the child's (backend.Cluster's
	// RenderedDigest).
	render renderFunc
	// requestResync asks the watcher for a full re-list (a fake in tests).
	requestResync func()
	// hooks runs the post_ready hooks; nil runs none.
	hooks HookRunner
	// capabilities says which storage classes can expand their volumes;
	// nil asks nothing (every class is taken to expand).
	capabilities capabilitySource
	// checks is the Consul health of the sets' services; nil without
	// Consul (-dev), when task states alone decide readiness.
	checks checkSource
	// native reads the sets' Nomad-native leader checks; nil in tests
	// that do not model them.
	native leaderSource
	// expectTTL is how long a write may stay unobserved before the cache
	// is distrusted and re-listed.
	expectTTL time.Duration
	// termStart is when this leadership term began: a child missing since
	// before it may have been purged unseen (Input.TermStart,
	// HoldKillGrace). Zero in tests that do not model a term.
	termStart time.Time
	// confirm reads the set's stored state from the store itself before a
	// pass acts, and reports whether the pass decided on it
	// (storecache.Store.Confirm); nil confirms nothing.
	confirm func(ctx context.Context, key backend.SetKey) (bool, error)
}

type cachedRevisionData struct {
	jobModifyIndex uint64
	data           []byte
}

// revisionData returns the parent's RevisionData, computed once per parent
// version.
func (c *controller) revisionData(st *setState, obs backend.Observation) ([]byte, error) {
	if obs.Parent == nil {
		return nil, errors.New("the parent job is gone")
	}
	_, idx := obs.Parent.Version()
	if idx != 0 && st.revData.jobModifyIndex == idx && st.revData.data != nil {
		return st.revData.data, nil
	}
	data, err := obs.Parent.RevisionData()
	if err != nil {
		return nil, err
	}
	st.revData = cachedRevisionData{jobModifyIndex: idx, data: data}
	return data, nil
}

// pass is one reconcile of one set: what was observed, and the input the
// decision is made from. The effector reads it to carry out the actions.
type pass struct {
	key  backend.SetKey
	st   *setState
	spec reconciler.Spec
	obs  backend.Observation
	revs []reconciler.Revision
	// prev is the stored status (zero when none is stored: found false).
	prev  reconciler.Status
	found bool
	now   time.Time
	in    reconciler.Input
	// hookHeld says a pod's post_ready hooks hold its readiness, for the
	// view.
	hookHeld bool
	// placed are the nodes of the volumes this pass created, by ordinal:
	// spreading must see them before the watcher does (a Parallel set
	// creates every volume in one pass). The controller adds to it from
	// each CreateVolume's outcome.
	placed map[int][]string
}

// effector carries out the reconciler's actions, as Kubernetes'
// StatefulPodControl carries out the StatefulSet controller's: the
// reconciler decides, the effector acts and says what happened. It writes
// nothing to the pass, so that the actions of one group
// (reconciler.Batches) can run at once, whatever the effector.
type effector interface {
	execute(ctx context.Context, p *pass, act reconciler.Action) outcome
}

// workQueue is what the controller needs of the work queue: to look at a
// set again now, or after a delay.
type workQueue interface {
	Add(key string)
	AddAfter(key string, d time.Duration)
}

// acted is what carrying out a decision did.
type acted struct {
	// done counts the actions carried out.
	done int
	// stateDeleted is set when the set's stored state was deleted.
	stateDeleted bool
	// held are the steps that met a wait, as holds.
	held []reconciler.Hold
}

// sync reconciles one set once: observe, decide, act, record.
func (c *controller) sync(ctx context.Context, key backend.SetKey) error {
	start := time.Now()
	defer func() { c.metrics.reconcileDuration.Observe(time.Since(start).Seconds()) }()
	p, err := c.observe(ctx, key)
	if p == nil || err != nil {
		return err
	}
	out := reconciler.Reconcile(p.in)
	if len(out.Actions) > 0 && c.confirm != nil {
		// The pass decided on the state kept in memory. It acts only once
		// the store has answered for the set: a leader cut off from its
		// store acts no more, and one that finds the store changed decides
		// again on what it found.
		fresh, err := c.confirm(ctx, key)
		if err != nil {
			return c.recordStoreError(key, fmt.Errorf("reading the stored state of %s before acting: %w", key, err))
		}
		if !fresh {
			c.log.Debug("the stored state changed; deciding again", "set", key.String())
			c.queue.Add(key.String())
			return nil
		}
	}
	res, err := c.act(ctx, p, out)
	if err != nil {
		return err
	}
	return c.record(ctx, p, out, res)
}

// observe builds the pass for a set from the cache and the store. It
// returns nil (and handles the set) when there is nothing to decide: the
// job is invalid, nothing of the set is left, or our own writes are not
// observed yet.
func (c *controller) observe(ctx context.Context, key backend.SetKey) (*pass, error) {
	now := c.clock()
	st := c.sets.of(key)
	// One look at the cache serves the whole pass: observing a set renders
	// every child, most of a steady pass's cost. Its volumes are found by
	// the claims of the set's last spec; only when the parsed spec names
	// others (a set first seen, or its claims changed) are they looked up
	// again, keeping the parent and pods the spec was parsed from.
	var claims []string
	if st.spec != nil {
		claims = st.spec.VolumeClaims
	}
	obs := c.term.Observe(key, claims, now)
	spec, parseErr := c.specFor(st, key, obs)
	if parseErr != nil {
		return nil, c.recordInvalid(ctx, key, parseErr, now)
	}
	if !slices.Equal(spec.VolumeClaims, claims) {
		obs.Volumes = c.term.Observe(key, spec.VolumeClaims, now).Volumes
	}
	if waiting, expired := st.pendingWrites(obs, now); len(waiting) > 0 || expired {
		if expired {
			c.log.Warn("a write was not observed in time; re-listing Nomad", "set", key.String(), "ttl", c.expectTTL)
			c.requestResync()
			return nil, nil
		}
		c.log.Trace("waiting for our own writes", "set", key.String(), "pending", waiting)
		if deadline, ok := st.firstDeadline(); ok {
			// Come back when the first of them expires even if no event
			// does: a write whose event was lost is then noticed, and the
			// cache re-listed, within expectTTL rather than at the next
			// periodic resync.
			c.queue.AddAfter(key.String(), deadline.Sub(now)+time.Millisecond)
		}
		return nil, nil
	}
	p := &pass{key: key, st: st, spec: *spec, obs: obs, now: now}
	if ok, err := c.readStore(ctx, p); !ok {
		return nil, err
	}
	if reconciler.IsDetached(p.spec, p.prev) {
		// A detached set's decision reads its stored state only. The
		// rest of the input would ask its pods' post_ready hooks and
		// watch its checks: nothing of a detached set is touched.
		p.in = c.baseInput(p)
		return p, nil
	}
	if ok, err := c.buildInput(ctx, p); !ok {
		return nil, err
	}
	return p, nil
}

// readStore reads the set's revisions and status into p. It reports false
// when there is nothing to decide on: the store failed (err), or holds a
// corrupt value, which leaves the set untouched (err nil).
func (c *controller) readStore(ctx context.Context, p *pass) (bool, error) {
	var err error
	if p.revs, err = c.store.ListRevisions(ctx, p.key); err != nil {
		return false, c.recordStoreError(p.key, fmt.Errorf("reading revisions of %s: %w", p.key, err))
	}
	if p.prev, p.found, err = c.store.GetStatus(ctx, p.key); err != nil {
		return false, c.recordStoreError(p.key, fmt.Errorf("reading status of %s: %w", p.key, err))
	}
	return true, nil
}

// buildInput turns the pass's observation into the reconciler's input: the
// pods as the readiness gates judge them, with what the agent found out
// about each (drift, a draining node, a count scaled by hand, a node back),
// and the holds in force. It reports false when the parent's template
// cannot be read, which leaves the set untouched (err says why only when
// that could not be recorded).
func (c *controller) buildInput(ctx context.Context, p *pass) (bool, error) {
	spec, obs, now := p.spec, p.obs, p.now
	p.in = c.baseInput(p)
	if obs.Parent != nil {
		p.in.JobVersion, _ = obs.Parent.Version()
	}
	if !spec.Deleted {
		data, err := c.revisionData(p.st, obs)
		if err != nil {
			return false, c.recordInvalid(ctx, p.key, err, now)
		}
		p.in.TemplateData = data
	}
	// Consul checks first: a pod they make not Ready is not one whose
	// post_ready hooks should be asked.
	p.in.LeaderUnknown = !c.gateChecks(p.key, obs, spec.Deleted, spec.LeaderCheck, true)
	p.hookHeld = c.judge(p.st, obs)
	p.in.Pods = c.inputPods(p)
	for _, v := range obs.Volumes {
		p.in.Volumes = append(p.in.Volumes, v.Volume)
	}
	p.in.CannotExpand, p.in.CapabilitiesUnknown = c.cannotExpand(ctx, p)
	return true, nil
}

// baseInput is the input every decision of the set reads, detached or
// not: the spec, the stored state and the set's memory, and what Nomad
// still holds of stopped children.
func (c *controller) baseInput(p *pass) reconciler.Input {
	in := reconciler.Input{Spec: p.spec, Revisions: p.revs, Previous: p.prev, Now: p.now,
		Memory: p.st.memory, TermStart: c.termStart, StateAbsent: len(p.revs) == 0 && !p.found,
		StatusMissing: !p.found}
	for _, s := range p.obs.Stopped {
		in.Stopped = append(in.Stopped, reconciler.StoppedChild{JobID: s.JobID, Ordinal: s.Ordinal})
	}
	if !p.st.memory.TermSeen && !c.termStart.IsZero() {
		in.StopGrace = c.stopGrace(p)
	}
	return in
}

// inputPods are the observed pods as the reconciler sees them.
func (c *controller) inputPods(p *pass) []reconciler.Pod {
	revByName := make(map[string]reconciler.Revision, len(p.revs))
	for _, r := range p.revs {
		revByName[r.Name] = r
	}
	rendered := p.st.rendered.begin(p.spec)
	defer rendered.trim(len(p.obs.Pods))
	volumeNodes := map[int][]string{}
	for _, v := range p.obs.Volumes {
		volumeNodes[v.Volume.Ordinal] = append(volumeNodes[v.Volume.Ordinal], v.NodeID)
	}
	pods := make([]reconciler.Pod, 0, len(p.obs.Pods))
	for _, d := range p.obs.Pods {
		pod := d.Pod
		if r, ok := revByName[pod.Revision]; ok && !pod.Terminating {
			if d.Job == nil || !d.Job.Matches(p.spec, r, pod.Ordinal) {
				pod.Drifted = true
			} else {
				changed, older := rendered.changed(c.render, p.spec, r, d, p.st.isOwn(d))
				if len(changed) > 0 {
					pod.Drifted = true
					c.noteEdit(p, d, r, changed)
				}
				rendered.noteOlder(d.JobID, older)
			}
		}
		if d.NodeID != "" && !pod.Terminating {
			// A pod on a draining node is the daemon's to move, within the
			// budget: its child's migrate block leaves it to us.
			if n, ok := c.term.NodeState(d.NodeID); ok && n.Draining {
				pod.NodeDraining = true
			}
		}
		pod.AllTerminal = d.AllTerminal
		pod.AllocID = d.AllocID
		pod.AwaitsPostReady = d.NotReady == notReadyHookHeld
		if !p.spec.Deleted && d.Job != nil {
			pod.ScaledCount = d.Job.ScaledCount()
		}
		pod.NodeChange = c.nodeChange(d, volumeNodes[pod.Ordinal])
		pods = append(pods, pod)
	}
	return pods
}

// nodeChange is Pod.NodeChange: for a child Nomad may have blocked while
// its volume's node was ineligible (it has no allocation, and every node
// holding its volumes is fine), the node change that made them all fine,
// when it came after the child was registered; 0 otherwise. The reconciler
// asks Nomad to place it again once per change. It reacts to node events
// (FineSince), not to a timer.
func (c *controller) nodeChange(d backend.PodDetail, nodes []string) uint64 {
	if d.AllocID != "" || d.Pod.Terminating || len(nodes) == 0 {
		return 0
	}
	var since uint64
	for _, id := range nodes {
		n, ok := c.term.NodeState(id)
		if !ok || !n.Fine() {
			return 0
		}
		since = max(since, n.FineSince)
	}
	if since <= d.JobModifyIndex {
		return 0
	}
	return since
}

// act carries out a prefix of the decision's actions, in the reconciler's
// groups (reconciler.Batches): the actions of a group run at once, and the
// first group in which an action fails or meets a wait is the last. The
// reconciler promises that stopping anywhere is safe (reconciler/doc.go);
// the set is queued again, and the next decision, with the wait in its
// memory, goes on from there. Every result is folded into the set's memory
// (reconciler.Fold), so that what an action met is the reconciler's to
// remember.
func (c *controller) act(ctx context.Context, p *pass, out reconciler.Output) (acted, error) {
	var res acted
	p.st.memory = out.Memory
	if ch := out.LeaderChange; ch != nil {
		from, to := reconciler.PodName(p.key.Name, ch.From), reconciler.PodName(p.key.Name, ch.To)
		c.sets.event(p.key, p.now, "Switchover", fmt.Sprintf("%s leads, after a switchover from %s in %s", to, from, ch.Took.Round(time.Millisecond)))
		c.log.Info("the leader changed after a switchover", "set", p.key.String(), "from", from, "to", to, "took", ch.Took)
	}
	var done []reconciler.Action
	for _, group := range reconciler.Batches(p.spec, out.Actions) {
		if ctx.Err() != nil {
			// Leadership or the agent is going away: stop between actions.
			c.recordCreates(ctx, p, done)
			return res, ctx.Err()
		}
		outcomes := c.runGroup(ctx, p, group)
		// Every result is settled, so that a pod registered beside one
		// that failed is counted and announced; the first error then ends
		// the pass.
		var first error
		stop := false
		for k, a := range group {
			if err := c.settle(p, a, outcomes[k], &res); err != nil && first == nil {
				first = err
			}
			if outcomes[k].Err == nil && outcomes[k].Wait == nil {
				done = append(done, a)
			}
			stop = stop || outcomes[k].Err != nil || outcomes[k].Wait != nil
		}
		if first != nil {
			c.recordCreates(ctx, p, done)
			c.sets.update(p.key, p.spec, out.Status, p.obs, p.revs, p.now)
			return res, first
		}
		if stop {
			c.recordCreates(ctx, p, done)
			break
		}
	}
	return res, nil
}

// recordCreates writes the revisions of the pods a pass created when the
// pass stops before its end (a step held or failed): its status, which
// would have recorded them, is not written then (reconciler.RecordsAfter).
// It is an ActionRecordOrdinals like any other; one that fails is only
// logged, as the pass is already stopping.
func (c *controller) recordCreates(ctx context.Context, p *pass, done []reconciler.Action) {
	base := p.prev.Ordinals
	for _, a := range done {
		if a.Type == reconciler.ActionRecordOrdinals {
			base = a.Ordinals
		}
	}
	recs, changed := reconciler.RecordsAfter(base, done)
	if !changed {
		return
	}
	a := reconciler.Action{Type: reconciler.ActionRecordOrdinals, Ordinals: recs,
		Reason: "the pass stopped early: remember what its new pods run"}
	if o := c.effector.execute(withAction(ctx, p.key, a), p, a); o.Err != nil {
		c.log.Warn("could not record the revisions of the pods this pass created", "set", p.key.String(), "error", o.Err)
	}
}

// runGroup carries out the actions of one group, at once when there are
// several (a Parallel set's creates, in slow-start batches, as Kubernetes'
// runForAll creates a bursting set's pods with slowStartBatch), each call
// tagged with the action it carries out.
func (c *controller) runGroup(ctx context.Context, p *pass, group []reconciler.Action) []outcome {
	outcomes := make([]outcome, len(group))
	if len(group) == 1 {
		outcomes[0] = c.effector.execute(withAction(ctx, p.key, group[0]), p, group[0])
		return outcomes
	}
	var wg sync.WaitGroup
	for k, a := range group {
		wg.Go(func() { outcomes[k] = c.effector.execute(withAction(ctx, p.key, a), p, a) })
	}
	wg.Wait()
	return outcomes
}

// settle takes in the outcome of one action: its result is folded into the
// set's memory; a wait becomes a hold (the fold says until when) and is
// announced, an error is announced and returned, and a success is counted,
// announced, and its writes expected in the cache.
func (c *controller) settle(p *pass, a reconciler.Action, o outcome, res *acted) error {
	var h *reconciler.Hold
	prev, asked := p.st.memory.PostReady[a.Pod.AllocID]
	p.st.memory, h = reconciler.Fold(p.spec, p.st.memory, a, o.Result, p.now)
	switch {
	case o.Err != nil:
		c.sets.event(p.key, p.now, "Error", fmt.Sprintf("%s ordinal %d: %v", a.Type, a.Ordinal, o.Err))
		return fmt.Errorf("%s for ordinal %d of %s: %w", a.Type, a.Ordinal, p.key, o.Err)
	case h != nil:
		c.hold(p, a, *h)
		res.held = append(res.held, *h)
		return nil
	}
	if a.Type == reconciler.ActionRecordStatus {
		// The decision's own record, not a change to the set: it needs
		// no second look and makes no event.
		c.log.Trace("recorded the status", "set", p.key.String())
		return nil
	}
	if a.Type == reconciler.ActionPostReady {
		// An answer, not a change to the set: announced when it changes
		// what the pod counts as.
		res.done++
		c.announcePostReady(p, a, o, asked && !prev.Done)
		return nil
	}
	c.expectOutcome(p, a, o)
	res.done++
	res.stateDeleted = res.stateDeleted || o.stateDeleted
	c.sets.event(p.key, p.now, string(a.Type), actionMessage(p.key, a))
	c.log.Info("acted", "set", p.key.String(), "action", a.Type, "ordinal", a.Ordinal, "revision", a.Revision.Name, "reason", a.Reason)
	return nil
}

// expectOutcome records the writes of a successful action that the cache
// must show before the set is decided on again: the watcher sees them in
// its own time, and until it does the set waits rather than act on a cache
// without them.
func (c *controller) expectOutcome(p *pass, a reconciler.Action, o outcome) {
	if a.Type == reconciler.ActionCreateVolume && o.node != "" {
		if p.placed == nil {
			p.placed = map[int][]string{}
		}
		p.placed[a.Ordinal] = append(p.placed[a.Ordinal], o.node)
	}
	if !o.wrote {
		return
	}
	now := c.clock()
	switch a.Type {
	case reconciler.ActionCreatePod:
		c.expectChild(p.st, childID(p.key, a.Ordinal), "registered", o.index)
		p.st.rendered.registered(p.spec, a.Revision.Name, a.Ordinal, o.registered)
	case reconciler.ActionRestoreCount:
		if d, ok := podDetail(p.obs, p.key, a.Ordinal); ok {
			c.expectChild(p.st, d.JobID, "back to count 1", o.index)
		}
	case reconciler.ActionDeletePod:
		id := childID(p.key, a.Ordinal)
		if d, ok := podDetail(p.obs, p.key, a.Ordinal); ok {
			id = d.JobID
		}
		p.st.expectWrite("child "+id+" stopping", now, c.expectTTL, func(obs backend.Observation) bool {
			return !slices.ContainsFunc(obs.Pods, func(q backend.PodDetail) bool { return q.JobID == id && !q.Pod.Terminating })
		})
	case reconciler.ActionCreateVolume:
		name := a.Volume.Name
		p.st.expectWrite("volume "+name+" created", now, c.expectTTL, func(obs backend.Observation) bool {
			return slices.ContainsFunc(obs.Volumes, func(v backend.VolumeDetail) bool { return v.Volume.Name == name })
		})
	case reconciler.ActionDeleteVolume:
		name := a.Volume.Name
		p.st.expectWrite("volume "+name+" deleted", now, c.expectTTL, func(obs backend.Observation) bool {
			return !slices.ContainsFunc(obs.Volumes, func(v backend.VolumeDetail) bool { return v.Volume.Name == name })
		})
	case reconciler.ActionExpandVolume:
		name, want := a.Volume.Name, a.Volume.Capacity
		p.st.expectWrite("volume "+name+" expanded", now, c.expectTTL, func(obs backend.Observation) bool {
			return slices.ContainsFunc(obs.Volumes, func(v backend.VolumeDetail) bool { return v.Volume.Name == name && v.Volume.Capacity >= want })
		})
	}
}

// expectChild records that the set waits until Nomad's child id is seen at
// JobModifyIndex want or later, and that the child at that index is the
// daemon's own rendering.
func (c *controller) expectChild(st *setState, id, what string, want uint64) {
	st.child(id).own = want
	st.expectWrite("child "+id+" "+what, c.clock(), c.expectTTL, func(o backend.Observation) bool {
		for _, p := range o.Pods {
			if p.JobID == id && p.JobModifyIndex >= want {
				return true
			}
		}
		return false
	})
}

// hold reports a step that must wait, in the log and the set's events.
func (c *controller) hold(p *pass, a reconciler.Action, h reconciler.Hold) {
	wait := h.Until.Sub(p.now)
	msg := fmt.Sprintf("%s: %s; trying again in %s", reconciler.PodName(p.key.Name, a.Ordinal), h.Message, wait.Round(time.Second))
	if wait <= 0 {
		// A wait that holds nothing: a switchover that failed with one
		// candidate, whose next candidate is tried at once.
		msg = fmt.Sprintf("%s: %s", reconciler.PodName(p.key.Name, a.Ordinal), h.Message)
		wait = 0
	}
	if h.Reason == reconciler.HoldSpreadUnsatisfiable && !p.spec.SpreadRequired {
		// A soft spread does not wait: the reconciler places the ordinal
		// without the rule at once (Action.Unspread).
		msg = fmt.Sprintf("%s: %s; placing it without the spread rule", reconciler.PodName(p.key.Name, a.Ordinal), h.Message)
	}
	c.log.Info("a step is held; will look again", "set", p.key.String(), "action", a.Type, "ordinal", a.Ordinal,
		"reason", h.Reason, "detail", h.Message, "retry_in", wait)
	c.sets.event(p.key, p.now, h.Reason, msg)
}

// record updates the view and says when to look again, once the actions
// are carried out (the status write among them, ActionRecordStatus, the last
// one). A set that is gone (reconciler Output.Gone, or whose state the pass
// deleted) is forgotten.
func (c *controller) record(ctx context.Context, p *pass, out reconciler.Output, res acted) error {
	key := p.key
	if res.stateDeleted || (out.Gone && len(res.held) == 0) {
		c.forget(key)
		return nil
	}
	c.noteDetached(p, out.Status)
	c.showOutcome(ctx, p, out, res)
	switch {
	case res.done > 0 || len(res.held) > 0:
		// Look again once our writes are visible: some (volume writes) make
		// no event, and the expectations gate keeps an early look harmless.
		// A step that met a wait is decided again at once, the wait now an
		// input: the reconciler holds it (and says until when), or goes
		// another way (a soft spread no node meets).
		c.queue.Add(key.String())
	default:
		if wait := soonest(out.Requeue, p.obs.RecheckAfter); wait > 0 {
			c.queue.AddAfter(key.String(), wait)
		}
	}
	return nil
}

// noteDetached announces, once per term, that a set is detached (the
// Detached event and a warning: an operator who mistyped the annotation must
// hear of it), and that it is adopted again once its parent is annotated.
func (c *controller) noteDetached(p *pass, next reconciler.Status) {
	detached := reconciler.StatusDetached(next)
	if detached == p.st.detached {
		return
	}
	p.st.detached = detached
	if !detached {
		c.log.Info("the set's parent is annotated again; its children are adopted as they are", "set", p.key.String())
		c.sets.event(p.key, p.now, "Adopted", "the parent job is annotated again: its children are adopted as they are")
		return
	}
	msg := ""
	for _, cond := range next.Conditions {
		if cond.Type == reconciler.ConditionDetached {
			msg = cond.Message
		}
	}
	c.log.Warn("the set is detached: nothing of it is changed, stopped or deleted", "set", p.key.String(), "why", msg)
	c.sets.event(p.key, p.now, string(reconciler.ConditionDetached), msg)
}

// showOutcome updates the set's view. After acting, the view shows what the
// actions changed; without actions, obs (already gated by the checks and
// the post_ready hooks) is current.
func (c *controller) showOutcome(ctx context.Context, p *pass, out reconciler.Output, res acted) {
	key := p.key
	finalRevs, finalObs := p.revs, p.obs
	if res.done > 0 {
		if r, err := c.store.ListRevisions(ctx, key); err == nil {
			finalRevs = r
		}
		finalObs = c.term.Observe(key, p.spec.VolumeClaims, p.now)
		c.gateChecks(key, finalObs, p.spec.Deleted, p.spec.LeaderCheck, false)
		c.judge(p.st, finalObs)
	}
	shown := out.Status
	held := append(slices.Clone(res.held), out.Held...)
	switch {
	case len(held) > 0:
		h := held[0]
		shown = heldStatus(shown, h.Reason, heldMessage(key.Name, h, p.now), p.now)
	case p.hookHeld:
		shown = heldStatus(shown, reconciler.HoldHookWaiting, "a post_ready hook holds a pod's readiness; see the events", p.now)
	}
	c.sets.update(key, p.spec, shown, finalObs, finalRevs, p.now)
}

// forget drops everything the controller keeps of a set that is gone (its
// state, the Consul watches of its services, and the reads of its native
// leader check). A set of the same name
// created later starts afresh.
func (c *controller) forget(key backend.SetKey) {
	c.sets.drop(key)
	if c.checks != nil {
		c.checks.Watch(key, nil, "")
	}
	if c.native != nil {
		c.native.Watch(key, "", 0, nil)
	}
}

// specFor parses the set's parent, or falls back to the last known spec when
// the parent was purged (Deleted, ParentGone) or is not annotated
// (Detached). It returns nil, nil when the set is unknown.
func (c *controller) specFor(st *setState, key backend.SetKey, obs backend.Observation) (*reconciler.Spec, error) {
	if obs.Parent != nil && !obs.ParentPurged && obs.Parent.Managed() {
		spec, err := obs.Parent.Spec()
		if err != nil {
			return nil, err
		}
		st.spec = &spec
		return &spec, nil
	}
	var last reconciler.Spec
	ok := st.spec != nil
	if ok {
		last = *st.spec
	} else if obs.Parent != nil && obs.Parent.Managed() {
		if s, err := obs.Parent.Spec(); err == nil {
			last, ok = s, true
		}
	}
	if obs.Parent != nil && !obs.ParentPurged {
		// The parent is there but not annotated: a typo or a removed
		// key detaches the set (reconciler.IsDetached), it never deletes
		// it. The spec is the last known one, if any; a detached set's
		// decision reads none of it.
		if !ok {
			last = reconciler.Spec{Namespace: key.Namespace, Name: key.Name}
		}
		last.Detached, last.DetachedBecause = true, obs.Parent.NotAnnotatedBecause()
		last.Deleted, last.ParentGone = false, false
		return &last, nil
	}
	last.ParentGone = true
	if !ok {
		// Children without a known parent spec, or only the stored state
		// of a set Nomad no longer has at all: tear down what is left,
		// keeping volumes (Retain is the only policy that can never lose
		// data). The reconciler decides what that is, as for any set: a
		// detached set's state stays (its revisions wait for a job of its
		// name to be annotated again), and a set with nothing stored and
		// nothing left gets no action.
		last = reconciler.Spec{
			Namespace: key.Namespace, Name: key.Name,
			PodManagementPolicy: reconciler.OrderedReady, UpdateStrategy: reconciler.RollingUpdate,
			WhenDeleted: reconciler.Retain, WhenScaled: reconciler.Retain, ParentGone: true,
		}
	}
	last.Deleted, last.Detached = true, false
	return &last, nil
}

// recordInvalid leaves the set untouched and reports why, as a condition
// that names the key, the value and the rule (reconciler.InvalidDecision,
// whose one action writes it).
func (c *controller) recordInvalid(ctx context.Context, key backend.SetKey, err error, now time.Time) error {
	msg := err.Error()
	c.log.Error("the set's job is invalid; leaving the set untouched", "set", key.String(), "error", msg)
	prev, found, gerr := c.store.GetStatus(ctx, key)
	if gerr != nil {
		c.sets.setError(key, msg)
		return nil
	}
	out := reconciler.InvalidDecision(prev, !found, msg, now)
	p := &pass{key: key, st: c.sets.of(key), prev: prev, found: found, now: now}
	for _, a := range out.Actions {
		if o := c.effector.execute(withAction(ctx, key, a), p, a); o.Err != nil {
			c.log.Warn("could not record the invalid-spec condition", "set", key.String(), "error", o.Err)
		}
	}
	c.sets.setError(key, msg)
	c.sets.setStatus(key, out.Status)
	// An invalid job is not retried: the next change to the job requeues it.
	return nil
}

// recordStoreError reports an unreadable store value on that set only.
func (c *controller) recordStoreError(key backend.SetKey, err error) error {
	var corrupt *backend.CorruptValueError
	if errors.As(err, &corrupt) {
		c.log.Error("the set's stored state is corrupt; leaving the set untouched", "set", key.String(), "error", err)
		c.sets.setError(key, err.Error())
		return nil
	}
	return err
}

// ConditionHeld is shown on a set, in the HTTP API and `status` only,
// while one of its steps waits on something outside the algorithm: a
// lifecycle hook, a plugin that is down, or a crash-loop backoff. Its
// reason says which. It is not stored: it describes this leader's last
// pass, and the next pass that is not held clears it.
const ConditionHeld reconciler.ConditionType = "Held"

// heldStatus returns st with the Held condition set, for the view.
// heldMessage is the Held condition's message for h: the pod, why it is
// held, and when it is tried again. A hold that waits for the operator or
// for the cluster to change (WaitingForApproval, no follower to hand over
// to) has no such time, and says none.
func heldMessage(set string, h reconciler.Hold, now time.Time) string {
	msg := fmt.Sprintf("%s: %s", reconciler.PodName(set, h.Ordinal), h.Message)
	if !h.Until.IsZero() {
		msg += fmt.Sprintf("; trying again in %s", h.Until.Sub(now).Round(time.Second))
	}
	return msg
}

func heldStatus(st reconciler.Status, reason, msg string, now time.Time) reconciler.Status {
	st.Conditions = reconciler.SetCondition(st.Conditions, reconciler.Condition{Type: ConditionHeld, Status: true, Reason: reason, Message: msg}, now)
	return st
}

func actionMessage(key backend.SetKey, a reconciler.Action) string {
	switch a.Type {
	case reconciler.ActionRecordOrdinals:
		return fmt.Sprintf("%s: %s", a.Type, a.Reason)
	case reconciler.ActionCheckDisruption, reconciler.ActionSwitchover:
		return fmt.Sprintf("%s %s-%d: %s", a.Type, key.Name, a.Ordinal, a.Reason)
	case reconciler.ActionCreatePod, reconciler.ActionDeletePod, reconciler.ActionRestoreCount, reconciler.ActionEvaluatePod:
		if a.Revision.Name == "" {
			return fmt.Sprintf("%s %s-%d: %s", a.Type, key.Name, a.Ordinal, a.Reason)
		}
		return fmt.Sprintf("%s %s-%d (revision %s): %s", a.Type, key.Name, a.Ordinal, a.Revision.Name, a.Reason)
	case reconciler.ActionCreateVolume, reconciler.ActionDeleteVolume, reconciler.ActionExpandVolume:
		return fmt.Sprintf("%s %s: %s", a.Type, a.Volume.Name, a.Reason)
	default:
		return fmt.Sprintf("%s %s: %s", a.Type, a.Revision.Name, a.Reason)
	}
}

// actionKey is the context key of the action a call is made for.
type actionKey struct{}

// ActionCall names the action of the reconciler's output a Nomad call was
// made for.
type ActionCall struct {
	Set    backend.SetKey
	Action reconciler.Action
}

// withAction tags ctx with the action its calls are made for: every write
// the agent makes carries one, which is how a test proves that nothing
// writes outside the reconciler's decisions.
func withAction(ctx context.Context, key backend.SetKey, a reconciler.Action) context.Context {
	return context.WithValue(ctx, actionKey{}, ActionCall{Set: key, Action: a})
}

// ActionOf returns the action a call's context was tagged with, if any.
func ActionOf(ctx context.Context) (ActionCall, bool) {
	a, ok := ctx.Value(actionKey{}).(ActionCall)
	return a, ok
}
