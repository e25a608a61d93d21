package agent

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"slices"
	"sync"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/nomad/api"

	"github.com/nomad-statefulset/nomad-statefulset/agent/config"
	"github.com/nomad-statefulset/nomad-statefulset/backend"
	"github.com/nomad-statefulset/nomad-statefulset/backend/nomad"
	"github.com/nomad-statefulset/nomad-statefulset/jobs"
	"github.com/nomad-statefulset/nomad-statefulset/plugin"
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
// reconciler what to do, carries the actions out and records the status.
type controller struct {
	log     hclog.Logger
	api     nomad.API
	store   backend.Store
	cache   *nomad.Cache
	watcher *nomad.Watcher
	queue   workQueue
	expect  *expectations
	clock   func() time.Time
	metrics *metrics
	views   *views
	// effector carries out actions; the controller itself, but for tests.
	effector effector
	// requestResync asks the watcher for a full re-list (a fake in tests).
	requestResync func()
	backoff       *crashBackoff
	// provisioner makes and removes the per-ordinal volumes.
	provisioner plugin.VolumeProvisioner
	// hooks runs lifecycle hooks; nil runs none.
	hooks HookRunner
	// postReady remembers, per allocation, what the post_ready hooks said.
	postReady postReadyGate
	// checks is the Consul health of the sets' services; nil without
	// Consul (-dev), when task states alone decide readiness.
	checks checkSource

	// lastSpec remembers each set's last valid spec, so that a parent purged
	// from Nomad is still torn down by its own retention policy.
	mu       sync.Mutex
	lastSpec map[backend.SetKey]reconciler.Spec
	// revData caches each set's revision data by the parent's
	// JobModifyIndex: computing it is half of a steady-state reconcile, and
	// it changes only when the parent job does.
	revData map[backend.SetKey]cachedRevisionData
	// unblocked remembers, per child job, the node change (FineSince) for
	// which Nomad was last asked to place it again.
	unblocked childIndexes
	// rendered caches, per set, the digest of each revision rendered for
	// each ordinal that has a pod: what hand edits are found against.
	rendered map[backend.SetKey]*renderedDigests
	// edits remembers, per child job, the JobModifyIndex of the hand edit
	// last reported, so that it is reported once.
	edits childIndexes
	// termStart is when this leadership term began: a child missing since
	// before it may have been purged unseen (unwatchedGone). Zero in tests
	// that do not model a term.
	termStart time.Time
	// vanished holds, per set seen in this term, the ordinals found missing
	// at its first pass and when each may be created again
	// (unwatchedGone).
	vanished map[backend.SetKey]map[int]time.Time
	// own remembers, per child job, the JobModifyIndex of the daemon's last
	// registration of it: the child Nomad holds at that index is what Nomad
	// made of the daemon's own rendering, never a hand edit.
	own childIndexes
}

// childIndexes holds one Nomad index per child job, grouped by set so that
// forgetting a set drops its children's and no other set's (a prefix of
// child IDs would also match set "web-db" when forgetting "web"). The
// controller's mu guards it.
type childIndexes map[backend.SetKey]map[string]uint64

func (m childIndexes) get(key backend.SetKey, child string) (uint64, bool) {
	idx, ok := m[key][child]
	return idx, ok
}

func (m *childIndexes) set(key backend.SetKey, child string, idx uint64) {
	if *m == nil {
		*m = childIndexes{}
	}
	if (*m)[key] == nil {
		(*m)[key] = map[string]uint64{}
	}
	(*m)[key][child] = idx
}

type cachedRevisionData struct {
	jobModifyIndex uint64
	data           []byte
}

// revisionData returns jobs.RevisionData of the parent, computed once per
// parent version.
func (c *controller) revisionData(key backend.SetKey, parent *api.Job) ([]byte, error) {
	var idx uint64
	if parent.JobModifyIndex != nil {
		idx = *parent.JobModifyIndex
	}
	c.mu.Lock()
	hit, ok := c.revData[key]
	c.mu.Unlock()
	if ok && idx != 0 && hit.jobModifyIndex == idx {
		return hit.data, nil
	}
	data, err := jobs.RevisionData(parent)
	if err != nil {
		return nil, err
	}
	c.mu.Lock()
	if c.revData == nil {
		c.revData = map[backend.SetKey]cachedRevisionData{}
	}
	c.revData[key] = cachedRevisionData{jobModifyIndex: idx, data: data}
	c.mu.Unlock()
	return data, nil
}

// pass is one reconcile of one set: what was observed, and the input the
// decision is made from. The effector reads it to carry out the actions.
type pass struct {
	key  backend.SetKey
	spec reconciler.Spec
	obs  nomad.Observation
	revs []reconciler.Revision
	// prev is the stored status (zero when none is stored: found false).
	prev  reconciler.Status
	found bool
	now   time.Time
	in    reconciler.Input
	// holdReady is how soon to look again for a pod whose post_ready hooks
	// hold its readiness; zero when none does.
	holdReady time.Duration
	// placed are the nodes of the volumes this pass created, by ordinal:
	// spreading must see them before the watcher does (a Parallel set
	// creates every volume in one pass).
	placed map[int][]string
	// unwatched are the ordinals whose child vanished before this term
	// began and must wait out its kill grace before being created again,
	// with how long each still waits (unwatchedGone).
	unwatched map[int]time.Duration
}

// effector carries out the reconciler's actions, as Kubernetes'
// StatefulPodControl carries out the StatefulSet controller's: the
// controller decides, the effector acts. A step that must wait (a crash-loop
// backoff, a hook that holds, a plugin that is down) returns a *deferError;
// the controller then holds what depends on it and carries on with the rest.
// It reports whether the set's stored state was deleted (the end of a
// cascading delete).
type effector interface {
	execute(ctx context.Context, p *pass, act reconciler.Action) (stateDeleted bool, err error)
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
	// held are the steps that must wait, with how long; heldWait is the
	// soonest of their waits.
	held     []held
	heldWait time.Duration
}

// held is one action that must wait.
type held struct {
	act reconciler.Action
	why *deferError
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
	res, err := c.act(ctx, p, out)
	if err != nil {
		return err
	}
	c.unblock(ctx, p)
	c.restoreCounts(ctx, p)
	return c.record(ctx, p, out, res)
}

// unblock asks Nomad to evaluate again a child that has no allocation while
// every node holding its volumes is fine and one of them became fine after
// the child was registered: Nomad blocked its placement while that node was
// ineligible (a drain) and does not unblock it when the node comes back.
// It reacts to node events (FineSince), not to a timer, and asks once per
// such change.
func (c *controller) unblock(ctx context.Context, p *pass) {
	nodesByOrd := map[int][]string{}
	for _, v := range p.obs.Volumes {
		nodesByOrd[v.Volume.Ordinal] = append(nodesByOrd[v.Volume.Ordinal], v.NodeID)
	}
	for _, d := range p.obs.Pods {
		if d.AllocID != "" || d.Pod.Terminating || len(nodesByOrd[d.Pod.Ordinal]) == 0 {
			continue
		}
		var since uint64
		fine := true
		for _, id := range nodesByOrd[d.Pod.Ordinal] {
			n, ok := c.cache.NodeState(id)
			if !ok || !n.Fine() {
				fine = false
				break
			}
			since = max(since, n.FineSince)
		}
		if !fine || since <= d.JobModifyIndex {
			continue
		}
		c.mu.Lock()
		asked, _ := c.unblocked.get(p.key, d.JobID)
		c.mu.Unlock()
		done := asked >= since
		if done {
			continue
		}
		ectx, cancel := effectContext(ctx)
		err := c.api.EvaluateJob(ectx, p.key.Namespace, d.JobID)
		cancel()
		if err != nil {
			c.log.Warn("could not ask Nomad to place a blocked child again", "set", p.key.String(), "child", d.JobID, "error", err)
			continue
		}
		c.mu.Lock()
		c.unblocked.set(p.key, d.JobID, since)
		c.mu.Unlock()
		c.views.event(p.key, p.now, "Unblock", fmt.Sprintf("%s: its volume's node is eligible again; asked Nomad to place it", d.JobID))
		c.log.Info("asked Nomad to place a blocked child again", "set", p.key.String(), "child", d.JobID)
	}
}

// observe builds the pass for a set from the cache and the store. It
// returns nil (and handles the set) when there is nothing to decide: the
// job is invalid, nothing of the set is left, or our own writes are not
// observed yet.
func (c *controller) observe(ctx context.Context, key backend.SetKey) (*pass, error) {
	now := c.clock()
	// One look at the cache serves the whole pass: observing a set renders
	// every child, most of a steady pass's cost. Its volumes are found by
	// the claims of the set's last spec; only when the parsed spec names
	// others (a set first seen, or its claims changed) are they looked up
	// again, keeping the parent and pods the spec was parsed from.
	c.mu.Lock()
	claims := c.lastSpec[key].VolumeClaims
	c.mu.Unlock()
	obs := c.cache.Observe(key, claims, now)
	spec, parseErr := c.specFor(key, obs)
	if parseErr != nil {
		return nil, c.recordInvalid(ctx, key, obs.Parent, parseErr, now)
	}
	if spec == nil {
		// Nothing of the set is left in Nomad and we never knew its spec.
		return nil, c.forgetOrphanState(ctx, key)
	}
	if !slices.Equal(spec.VolumeClaims, claims) {
		obs.Volumes = c.cache.Observe(key, spec.VolumeClaims, now).Volumes
	}
	if waiting, expired := c.expect.pending(key, obs, now); len(waiting) > 0 || expired {
		if expired {
			c.log.Warn("a write was not observed in time; re-listing Nomad", "set", key.String(), "ttl", c.expect.ttl)
			c.requestResync()
			return nil, nil
		}
		c.log.Trace("waiting for our own writes", "set", key.String(), "pending", waiting)
		return nil, nil
	}

	p := &pass{key: key, spec: *spec, obs: obs, now: now}
	var err error
	if p.revs, err = c.store.ListRevisions(ctx, key); err != nil {
		return nil, c.recordStoreError(key, spec, fmt.Errorf("reading revisions of %s: %w", key, err))
	}
	if p.prev, p.found, err = c.store.GetStatus(ctx, key); err != nil {
		return nil, c.recordStoreError(key, spec, fmt.Errorf("reading status of %s: %w", key, err))
	}
	p.in = reconciler.Input{Spec: *spec, Revisions: p.revs, Previous: p.prev, Now: now}
	if obs.Parent != nil && obs.Parent.Version != nil {
		p.in.JobVersion = *obs.Parent.Version
	}
	if !spec.Deleted {
		data, err := c.revisionData(key, obs.Parent)
		if err != nil {
			return nil, c.recordInvalid(ctx, key, obs.Parent, err, now)
		}
		p.in.TemplateData = data
	}
	revByName := make(map[string]reconciler.Revision, len(p.revs))
	for _, r := range p.revs {
		revByName[r.Name] = r
	}
	// Consul checks first: a pod they make not Ready is not one whose
	// post_ready hooks should be asked.
	c.gateChecks(key, obs, spec.Deleted)
	p.holdReady = c.gatePostReady(ctx, key, obs, now)
	rendered := c.renderedDigests(key, *spec)
	defer c.keepRendered(rendered, len(obs.Pods))
	for _, d := range obs.Pods {
		pod := d.Pod
		if r, ok := revByName[pod.Revision]; ok && !pod.Terminating {
			if !jobs.ChildMatches(*spec, r, pod.Ordinal, d.Job) {
				pod.Drifted = true
			} else if changed := rendered.changed(*spec, r, d, c.isOwn(key, d)); len(changed) > 0 {
				pod.Drifted = true
				c.noteEdit(p, d, r, changed)
			}
		}
		if d.NodeID != "" && !pod.Terminating {
			// A pod on a draining node is the daemon's to move, within the
			// budget: its child's migrate block leaves it to us.
			if n, ok := c.cache.NodeState(d.NodeID); ok && n.Draining {
				pod.NodeDraining = true
			}
		}
		p.in.Pods = append(p.in.Pods, pod)
	}
	for _, v := range obs.Volumes {
		p.in.Volumes = append(p.in.Volumes, v.Volume)
	}
	p.unwatched = c.unwatchedGone(p)
	return p, nil
}

// act carries out the decision's actions in order. A step that must wait
// holds only what depends on it: later actions on the same ordinal, and the
// end of a cascading delete. Every other action goes ahead, so that one
// ordinal in backoff, or held by a hook, does not hold up the others
// (plugin/manager promises hooks that say wait let other work carry on). An
// error stops the pass; the next one starts from fresh observations.
func (c *controller) act(ctx context.Context, p *pass, out reconciler.Output) (acted, error) {
	var res acted
	heldOrdinals := map[int]bool{}
	for _, a := range out.Actions {
		if ctx.Err() != nil {
			// Leadership or the agent is going away: stop between actions.
			return res, ctx.Err()
		}
		if a.Type == reconciler.ActionDeleteSetState && len(p.revs) == 0 && !p.found && len(p.obs.Stopped) == 0 {
			// The cascade finished on an earlier pass: nothing to do, and
			// nothing to look at again until the set changes. Counting
			// this as an action queued the set again at once, forever.
			res.stateDeleted = true
			continue
		}
		if dependsOnHeld(a, heldOrdinals, len(res.held)) {
			continue
		}
		var deleted bool
		var err error
		if left, ok := p.unwatched[a.Ordinal]; ok && a.Type == reconciler.ActionCreatePod {
			err = &deferError{wait: left, kind: "KillGrace", reason: "its child vanished from Nomad while no leader watched " +
				"(a purge?), and its old task may still be stopping on its node"}
		} else {
			deleted, err = c.effector.execute(ctx, p, a)
		}
		var why *deferError
		if errors.As(err, &why) {
			c.hold(p, a, why)
			res.held = append(res.held, held{act: a, why: why})
			res.heldWait = soonest(res.heldWait, why.wait)
			heldOrdinals[a.Ordinal] = true
			continue
		}
		if err != nil {
			c.views.event(p.key, p.now, "Error", fmt.Sprintf("%s ordinal %d: %v", a.Type, a.Ordinal, err))
			c.views.update(p.key, p.spec, out.Status, p.obs, p.revs, p.now)
			return res, fmt.Errorf("%s for ordinal %d of %s: %w", a.Type, a.Ordinal, p.key, err)
		}
		res.done++
		res.stateDeleted = res.stateDeleted || deleted
		c.views.event(p.key, p.now, string(a.Type), actionMessage(p.key, a))
		c.log.Info("acted", "set", p.key.String(), "action", a.Type, "ordinal", a.Ordinal, "revision", a.Revision.Name, "reason", a.Reason)
	}
	return res, nil
}

// dependsOnHeld reports whether action a must wait because an earlier one
// was held: it acts on a held ordinal, or it ends a cascading delete, which
// must come after everything else.
func dependsOnHeld(a reconciler.Action, heldOrdinals map[int]bool, nHeld int) bool {
	if nHeld == 0 {
		return false
	}
	switch a.Type {
	case reconciler.ActionDeleteSetState:
		return true
	case reconciler.ActionCreatePod, reconciler.ActionDeletePod, reconciler.ActionCreateVolume, reconciler.ActionDeleteVolume:
		return heldOrdinals[a.Ordinal]
	}
	return false
}

// hold reports a step that must wait, in the log and the set's events.
func (c *controller) hold(p *pass, a reconciler.Action, why *deferError) {
	msg := fmt.Sprintf("%s: %v", reconciler.PodName(p.key.Name, a.Ordinal), why)
	c.log.Info("a step is held; will look again", "set", p.key.String(), "action", a.Type, "ordinal", a.Ordinal,
		"reason", why.kind, "detail", why.reason, "retry_in", why.wait)
	c.views.event(p.key, p.now, why.kind, msg)
}

// record stores the status, updates the view and says when to look again.
// While a step is held the status is not stored: it assumes every action was
// carried out, and the next pass recomputes it from what really happened.
func (c *controller) record(ctx context.Context, p *pass, out reconciler.Output, res acted) error {
	key := p.key
	cascadeDone := p.spec.Deleted && len(p.obs.Pods) == 0 && len(p.obs.Volumes) == 0
	if res.stateDeleted || cascadeDone {
		c.forget(key)
		return nil
	}
	if len(res.held) == 0 && !reflect.DeepEqual(p.prev, out.Status) {
		if err := c.store.PutStatus(ctx, key, out.Status); err != nil {
			return fmt.Errorf("writing status of %s: %w", key, err)
		}
	}
	// After acting, the view shows what the actions changed; without
	// actions, obs (already gated by the checks and the post_ready hooks)
	// is current.
	finalRevs, finalObs := p.revs, p.obs
	if res.done > 0 {
		if r, err := c.store.ListRevisions(ctx, key); err == nil {
			finalRevs = r
		}
		finalObs = c.cache.Observe(key, p.spec.VolumeClaims, p.now)
		c.gateChecks(key, finalObs, p.spec.Deleted)
		finalObs = c.postReadyView(key, finalObs)
	}
	shown := out.Status
	switch {
	case len(res.held) > 0:
		h := res.held[0]
		shown = heldStatus(shown, h.why.kind, fmt.Sprintf("%s: %v", reconciler.PodName(key.Name, h.act.Ordinal), h.why), p.now)
	case p.holdReady > 0:
		shown = heldStatus(shown, "HookWaiting", "a post_ready hook holds a pod's readiness; see the events", p.now)
	}
	c.views.update(key, p.spec, shown, finalObs, finalRevs, p.now)
	switch {
	case res.done > 0:
		// Look again once our writes are visible: some (volume writes) make
		// no event, and the expectations gate keeps an early look harmless.
		c.queue.Add(key.String())
	default:
		if wait := soonest(soonest(soonest(out.Requeue, p.holdReady), res.heldWait), p.obs.RecheckAfter); wait > 0 {
			c.queue.AddAfter(key.String(), wait)
		}
	}
	return nil
}

// forget drops everything the controller keeps of a set that is gone: its
// last spec, cached revision data, expectations, crash-loop records,
// post_ready answers, Consul check watches and its view. A set of the same name created later
// starts afresh.
func (c *controller) forget(key backend.SetKey) {
	c.mu.Lock()
	delete(c.lastSpec, key)
	delete(c.revData, key)
	delete(c.rendered, key)
	delete(c.unblocked, key)
	delete(c.edits, key)
	delete(c.own, key)
	delete(c.vanished, key)
	c.mu.Unlock()
	c.expect.forget(key)
	c.backoff.forget(key)
	c.postReady.forget(key)
	c.views.remove(key)
	if c.checks != nil {
		c.checks.Watch(key, nil)
	}
}

// specFor parses the set's parent, or falls back to the last known spec when
// the parent was purged. It returns nil, nil when the set is unknown.
func (c *controller) specFor(key backend.SetKey, obs nomad.Observation) (*reconciler.Spec, error) {
	if obs.Parent != nil && !obs.ParentPurged && jobs.IsManaged(obs.Parent) {
		spec, err := jobs.Parse(obs.Parent)
		if err != nil {
			return nil, err
		}
		c.mu.Lock()
		c.lastSpec[key] = spec
		c.mu.Unlock()
		return &spec, nil
	}
	c.mu.Lock()
	last, ok := c.lastSpec[key]
	c.mu.Unlock()
	if !ok && obs.Parent != nil && jobs.IsManaged(obs.Parent) {
		if s, err := jobs.Parse(obs.Parent); err == nil {
			last, ok = s, true
		}
	}
	if !ok {
		if len(obs.Pods) == 0 && len(obs.Stopped) == 0 {
			return nil, nil
		}
		// Children without a known parent spec: tear them down, keeping
		// volumes (Retain is the only policy that can never lose data).
		last = reconciler.Spec{
			Namespace: key.Namespace, Name: key.Name,
			PodManagementPolicy: reconciler.OrderedReady, UpdateStrategy: reconciler.RollingUpdate,
			WhenDeleted: reconciler.Retain, WhenScaled: reconciler.Retain,
		}
	}
	last.Deleted = true
	return &last, nil
}

// forgetOrphanState removes stored state of a set that Nomad no longer has
// at all. It reads first so that steady state makes no writes.
func (c *controller) forgetOrphanState(ctx context.Context, key backend.SetKey) error {
	c.forget(key)
	revs, err := c.store.ListRevisions(ctx, key)
	if err != nil {
		return fmt.Errorf("reading revisions of %s: %w", key, err)
	}
	_, found, err := c.store.GetStatus(ctx, key)
	if err != nil {
		return fmt.Errorf("reading status of %s: %w", key, err)
	}
	if len(revs) == 0 && !found {
		return nil
	}
	c.log.Info("removing the state of a set whose job is gone", "set", key.String())
	return c.store.DeleteSet(ctx, key)
}

// recordInvalid leaves the set untouched and reports why, as a condition
// that names the key, the value and the rule.
func (c *controller) recordInvalid(ctx context.Context, key backend.SetKey, parent *api.Job, err error, now time.Time) error {
	msg := err.Error()
	c.log.Error("the set's job is invalid; leaving the set untouched", "set", key.String(), "error", msg)
	prev, _, gerr := c.store.GetStatus(ctx, key)
	if gerr != nil {
		c.views.setError(key, msg)
		return nil
	}
	next := prev
	next.Conditions = setCondition(prev.Conditions, reconciler.Condition{
		Type: reconciler.ConditionInvalidSpec, Status: true, Reason: "InvalidAnnotations", Message: msg,
	}, now)
	if !reflect.DeepEqual(prev, next) {
		if perr := c.store.PutStatus(ctx, key, next); perr != nil {
			c.log.Warn("could not record the invalid-spec condition", "set", key.String(), "error", perr)
		}
	}
	c.views.setError(key, msg)
	c.views.setStatus(key, next)
	// An invalid job is not retried: the next change to the job requeues it.
	return nil
}

// recordStoreError reports an unreadable store value on that set only.
func (c *controller) recordStoreError(key backend.SetKey, spec *reconciler.Spec, err error) error {
	var corrupt *backend.CorruptValueError
	if errors.As(err, &corrupt) {
		c.log.Error("the set's stored state is corrupt; leaving the set untouched", "set", key.String(), "error", err)
		c.views.setError(key, err.Error())
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
func heldStatus(st reconciler.Status, reason, msg string, now time.Time) reconciler.Status {
	st.Conditions = setCondition(st.Conditions, reconciler.Condition{Type: ConditionHeld, Status: true, Reason: reason, Message: msg}, now)
	return st
}

// setCondition replaces or adds cond, keeping the transition time when its
// status did not change.
func setCondition(conds []reconciler.Condition, cond reconciler.Condition, now time.Time) []reconciler.Condition {
	out := make([]reconciler.Condition, 0, len(conds)+1)
	replaced := false
	for _, c := range conds {
		if c.Type == cond.Type {
			cond.LastTransitionTime = c.LastTransitionTime
			if c.Status != cond.Status || cond.LastTransitionTime.IsZero() {
				cond.LastTransitionTime = now
			}
			out = append(out, cond)
			replaced = true
			continue
		}
		out = append(out, c)
	}
	if !replaced {
		cond.LastTransitionTime = now
		out = append(out, cond)
	}
	return out
}

func actionMessage(key backend.SetKey, a reconciler.Action) string {
	switch a.Type {
	case reconciler.ActionRecordOrdinals:
		return fmt.Sprintf("%s: %s", a.Type, a.Reason)
	case reconciler.ActionCreatePod, reconciler.ActionDeletePod:
		if a.Revision.Name == "" {
			return fmt.Sprintf("%s %s-%d: %s", a.Type, key.Name, a.Ordinal, a.Reason)
		}
		return fmt.Sprintf("%s %s-%d (revision %s): %s", a.Type, key.Name, a.Ordinal, a.Revision.Name, a.Reason)
	case reconciler.ActionCreateVolume, reconciler.ActionDeleteVolume:
		return fmt.Sprintf("%s %s: %s", a.Type, a.Volume.Name, a.Reason)
	default:
		return fmt.Sprintf("%s %s: %s", a.Type, a.Revision.Name, a.Reason)
	}
}
