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

// PodDetail is one observed pod plus the Nomad facts behind it.
type PodDetail struct {
	Pod reconciler.Pod
	// JobID is the child job's ID.
	JobID string
	// JobModifyIndex is the child's modify index, for check-and-set writes.
	JobModifyIndex uint64
	// AllocID and NodeID are those of the newest allocation, if any.
	AllocID string
	NodeID  string
	// ClientStatus is the newest allocation's client status.
	ClientStatus string
	// Job is the child job as Nomad has it, in its compact form
	// (jobs.CompactChild): what drift detection (jobs.ChildMatches) and
	// ParseChild read, not the whole job.
	Job *api.Job
	// AllTerminal is true when no allocation of the child can still run.
	AllTerminal bool
}

// StoppedChild is a child job that is stopped and fully terminal: its
// ordinal has no pod, but re-registering must name its modify index.
type StoppedChild struct {
	Ordinal        int
	JobID          string
	JobModifyIndex uint64
}

// VolumeDetail is one observed per-ordinal volume.
type VolumeDetail struct {
	Volume reconciler.Volume
	ID     string
	NodeID string
}

// Observation is everything the cache knows about one set.
type Observation struct {
	// Parent is the parent job; nil if Nomad no longer has it.
	Parent *api.Job
	// ParentPurged is true when the parent was purged; Parent then holds
	// its last known version so the cascading delete can follow its policy.
	ParentPurged bool
	Pods         []PodDetail
	Stopped      []StoppedChild
	Volumes      []VolumeDetail
}

// Observe returns the set's observed state at time now. claims are the set's
// volume claim names, used to find its volumes.
func (c *Cache) Observe(key backend.SetKey, claims []string, now time.Time) Observation {
	c.mu.RLock()
	defer c.mu.RUnlock()
	var obs Observation
	if p, ok := c.parents[key]; ok {
		obs.Parent = p
	} else if p, ok := c.purged[key]; ok {
		obs.Parent, obs.ParentPurged = p, true
	}
	ids := make([]string, 0, len(c.children[key]))
	for id := range c.children[key] {
		ids = append(ids, id)
	}
	sort.Strings(ids)
	for _, id := range ids {
		ch := c.children[key][id]
		ord, err := strconv.Atoi(ch.job.Meta(metaOrdinal))
		if err != nil {
			// Not a child we can place; the reconciler never sees it.
			continue
		}
		if d, ok := podFromChild(ch, ord, now); ok {
			obs.Pods = append(obs.Pods, d)
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
				Volume: reconciler.Volume{Claim: claim, Ordinal: o, Name: v.Name},
				ID:     v.ID, NodeID: v.NodeID,
			})
		}
	}
	return obs
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

// allocStopped reports whether an allocation can no longer be running
// anywhere. Lost allocations are only taken as stopped once their client
// must have stopped them itself (see lostAllocMargin).
func allocStopped(a *allocState, job *jobs.ChildRecord, now time.Time) bool {
	switch a.clientStatus {
	case api.AllocClientStatusComplete, api.AllocClientStatusFailed:
		return true
	case api.AllocClientStatusLost:
		wait := defaultLostWait
		if d := job.StopOnClientAfter(); d > 0 {
			wait = d + lostAllocMargin
		}
		return now.Sub(time.Unix(0, a.modifyTime)) >= wait
	}
	return false
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
		Job:            job.Job(),
		Pod: reconciler.Pod{
			Ordinal:  ord,
			Revision: job.Meta("statefulset_revision"),
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
	a := newestAlloc(ch.allocs)
	if !stopped {
		a = newestAllocAfter(ch.allocs, job.JobModifyIndex())
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
		if !d.Pod.Terminating && !olderLive && a.healthKnown && a.healthy {
			d.Pod.Ready = true
			d.Pod.ReadySince = a.healthTime
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
