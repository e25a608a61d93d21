package agent

import (
	"time"

	"github.com/nomad-statefulset/nomad-statefulset/backend"
	"github.com/nomad-statefulset/nomad-statefulset/backend/consul"
	"github.com/nomad-statefulset/nomad-statefulset/reconciler"
)

// checkSource is what the readiness gate reads of Consul: the watcher, or
// a fake in tests.
type checkSource interface {
	Watch(key backend.SetKey, services []string, leaderCheck string)
	Checks(key backend.SetKey, allocID string) (consul.AllocChecks, bool)
}

// leaderSource is what the leader gate reads of a Nomad-native leader
// check: the nomad.NativeCheckWatcher, or a fake in tests.
type leaderSource interface {
	Watch(key backend.SetKey, check string, interval time.Duration, allocs []string)
	Leader(key backend.SetKey, allocID string) (leader, read bool)
}

// gateChecks keeps the set's Consul watches to the services of its parent
// (none once it is deleted) and its leader check (statefulset_leader_check,
// "" for none), and records their checks in the readiness facts and the
// leadership of the pods of obs; see applyChecks. Without Consul (-dev) the
// Consul part does nothing: the task states alone decide readiness.
//
// A leader check on a provider = "nomad" service (backend.ParentJob.NativeLeaderCheck)
// is read from Nomad instead, by the native watcher, Consul or not: Nomad's
// client keeps those results. It still has no say in readiness, which for
// a native service is Nomad's deployment health and the task states, as
// for its other checks (docs/concepts.md, Live readiness).
//
// It reports whether the leader is known: true without a leader check;
// false while the checks of a live pod are not read yet, or when the
// leader check cannot be read at all (a Consul check without Consul, or on
// no service it watches), so that the reconciler waits rather than take
// the leader down as if it were a follower.
//
// watch says to keep the watches to what the set asks now: the pass that
// builds the decision's input does, the view of what a pass did does not
// (building a view starts no watcher).
func (c *controller) gateChecks(key backend.SetKey, obs backend.Observation, deleted bool, leaderCheck string, watch bool) (leaderKnown bool) {
	var interval time.Duration
	native := false
	if !deleted && obs.Parent != nil {
		interval, native = obs.Parent.NativeLeaderCheck(leaderCheck)
	}
	consulLeader := leaderCheck
	if native {
		consulLeader = ""
	}
	leaderKnown = leaderCheck == ""
	if c.checks != nil {
		var services []string
		if !deleted && obs.Parent != nil {
			services = obs.Parent.ConsulServices()
		}
		if watch {
			c.checks.Watch(key, services, consulLeader)
		}
		synced := applyChecks(c.checks, key, obs.Pods, len(services) > 0)
		leaderKnown = leaderKnown || (!native && len(services) > 0 && synced)
	}
	if c.native != nil {
		var allocs []string
		if native {
			allocs = liveAllocs(obs.Pods)
		} else {
			leaderCheck = ""
		}
		if watch {
			c.native.Watch(key, leaderCheck, interval, allocs)
		}
		if native {
			leaderKnown = applyNativeLeader(c.native, key, obs.Pods)
		}
	}
	return leaderKnown
}

// liveAllocs are the allocations of the live pods: the ones whose leader
// check says who leads (see applyChecks).
func liveAllocs(pods []backend.PodDetail) []string {
	var ids []string
	for i := range pods {
		if d := &pods[i]; d.Facts.Alloc.Live && d.AllocID != "" {
			ids = append(ids, d.AllocID)
		}
	}
	return ids
}

// applyNativeLeader marks the live pod whose Nomad-native leader check
// passes as the Leader, and reports whether every live pod's check has
// been read (synced). It leaves readiness alone: the leader check never
// counts against it.
func applyNativeLeader(src leaderSource, key backend.SetKey, pods []backend.PodDetail) (synced bool) {
	synced = true
	for i := range pods {
		d := &pods[i]
		d.Pod.Leader = false
		if d.Facts.Alloc.Live && d.AllocID != "" {
			leads, read := src.Leader(key, d.AllocID)
			synced = synced && read
			d.Pod.Leader = leads
		}
	}
	return synced
}

// applyChecks records the Consul checks of each live pod's allocation in its
// readiness facts; what the checks do to its readiness (DESIGN §2) is
// reconciler.JudgeReadiness's to say, once every fact is in (controller.judge),
// not this gate's. It also marks the pod where the set's leader check passes
// as the Leader (DESIGN §3b). hasServices says whether the set has Consul
// services at all; without, the checks have no say and no pod leads.
func applyChecks(src checkSource, key backend.SetKey, pods []backend.PodDetail, hasServices bool) (synced bool) {
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
	}
	return synced
}
