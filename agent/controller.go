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
const effectTimeout = 5 * time.Second

// StopTimeout is the longest the agent takes to stop acting once its
// leadership context is cancelled: the one effect in flight, plus slack. The
// leader election's lock-delay arithmetic is built on it.
const StopTimeout = effectTimeout + time.Second

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
	queue   *queue
	expect  *expectations
	clock   func() time.Time
	metrics *metrics
	views   *views
	backoff *crashBackoff
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

// sync reconciles one set once.
func (c *controller) sync(ctx context.Context, key backend.SetKey) error {
	start := time.Now()
	defer func() { c.metrics.reconcileDuration.Observe(time.Since(start).Seconds()) }()
	now := c.clock()
	log := c.log.With("set", key.String())

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
		return c.recordInvalid(ctx, key, obs.Parent, parseErr, now)
	}
	if spec == nil {
		// Nothing of the set is left in Nomad and we never knew its spec.
		return c.forgetOrphanState(ctx, key)
	}
	if !slices.Equal(spec.VolumeClaims, claims) {
		obs.Volumes = c.cache.Observe(key, spec.VolumeClaims, now).Volumes
	}
	if waiting, expired := c.expect.pending(key, obs, now); len(waiting) > 0 || expired {
		if expired {
			log.Warn("a write was not observed in time; re-listing Nomad", "ttl", c.expect.ttl)
			c.watcher.RequestResync()
			return nil
		}
		log.Trace("waiting for our own writes", "pending", waiting)
		return nil
	}

	revs, err := c.store.ListRevisions(ctx, key)
	if err != nil {
		return c.recordStoreError(key, spec, fmt.Errorf("reading revisions of %s: %w", key, err))
	}
	prev, found, err := c.store.GetStatus(ctx, key)
	if err != nil {
		return c.recordStoreError(key, spec, fmt.Errorf("reading status of %s: %w", key, err))
	}

	in := reconciler.Input{Spec: *spec, Revisions: revs, Previous: prev, Now: now}
	if obs.Parent != nil && obs.Parent.Version != nil {
		in.JobVersion = *obs.Parent.Version
	}
	if !spec.Deleted {
		data, err := c.revisionData(key, obs.Parent)
		if err != nil {
			return c.recordInvalid(ctx, key, obs.Parent, err, now)
		}
		in.TemplateData = data
	}
	revByName := make(map[string]reconciler.Revision, len(revs))
	for _, r := range revs {
		revByName[r.Name] = r
	}
	// Consul checks first: a pod they make not Ready is not one whose
	// post_ready hooks should be asked.
	c.gateChecks(key, obs, spec.Deleted)
	holdReady := c.gatePostReady(ctx, key, obs, now)
	for _, d := range obs.Pods {
		p := d.Pod
		if r, ok := revByName[p.Revision]; ok && !p.Terminating && !jobs.ChildMatches(*spec, r, p.Ordinal, d.Job) {
			p.Drifted = true
		}
		in.Pods = append(in.Pods, p)
	}
	for _, v := range obs.Volumes {
		in.Volumes = append(in.Volumes, v.Volume)
	}

	out := reconciler.Reconcile(in)
	out.Requeue = soonest(out.Requeue, holdReady)
	stateDeleted := false
	for _, act := range out.Actions {
		if ctx.Err() != nil {
			// Leadership or the agent is going away: stop between actions.
			return ctx.Err()
		}
		if act.Type == reconciler.ActionDeleteSetState && len(revs) == 0 && !found && len(obs.Stopped) == 0 {
			// The cascade finished on an earlier pass: nothing to do, and
			// nothing to look at again until the set changes. Counting
			// this as an action queued the set again at once, forever.
			stateDeleted = true
			continue
		}
		deleted, err := c.execute(ctx, key, *spec, obs, act, revs, prev, found, now)
		var bo *deferError
		if errors.As(err, &bo) {
			msg := fmt.Sprintf("%s-%d: %v", key.Name, act.Ordinal, err)
			log.Info("a step is held; will look again", "action", act.Type, "ordinal", act.Ordinal,
				"reason", bo.kind, "detail", bo.reason, "retry_in", bo.wait)
			c.views.event(key, now, bo.kind, msg)
			c.views.update(key, *spec, heldStatus(out.Status, bo.kind, msg, now), obs, revs, now)
			c.queue.AddAfter(key.String(), bo.wait)
			return nil
		}
		if err != nil {
			c.views.event(key, now, "Error", fmt.Sprintf("%s ordinal %d: %v", act.Type, act.Ordinal, err))
			c.views.update(key, *spec, out.Status, obs, revs, now)
			return fmt.Errorf("%s for ordinal %d of %s: %w", act.Type, act.Ordinal, key, err)
		}
		stateDeleted = stateDeleted || deleted
		c.views.event(key, now, string(act.Type), actionMessage(key, act))
		log.Info("acted", "action", act.Type, "ordinal", act.Ordinal, "revision", act.Revision.Name, "reason", act.Reason)
	}

	cascadeDone := spec.Deleted && len(obs.Pods) == 0 && len(obs.Volumes) == 0
	if !stateDeleted && !cascadeDone && !reflect.DeepEqual(prev, out.Status) {
		if err := c.store.PutStatus(ctx, key, out.Status); err != nil {
			return fmt.Errorf("writing status of %s: %w", key, err)
		}
	}
	if stateDeleted || cascadeDone {
		c.mu.Lock()
		delete(c.lastSpec, key)
		delete(c.revData, key)
		c.mu.Unlock()
		c.views.remove(key)
		if c.checks != nil {
			c.checks.Watch(key, nil)
		}
	} else {
		// After acting, the view shows what the actions changed; without
		// actions, obs (already gated by the post_ready hooks) is current.
		finalRevs, finalObs := revs, obs
		if len(out.Actions) > 0 {
			if r, err := c.store.ListRevisions(ctx, key); err == nil {
				finalRevs = r
			}
			finalObs = c.cache.Observe(key, spec.VolumeClaims, now)
			c.gateChecks(key, finalObs, spec.Deleted)
			finalObs = c.postReadyView(key, finalObs)
		}
		shown := out.Status
		if holdReady > 0 {
			shown = heldStatus(shown, "HookWaiting", "a post_ready hook holds a pod's readiness; see the events", now)
		}
		c.views.update(key, *spec, shown, finalObs, finalRevs, now)
	}
	switch {
	case len(out.Actions) > 0 && !stateDeleted:
		// Look again once our writes are visible: some (volume writes) make
		// no event, and the expectations gate keeps an early look harmless.
		c.queue.Add(key.String())
	case out.Requeue > 0:
		c.queue.AddAfter(key.String(), out.Requeue)
	}
	return nil
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
	c.views.remove(key)
	if c.checks != nil {
		c.checks.Watch(key, nil)
	}
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
