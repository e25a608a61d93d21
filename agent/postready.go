package agent

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/nomad-statefulset/nomad-statefulset/backend"
	"github.com/nomad-statefulset/nomad-statefulset/plugin"
	"github.com/nomad-statefulset/nomad-statefulset/plugin/manager"
	"github.com/nomad-statefulset/nomad-statefulset/reconciler"
)

// postReadyUnasked is how soon a set is looked at again when a ready pod's
// hooks could not be asked at all (the worker's context ended mid-call).
const postReadyUnasked = time.Second

// maxPostReadyCalls bounds the post_ready hook calls one pass makes at once.
const maxPostReadyCalls = 8

// notReadyHookHeld is the NotReady of a pod a post_ready hook holds. Its
// release is announced by the HookDone event, not by a PodReady one.
const notReadyHookHeld = reconciler.NotReadyHookHeld

// readyHold is what the post_ready hooks last said about one allocation.
type readyHold struct {
	// done: every hook said done, or failed under failure_policy "ignore".
	done bool
	// doneAt is when the hooks said done after having held the pod at least
	// once; zero when they said done at the first asking.
	doneAt time.Time
	// retryAt is when to ask again while the pod is held.
	retryAt time.Time
}

// gated reports whether p is a pod whose readiness the hooks decide: ready
// by Nomad, running, not on its way out, and with an allocation to key on.
func gated(d backend.PodDetail) bool {
	p := d.Pod
	return p.Ready && p.Phase == reconciler.PhaseRunning && !p.Terminating && d.AllocID != ""
}

// gatePostReady runs the post_ready hooks of the pods in obs that Nomad
// reports ready and whose allocation the hooks have not cleared yet (unless
// a held pod's retry time has not come), then marks every pod still held as
// not Ready in obs.Pods, in place. It returns how soon the set should be
// looked at again for a held pod, 0 when none is held.
func (c *controller) gatePostReady(ctx context.Context, st *setState, key backend.SetKey, obs backend.Observation, now time.Time) time.Duration {
	if c.hooks == nil {
		return 0
	}
	due := st.postReadyDue(obs.Pods, now)
	if len(due) > 0 {
		results := make([]plugin.HookResult, len(due))
		pods := make([]plugin.Pod, len(due))
		var wg sync.WaitGroup
		// The hooks of many pods run at once, but no more than
		// maxPostReadyCalls: a set of a thousand fresh pods must not start
		// a thousand calls.
		slots := make(chan struct{}, maxPostReadyCalls)
		for i, d := range due {
			pods[i] = plugin.Pod{
				Namespace: key.Namespace, Set: key.Name, Ordinal: d.Pod.Ordinal, Name: d.JobID,
				Revision: d.Pod.Revision, AllocID: d.AllocID, NodeID: d.NodeID,
			}
			// The set's pods are asked side by side (a Parallel set may
			// have many become ready at once), so the wait is that of the
			// slowest pod, not the sum.
			wg.Add(1)
			slots <- struct{}{}
			go func() {
				defer func() { <-slots; wg.Done() }()
				results[i] = c.hooks.RunHooks(ctx, plugin.EventPostReady, pods[i])
			}()
		}
		wg.Wait()
		// A call cut short by leadership loss or shutdown says nothing
		// about the pod: record nothing, least of all an ignored failure as
		// done. The pods stay held below.
		if ctx.Err() == nil {
			doneAt := c.clock()
			for i, res := range results {
				c.recordPostReady(st, key, pods[i], res, now, doneAt)
			}
		}
	}
	return st.applyPostReady(obs.Pods, now)
}

// recordPostReady remembers one answer and says so in the set's events and
// the log. Only a change is an event: a pod held across many reconciles
// adds one event per asking, not one per reconcile.
func (c *controller) recordPostReady(st *setState, key backend.SetKey, pod plugin.Pod, res plugin.HookResult, now, doneAt time.Time) {
	log := c.log.With("set", key.String(), "pod", pod.Name, "alloc_id", pod.AllocID)
	held := st.recordPostReady(pod.AllocID, res, now, doneAt)
	switch {
	case res.Proceed && held:
		log.Info("post_ready hooks done; the pod counts as ready")
		c.sets.event(key, now, "HookDone", fmt.Sprintf("%s: post_ready hooks done; it counts as ready", pod.Name))
	case !res.Proceed:
		wait := res.RetryAfter.Round(time.Second)
		log.Info("post_ready hook holds the pod; it does not count as ready", "hook", res.Hook, "failed", res.Failed, "reason", res.Reason, "retry_after", wait)
		c.sets.event(key, now, "HookWaiting", fmt.Sprintf("%s: %s; it does not count as ready until the hook says done, asking again in %s", pod.Name, res.Reason, wait))
	}
}

// due returns the pods whose hooks should be asked now, and forgets the
// answers about allocations the set no longer has.
func (st *setState) postReadyDue(pods []backend.PodDetail, now time.Time) []backend.PodDetail {
	holds := st.readyHolds
	if len(pods) == 0 {
		st.readyHolds = nil
		return nil
	}
	live := make(map[string]bool, len(pods))
	var out []backend.PodDetail
	for _, d := range pods {
		live[d.AllocID] = true
		if !gated(d) {
			continue
		}
		h := holds[d.AllocID]
		if h == nil || (!h.done && !now.Before(h.retryAt)) {
			out = append(out, d)
		}
	}
	for id := range holds {
		if !live[id] {
			delete(holds, id)
		}
	}
	return out
}

// record stores one answer about an allocation. It reports whether the pod
// had been held before, which is what makes a done answer news.
func (st *setState) recordPostReady(allocID string, res plugin.HookResult, now, doneAt time.Time) (heldBefore bool) {
	if st.readyHolds == nil {
		st.readyHolds = map[string]*readyHold{}
	}
	holds := st.readyHolds
	h := holds[allocID]
	heldBefore = h != nil && !h.done
	if h == nil {
		h = &readyHold{}
		holds[allocID] = h
	}
	if res.Proceed {
		h.done = true
		if heldBefore {
			h.doneAt = doneAt
		}
		return heldBefore
	}
	wait := res.RetryAfter
	if wait <= 0 {
		wait = manager.DefaultWaitRetry
	}
	h.retryAt = now.Add(wait)
	return heldBefore
}

// apply records what the hooks said in the readiness facts of each pod and
// judges it again: reconciler.JudgeReadiness holds a pod they have not
// cleared, and counts one they cleared late as ready from when they did. It
// returns how soon a held pod is due to be asked again, 0 if none is held.
func (st *setState) applyPostReady(pods []backend.PodDetail, now time.Time) time.Duration {
	holds := st.readyHolds
	var next time.Duration
	for i := range pods {
		d := &pods[i]
		d.Facts.Hooks = reconciler.HookFacts{Configured: true}
		h := holds[d.AllocID]
		if h != nil {
			d.Facts.Hooks.Done, d.Facts.Hooks.DoneAt = h.done, h.doneAt
		}
		if d.Judge(); d.NotReady != notReadyHookHeld {
			continue
		}
		wait := postReadyUnasked
		if h != nil {
			wait = max(h.retryAt.Sub(now), time.Millisecond)
		}
		if next == 0 || wait < next {
			next = wait
		}
	}
	return next
}

// postReadyView returns obs with the pods the hooks still hold shown as not
// ready, for the set's view, without asking any hook.
func (c *controller) postReadyView(st *setState, obs backend.Observation) backend.Observation {
	if c.hooks != nil {
		st.applyPostReady(obs.Pods, c.clock())
	}
	return obs
}

// soonest is the earlier of two requeue delays, where 0 means none.
func soonest(a, b time.Duration) time.Duration {
	if a <= 0 || (b > 0 && b < a) {
		return b
	}
	return a
}
