package agent

import (
	"github.com/nomad-statefulset/nomad-statefulset/backend"
	"github.com/nomad-statefulset/nomad-statefulset/backend/consul"
	"github.com/nomad-statefulset/nomad-statefulset/backend/nomad"
	"github.com/nomad-statefulset/nomad-statefulset/jobs"
	"github.com/nomad-statefulset/nomad-statefulset/reconciler"
)

// checkSource is what the readiness gate reads of Consul: the watcher, or
// a fake in tests.
type checkSource interface {
	Watch(key backend.SetKey, services []string, leaderCheck string)
	Checks(key backend.SetKey, allocID string) (consul.AllocChecks, bool)
}

// gateChecks keeps the set's Consul watches to the services of its parent
// (none once it is deleted) and its leader check (statefulset_leader_check,
// "" for none), and records their checks in the readiness facts and the
// leadership of the pods of obs; see applyChecks. Without Consul (-dev) it
// does nothing: the task states alone decide, and no pod leads.
//
// It reports whether the leader is known: true without a leader check;
// false while the checks of a live pod are not read yet, or when the
// leader check cannot be read at all (no Consul, or on no service it
// watches), so that the reconciler waits rather than take the leader down
// as if it were a follower.
func (c *controller) gateChecks(key backend.SetKey, obs nomad.Observation, deleted bool, leaderCheck string) (leaderKnown bool) {
	if c.checks == nil {
		return leaderCheck == ""
	}
	var services []string
	if !deleted {
		services = jobs.ConsulServices(obs.Parent)
	}
	c.checks.Watch(key, services, leaderCheck)
	synced := applyChecks(c.checks, key, obs.Pods, len(services) > 0)
	return leaderCheck == "" || (len(services) > 0 && synced)
}

// applyChecks records the Consul checks of each live pod's allocation in its
// readiness facts and judges the pod again: what the checks do to its
// readiness (DESIGN §2) is reconciler.JudgeReadiness's to say, not this
// gate's. It also marks the pod where the set's leader check passes as the
// Leader (DESIGN §3b). hasServices says whether the set has Consul services
// at all; without, the checks have no say and no pod leads.
func applyChecks(src checkSource, key backend.SetKey, pods []nomad.PodDetail, hasServices bool) (synced bool) {
	synced = true
	for i := range pods {
		d := &pods[i]
		d.Facts.Checks = reconciler.CheckFacts{}
		d.Pod.Leader = false
		// Only a live allocation (running, not terminating, with no older
		// one beside it) is asked about: the leader check of one on its way
		// out says nothing of who leads next, and the reconciler must not
		// order the rest of the set around it.
		if hasServices && d.Facts.Alloc.Live {
			checks, read := src.Checks(key, d.AllocID)
			synced = synced && read
			d.Facts.Checks = reconciler.CheckFacts{
				Watched: true, Synced: read,
				Known: checks.Known, Critical: checks.Critical, PassingSince: checks.PassingSince,
			}
			d.Pod.Leader = checks.Leader
		}
		d.Judge()
	}
	return synced
}
