package agent

import (
	"time"

	"github.com/nomad-statefulset/nomad-statefulset/backend"
	"github.com/nomad-statefulset/nomad-statefulset/reconciler"
)

// stopGrace is Input.StopGrace: per ordinal the set's status records, how
// long its last task may still run after a stop, with the margin of a
// purge. The reconciler holds the creation of an ordinal missing at the
// set's first pass of the term for that long from the term's start
// (reconciler.HoldKillGrace): a purge made while no leader watched left
// nothing to see, and a new child's allocation does not wait for the old
// one's task.
func (c *controller) stopGrace(p *pass) map[int]time.Duration {
	out := make(map[int]time.Duration, len(p.prev.Ordinals))
	for _, r := range p.prev.Ordinals {
		out[r.Ordinal] = c.lastKillGrace(p, r) + backend.PurgeMargin
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
