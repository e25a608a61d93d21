package agent

import (
	"context"
	"slices"
	"time"

	"github.com/nomad-statefulset/nomad-statefulset/plugin"
	"github.com/nomad-statefulset/nomad-statefulset/reconciler"
)

// capabilitiesTimeout bounds one Capabilities call: it is asked on the
// worker, before the reconciler decides, so a plugin that hangs must not
// hold the set.
const capabilitiesTimeout = 10 * time.Second

// capabilitySource answers what a storage class's provisioner can do: the
// plugin manager's provisioner, or a fake in tests.
type capabilitySource interface {
	Capabilities(ctx context.Context, req *plugin.VolumeRequest) (*plugin.Capabilities, error)
}

// cannotExpand is Input.CannotExpand and Input.CapabilitiesUnknown: the
// storage classes whose volumes a claim now asks to grow and whose
// provisioner says it cannot expand them, and those whose provisioner could
// not be asked (down, or the class gone from the config). Each such class's
// provisioner is asked before the reconciler decides, because a volume can
// only be expanded once its pod is stopped: learning it from
// ExpandVolume's refusal would stop a pod for nothing, once per leadership
// term. The reconciler grows neither kind (nothing is stopped on a guess)
// and looks again soon at the second. A class whose ExpandVolume refused
// although Capabilities said it could is in the set's memory for the term
// (reconciler.Memory.CannotExpand) and is not asked again.
func (c *controller) cannotExpand(ctx context.Context, p *pass) (cannot, unknown []string) {
	if c.capabilities == nil || len(p.spec.ClaimTemplates) == 0 {
		return nil, nil
	}
	var asked []string
	for _, v := range p.obs.Volumes {
		class, ok := growthClass(p.spec, v.Volume)
		if !ok || slices.Contains(asked, class) {
			continue
		}
		asked = append(asked, class)
		if slices.Contains(p.st.memory.CannotExpand, class) {
			continue
		}
		actx, cancel := context.WithTimeout(ctx, capabilitiesTimeout)
		caps, err := c.capabilities.Capabilities(actx, &plugin.VolumeRequest{Namespace: p.key.Namespace, Set: p.key.Name, Claim: v.Volume.Claim, Class: class})
		cancel()
		switch {
		case err != nil:
			c.log.Warn("cannot ask the volume provisioner whether it can expand; growing nothing of the class for now",
				"set", p.key.String(), "class", classOrDefault(class), "error", err, "retry_in", reconciler.CapabilitiesRetry)
			unknown = append(unknown, class)
		case !caps.Expand:
			if !slices.Contains(p.st.unexpandable, class) {
				// Once per class and term: the condition says it for good.
				p.st.unexpandable = append(p.st.unexpandable, class)
				c.sets.event(p.key, p.now, "ExpandUnsupported", "the provisioner of class "+classOrDefault(class)+
					" cannot expand volumes ("+caps.Reason+"); its volumes keep their size and no pod is stopped for them")
			}
			cannot = append(cannot, class)
		}
	}
	return cannot, unknown
}

// growthClass returns the class of v when its claim asks it to grow: the
// claim names v's class and more than v's known capacity. The reconciler
// decides whether it grows; this only says whose provisioner to ask.
func growthClass(spec reconciler.Spec, v reconciler.Volume) (string, bool) {
	for _, t := range spec.ClaimTemplates {
		if t.Claim == v.Claim {
			return v.Class, t.Class == v.Class && v.Capacity > 0 && t.CapacityMin > v.Capacity
		}
	}
	return "", false
}
