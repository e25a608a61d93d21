package nomad

import (
	"sort"
	"strconv"
	"time"

	"github.com/hashicorp/nomad/api"

	"github.com/nomad-statefulset/nomad-statefulset/backend"
	"github.com/nomad-statefulset/nomad-statefulset/jobs"
	"github.com/nomad-statefulset/nomad-statefulset/reconciler"
)

// lostAllocMargin is added to a child's stop_on_client_after before a lost
// allocation is taken as stopped. A lost allocation's client has not
// reported; it may still be running on a partitioned node until it stops
// itself, and clocks on server and client can disagree by this much.
const lostAllocMargin = 30 * time.Second

// defaultLostWait applies when a child has no stop_on_client_after: without
// it a partitioned client never stops its allocation by itself, so the pod is
// held as Terminating for this long after it was marked lost.
const defaultLostWait = 5 * time.Minute

// PodDetail is one observed pod plus the Nomad facts behind it; see
// backend.PodDetail. Its Job is the child's *jobs.ChildRecord.
type PodDetail = backend.PodDetail

// StoppedChild is a child job that is stopped and fully terminal.
type StoppedChild = backend.StoppedChild

// ClassParameter is the host volume parameter that records a volume's
// storage class: the name of the agent's volume_provisioner block that made
// it (statefulset_claim_<claim>_class). The built-in provisioner sets it
// on the volumes of named classes; a volume without it belongs to the
// unnamed block, the default class. Nomad hands parameters to the host
// volume plugin, which must accept the key (the mkdir plugin refuses
// parameters it does not know, so named classes cannot use it).
const ClassParameter = "nomad_statefulset_class"

// VolumeDetail is one observed per-ordinal volume. Its Volume's Capacity
// is Nomad's CapacityBytes (what the host volume plugin reported; Nomad's
// mkdir plugin reports 0), and its Class the volume's ClassParameter.
type VolumeDetail = backend.VolumeDetail

// Observation is everything the cache knows about one set. Its Parent is
// a jobs.Parent.
type Observation = backend.Observation

// Observe returns the set's observed state at time now. claims are the set's
// volume claim names, used to find its volumes.
func (c *Cache) Observe(key backend.SetKey, claims []string, now time.Time) Observation {
	c.mu.RLock()
	defer c.mu.RUnlock()
	var obs Observation
	if p, ok := c.parents[key]; ok {
		obs.Parent = jobs.ParentOf(p)
	} else if p, ok := c.purged[key]; ok {
		obs.Parent, obs.ParentPurged = jobs.ParentOf(p), true
	}
	ids := make([]string, 0, len(c.children[key]))
	for id := range c.children[key] {
		ids = append(ids, id)
	}
	sort.Strings(ids)
	// Nearly every child is a pod: one allocation, not a doubling series.
	obs.Pods = make([]PodDetail, 0, len(ids))
	for _, id := range ids {
		ch := c.children[key][id]
		ord, err := strconv.Atoi(ch.job.Meta(jobs.MetaOrdinal))
		if err != nil {
			// Not a child we can place; the reconciler never sees it.
			continue
		}
		if ch.purged {
			// Purged while its allocations still ran: Nomad forgot them in
			// the same transaction and sends no event for them. Once its
			// tasks must have stopped, the child is gone and its ordinal
			// free; until then it shows as stopping.
			left := ch.purgedAt.Add(ch.job.KillGrace() + PurgeMargin).Sub(now)
			if left <= 0 {
				continue
			}
			if obs.RecheckAfter == 0 || left < obs.RecheckAfter {
				obs.RecheckAfter = left
			}
		}
		for i := range ch.allocs {
			// A lost allocation turns stopped by the clock alone, with no
			// event (its node is gone): look again when it does.
			if a := &ch.allocs[i]; a.clientStatus == api.AllocClientStatusLost {
				if left := lostWaitLeft(a, ch.job, now); left > 0 && (obs.RecheckAfter == 0 || left < obs.RecheckAfter) {
					obs.RecheckAfter = left
				}
			}
		}
		if d, ok := podFromChild(ch, ord, now); ok {
			d.Blocked = ch.blockedReason()
			if d.Blocked != "" {
				if pending, readied := c.volumeWaitLocked(key, claims, ord, ch.placement.evalIndex); pending != "" || readied {
					d.Blocked, d.Waiting = "", volumePendingReason(pending)
				}
			}
			obs.Pods = append(obs.Pods, d)
		} else if _, unsettled := c.unsettled[key.Namespace+"/"+id]; unsettled {
			// A deregister whose stop-or-purge Nomad has not told yet: a
			// purged child must not be registered again over its old index
			// (a conflict), nor a stopped one created anew, so until the
			// answer it is a pod still going.
			obs.Pods = append(obs.Pods, PodDetail{AllTerminal: true, JobID: id, JobModifyIndex: ch.job.JobModifyIndex(), Job: ch.job,
				Digest: ch.job.Digest(), Pod: reconciler.Pod{Ordinal: ord, Revision: ch.job.Meta(jobs.MetaRevision),
					Phase: reconciler.PhasePending, Terminating: true, AllTerminal: true}})
		} else {
			obs.Stopped = append(obs.Stopped, StoppedChild{Ordinal: ord, JobID: id, JobModifyIndex: ch.job.JobModifyIndex()})
		}
	}
	for _, claim := range claims {
		m := c.volumes[key.Namespace+"/"+claim+"-"+key.Name]
		ords := make([]int, 0, len(m))
		for o := range m {
			ords = append(ords, o)
		}
		sort.Ints(ords)
		for _, o := range ords {
			v := m[o]
			obs.Volumes = append(obs.Volumes, VolumeDetail{
				Volume: reconciler.Volume{Claim: claim, Ordinal: o, Name: v.Name,
					Class: c.volumeClasses[v.ID], Capacity: v.CapacityBytes},
				ID: v.ID, NodeID: v.NodeID,
			})
		}
	}
	for i := range obs.Pods {
		c.noteNodeLocked(&obs, obs.Pods[i].NodeID)
	}
	for i := range obs.Volumes {
		c.noteNodeLocked(&obs, obs.Volumes[i].NodeID)
	}
	return obs
}

// volumeWaitLocked tells whether a child's placement failure at Raft index
// failedAt is only the wait for its ordinal's own new volumes. Nomad
// creates a host volume "pending" and marks it "ready" at its client's next
// node update, 5 to 10 s later, in the Raft entry that also unblocks the
// evaluations waiting for that node's class. A child registered right after
// its volume, as every new pod is, fails placement meanwhile with "missing
// compatible host volumes", and Nomad places it by itself once the volume
// is ready: that is a wait, not a failure to show. pending names a volume
// of ord still pending; readied is true when one turned ready after the
// failure (Nomad is placing the child again). c.mu is held.
func (c *Cache) volumeWaitLocked(key backend.SetKey, claims []string, ord int, failedAt uint64) (pending string, readied bool) {
	for _, claim := range claims {
		v := c.volumes[key.Namespace+"/"+claim+"-"+key.Name][ord]
		switch {
		case v == nil:
		case v.State == api.HostVolumeStatePending:
			return v.Name, false
		case v.State == api.HostVolumeStateReady && v.ModifyIndex > failedAt:
			readied = true
		}
	}
	return "", readied
}

// volumePendingReason is a pod's Waiting while Nomad has not yet marked its
// new volume ready (volumeWaitLocked); "" when it has.
func volumePendingReason(volume string) string {
	if volume == "" {
		return ""
	}
	return "waiting for Nomad to mark its new volume " + volume +
		" ready (at its client's next node update, 5 to 10 s after it was made); Nomad places the pod then"
}

// noteNodeLocked adds node id to obs.Nodes unless it is plainly fine. c.mu
// is held.
func (c *Cache) noteNodeLocked(obs *Observation, id string) {
	if id == "" {
		return
	}
	n, ok := c.nodeStates[id]
	if !ok || n.Fine() {
		return
	}
	if obs.Nodes == nil {
		obs.Nodes = map[string]NodeState{}
	}
	obs.Nodes[id] = n
}

// newestAlloc returns the allocation created last, or nil.
func newestAlloc(allocs []allocState) *allocState {
	var best *allocState
	for i := range allocs {
		a := &allocs[i]
		if best == nil || a.createIndex > best.createIndex || (a.createIndex == best.createIndex && a.id > best.id) {
			best = a
		}
	}
	return best
}

// newestAllocAfter returns the allocation created last after a raft index,
// or nil.
func newestAllocAfter(allocs []allocState, index uint64) *allocState {
	var best *allocState
	for i := range allocs {
		a := &allocs[i]
		if a.createIndex <= index {
			continue
		}
		if best == nil || a.createIndex > best.createIndex || (a.createIndex == best.createIndex && a.id > best.id) {
			best = a
		}
	}
	return best
}

// updatedInPlace returns the newest allocation that a server updated in
// place to run the job registered at index as version, or nil: an event
// says so by its AllocModifyIndex, a list stub by its JobVersion.
func updatedInPlace(allocs []allocState, index, version uint64) *allocState {
	var best *allocState
	for i := range allocs {
		a := &allocs[i]
		current := a.allocModifyIndex > index || (a.jobVersionKnown && a.jobVersion == version)
		if !current || a.desiredStatus != api.AllocDesiredStatusRun {
			continue
		}
		if best == nil || a.createIndex > best.createIndex || (a.createIndex == best.createIndex && a.id > best.id) {
			best = a
		}
	}
	return best
}

// allocStopped reports whether an allocation can no longer be running
// anywhere. Lost allocations are only taken as stopped once their client
// must have stopped them itself (see lostAllocMargin).
func allocStopped(a *allocState, job *jobs.ChildRecord, now time.Time) bool {
	switch a.clientStatus {
	case api.AllocClientStatusComplete, api.AllocClientStatusFailed:
		return true
	case api.AllocClientStatusLost:
		return lostWaitLeft(a, job, now) <= 0
	}
	return false
}

// lostWaitLeft is how long a lost allocation is still held as possibly
// running: until its client must have stopped it itself.
func lostWaitLeft(a *allocState, job *jobs.ChildRecord, now time.Time) time.Duration {
	wait := defaultLostWait
	if d := job.StopOnClientAfter(); d > 0 {
		wait = d + lostAllocMargin
	}
	return time.Unix(0, a.modifyTime).Add(wait).Sub(now)
}

// WaitingForHealth is the NotReady of a running pod whose allocation Nomad
// has not judged healthy yet: every new pod's first wait.
const WaitingForHealth = backend.WaitingForHealth

// allocFacts returns what readiness reads of the newest allocation of a
// pod, which runs and is not being replaced (DESIGN §2): Nomad's one-shot
// deployment health, and the tasks that do not run with their lifecycle in
// the child job.
func allocFacts(a *allocState, job *jobs.ChildRecord) reconciler.AllocFacts {
	f := reconciler.AllocFacts{
		Live:        true,
		HealthKnown: a.healthKnown, Healthy: a.healthy, HealthTime: a.healthTime,
		TasksKnown: a.tasksKnown,
	}
	if a.tasksStarted > 0 {
		f.TasksStarted = time.Unix(0, a.tasksStarted)
	}
	if len(a.tasks) > 0 {
		// a.tasks is in name order already: the reason a pod shows must
		// not flap between two tasks.
		f.Tasks = make([]reconciler.TaskFacts, len(a.tasks))
		for i, t := range a.tasks {
			hook, sidecar := job.TaskLifecycle(t.name)
			f.Tasks[i] = reconciler.TaskFacts{
				Name: t.name, State: t.state, Dead: t.state == taskDead, Failed: t.failed, Restarts: t.restarts,
				Lifecycle: taskLifecycle(hook), Sidecar: sidecar,
			}
		}
	}
	return f
}

// taskLifecycle maps Nomad's lifecycle hook names to the reconciler's. An
// unknown hook counts as a main task, which must run: a pod is never taken
// as ready on a task it does not understand.
func taskLifecycle(hook string) reconciler.TaskLifecycle {
	switch hook {
	case api.TaskLifecycleHookPrestart:
		return reconciler.TaskPrestart
	case api.TaskLifecycleHookPoststart:
		return reconciler.TaskPoststart
	case api.TaskLifecycleHookPoststop:
		return reconciler.TaskPoststop
	}
	return reconciler.TaskMain
}

// podFromChild maps a child job and its allocations to a pod, following
// DESIGN §2. It returns false when the child is stopped and nothing of it
// can still run: the ordinal then has no pod.
func podFromChild(ch *child, ord int, now time.Time) (PodDetail, bool) {
	job := ch.job
	stopped := job.Stopped()
	anyLive := false
	for i := range ch.allocs {
		if !allocStopped(&ch.allocs[i], job, now) {
			anyLive = true
			break
		}
	}
	if stopped && !anyLive {
		return PodDetail{}, false
	}
	d := PodDetail{
		AllTerminal:    !anyLive,
		JobID:          job.ID(),
		JobModifyIndex: job.JobModifyIndex(),
		Job:            job,
		Digest:         job.Digest(),
		Pod: reconciler.Pod{
			Ordinal:  ord,
			Revision: job.Meta(jobs.MetaRevision),
			Phase:    reconciler.PhasePending,
		},
	}
	if t, ok := job.SubmitTime(); ok {
		d.Pod.Created = time.Unix(0, t)
	}
	if stopped {
		d.Pod.Terminating = true
	}
	// A child registered again (at a new revision, or after it stopped)
	// still lists the allocations of its earlier versions. Until Nomad
	// places one for the current registration, the child is Pending:
	// judging it by an old, completed allocation would read it as Succeeded
	// and delete it again. Allocation events carry no Job (Nomad strips it),
	// so JobVersion is unknown there; but an allocation placed for this
	// registration is created after it, and Nomad moves JobModifyIndex only
	// when the spec changes.
	//
	// A registration Nomad applies in place (only the count changed: the
	// agent putting a scaled child back to 1) places no allocation: the
	// running one is updated to the new version, which moves its
	// AllocModifyIndex past the registration. It is the pod's allocation.
	// An old allocation of a registration that replaces it is never
	// updated in place, only stopped.
	a := newestAlloc(ch.allocs)
	if !stopped {
		a = newestAllocAfter(ch.allocs, job.JobModifyIndex())
		if a == nil {
			a = updatedInPlace(ch.allocs, job.JobModifyIndex(), job.Version())
		}
	}
	if a == nil {
		return d, true
	}
	d.AllocID, d.NodeID, d.ClientStatus = a.id, a.nodeID, a.clientStatus
	// An older allocation still running beside the newest one (Nomad is
	// replacing it) means the ordinal is in transition, never ready.
	olderLive := false
	for i := range ch.allocs {
		if o := &ch.allocs[i]; o.id != a.id && !allocStopped(o, job, now) {
			olderLive = true
		}
	}
	switch a.clientStatus {
	case api.AllocClientStatusPending:
		d.Pod.Phase = reconciler.PhasePending
	case api.AllocClientStatusRunning:
		d.Pod.Phase = reconciler.PhaseRunning
		if a.desiredStatus != api.AllocDesiredStatusRun {
			d.Pod.Terminating = true
		}
		if !d.Pod.Terminating && !olderLive {
			d.Facts.Alloc = allocFacts(a, job)
			d.Judge()
		}
	case api.AllocClientStatusComplete:
		d.Pod.Phase = reconciler.PhaseSucceeded
	case api.AllocClientStatusFailed:
		d.Pod.Phase = reconciler.PhaseFailed
	case api.AllocClientStatusLost:
		if allocStopped(a, job, now) {
			d.Pod.Phase = reconciler.PhaseFailed
		} else {
			// Its client may still be running it; hold the ordinal.
			d.Pod.Phase = reconciler.PhaseRunning
			d.Pod.Terminating = true
		}
	default:
		// An unknown status is treated as not ready and never as gone.
		d.Pod.Phase = reconciler.PhasePending
	}
	if olderLive {
		d.Pod.Terminating = d.Pod.Terminating || stopped
	}
	return d, true
}
