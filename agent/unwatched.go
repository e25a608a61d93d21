package agent

import (
	"time"

	"github.com/nomad-statefulset/nomad-statefulset/backend"
	"github.com/nomad-statefulset/nomad-statefulset/reconciler"
)

// unwatchedGone finds the ordinals whose child vanished from Nomad before
// this leadership term began, and how long each must still wait before it
// is created again.
//
// A purge makes Nomad forget the child's allocations at once while their
// client may still be killing the task; a new child is a new job, whose
// allocation does not wait for the old one. The cache holds a purge it saw
// as a stopping pod for the task's kill grace (Cache.RemoveJob). A purge
// that happened while no leader watched (the daemon restarting, or
// leadership moving) left nothing to see: the child is simply missing. Such
// an ordinal (one the set's status says had a pod, that is not condemned,
// and that is missing at the set's first pass in the term) waits out the
// kill grace from the start of the term, the earliest moment the purge can
// be known to have happened by. The cost is a few seconds' delay for a
// child that vanished long before; the gain is never running two copies of
// one ordinal. A child that vanishes later in the term was seen to go.
func (c *controller) unwatchedGone(p *pass) []reconciler.Hold {
	if c.termStart.IsZero() || p.spec.Deleted {
		return nil
	}
	present := map[int]bool{}
	for _, d := range p.obs.Pods {
		present[d.Pod.Ordinal] = true
	}
	for _, s := range p.obs.Stopped {
		present[s.Ordinal] = true
	}
	st := p.st
	if !st.vanishedKnown {
		st.vanishedKnown = true
		st.vanished = map[int]time.Time{}
		for _, r := range p.prev.Ordinals {
			if r.Revision == "" || r.Condemned || present[r.Ordinal] ||
				r.Ordinal < p.spec.OrdinalsStart || r.Ordinal >= p.spec.OrdinalsStart+p.spec.Replicas {
				continue
			}
			st.vanished[r.Ordinal] = c.termStart.Add(c.lastKillGrace(p, r) + backend.PurgeMargin)
		}
	}
	var out []reconciler.Hold
	for ord, at := range st.vanished {
		if !at.After(p.now) || present[ord] {
			delete(st.vanished, ord)
			continue
		}
		out = append(out, reconciler.Hold{Ordinal: ord, Step: reconciler.StepCreate, Until: at, Reason: reconciler.HoldKillGrace,
			Message: "its child vanished from Nomad while no leader watched (a purge?), and its old task may still be stopping on its node"})
	}
	return out
}

// lastKillGrace is the longest the ordinal's last task may run after a
// stop: the larger of the template's kill grace now and at the revision
// the ordinal last ran, which may have had a longer kill_timeout.
func (c *controller) lastKillGrace(p *pass, r reconciler.OrdinalRecord) time.Duration {
	if p.obs.Parent == nil {
		return backend.DefaultKillTimeout
	}
	grace := p.obs.Parent.KillGrace()
	for _, rev := range p.revs {
		if rev.Name != r.Revision {
			continue
		}
		if old, err := p.obs.Parent.KillGraceOf(rev.Data); err == nil {
			grace = max(grace, old)
		}
	}
	return grace
}
