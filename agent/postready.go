package agent

import (
	"context"
	"fmt"
	"time"

	"github.com/nomad-statefulset/nomad-statefulset/backend"
	"github.com/nomad-statefulset/nomad-statefulset/plugin"
	"github.com/nomad-statefulset/nomad-statefulset/reconciler"
)

// notReadyHookHeld is the NotReady of a pod a post_ready hook holds. Its
// release is announced by the HookDone event, not by a PodReady one.
const notReadyHookHeld = reconciler.NotReadyHookHeld

// judge gives every pod of obs its verdict, once every fact is in: the
// allocation's (Observe), the checks' (gateChecks) and, when the set has
// post_ready hooks, their last answers about each allocation (the set's
// memory). Nothing of a pod changes after it, and it asks no hook: the
// hooks are asked by the reconciler's PostReady actions. It reports whether
// a pod is held by its hooks.
func (c *controller) judge(st *setState, obs backend.Observation) (hookHeld bool) {
	gated := c.postReadyGates()
	for i := range obs.Pods {
		d := &obs.Pods[i]
		if gated {
			d.Facts.Hooks = st.memory.Hooks(d.AllocID)
		}
		d.Judge()
		hookHeld = hookHeld || d.NotReady == notReadyHookHeld
	}
	return hookHeld
}

// postReadyGates reports whether post_ready hooks decide readiness: some
// hook of the agent's config runs on post_ready. Without one a pod is ready
// when Nomad and its checks say so, with no ask and no extra pass.
func (c *controller) postReadyGates() bool {
	return c.hooks != nil && c.hooks.HasHooks(plugin.EventPostReady)
}

// postReady runs the post_ready hooks of the pod of a PostReady action, on
// the worker's context: a hook's own timeout bounds it. An answer given as
// that context ends (leadership lost, shutdown) says nothing about the pod,
// least of all a failure that failure_policy "ignore" turned into done: it
// is a failure, and nothing is remembered.
func (e *podControl) postReady(ctx context.Context, p *pass, act reconciler.Action) outcome {
	if e.hooks == nil {
		return done(fmt.Errorf("this agent runs no hooks"))
	}
	pod := plugin.Pod{Namespace: p.key.Namespace, Set: p.key.Name, Ordinal: act.Ordinal, Name: childID(p.key, act.Ordinal),
		Revision: act.Pod.Revision, AllocID: act.Pod.AllocID}
	if d, ok := podDetail(p.obs, p.key, act.Ordinal); ok && d.AllocID == act.Pod.AllocID {
		pod.Name, pod.NodeID = d.JobID, d.NodeID
	}
	res := e.hooks.RunHooks(ctx, plugin.EventPostReady, pod)
	if err := ctx.Err(); err != nil {
		return done(fmt.Errorf("the post_ready hooks of %s were cut short: %w", pod.Name, err))
	}
	o := outcome{}
	o.PostReady = &reconciler.HookAnswer{Proceed: res.Proceed, RetryAfter: res.RetryAfter}
	o.hookReason, o.hook = res.Reason, res.Hook
	return o
}

// announcePostReady says what a PostReady action's answer changed, in the
// events and the log. Only a change is an event: a pod held across many
// passes adds one event per asking, and one when it is released.
func (c *controller) announcePostReady(p *pass, a reconciler.Action, o outcome, heldBefore bool) {
	if o.PostReady == nil {
		return
	}
	name := reconciler.PodName(p.key.Name, a.Ordinal)
	log := c.log.With("set", p.key.String(), "pod", name, "alloc_id", a.Pod.AllocID)
	switch {
	case o.PostReady.Proceed && heldBefore:
		log.Info("post_ready hooks done; the pod counts as ready")
		c.sets.event(p.key, p.now, "HookDone", fmt.Sprintf("%s: post_ready hooks done; it counts as ready", name))
	case !o.PostReady.Proceed:
		ans := p.st.memory.PostReady[a.Pod.AllocID]
		wait := ans.RetryAt.Sub(p.now).Round(1e9)
		log.Info("post_ready hook holds the pod; it does not count as ready", "hook", o.hook, "reason", o.hookReason, "retry_after", wait)
		c.sets.event(p.key, p.now, reconciler.HoldHookWaiting, fmt.Sprintf("%s: %s; it does not count as ready until the hook says done, asking again in %s", name, o.hookReason, wait))
	}
}

// soonest is the earlier of two requeue delays, where 0 means none.
func soonest(a, b time.Duration) time.Duration {
	if a <= 0 || (b > 0 && b < a) {
		return b
	}
	return a
}
