package agent

import (
	"context"
	"errors"
	"sync"

	"github.com/nomad-statefulset/nomad-statefulset/reconciler"
)

// podCreator is an effector that can carry out several CreatePod actions
// of one pass at once.
type podCreator interface {
	createPods(ctx context.Context, p *pass, acts []reconciler.Action) []error
}

// errNotTried is the result of a creation that a pass did not attempt
// because an earlier batch of the pass failed.
var errNotTried = errors.New("not tried: an earlier creation in this pass failed")

// createPods registers the children of acts, the CreatePod actions of one
// pass of a Parallel set, in batches of 1, 2, 4 … at once, as Kubernetes'
// StatefulSet controller creates the pods of a set that allows bursts
// (runForAll with slowStartBatch). One round trip after another made a
// 200-set create wait for its registrations; and a Nomad that refuses the
// first registration is asked once, not once per pod. Every registration
// of a batch ends before the next batch starts, and a batch with an error
// is the last. A hold (a spread no node meets) is a wait, not an error: the
// batches go on.
//
// The registrations only read the pass. What they change in the set's
// state (the writes to wait for) is recorded after each batch, in the
// order of acts. The results are in that order too: nil, a *holdError, an
// error, or errNotTried.
func (e *podControl) createPods(ctx context.Context, p *pass, acts []reconciler.Action) []error {
	errs := make([]error, len(acts))
	indexes := make([]uint64, len(acts))
	next := 0
	for _, size := range reconciler.SlowStartBatches(len(acts)) {
		end := next + size
		var wg sync.WaitGroup
		for k := next; k < end; k++ {
			wg.Go(func() {
				// Tagged, as every write is, with the action it carries out.
				ectx, cancel := effectContext(withAction(ctx, p.key, acts[k]))
				defer cancel()
				indexes[k], errs[k] = e.registerPod(ectx, p, acts[k])
			})
		}
		wg.Wait()
		failed := false
		for k := next; k < end; k++ {
			var hold *holdError
			switch {
			case errs[k] == nil:
				e.expectChild(p.st, childID(p.key, acts[k].Ordinal), "registered", indexes[k])
			case !errors.As(errs[k], &hold):
				failed = true
			}
		}
		next = end
		if failed || ctx.Err() != nil {
			break
		}
	}
	for k := next; k < len(acts); k++ {
		errs[k] = errNotTried
	}
	return errs
}

// parallelCreates returns the CreatePod actions at the start of actions
// that may be carried out at once: those of a Parallel set, none of them
// waiting on a held step, when the effector can. It returns nil otherwise,
// and for a single action.
func (c *controller) parallelCreates(p *pass, actions []reconciler.Action, heldOrdinals map[int]bool, nHeld int) []reconciler.Action {
	if _, ok := c.effector.(podCreator); !ok {
		return nil
	}
	n := reconciler.BurstCreates(p.spec, actions)
	for k := range n {
		if dependsOnHeld(actions[k], heldOrdinals, nHeld) {
			n = k
			break
		}
	}
	if n < 2 {
		return nil
	}
	return actions[:n]
}
