package agent

import (
	"context"
	"fmt"

	"github.com/nomad-statefulset/nomad-statefulset/backend/nomad"
	"github.com/nomad-statefulset/nomad-statefulset/jobs"
)

// restoreCounts puts back to 1 the count of a child that was scaled up by
// hand (`nomad job scale <child> <group> N`). It re-registers the child as
// Nomad has it, at its own revision, with only the count changed, and
// fenced on the JobModifyIndex it observed: Nomad then stops only the
// extra allocations and the original keeps running. Replacing the child
// as drift would have stopped the healthy original too. A child that also
// drifted otherwise is left to the reconciler's repair, which replaces it
// whole; one that is stopping is left alone.
func (c *controller) restoreCounts(ctx context.Context, p *pass) {
	if p.spec.Deleted {
		return
	}
	for _, d := range p.obs.Pods {
		n := jobs.ScaledChild(d.Job)
		if n == 0 || d.Pod.Terminating || drifted(p, d.Pod.Ordinal) {
			continue
		}
		if err := c.restoreCount(ctx, p, d, n); err != nil {
			// The next event on the child (or the re-list) brings it back
			// here; a conflict means someone changed it meanwhile.
			c.log.Warn("could not put a scaled child's count back to 1", "set", p.key.String(), "child", d.JobID, "error", err)
		}
	}
}

// drifted reports whether the pass found ordinal's pod drifted.
func drifted(p *pass, ordinal int) bool {
	for _, pod := range p.in.Pods {
		if pod.Ordinal == ordinal {
			return pod.Drifted
		}
	}
	return false
}

func (c *controller) restoreCount(ctx context.Context, p *pass, d nomad.PodDetail, n int) error {
	ectx, cancel := effectContext(ctx)
	defer cancel()
	job, err := c.api.GetJob(ectx, p.key.Namespace, d.JobID)
	if err != nil {
		return fmt.Errorf("reading %s: %w", d.JobID, err)
	}
	if job.JobModifyIndex == nil || *job.JobModifyIndex != d.JobModifyIndex || len(job.TaskGroups) != 1 {
		// The cache is behind Nomad: the event that says so is on its way.
		return nil
	}
	one := 1
	job.TaskGroups[0].Count = &one
	resp, err := c.api.RegisterJob(ectx, job, true, d.JobModifyIndex)
	if err != nil {
		if nomad.IsConflict(err) {
			c.requestResync()
		}
		return fmt.Errorf("re-registering %s at count 1: %w", d.JobID, err)
	}
	id, want := d.JobID, resp.JobModifyIndex
	c.registered(p.key, id, want)
	c.expect.expect(p.key, "child "+id+" back to count 1", p.now, func(o nomad.Observation) bool {
		for _, q := range o.Pods {
			if q.JobID == id && q.JobModifyIndex >= want {
				return true
			}
		}
		return false
	})
	c.views.event(p.key, p.now, "CountRestored", fmt.Sprintf(
		"%s was scaled to %d outside nomad-statefulset; its count is back to 1 (Nomad stops only the extra allocations)", id, n))
	c.log.Info("put a scaled child's count back to 1", "set", p.key.String(), "child", id, "count", n)
	return nil
}
