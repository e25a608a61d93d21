package agent

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/nomad-statefulset/nomad-statefulset/backend"
	"github.com/nomad-statefulset/nomad-statefulset/backend/nomad"
	"github.com/nomad-statefulset/nomad-statefulset/jobs"
	"github.com/nomad-statefulset/nomad-statefulset/plugin"
	"github.com/nomad-statefulset/nomad-statefulset/reconciler"
)

// effectContext detaches an effect from cancellation so a shutdown never
// cuts a write in half, while still bounding it in time. The caller checks
// its own context between actions, so at most one effect outlives it.
func effectContext(ctx context.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.WithoutCancel(ctx), effectTimeout)
}

// execute carries out one action against Nomad, the store and the plugins
// (the controller is its own effector). It reports whether the set's stored
// state was deleted (the end of a cascading delete).
func (c *controller) execute(ctx context.Context, p *pass, act reconciler.Action) (bool, error) {
	key, spec, obs, revs, now := p.key, p.spec, p.obs, p.revs, p.now
	ectx, cancel := effectContext(ctx)
	defer cancel()
	switch act.Type {
	case reconciler.ActionRecordOrdinals:
		// The condemnations are stored before any pod or volume is
		// touched; the rest of the status waits for the end of the pass.
		rec := p.prev
		rec.Ordinals = act.Ordinals
		return false, c.store.PutStatus(ectx, key, rec)
	case reconciler.ActionCreateRevision, reconciler.ActionUpdateRevision:
		return false, c.store.PutRevision(ectx, key, act.Revision)
	case reconciler.ActionDeleteRevision:
		return false, c.store.DeleteRevision(ectx, key, act.Revision.Name)
	case reconciler.ActionCreateVolume:
		return false, c.createVolume(ectx, p, act)
	case reconciler.ActionDeleteVolume:
		return false, c.deleteVolume(ectx, key, obs, act)
	case reconciler.ActionCreatePod:
		return false, c.createPod(ectx, key, spec, obs, act, now)
	case reconciler.ActionDeletePod:
		if err := c.runHooks(ctx, key, obs, act); err != nil {
			return false, err
		}
		// A drifted child (CauseRepair) is stopped like an outdated one; the
		// next pass creates it again from its revision. Re-registering in
		// place would let Nomad run the old and new allocation side by side.
		return false, c.deletePod(ectx, key, obs, act, now)
	case reconciler.ActionDeleteSetState:
		for _, s := range obs.Stopped {
			// Purge the stopped children so nothing of the set is left.
			if err := c.api.DeregisterJob(ectx, key.Namespace, s.JobID, true); err != nil && !errors.Is(err, nomad.ErrNotFound) {
				return false, err
			}
		}
		if len(revs) == 0 && !p.found {
			return true, nil
		}
		if err := c.store.DeleteSet(ectx, key); err != nil {
			return false, err
		}
		return true, nil
	}
	return false, fmt.Errorf("unknown action %q", act.Type)
}

func childID(key backend.SetKey, ordinal int) string {
	return reconciler.PodName(key.Name, ordinal)
}

func (c *controller) createPod(ctx context.Context, key backend.SetKey, spec reconciler.Spec, obs nomad.Observation, act reconciler.Action, now time.Time) error {
	child, err := jobs.RenderChild(spec, act.Revision, act.Ordinal)
	if err != nil {
		return fmt.Errorf("rendering child %s: %w", childID(key, act.Ordinal), err)
	}
	id := childID(key, act.Ordinal)
	// A stopped child keeps its job in Nomad; re-registering it must name
	// the index we saw, and a new one must not exist at all (index 0). Either
	// way a second agent or a stale decision cannot overwrite a live child.
	var index uint64
	for _, s := range obs.Stopped {
		if s.JobID == id {
			index = s.JobModifyIndex
		}
	}
	for _, p := range obs.Pods {
		if p.JobID == id {
			return fmt.Errorf("refusing to create %s: it still has a pod", id)
		}
	}
	if wait := c.backoff.remaining(key, act.Ordinal, now); wait > 0 {
		// The ordinal keeps failing: recreate it later, not in a hot loop.
		return &deferError{wait: wait, kind: "BackOff", reason: "the pod keeps failing"}
	}
	if len(spec.VolumeClaims) == 0 {
		used, err := c.usedSpreadValues(ctx, spec, obs, nil, act.Ordinal)
		if err != nil {
			return fmt.Errorf("reading the nodes of %s's other ordinals to spread: %w", key, err)
		}
		if spec.SpreadRequired && spec.Spread == "${node.unique.id}" && !c.cache.HasFineNodeOutside(used) {
			return spreadUnsatisfiable(act.Ordinal, spec, used, errors.New("every eligible node holds another ordinal"))
		}
		jobs.SpreadChild(child, spec.Spread, spec.SpreadRequired, used)
	}
	resp, err := c.api.RegisterJob(ctx, child, true, index)
	if err != nil {
		if nomad.IsConflict(err) {
			c.requestResync()
			return fmt.Errorf("%s changed since it was observed: %w", id, backend.ErrConflict)
		}
		return err
	}
	want := resp.JobModifyIndex
	c.registered(key, id, want)
	c.expect.expect(key, "child "+id+" registered", now, func(o nomad.Observation) bool {
		for _, p := range o.Pods {
			if p.JobID == id && p.JobModifyIndex >= want {
				return true
			}
		}
		return false
	})
	return nil
}

func (c *controller) deletePod(ctx context.Context, key backend.SetKey, obs nomad.Observation, act reconciler.Action, now time.Time) error {
	id := childID(key, act.Ordinal)
	for _, p := range obs.Pods {
		if p.Pod.Ordinal == act.Ordinal && p.JobID != id {
			// A child for this ordinal under another ID (adopted by meta).
			id = p.JobID
		}
	}
	// A pod that ended (Failed or Succeeded) with nothing left running is
	// purged, not stopped: Nomad counts a failed allocation that may not be
	// rescheduled toward the group, so a stopped child registered again
	// would never be placed. Purging is safe only because nothing of it
	// runs; a live pod is stopped and observed until its allocations end.
	purge := false
	for _, p := range obs.Pods {
		if p.JobID == id && p.AllTerminal && (p.Pod.Phase == reconciler.PhaseFailed || p.Pod.Phase == reconciler.PhaseSucceeded) {
			purge = true
			c.backoff.failed(key, act.Ordinal, now)
		}
	}
	err := c.api.DeregisterJob(ctx, key.Namespace, id, purge)
	if errors.Is(err, nomad.ErrNotFound) {
		// Already gone: the goal of the action is met (Kubernetes #136812).
		return nil
	}
	if err != nil {
		return err
	}
	c.expect.expect(key, "child "+id+" stopping", now, func(o nomad.Observation) bool {
		for _, p := range o.Pods {
			if p.JobID == id && !p.Pod.Terminating {
				return false
			}
		}
		return true
	})
	return nil
}

// hookEvent is the lifecycle hook a deletion runs, by why it happens. An
// update and a drift repair both take a member down to recreate it, so both
// run pre_update; a scale-down, the set's deletion, a drain and a pod replace
// take it away (for good, until its node is back, or onto a fresh volume),
// so they run pre_delete. A pod that
// already ended, or a duplicate, runs none.
func hookEvent(act reconciler.Action) (plugin.Event, bool) {
	if act.Type != reconciler.ActionDeletePod {
		return "", false
	}
	switch act.Cause {
	case reconciler.CauseScaleDown, reconciler.CauseSetDeleted, reconciler.CauseDrain, reconciler.CauseReplace:
		return plugin.EventPreDelete, true
	case reconciler.CauseUpdate, reconciler.CauseRepair:
		return plugin.EventPreUpdate, true
	}
	return "", false
}

// runHooks runs the lifecycle hooks for a deletion and defers it while one
// holds the step. It runs on the worker's context, not effectContext: a
// hook's own timeout bounds it and may be longer than an effect's.
func (c *controller) runHooks(ctx context.Context, key backend.SetKey, obs nomad.Observation, act reconciler.Action) error {
	event, ok := hookEvent(act)
	if !ok || c.hooks == nil {
		return nil
	}
	pod := plugin.Pod{Namespace: key.Namespace, Set: key.Name, Ordinal: act.Ordinal, Name: childID(key, act.Ordinal), Revision: act.Pod.Revision}
	for _, p := range obs.Pods {
		if p.Pod.Ordinal == act.Ordinal {
			pod.Name, pod.AllocID, pod.NodeID = p.JobID, p.AllocID, p.NodeID
		}
	}
	res := c.hooks.RunHooks(ctx, event, pod)
	if res.Proceed {
		return nil
	}
	wait := res.RetryAfter
	if wait <= 0 {
		wait = 10 * time.Second
	}
	return &deferError{wait: wait, kind: "HookWaiting", reason: fmt.Sprintf("%s hook %q holds %s: %s", event, res.Hook, pod.Name, res.Reason)}
}

// findOrdinalRecord returns the record of ord in recs (sorted by ordinal).
func findOrdinalRecord(recs []reconciler.OrdinalRecord, ord int) (reconciler.OrdinalRecord, bool) {
	i, ok := slices.BinarySearchFunc(recs, ord, func(r reconciler.OrdinalRecord, o int) int { return r.Ordinal - o })
	if !ok {
		return reconciler.OrdinalRecord{}, false
	}
	return recs[i], true
}

// ordinalNode is the node of an existing volume of the ordinal (observed, or
// created in this pass), or "".
func ordinalNode(p *pass, ord int) string {
	for _, v := range p.obs.Volumes {
		if v.Volume.Ordinal == ord && v.NodeID != "" {
			return v.NodeID
		}
	}
	for _, id := range p.placed[ord] {
		if id != "" {
			return id
		}
	}
	return ""
}

// volumeRequest describes a claim's volume for a provisioner plugin.
func volumeRequest(key backend.SetKey, obs nomad.Observation, act reconciler.Action) *plugin.VolumeRequest {
	req := &plugin.VolumeRequest{Namespace: key.Namespace, Set: key.Name, Claim: act.Volume.Claim, Ordinal: act.Volume.Ordinal, Name: act.Volume.Name}
	if p := obs.Parent; p != nil {
		if p.NodePool != nil {
			req.NodePool = *p.NodePool
		}
		for _, c := range p.Constraints {
			req.Constraints = append(req.Constraints, plugin.Constraint{LTarget: c.LTarget, RTarget: c.RTarget, Operand: c.Operand})
		}
		req.AccessMode, req.AttachmentMode = jobs.ClaimModes(p, act.Volume.Claim)
	}
	return req
}

// pluginDown turns a plugin outage into a deferral: the step waits and the
// set says why, rather than failing and retrying hot.
func pluginDown(err error) error {
	if errors.Is(err, plugin.ErrPluginUnavailable) {
		return &deferError{wait: 15 * time.Second, kind: "PluginUnavailable", reason: err.Error()}
	}
	return err
}

func (c *controller) createVolume(ctx context.Context, p *pass, act reconciler.Action) error {
	key, spec := p.key, p.spec
	req := volumeRequest(key, p.obs, act)
	used, err := c.usedSpreadValues(ctx, spec, p.obs, p.placed, act.Ordinal)
	if err != nil {
		return fmt.Errorf("reading the nodes of %s's other ordinals to spread: %w", key, err)
	}
	plain := slices.Clone(req.Constraints)
	if node := ordinalNode(p, act.Ordinal); node != "" {
		// The ordinal already has a volume: its pod mounts all of them on
		// one node, so a new claim's volume goes to that node.
		used = nil
		plain = append(plain, plugin.Constraint{LTarget: "${node.unique.id}", RTarget: node, Operand: "="})
		req.Constraints = plain
	}
	req.Constraints = append(req.Constraints, spreadConstraints(spec.Spread, used)...)
	vol, err := c.provisioner.CreateVolume(ctx, req)
	if err != nil && len(used) > 0 && !errors.Is(err, plugin.ErrPluginUnavailable) {
		if spec.SpreadRequired {
			return spreadUnsatisfiable(act.Ordinal, spec, used, err)
		}
		// Soft spread: no node with a value of its own can take it; it goes
		// where it can, next to another ordinal.
		c.log.Info("no node outside the set's other spread domains takes the volume; placing it where it fits",
			"set", key.String(), "volume", act.Volume.Name, "spread", spec.Spread, "used", used, "error", err)
		req.Constraints = plain
		vol, err = c.provisioner.CreateVolume(ctx, req)
	}
	if err != nil {
		return pluginDown(err)
	}
	if p.placed == nil {
		p.placed = map[int][]string{}
	}
	p.placed[act.Ordinal] = append(p.placed[act.Ordinal], vol.NodeID)
	if rec, ok := findOrdinalRecord(p.prev.Ordinals, act.Ordinal); ok && rec.Revision != "" {
		// The ordinal has run before, so this volume replaces one that is
		// gone (deleted by hand, or by pod replace -new-volume) or serves a
		// new claim: either way its pod starts on empty data, which the
		// user must be told.
		c.views.event(key, p.now, "NewVolume", fmt.Sprintf("%s: created empty for %s, which has run before: its data in this volume starts new",
			act.Volume.Name, reconciler.PodName(key.Name, act.Ordinal)))
	}
	// The watcher sees the volume on the HostVolume topic; until it does,
	// the set waits rather than act on a cache without it.
	name, now := vol.Name, c.clock()
	c.expect.expect(key, "volume "+name+" created", now, func(o nomad.Observation) bool {
		for _, v := range o.Volumes {
			if v.Volume.Name == name {
				return true
			}
		}
		return false
	})
	return nil
}

func (c *controller) deleteVolume(ctx context.Context, key backend.SetKey, obs nomad.Observation, act reconciler.Action) error {
	if err := c.provisioner.DeleteVolume(ctx, volumeRequest(key, obs, act)); err != nil {
		return pluginDown(err)
	}
	name, now := act.Volume.Name, c.clock()
	c.expect.expect(key, "volume "+name+" deleted", now, func(o nomad.Observation) bool {
		for _, v := range o.Volumes {
			if v.Volume.Name == name {
				return false
			}
		}
		return true
	})
	return nil
}
