package agent

import (
	"time"

	"github.com/nomad-statefulset/nomad-statefulset/backend"
	"github.com/nomad-statefulset/nomad-statefulset/backend/consul"
	"github.com/nomad-statefulset/nomad-statefulset/backend/nomad"
	"github.com/nomad-statefulset/nomad-statefulset/jobs"
	"github.com/nomad-statefulset/nomad-statefulset/reconciler"
)

// notReadyChecksUnknown is the NotReady of a pod that missed its healthy
// deadline and whose Consul checks have not been read yet: Nomad said it
// is unhealthy, and only passing checks can overrule that.
const notReadyChecksUnknown = "Nomad judged the allocation unhealthy; waiting for its Consul checks to pass"

// checkSource is what the readiness gate reads of Consul: the watcher, or
// a fake in tests.
type checkSource interface {
	Watch(key backend.SetKey, services []string)
	Checks(key backend.SetKey, allocID string) (consul.AllocChecks, bool)
}

// gateChecks keeps the set's Consul watches to the services of its parent
// (none once it is deleted) and applies their checks to the pods of obs,
// in place; see applyChecks. Without Consul (-dev) it does nothing: the
// task states alone decide.
func (c *controller) gateChecks(key backend.SetKey, obs nomad.Observation, deleted bool) {
	if c.checks == nil {
		return
	}
	var services []string
	if !deleted {
		services = jobs.ConsulServices(obs.Parent)
	}
	c.checks.Watch(key, services)
	applyChecks(c.checks, key, obs.Pods, len(services) > 0)
}

// applyChecks turns the Consul checks of each Ready pod's allocation into
// its readiness (DESIGN §2): a critical check makes it not Ready, and a pod
// that missed its healthy deadline stays not Ready until its checks are
// read and none is critical. ReadySince moves to when the checks stopped
// being critical, so min_ready_seconds starts over after a failing check.
// hasServices says whether the set has Consul services at all.
func applyChecks(src checkSource, key backend.SetKey, pods []nomad.PodDetail, hasServices bool) {
	if !hasServices {
		return
	}
	for i := range pods {
		d := &pods[i]
		if !d.Pod.Ready || d.Pod.Phase != reconciler.PhaseRunning || d.AllocID == "" {
			continue
		}
		checks, synced := src.Checks(key, d.AllocID)
		switch {
		case checks.Critical != "":
			d.Pod.Ready, d.Pod.ReadySince, d.NotReady = false, time.Time{}, checks.Critical
		case d.HealthMissed && (!synced || !checks.Known):
			d.Pod.Ready, d.Pod.ReadySince, d.NotReady = false, time.Time{}, notReadyChecksUnknown
		case checks.PassingSince.After(d.Pod.ReadySince):
			d.Pod.ReadySince = checks.PassingSince
		}
	}
}
