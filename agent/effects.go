package agent

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/nomad-statefulset/nomad-statefulset/backend"
	"github.com/nomad-statefulset/nomad-statefulset/internal/bytesize"
	"github.com/nomad-statefulset/nomad-statefulset/plugin"
	"github.com/nomad-statefulset/nomad-statefulset/reconciler"
)

// effectContext detaches an effect from cancellation so a shutdown never
// cuts a write in half, while still bounding it in time. The caller checks
// its own context between actions, so at most one effect outlives it.
func effectContext(ctx context.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.WithoutCancel(ctx), effectTimeout)
}

// podControl carries out the reconciler's actions against Nomad, the store
// and the plugins, as Kubernetes' StatefulPodControl carries out the
// StatefulSet controller's: it decides nothing and remembers nothing. It
// holds only its own dependencies, reads the pass it is given and writes
// nothing to it: what it met is its outcome, which the reconciler folds
// into the set's memory and the controller turns into the writes to wait
// for. So several of its calls can run at once (a Parallel set's creates).
type podControl struct {
	log   hclog.Logger
	nomad backend.Cluster
	store backend.Store
	// nodes is the term's cache, asked whether a node is free for a
	// required spread.
	nodes fineNodes
	// provisioner makes and removes the per-ordinal volumes.
	provisioner plugin.VolumeProvisioner
	// hooks runs lifecycle hooks; nil runs none.
	hooks HookRunner
	clock func() time.Time
	// expectTTL is how long a write may stay unobserved before the cache
	// is distrusted and re-listed.
	expectTTL time.Duration
	// requestResync asks the watcher for a full re-list.
	requestResync func()
	// event adds an event to the set's view.
	event func(key backend.SetKey, now time.Time, typ, msg string)
	// exec runs the sets' own commands in their pods; nil when this agent
	// cannot (then such a step is held, saying so).
	exec commandRunner
}

// execute carries out one action and returns what it did.
func (e *podControl) execute(ctx context.Context, p *pass, act reconciler.Action) outcome {
	ectx, cancel := effectContext(ctx)
	defer cancel()
	switch act.Type {
	case reconciler.ActionRecordOrdinals:
		// The condemnations are stored before any pod or volume is
		// touched; the rest of the status waits for the end of the pass.
		rec := p.prev
		rec.Ordinals = act.Ordinals
		return done(e.store.PutStatus(ectx, p.key, rec))
	case reconciler.ActionRecordStatus:
		return done(e.recordStatus(ectx, p, act))
	case reconciler.ActionCreateRevision, reconciler.ActionUpdateRevision:
		return done(e.store.PutRevision(ectx, p.key, act.Revision))
	case reconciler.ActionDeleteRevision:
		return done(e.store.DeleteRevision(ectx, p.key, act.Revision.Name))
	case reconciler.ActionCreateVolume:
		node, err := e.createVolume(ectx, p, act)
		o := wrote(err)
		o.node = node
		return o
	case reconciler.ActionDeleteVolume:
		return wrote(e.deleteVolume(ectx, p, act))
	case reconciler.ActionExpandVolume:
		unsupported, err := e.expandVolume(ectx, p, act)
		o := wrote(err)
		o.Unsupported, o.wrote = unsupported, o.wrote && !unsupported
		return o
	case reconciler.ActionCreatePod:
		reg, err := e.registerPod(ectx, p, act)
		o := wrote(err)
		o.index, o.registered = reg.JobModifyIndex, reg
		return o
	case reconciler.ActionDeletePod:
		if err := e.runHooks(ctx, p, act); err != nil {
			return done(err)
		}
		return wrote(e.deletePod(ectx, p, act))
	case reconciler.ActionRestoreCount:
		index, err := e.restoreCount(ectx, p, act)
		o := wrote(err)
		o.index, o.wrote = index, o.wrote && index > 0
		return o
	case reconciler.ActionEvaluatePod:
		return done(e.evaluatePod(ectx, p, act))
	case reconciler.ActionCheckDisruption:
		// On the worker's context: the command's own timeout bounds it.
		return done(e.checkDisruption(ctx, p, act))
	case reconciler.ActionSwitchover:
		return done(e.switchover(ctx, p, act))
	case reconciler.ActionPostReady:
		return e.postReady(ctx, p, act)
	case reconciler.ActionDeleteSetState:
		o := done(e.deleteSetState(ectx, p, act))
		o.stateDeleted = o.Err == nil
		return o
	}
	return done(fmt.Errorf("unknown action %q", act.Type))
}

// recordStatus stores the status of the decision (ActionRecordStatus).
func (e *podControl) recordStatus(ctx context.Context, p *pass, act reconciler.Action) error {
	if act.Status == nil {
		return errors.New("a status write without a status")
	}
	return e.store.PutStatus(ctx, p.key, *act.Status)
}

// outcome is what carrying out one action did: the Result the reconciler
// folds into the set's memory, and what the controller must see in Nomad
// before it trusts its cache again.
type outcome struct {
	reconciler.Result
	// index is the JobModifyIndex a registration got (CreatePod,
	// RestoreCount); 0 when there is nothing to wait for.
	index uint64
	// registered is what a CreatePod registered, its record of the
	// rendering kept for drift detection (renderedDigests.registered).
	registered backend.Registration
	// node is the node a created volume is on.
	node string
	// stateDeleted is set when the set's stored state was deleted (the
	// end of a cascading delete).
	stateDeleted bool
	// wrote is set when the effect changed Nomad's children or volumes: the
	// change must be seen in the cache before the set is decided on again.
	wrote bool
	// hook and hookReason are the post_ready hook that answered and why,
	// for the events.
	hook, hookReason string
}

// done is the outcome of an effect that returned err.
func done(err error) outcome { return outcome{Result: resultOf(err)} }

// wrote is the outcome of an effect on Nomad's children or volumes that
// returned err: one that succeeded must be seen in the cache.
func wrote(err error) outcome {
	o := done(err)
	o.wrote = err == nil
	return o
}

func childID(key backend.SetKey, ordinal int) string {
	return reconciler.PodName(key.Name, ordinal)
}

// podDetail returns the observed pod an action on ord acts on: the child
// named for it, or one adopted under another ID by its meta.
func podDetail(obs backend.Observation, key backend.SetKey, ord int) (backend.PodDetail, bool) {
	var found backend.PodDetail
	ok := false
	for _, d := range obs.Pods {
		if d.Pod.Ordinal == ord && (!ok || d.JobID != childID(key, ord)) {
			found, ok = d, true
		}
	}
	return found, ok
}

// registerPod registers the child of a CreatePod action and returns what
// it registered. It reads the pass and writes nothing to it, so that the
// pods of a Parallel set can be registered at once.
func (e *podControl) registerPod(ctx context.Context, p *pass, act reconciler.Action) (backend.Registration, error) {
	key, spec := p.key, p.spec
	id := childID(key, act.Ordinal)
	// A stopped child keeps its job in Nomad; re-registering it must name
	// the index we saw, and a new one must not exist at all (index 0). Either
	// way a second agent or a stale decision cannot overwrite a live child.
	var index uint64
	for _, s := range p.obs.Stopped {
		if s.JobID == id {
			index = s.JobModifyIndex
		}
	}
	if slices.ContainsFunc(p.obs.Pods, func(d backend.PodDetail) bool { return d.JobID == id }) {
		return backend.Registration{}, fmt.Errorf("refusing to create %s: it still has a pod", id)
	}
	var spread *backend.Spread
	if len(spec.VolumeClaims) == 0 && !act.Unspread {
		used, err := e.usedSpreadValues(ctx, spec, p.obs, nil, act.Ordinal)
		if err != nil {
			return backend.Registration{}, fmt.Errorf("reading the nodes of %s's other ordinals to spread: %w", key, err)
		}
		if spec.SpreadRequired && spec.Spread == "${node.unique.id}" && !e.nodes.HasFineNodeOutside(used) {
			return backend.Registration{}, spreadUnmet(act.Ordinal, spec, used, errors.New("every eligible node holds another ordinal"))
		}
		spread = &backend.Spread{Attr: spec.Spread, Required: spec.SpreadRequired, Used: used}
	}
	reg, err := e.nomad.RegisterChild(ctx, spec, act.Revision, act.Ordinal, spread, index)
	if err != nil {
		if backend.IsConflict(err) {
			e.requestResync()
		}
		return backend.Registration{}, err
	}
	return reg, nil
}

// deletePod stops the child, or purges it when the reconciler says so (a
// pod that ended with nothing left running). A drifted child (CauseRepair)
// is stopped like an outdated one and created again from its revision by a
// later pass: re-registering in place would let Nomad run the old and new
// allocation side by side.
func (e *podControl) deletePod(ctx context.Context, p *pass, act reconciler.Action) error {
	id := childID(p.key, act.Ordinal)
	if d, ok := podDetail(p.obs, p.key, act.Ordinal); ok {
		id = d.JobID
	}
	err := e.nomad.DeregisterChild(ctx, p.key.Namespace, id, act.Purge)
	if errors.Is(err, backend.ErrNotFound) {
		// Already gone: the goal of the action is met (Kubernetes #136812).
		return nil
	}
	if err != nil {
		return err
	}
	return nil
}

// restoreCount re-registers a child scaled up by hand as Nomad has it, at
// its own revision, with only the count back at 1, fenced on the
// JobModifyIndex observed: Nomad then stops only the extra allocations and
// the original keeps running.
// It returns the JobModifyIndex of the registration, 0 when the cache is
// behind Nomad (the event that says so is on its way).
func (e *podControl) restoreCount(ctx context.Context, p *pass, act reconciler.Action) (uint64, error) {
	d, ok := podDetail(p.obs, p.key, act.Ordinal)
	if !ok {
		return 0, nil
	}
	index, err := e.nomad.RestoreCount(ctx, p.key.Namespace, d.JobID, d.JobModifyIndex)
	if err != nil && backend.IsConflict(err) {
		e.requestResync()
	}
	return index, err
}

// evaluatePod asks Nomad to place a blocked child again; the reconciler
// remembers for which node change (reconciler.Fold), to ask once per change.
func (e *podControl) evaluatePod(ctx context.Context, p *pass, act reconciler.Action) error {
	d, ok := podDetail(p.obs, p.key, act.Ordinal)
	if !ok {
		return nil
	}
	return e.nomad.EvaluateChild(ctx, p.key.Namespace, d.JobID)
}

// deleteSetState purges the stopped children the reconciler names, so
// nothing of the set is left in Nomad, then deletes its stored state.
func (e *podControl) deleteSetState(ctx context.Context, p *pass, act reconciler.Action) error {
	for _, id := range act.Targets {
		if err := e.nomad.DeregisterChild(ctx, p.key.Namespace, id, true); err != nil && !errors.Is(err, backend.ErrNotFound) {
			return err
		}
	}
	if len(p.revs) == 0 && !p.found {
		return nil
	}
	return e.store.DeleteSet(ctx, p.key)
}

// hookEvent is the lifecycle hook a deletion runs, by why it happens. An
// update, a drift repair and a volume growth all take a member down to
// recreate it, so they run pre_update; a scale-down, the set's deletion, a drain and a pod replace
// take it away (for good, until its node is back, or onto a fresh volume),
// so they run pre_delete. A pod that already ended, or a duplicate, runs
// none.
func hookEvent(act reconciler.Action) (plugin.Event, bool) {
	if !act.Disrupts() {
		return "", false
	}
	switch act.Cause {
	case reconciler.CauseScaleDown, reconciler.CauseSetDeleted, reconciler.CauseDrain, reconciler.CauseReplace:
		return plugin.EventPreDelete, true
	case reconciler.CauseUpdate, reconciler.CauseRepair, reconciler.CauseResize:
		return plugin.EventPreUpdate, true
	}
	return "", false
}

// runHooks runs the lifecycle hooks for a deletion; one that holds the step
// becomes a hold on the ordinal's disruption. It runs on the worker's
// context, not effectContext: a hook's own timeout bounds it and may be
// longer than an effect's.
func (e *podControl) runHooks(ctx context.Context, p *pass, act reconciler.Action) error {
	event, ok := hookEvent(act)
	if !ok || e.hooks == nil {
		return nil
	}
	pod := plugin.Pod{Namespace: p.key.Namespace, Set: p.key.Name, Ordinal: act.Ordinal, Name: childID(p.key, act.Ordinal), Revision: act.Pod.Revision}
	if d, ok := podDetail(p.obs, p.key, act.Ordinal); ok {
		pod.Name, pod.AllocID, pod.NodeID = d.JobID, d.AllocID, d.NodeID
	}
	res := e.hooks.RunHooks(ctx, event, pod)
	if res.Proceed {
		return nil
	}
	return &waitError{reason: reconciler.HoldHookWaiting, retryAfter: res.RetryAfter,
		msg: fmt.Sprintf("%s hook %q holds %s: %s", event, res.Hook, pod.Name, res.Reason)}
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
func volumeRequest(key backend.SetKey, spec reconciler.Spec, obs backend.Observation, act reconciler.Action) *plugin.VolumeRequest {
	req := &plugin.VolumeRequest{Namespace: key.Namespace, Set: key.Name, Claim: act.Volume.Claim, Ordinal: act.Volume.Ordinal, Name: act.Volume.Name,
		Class: act.Volume.Class}
	for _, t := range spec.ClaimTemplates {
		if t.Claim == act.Volume.Claim {
			// What the claim asks; an expansion asks the action's size.
			req.CapacityMin, req.CapacityMax = t.CapacityMin, t.CapacityMax
		}
	}
	if act.Type == reconciler.ActionExpandVolume {
		req.CapacityMin = act.Volume.Capacity
		req.CapacityMax = max(req.CapacityMax, req.CapacityMin)
	}
	var pl backend.ClaimPlacement
	if obs.Parent != nil {
		pl = obs.Parent.Placement(act.Volume.Claim)
	}
	req.NodePool, req.AccessMode, req.AttachmentMode = pl.NodePool, pl.AccessMode, pl.AttachmentMode
	for _, c := range pl.Constraints {
		req.Constraints = append(req.Constraints, plugin.Constraint{LTarget: c.LTarget, RTarget: c.RTarget, Operand: c.Operand})
	}
	return req
}

// expandVolume grows a volume whose pod is gone to what its claim asks. A
// class whose provisioner cannot expand never gets here: its Capabilities
// said so before any pod was stopped (controller.cannotExpand). One that
// said it could and then refuses (a volume made by another plugin than
// its class now names) is remembered for the term (the reconciler then
// leaves that class's volumes at their size, and says so) and the pod
// comes back on its volume as it is. A volume Nomad still counts as
// claimed (the old allocation is being released) waits a little.
func (e *podControl) expandVolume(ctx context.Context, p *pass, act reconciler.Action) (unsupported bool, err error) {
	started := e.clock()
	before := int64(0)
	for _, v := range p.obs.Volumes {
		if v.Volume.Name == act.Volume.Name {
			before = v.Volume.Capacity
		}
	}
	_, err = e.provisioner.ExpandVolume(ctx, volumeRequest(p.key, p.spec, p.obs, act))
	switch {
	case errors.Is(err, plugin.ErrExpandUnsupported):
		e.event(p.key, p.now, "ExpandUnsupported", fmt.Sprintf("%s: the provisioner of class %q cannot expand volumes; it keeps its %s",
			act.Volume.Name, classOrDefault(act.Volume.Class), bytesize.Format(before)))
		return true, nil
	case errors.Is(err, plugin.ErrVolumeInUse):
		return false, &waitError{reason: reconciler.HoldVolumeInUse, msg: err.Error()}
	case err != nil:
		return false, pluginDown(err)
	}
	e.event(p.key, p.now, "VolumeExpanded", fmt.Sprintf("%s: %s → %s in %s", act.Volume.Name, bytesize.Format(before),
		bytesize.Format(act.Volume.Capacity), e.clock().Sub(started).Round(time.Millisecond)))
	return false, nil
}

// classOrDefault names a storage class for messages.
func classOrDefault(class string) string {
	if class == "" {
		return "(default)"
	}
	return class
}

// claimClassKey is the annotation that names a claim's storage class
// (DESIGN §1), for messages that name the culprit.
func claimClassKey(claim string) string { return "statefulset_claim_" + claim + "_class" }

// fineNodes is what spreading asks of the term's cache.
type fineNodes interface {
	// HasFineNodeOutside reports whether a ready, eligible node that is
	// not draining exists whose ID is not in ids.
	HasFineNodeOutside(ids []string) bool
}

// pluginDown turns a plugin outage into a hold on the ordinal's creation:
// the step waits and the set says why, rather than failing and retrying
// hot.
func pluginDown(err error) error {
	if errors.Is(err, plugin.ErrPluginUnavailable) {
		return &waitError{reason: reconciler.HoldPluginUnavailable, msg: err.Error()}
	}
	return err
}

// createVolume creates a claim's volume away from the set's other spread
// domains, unless the reconciler said to drop the spread rule. A volume for
// an ordinal that already has one goes to that node: its pod mounts all of
// them on one node.
// It returns the node the volume is on.
func (e *podControl) createVolume(ctx context.Context, p *pass, act reconciler.Action) (string, error) {
	key, spec := p.key, p.spec
	req := volumeRequest(key, spec, p.obs, act)
	var used []string
	if node := ordinalNode(p, act.Ordinal); node != "" {
		req.Constraints = append(req.Constraints, plugin.Constraint{LTarget: "${node.unique.id}", RTarget: node, Operand: "="})
	} else if !act.Unspread {
		var err error
		if used, err = e.usedSpreadValues(ctx, spec, p.obs, p.placed, act.Ordinal); err != nil {
			return "", fmt.Errorf("reading the nodes of %s's other ordinals to spread: %w", key, err)
		}
		req.Constraints = append(req.Constraints, spreadConstraints(spec.Spread, used)...)
	}
	vol, err := e.provisioner.CreateVolume(ctx, req)
	if err != nil && len(used) > 0 && !errors.Is(err, plugin.ErrPluginUnavailable) {
		// No node with a spread value of its own takes it: the reconciler
		// decides whether to wait (a required spread) or to place it where
		// it fits (a soft one).
		return "", spreadUnmet(act.Ordinal, spec, used, err)
	}
	if errors.Is(err, plugin.ErrUnknownClass) {
		return "", &waitError{reason: reconciler.HoldUnknownClass, msg: fmt.Sprintf("%s: %v", claimClassKey(act.Volume.Claim), err)}
	}
	if err != nil {
		return "", pluginDown(err)
	}
	if rec, ok := findOrdinalRecord(p.prev.Ordinals, act.Ordinal); ok && rec.Revision != "" {
		// The ordinal has run before, so this volume replaces one that is
		// gone (deleted by hand, or by pod replace -new-volume) or serves a
		// new claim: either way its pod starts on empty data, which the
		// user must be told.
		e.event(key, p.now, "NewVolume", fmt.Sprintf("%s: created empty for %s, which has run before: its data in this volume starts new",
			act.Volume.Name, reconciler.PodName(key.Name, act.Ordinal)))
	}
	return vol.NodeID, nil
}

func (e *podControl) deleteVolume(ctx context.Context, p *pass, act reconciler.Action) error {
	if err := e.provisioner.DeleteVolume(ctx, volumeRequest(p.key, p.spec, p.obs, act)); err != nil {
		return pluginDown(err)
	}
	return nil
}
