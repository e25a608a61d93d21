package nomad

import (
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/hashicorp/nomad/api"

	"github.com/nomad-statefulset/nomad-statefulset/backend"
	"github.com/nomad-statefulset/nomad-statefulset/jobs"
)

// child is the cached state of one child job and its allocations. A cache
// holds one per pod, so it is kept small: the job as a jobs.ChildRecord
// (what drift detection and the observation read, some 1 KB where the
// decoded job is tens) and of each allocation only what Observe reads.
type child struct {
	job    *jobs.ChildRecord
	allocs []allocState
	// purgedAt is when the watcher saw the purge: Nomad 1.10 deletes a
	// purged job's allocations in the same transaction and sends no
	// allocation event for them, so the child is held as stopping only
	// until its tasks must have stopped (PurgeGrace after purgedAt).
	purgedAt time.Time
	// purged marks a child Nomad purged while its allocations were still
	// stopping; it is forgotten once they are terminal.
	purged bool
	// placement is the child's last placement failure, from the
	// Evaluation topic; nil when it has none. evalIndex is the ModifyIndex
	// of the last evaluation that said how its placement went, so that an
	// older one arriving late changes nothing.
	placement *placement
	evalIndex uint64
}

// allocState is what the cache keeps of an allocation.
type allocState struct {
	id, nodeID                  string
	clientStatus, desiredStatus string
	createIndex, modifyIndex    uint64
	// allocModifyIndex is when a server last changed the allocation: an
	// allocation Nomad updated in place for a new registration of its job
	// has it above the job's JobModifyIndex.
	allocModifyIndex uint64
	// jobVersion is the job version the allocation runs, known from a
	// list stub (events do not carry it).
	jobVersion      uint64
	jobVersionKnown bool
	// modifyTime is in Unix nanoseconds, as Nomad gives it.
	modifyTime int64
	// healthKnown is set once the deployment reported the allocation's
	// health: healthy, since healthTime.
	healthKnown, healthy bool
	healthTime           time.Time
	// tasksKnown is set when the payload carried task states. Then
	// tasks holds the tasks that are not running (nil in the steady state,
	// when all run), which readiness judges against the job's lifecycle
	// blocks, and tasksStarted is the latest start of a running task, in
	// Unix nanoseconds: a task that restarted moves it, and with it the
	// pod's ReadySince. The whole TaskStates map (events included) would
	// be some kilobytes per allocation; this is 32 bytes when all run.
	tasksKnown   bool
	tasks        []taskNote
	tasksStarted int64
}

// Nomad's task states (structs.TaskState*; the api package has no names
// for them).
const (
	taskPending = "pending"
	taskRunning = "running"
	taskDead    = "dead"
)

// taskNote is what readiness needs of a task that is not running.
type taskNote struct {
	name string
	// state is Nomad's task state, "pending" or "dead".
	state    string
	failed   bool
	restarts uint64
}

// taskStatePayload is the part of an api.TaskState that readiness reads,
// with its field names, so that decoding skips the task's events.
type taskStatePayload struct {
	State      string
	Failed     bool
	Restarts   uint64
	StartedAt  time.Time
	FinishedAt time.Time
}

// taskStates reduces a payload's task states to what the cache keeps. It
// returns known=false when the payload had none (a simulator, or a listing
// without them): readiness then rests on Nomad's health alone.
func taskStates(ts map[string]*taskStatePayload) (notes []taskNote, started int64, known bool) {
	if len(ts) == 0 {
		return nil, 0, false
	}
	for name, t := range ts {
		if t == nil {
			continue
		}
		if t.State == taskRunning {
			if !t.StartedAt.IsZero() {
				started = max(started, t.StartedAt.UnixNano())
			}
			continue
		}
		state := t.State
		switch state {
		case taskPending:
			state = taskPending // interned, as internStatus does
		case taskDead:
			state = taskDead
		}
		notes = append(notes, taskNote{name: name, state: state, failed: t.Failed, restarts: t.Restarts})
	}
	// Map order is random; a stable order keeps the reason a pod shows
	// from flapping between two tasks.
	slices.SortFunc(notes, func(a, b taskNote) int { return strings.Compare(a.name, b.name) })
	return notes, started, true
}

// internStatus returns Nomad's status strings as constants, so that ten
// thousand cached allocations do not each hold a decoded copy.
func internStatus(s string) string {
	for _, c := range [...]string{
		api.AllocClientStatusPending, api.AllocClientStatusRunning, api.AllocClientStatusComplete,
		api.AllocClientStatusFailed, api.AllocClientStatusLost, api.AllocClientStatusUnknown,
		api.AllocDesiredStatusRun, api.AllocDesiredStatusStop, api.AllocDesiredStatusEvict,
	} {
		if s == c {
			return c
		}
	}
	return s
}

// stateOf converts a decoded allocation for the cache, interning the node
// ID, which a cluster's allocations share. Callers hold c.mu.
func (c *Cache) stateOf(a *allocPayload) allocState {
	st := allocState{
		id: a.ID, nodeID: internNode(c.nodes, a.NodeID),
		clientStatus: internStatus(a.ClientStatus), desiredStatus: internStatus(a.DesiredStatus),
		createIndex: a.CreateIndex, modifyIndex: a.ModifyIndex, allocModifyIndex: a.AllocModifyIndex, modifyTime: a.ModifyTime,
	}
	if a.JobVersion != nil {
		st.jobVersion, st.jobVersionKnown = *a.JobVersion, true
	}
	if d := a.DeploymentStatus; d != nil && d.Healthy != nil {
		st.healthKnown, st.healthy, st.healthTime = true, *d.Healthy, d.Timestamp
	}
	st.tasks, st.tasksStarted, st.tasksKnown = taskStates(a.TaskStates)
	return st
}

func internNode(nodes map[string]string, id string) string {
	if n, ok := nodes[id]; ok {
		return n
	}
	nodes[id] = id
	return id
}

// Cache is the watcher's in-memory view of the cluster, grouped by set. It is
// filled by a full list and kept current by the event stream. Updates only
// move forward (by modify index), so replayed events are harmless.
type Cache struct {
	mu sync.RWMutex
	// index is the highest Nomad raft index the cache reflects.
	index uint64
	// listIndex is the index of the last full list: a volume event at or
	// below it is already in the list (the stream and a re-list overlap).
	listIndex uint64
	synced    bool
	parents   map[backend.SetKey]*api.Job
	// purged records parents that were purged from Nomad while the set
	// still had children, so the cascading delete can finish.
	purged   map[backend.SetKey]*api.Job
	children map[backend.SetKey]map[string]*child
	// owner maps "namespace/jobID" of a child to its set, for allocation events.
	owner map[string]backend.SetKey
	// volumes maps "namespace/<claim>-<set>" to ordinal to volume.
	volumes map[string]map[int]*api.HostVolumeStub
	// deletedVolumes maps the ID of each volume whose delete was seen to
	// the index of that event. Volume IDs are never reused, so a
	// registration of a deleted ID is an older event (a re-list and the
	// stream overlap) and must not bring the volume back. It survives
	// Replace for deletes newer than the snapshot, and is pruned there.
	deletedVolumes map[string]uint64
	// volumeClasses maps the ID of each volume whose storage class is
	// known to that class (ClassParameter; "" for the default). A list
	// stub does not carry a volume's parameters, so the class comes from
	// the volume's events, or from one read of the volume by the re-list
	// that first meets it; a volume keeps its class, so that read is never
	// repeated. It survives Replace for the volumes the listing holds.
	volumeClasses map[string]string
	// nodes interns the node IDs of cached allocations.
	nodes map[string]string
	// nodeStates are the client nodes' drain, eligibility and status.
	nodeStates map[string]NodeState
	// unsettled maps "namespace/id" of each job whose deregister event the
	// cache holds without yet knowing whether it was a stop or a purge to
	// that event's index. The job is shown stopped meanwhile (its ordinal
	// is not free); settleDeregister applies Nomad's answer, and a newer
	// event of the job, or a re-list, makes the answer moot.
	unsettled map[string]uint64
}

// NewCache returns an empty, unsynced cache.
func NewCache() *Cache {
	c := &Cache{}
	c.reset()
	return c
}

func (c *Cache) reset() {
	c.parents = map[backend.SetKey]*api.Job{}
	c.purged = map[backend.SetKey]*api.Job{}
	c.children = map[backend.SetKey]map[string]*child{}
	c.owner = map[string]backend.SetKey{}
	c.volumes = map[string]map[int]*api.HostVolumeStub{}
	if c.deletedVolumes == nil {
		c.deletedVolumes = map[string]uint64{}
	}
	if c.volumeClasses == nil {
		c.volumeClasses = map[string]string{}
	}
	c.nodes = map[string]string{}
	c.nodeStates = map[string]NodeState{}
	c.unsettled = map[string]uint64{}
}

// Index returns the highest Nomad index the cache reflects.
func (c *Cache) Index() uint64 {
	c.mu.RLock()
	defer c.mu.RUnlock()
	return c.index
}

// Synced reports whether a full list has completed since the cache was created.
func (c *Cache) Synced() bool {
	c.mu.RLock()
	defer c.mu.RUnlock()
	return c.synced
}

func str(p *string) string {
	if p == nil {
		return ""
	}
	return *p
}

func u64(p *uint64) uint64 {
	if p == nil {
		return 0
	}
	return *p
}

func jobNamespace(j *api.Job) string {
	if ns := str(j.Namespace); ns != "" {
		return ns
	}
	return "default"
}

// parentOf returns the set a child job belongs to, from its meta.
func parentOf(j *api.Job) (backend.SetKey, bool) {
	p, ok := j.Meta[jobs.MetaParent]
	if !ok || p == "" {
		return backend.SetKey{}, false
	}
	return backend.SetKey{Namespace: jobNamespace(j), Name: p}, true
}

func isParent(j *api.Job) bool {
	return j.Meta[jobs.KeyManaged] == "true" && j.Meta[jobs.MetaParent] == ""
}

// Snapshot is a full listing, used to replace the cache's contents.
type Snapshot struct {
	Index uint64
	// At is when the listing was taken: a child it no longer holds while
	// the cache saw its allocations still running was purged unseen, and
	// is held as stopping for its kill grace from then.
	At      time.Time
	Jobs    []*api.Job
	Allocs  []*api.AllocationListStub
	Volumes []*api.HostVolumeStub
	// VolumeClasses are the storage classes of the listed volumes the
	// cache did not know the class of, by volume ID, read one by one.
	VolumeClasses map[string]string
	// Nodes are the client nodes.
	Nodes []*api.NodeListStub
	// kept are children the re-list found unchanged, carried over from
	// the cache as they are rather than rebuilt from a job.
	kept []*jobs.ChildRecord
}

// Replace swaps the cache's contents for a full listing and returns every set
// that was or is now known, so all of them are reconciled again.
func (c *Cache) Replace(s Snapshot) []backend.SetKey {
	c.mu.Lock()
	defer c.mu.Unlock()
	touched := c.setsLocked()
	purged := c.purged
	for key := range c.unsettled {
		// A parent deregistered, maybe purged, before the listing: if the
		// listing no longer holds it, it was purged.
		if k, ok := splitKey(key); ok && c.parents[k] != nil {
			purged[k] = c.parents[k]
		}
	}
	stopping := c.stoppingChildrenLocked(s.Index, s.At)
	placements := c.placementsLocked()
	wasParent := make(map[backend.SetKey]bool, len(c.parents)+len(c.purged))
	for k := range c.parents {
		wasParent[k] = true
	}
	for k := range purged {
		wasParent[k] = true
	}
	c.reset()
	// Children first: a parent that is not annotated is kept only for a set
	// that has children or had a parent (upsertParentLocked), whatever the
	// listing's order.
	var parents []*api.Job
	for _, j := range s.Jobs {
		if j == nil || j.ID == nil {
			continue
		}
		if _, child := parentOf(j); !child {
			parents = append(parents, j)
			continue
		}
		if k, ok := c.upsertJobLocked(j); ok {
			touched[k] = struct{}{}
		}
	}
	for _, r := range s.kept {
		if k, ok := c.upsertRecordLocked(r); ok {
			touched[k] = struct{}{}
		}
	}
	for _, j := range parents {
		k := backend.SetKey{Namespace: jobNamespace(j), Name: *j.ID}
		if wasParent[k] && !isParent(j) {
			c.parents[k] = j // known as the set's parent: it stays so
			touched[k] = struct{}{}
			continue
		}
		if k, ok := c.upsertParentLocked(j); ok {
			touched[k] = struct{}{}
		}
	}
	for _, a := range s.Allocs {
		if k, ok := c.upsertAllocLocked(a); ok {
			touched[k] = struct{}{}
		}
	}
	for id, at := range c.deletedVolumes {
		if at <= s.Index {
			// The snapshot is newer than the delete: it is the truth.
			delete(c.deletedVolumes, id)
		}
	}
	listed := make(map[string]bool, len(s.Volumes))
	for _, v := range s.Volumes {
		if _, gone := c.deletedVolumes[v.ID]; !gone {
			c.putVolumeLocked(v)
			listed[v.ID] = true
		}
	}
	for id := range c.volumeClasses {
		if !listed[id] {
			delete(c.volumeClasses, id)
		}
	}
	for id, class := range s.VolumeClasses {
		if listed[id] {
			c.volumeClasses[id] = class
		}
	}
	c.replaceNodesLocked(s.Nodes)
	for id, p := range placements {
		// A listing has no evaluations: a failure still holds for the
		// same version of the child (blockedReason judges the rest).
		if k, ok := c.owner[id]; ok {
			name := id[strings.IndexByte(id, '/')+1:]
			if ch := c.children[k][name]; ch != nil && ch.job != nil && ch.job.JobModifyIndex() == p.jobModifyIndex {
				ch.placement, ch.evalIndex = p, p.evalIndex
			}
		}
	}
	for _, st := range stopping {
		if c.children[st.key][st.id] != nil {
			continue // the listing holds the child (or a new one of its ID)
		}
		if c.children[st.key] == nil {
			c.children[st.key] = map[string]*child{}
		}
		c.children[st.key][st.id] = st.child
		c.owner[st.key.Namespace+"/"+st.id] = st.key
		touched[st.key] = struct{}{}
	}
	// A purged parent is remembered until its children are gone.
	for k, j := range purged {
		if _, back := c.parents[k]; !back && len(c.children[k]) > 0 {
			c.purged[k] = j
		}
	}
	if s.Index > c.index {
		c.index = s.Index
	}
	c.listIndex = s.Index
	c.synced = true
	return sortedKeys(touched)
}

// placementsLocked returns the children's placement failures by
// "namespace/id", to carry over a re-list. The caller holds mu.
func (c *Cache) placementsLocked() map[string]*placement {
	out := map[string]*placement{}
	for k, kids := range c.children {
		for id, ch := range kids {
			if ch.placement != nil {
				out[k.Namespace+"/"+id] = ch.placement
			}
		}
	}
	return out
}

// stoppingChild is a child carried over a re-list as a purged stand-in.
type stoppingChild struct {
	key   backend.SetKey
	id    string
	child *child
}

// stoppingChildrenLocked returns the children a re-list at index, taken at
// at, must not simply drop when it no longer holds them: those already
// held as purged (their kill grace still runs), and those whose
// allocations the cache last saw running, which can only have gone by a
// purge whose event was missed (a stream cut short). Dropping either would
// free the ordinal while its old task may still be stopping. A child
// registered after the listing's index is not one it could have held.
// The caller holds mu.
func (c *Cache) stoppingChildrenLocked(index uint64, at time.Time) []stoppingChild {
	var out []stoppingChild
	for k, kids := range c.children {
		for id, ch := range kids {
			switch {
			case ch.job == nil:
			case ch.purged:
				out = append(out, stoppingChild{k, id, ch})
			case !allTerminal(ch.allocs) && ch.job.ModifyIndex() <= index:
				cp := *ch
				cp.job = ch.job.WithStop()
				cp.purged, cp.purgedAt = true, at
				out = append(out, stoppingChild{k, id, &cp})
			}
		}
	}
	return out
}

func sortedKeys(m map[backend.SetKey]struct{}) []backend.SetKey {
	out := make([]backend.SetKey, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].String() < out[j].String() })
	return out
}

// UpsertJob records a job seen in an event or after a write. It returns the
// set the job belongs to, if any.
func (c *Cache) UpsertJob(j *api.Job, index uint64) (backend.SetKey, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.advanceLocked(index)
	return c.upsertJobLocked(j)
}

// digestAt returns the spec digest of child ns/id if the cache holds it at
// jobModifyIndex with a known digest: its spec has not changed since.
func (c *Cache) digestAt(ns, id string, jobModifyIndex uint64) (jobs.SpecDigest, bool) {
	c.mu.RLock()
	defer c.mu.RUnlock()
	k, ok := c.owner[ns+"/"+id]
	if !ok || jobModifyIndex == 0 {
		return jobs.SpecDigest{}, false
	}
	ch := c.children[k][id]
	if ch == nil || ch.job == nil || ch.job.JobModifyIndex() != jobModifyIndex || !ch.job.Digest().Known() {
		return jobs.SpecDigest{}, false
	}
	return ch.job.Digest(), true
}

// UpsertChildRecord records a job seen in an event, already reduced to its
// record (jobs.DecodeChildRecord). A job that is not a child goes the way
// of UpsertJob: it may be a parent that lost its annotation.
func (c *Cache) UpsertChildRecord(r *jobs.ChildRecord, index uint64) (backend.SetKey, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.advanceLocked(index)
	if r.Meta(jobs.MetaParent) == "" {
		return c.upsertJobLocked(r.Job())
	}
	return c.upsertRecordLocked(r)
}

func (c *Cache) advanceLocked(index uint64) {
	if index > c.index {
		c.index = index
	}
}

func (c *Cache) upsertJobLocked(j *api.Job) (backend.SetKey, bool) {
	if j == nil || j.ID == nil {
		return backend.SetKey{}, false
	}
	k, ok := parentOf(j)
	if !ok {
		return c.upsertParentLocked(j)
	}
	return c.upsertChildLocked(k, *j.ID, u64(j.ModifyIndex), u64(j.CreateIndex), func() *jobs.ChildRecord { return jobs.NewChildRecord(j) })
}

// upsertParentLocked records a job that is no set's child. An annotated one
// is a set's parent. One that is not annotated is kept as its set's parent
// too when it was one, or when the set has children: the set is then
// detached, not deleted (reconciler.IsDetached), and only a parent that the
// cache holds tells the one from the other. Any other job is none of ours.
func (c *Cache) upsertParentLocked(j *api.Job) (backend.SetKey, bool) {
	k := backend.SetKey{Namespace: jobNamespace(j), Name: *j.ID}
	if !isParent(j) && !c.mayBeParentLocked(k) {
		return backend.SetKey{}, false
	}
	if old, ok := c.parents[k]; ok && u64(old.ModifyIndex) > u64(j.ModifyIndex) {
		return k, true
	}
	c.parents[k] = j
	delete(c.purged, k)
	delete(c.unsettled, k.Namespace+"/"+k.Name)
	return k, true
}

// mayBeParentLocked reports whether a job that is not annotated, of set k's
// name, is that set's parent as far as the cache knows: it holds the set's
// parent, a purged one, or children. The caller holds mu.
func (c *Cache) mayBeParentLocked(k backend.SetKey) bool {
	_, parent := c.parents[k]
	_, purged := c.purged[k]
	return parent || purged || len(c.children[k]) > 0
}

// knowsParent reports whether the cache holds a parent, annotated or not, or
// a purged parent, of set ns/id: a re-list must read such a job even when it
// is not annotated, or the set would look deleted.
func (c *Cache) knowsParent(ns, id string) bool {
	c.mu.RLock()
	defer c.mu.RUnlock()
	k := backend.SetKey{Namespace: ns, Name: id}
	_, parent := c.parents[k]
	_, purged := c.purged[k]
	return parent || purged
}

// upsertChildLocked records child id of set k at modifyIndex, unless the
// cache holds a newer version; rec is only called when it is recorded.
// createIndex is the job's CreateIndex (0 if unknown). Recording a version
// settles a deregister the cache held unsettled: it is newer.
func (c *Cache) upsertChildLocked(k backend.SetKey, id string, modifyIndex, createIndex uint64, rec func() *jobs.ChildRecord) (backend.SetKey, bool) {
	kids := c.children[k]
	if kids == nil {
		kids = map[string]*child{}
		c.children[k] = kids
	}
	ch := kids[id]
	switch {
	case ch == nil:
		ch = &child{}
		kids[id] = ch
	case ch.job != nil && ch.job.ModifyIndex() > modifyIndex:
		return k, true
	case ch.purged, createIndex != 0 && ch.job != nil && ch.job.CreateIndex() != 0 && ch.job.CreateIndex() != createIndex:
		// A new job under a purged child's ID (known purged, or purged
		// unseen or unsettled: its CreateIndex is new): the purged job's
		// allocations, which Nomad forgot, are not this one's.
		ch = &child{}
		kids[id] = ch
	}
	ch.job = rec()
	c.owner[k.Namespace+"/"+id] = k
	delete(c.unsettled, k.Namespace+"/"+id)
	return k, true
}

// upsertRecordLocked re-inserts a child record kept from before a re-list.
func (c *Cache) upsertRecordLocked(r *jobs.ChildRecord) (backend.SetKey, bool) {
	ns := r.Namespace()
	if ns == "" {
		ns = "default"
	}
	parent := r.Meta(jobs.MetaParent)
	if r.ID() == "" || parent == "" {
		return backend.SetKey{}, false
	}
	return c.upsertChildLocked(backend.SetKey{Namespace: ns, Name: parent}, r.ID(), r.ModifyIndex(), r.CreateIndex(), func() *jobs.ChildRecord { return r })
}

// jobAt returns the cached job of stub s (in namespace ns) when the re-list
// need not read it again. A parent comes back as its job, when the cache
// holds it at exactly the stub's ModifyIndex. A child comes back as its
// record, which Replace keeps, when the cache holds it at the stub's
// ModifyIndex, or holds its spec (the same JobModifyIndex, CreateIndex,
// stop flag and SubmitTime): Nomad moves ModifyIndex alone when only the
// job's status or stability changes, as every child's does when it is
// placed and again when its deployment succeeds, and the stub has the new
// status (jobs.ChildRecord.WithListing). A purged child's stopped stand-in,
// and a job whose deregister is unsettled, are never returned: either may
// not be what Nomad holds.
func (c *Cache) jobAt(ns string, s *api.JobListStub) (*api.Job, *jobs.ChildRecord) {
	id, modifyIndex := s.ID, s.ModifyIndex
	c.mu.RLock()
	defer c.mu.RUnlock()
	if modifyIndex == 0 {
		return nil, nil
	}
	if _, unsettled := c.unsettled[ns+"/"+id]; unsettled {
		return nil, nil // shown stopped, which Nomad may not hold
	}
	if p, ok := c.parents[backend.SetKey{Namespace: ns, Name: id}]; ok {
		if u64(p.ModifyIndex) == modifyIndex {
			return p, nil
		}
		return nil, nil
	}
	k, ok := c.owner[ns+"/"+id]
	if !ok {
		return nil, nil
	}
	ch := c.children[k][id]
	if ch == nil || ch.purged || ch.job == nil {
		return nil, nil
	}
	if ch.job.ModifyIndex() == modifyIndex {
		return nil, ch.job
	}
	if r, ok := ch.job.WithListing(s); ok {
		return nil, r
	}
	return nil, nil
}

// PurgeMargin is added to a purged child's kill grace before its ordinal
// is placed again; see backend.PurgeMargin.
const PurgeMargin = backend.PurgeMargin

// RemoveJob forgets a job that Nomad purged, at now.
func (c *Cache) RemoveJob(namespace, id string, index uint64, now time.Time) (backend.SetKey, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.advanceLocked(index)
	return c.removeJobLocked(namespace, id, now)
}

// removeJobLocked is RemoveJob under c.mu.
func (c *Cache) removeJobLocked(namespace, id string, now time.Time) (backend.SetKey, bool) {
	delete(c.unsettled, namespace+"/"+id)
	pk := backend.SetKey{Namespace: namespace, Name: id}
	if p, ok := c.parents[pk]; ok {
		delete(c.parents, pk)
		if len(c.children[pk]) > 0 {
			c.purged[pk] = p
		}
		return pk, true
	}
	k, ok := c.owner[namespace+"/"+id]
	if !ok {
		return backend.SetKey{}, false
	}
	if kids := c.children[k]; kids != nil {
		if ch := kids[id]; ch != nil && !allTerminal(ch.allocs) {
			// Purged but its allocations are still stopping: keep it as a
			// stopped job so the pod shows as Terminating, never as gone.
			ch.job = ch.job.WithStop()
			ch.purged, ch.purgedAt = true, now
			return k, true
		}
		delete(kids, id)
		if len(kids) == 0 {
			delete(c.children, k)
		}
	}
	delete(c.owner, namespace+"/"+id)
	return k, true
}

// deregisterKind is what a JobDeregistered event did to its job.
type deregisterKind int

const (
	// deregisterUnknown: the event alone cannot tell; Nomad must be asked.
	deregisterUnknown deregisterKind = iota
	// deregisterStopped: the job is stopped, and the payload is it as Nomad
	// now holds it.
	deregisterStopped
	// deregisterPurged: the job is gone.
	deregisterPurged
)

// String names the kind for logs and tests.
func (k deregisterKind) String() string {
	switch k {
	case deregisterStopped:
		return "stopped"
	case deregisterPurged:
		return "purged"
	}
	return "unknown"
}

// deregisterKindOf reads a JobDeregistered event at index as a stop or a
// purge from its payload alone. Nomad's FSM (nomad/fsm.go,
// handleJobDeregister, 1.10.5, which applyBatchDeregisterJob calls too)
// stops a job by writing a stopped copy at the event's raft index, so a
// stop's payload was modified at exactly that index; a purge deletes the
// job, and the event carries the job as it was before
// (nomad/state/events.go, eventFromChange), last modified earlier.
// Anything else (an index of 0, a payload modified later, a job modified at
// the index yet not stopped) is left to Nomad's answer.
func deregisterKindOf(job *api.Job, index uint64) deregisterKind {
	if index == 0 || job == nil || job.ModifyIndex == nil {
		return deregisterUnknown
	}
	switch modify := *job.ModifyIndex; {
	case modify == index && job.Stop != nil && *job.Stop:
		return deregisterStopped
	case modify < index:
		return deregisterPurged
	}
	return deregisterUnknown
}

// notePurge folds a JobDeregistered event at index that purged job, as
// deregisterKindOf read it, into the cache at now: a known job is removed
// as RemoveJob does, a child whose allocations are still stopping held as
// stopping. Nothing changes when the cache knows better already: a re-list
// at or after index, a newer version of the job, the purge itself, or a job
// it never held.
func (c *Cache) notePurge(job *api.Job, index uint64, now time.Time) (backend.SetKey, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.advanceLocked(index)
	if job == nil || job.ID == nil || index <= c.listIndex {
		return backend.SetKey{}, false
	}
	ns, id := jobNamespace(job), *job.ID
	modify := u64(job.ModifyIndex)
	pk := backend.SetKey{Namespace: ns, Name: id}
	if p, ok := c.parents[pk]; ok {
		if u64(p.ModifyIndex) > modify {
			return backend.SetKey{}, false // an older event
		}
		return c.removeJobLocked(ns, id, now)
	}
	sk, known := c.owner[ns+"/"+id]
	ch := c.children[sk][id]
	if !known || ch == nil || ch.job == nil || ch.purged || ch.job.ModifyIndex() > modify {
		return backend.SetKey{}, false
	}
	return c.removeJobLocked(ns, id, now)
}

// noteDeregister folds a JobDeregistered event that deregisterKindOf could
// not read into the cache in constant time, without asking Nomad whether it
// was a stop or a purge. A job the
// cache knows is shown stopped, so that its pod is stopping, never gone,
// and marked unsettled at index until settleDeregister applies Nomad's
// answer. job is the payload's job, rec its child record when the watcher
// decoded one. held reports whether the cache now holds the job unsettled
// (the set k is touched); settle whether the event needs that answer: not when
// the cache knows better already (a re-list at or after index, a newer
// version of the job, the purge itself), nor for a job that is none of
// ours.
func (c *Cache) noteDeregister(job *api.Job, rec *jobs.ChildRecord, index uint64) (k backend.SetKey, held, settle bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.advanceLocked(index)
	if job == nil || job.ID == nil || (index != 0 && index <= c.listIndex) {
		return k, false, false // the last full list already holds its outcome
	}
	ns, id := jobNamespace(job), *job.ID
	key := ns + "/" + id
	modify := u64(job.ModifyIndex)
	pk := backend.SetKey{Namespace: ns, Name: id}
	if p, ok := c.parents[pk]; ok {
		if u64(p.ModifyIndex) > modify {
			return pk, false, false // an older event
		}
		if isParent(job) {
			// A stopped parent and a purged one both delete the set, by
			// the same spec: stopped is the safe reading meanwhile.
			stopped, stop := *job, true
			stopped.Stop = &stop
			c.parents[pk] = &stopped
		}
		c.unsettled[key] = index
		return pk, true, true
	}
	if p, ok := c.purged[pk]; ok && u64(p.ModifyIndex) >= modify {
		return pk, false, false // its purge is known
	}
	sk, known := c.owner[key]
	ch := c.children[sk][id]
	if _, child := parentOf(job); !child || !known || ch == nil || ch.job == nil {
		// Unknown: nothing to hold as stopping. Nomad's answer adopts a
		// child or parent it still has (a missed registration).
		return k, false, child || isParent(job)
	}
	if ch.job.ModifyIndex() > modify || (ch.purged && ch.job.ModifyIndex() >= modify) {
		return sk, false, false // an older event, or its purge is known
	}
	if rec == nil {
		rec = jobs.NewChildRecord(job)
	}
	stopped := rec.WithStop()
	c.upsertChildLocked(sk, id, modify, stopped.CreateIndex(), func() *jobs.ChildRecord { return stopped })
	c.unsettled[key] = index
	return sk, true, true
}

// settleDeregister applies Nomad's answer to whether job ns/id, whose
// deregister event at index the watcher saw, was stopped or purged: job is
// the job Nomad has, nil when it has none (a purge, at now). held says
// whether noteDeregister held the job unsettled. The answer was read after
// the event, but it may come after newer events too: it applies only while
// nothing newer has: no re-list since the event, and the job still
// unsettled at index (or still unknown, for a job it did not hold).
func (c *Cache) settleDeregister(ns, id string, index uint64, held bool, job *api.Job, now time.Time) (backend.SetKey, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if index != 0 && index <= c.listIndex {
		return backend.SetKey{}, false // a re-list since the event holds the truth
	}
	key := ns + "/" + id
	if held {
		if at, ok := c.unsettled[key]; !ok || at != index {
			return backend.SetKey{}, false // a newer event of the job decides
		}
		delete(c.unsettled, key)
		if job == nil {
			return c.removeJobLocked(ns, id, now)
		}
		return c.upsertJobLocked(job)
	}
	if job == nil || c.knowsLocked(ns, id) {
		return backend.SetKey{}, false
	}
	return c.upsertJobLocked(job)
}

// knowsLocked reports whether the cache holds job ns/id in any form. The
// caller holds mu.
func (c *Cache) knowsLocked(ns, id string) bool {
	k := backend.SetKey{Namespace: ns, Name: id}
	_, parent := c.parents[k]
	_, purged := c.purged[k]
	_, child := c.owner[ns+"/"+id]
	return parent || purged || child
}

// splitKey splits a "namespace/id" key of the cache.
func splitKey(key string) (backend.SetKey, bool) {
	ns, id, ok := strings.Cut(key, "/")
	return backend.SetKey{Namespace: ns, Name: id}, ok
}

// upsertAllocLocked records an allocation from a listing.
func (c *Cache) upsertAllocLocked(a *api.AllocationListStub) (backend.SetKey, bool) {
	if a == nil {
		return backend.SetKey{}, false
	}
	p := stubPayload(a)
	return c.upsertAllocStateLocked(p.Namespace, p.JobID, c.stateOf(p))
}

// stubPayload is the part of a listed allocation that an event's would
// carry: the cache reads the two through one allocPayload.
func stubPayload(a *api.AllocationListStub) *allocPayload {
	return &allocPayload{
		ID: a.ID, Namespace: a.Namespace, NodeID: a.NodeID, JobID: a.JobID,
		DesiredStatus: a.DesiredStatus, ClientStatus: a.ClientStatus, DeploymentStatus: a.DeploymentStatus,
		CreateIndex: a.CreateIndex, ModifyIndex: a.ModifyIndex, JobVersion: &a.JobVersion, ModifyTime: a.ModifyTime,
		TaskStates: stubTaskStates(a.TaskStates),
	}
}

func stubTaskStates(ts map[string]*api.TaskState) map[string]*taskStatePayload {
	if len(ts) == 0 {
		return nil
	}
	out := make(map[string]*taskStatePayload, len(ts))
	for name, t := range ts {
		if t != nil {
			out[name] = &taskStatePayload{State: t.State, Failed: t.Failed, Restarts: t.Restarts, StartedAt: t.StartedAt, FinishedAt: t.FinishedAt}
		}
	}
	return out
}

// upsertAllocPayload records an allocation decoded from an event.
func (c *Cache) upsertAllocPayload(a *allocPayload, index uint64) (backend.SetKey, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.advanceLocked(index)
	return c.upsertAllocStateLocked(a.Namespace, a.JobID, c.stateOf(a))
}

func (c *Cache) upsertAllocStateLocked(ns, jobID string, a allocState) (backend.SetKey, bool) {
	if ns == "" {
		ns = "default"
	}
	k, ok := c.owner[ns+"/"+jobID]
	if !ok {
		return backend.SetKey{}, false
	}
	ch := c.children[k][jobID]
	if ch == nil {
		return backend.SetKey{}, false
	}
	i := slices.IndexFunc(ch.allocs, func(o allocState) bool { return o.id == a.id })
	switch {
	case i < 0:
		ch.allocs = append(ch.allocs, a)
	case ch.allocs[i].modifyIndex > a.modifyIndex:
		return k, true
	default:
		ch.allocs[i] = a
	}
	// A purged child whose last allocation just finished is now gone.
	if ch.purged && allTerminal(ch.allocs) {
		delete(c.children[k], jobID)
		delete(c.owner, ns+"/"+jobID)
	}
	return k, true
}

// upsertVolume records a host volume event, and returns the sets whose
// volume it may be: those of its namespace whose name ends its
// "<claim>-<set>" prefix.
func (c *Cache) upsertVolume(v *api.HostVolume, deleted bool, index uint64) []backend.SetKey {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.advanceLocked(index)
	stub := &api.HostVolumeStub{
		Namespace: v.Namespace, ID: v.ID, Name: v.Name, PluginID: v.PluginID, NodePool: v.NodePool, NodeID: v.NodeID,
		CapacityBytes: v.CapacityBytes, State: v.State, CreateIndex: v.CreateIndex, CreateTime: v.CreateTime,
		ModifyIndex: v.ModifyIndex, ModifyTime: v.ModifyTime,
	}
	base, _, ok := splitOrdinal(v.Name)
	if !ok {
		return nil
	}
	if !c.applyVolumeLocked(stub, deleted, index) {
		return nil
	}
	if deleted {
		delete(c.volumeClasses, v.ID)
	} else {
		c.volumeClasses[v.ID] = v.Parameters[ClassParameter]
	}
	ns := stub.Namespace
	if ns == "" {
		ns = "default"
	}
	// The sets named by a suffix of base after a "-": looked up one by
	// one, rather than by building the index of every set (setsLocked)
	// for each of the many volume events of a convergence.
	var out []backend.SetKey
	for i := 0; i < len(base); i++ {
		if base[i] != '-' {
			continue
		}
		if k := (backend.SetKey{Namespace: ns, Name: base[i+1:]}); c.knownSetLocked(k) {
			out = append(out, k)
		}
	}
	return out
}

// knownSetLocked reports whether k is one of the sets Sets returns. The
// caller holds mu.
func (c *Cache) knownSetLocked(k backend.SetKey) bool {
	if _, ok := c.parents[k]; ok {
		return true
	}
	_, ok := c.children[k]
	return ok
}

// applyVolumeLocked folds one volume event into the cache and reports
// whether it changed anything. Events may come late where a re-list and
// the stream overlap, and a name is reused when a deleted volume is
// created again, so neither the name nor the arrival order decides: a
// delete removes only the volume with its ID, a deleted ID never comes
// back, and of two volumes with one name the later created wins.
func (c *Cache) applyVolumeLocked(v *api.HostVolumeStub, deleted bool, index uint64) bool {
	if index != 0 && index <= c.listIndex {
		return false // the last full list already holds it
	}
	old := c.volumeLocked(v.Namespace, v.Name)
	if deleted {
		c.deletedVolumes[v.ID] = max(c.deletedVolumes[v.ID], index)
		if old == nil || old.ID != v.ID {
			return false // already gone, or the name is a newer volume's
		}
		c.removeVolumeLocked(v.Namespace, v.Name)
		return true
	}
	if _, gone := c.deletedVolumes[v.ID]; gone {
		return false // an event from before the delete
	}
	if old != nil {
		if old.ID == v.ID && old.ModifyIndex > v.ModifyIndex {
			return false // an older event of the same volume
		}
		if old.ID != v.ID && old.CreateIndex > v.CreateIndex {
			return false // a volume the name belonged to before
		}
	}
	c.putVolumeLocked(v)
	return true
}

// volumeClassKnown reports whether the cache knows the storage class of
// volume id, so that the re-list need not read the volume for it.
func (c *Cache) volumeClassKnown(id string) bool {
	c.mu.RLock()
	defer c.mu.RUnlock()
	_, ok := c.volumeClasses[id]
	return ok
}

// volumeLocked returns the cached volume called name, or nil.
func (c *Cache) volumeLocked(namespace, name string) *api.HostVolumeStub {
	base, ord, ok := splitOrdinal(name)
	if !ok {
		return nil
	}
	if namespace == "" {
		namespace = "default"
	}
	return c.volumes[namespace+"/"+base][ord]
}

func (c *Cache) putVolumeLocked(v *api.HostVolumeStub) {
	base, ord, ok := splitOrdinal(v.Name)
	if !ok {
		return
	}
	ns := v.Namespace
	if ns == "" {
		ns = "default"
	}
	key := ns + "/" + base
	m := c.volumes[key]
	if m == nil {
		m = map[int]*api.HostVolumeStub{}
		c.volumes[key] = m
	}
	m[ord] = v
}

// removeVolumeLocked forgets a deleted volume. c.mu is held.
func (c *Cache) removeVolumeLocked(namespace, name string) {
	if namespace == "" {
		namespace = "default"
	}
	base, ord, ok := splitOrdinal(name)
	if !ok {
		return
	}
	key := namespace + "/" + base
	delete(c.volumes[key], ord)
	if len(c.volumes[key]) == 0 {
		delete(c.volumes, key)
	}
}

// splitOrdinal splits "<base>-<n>" into base and n.
func splitOrdinal(name string) (string, int, bool) {
	i := strings.LastIndexByte(name, '-')
	if i <= 0 || i == len(name)-1 {
		return "", 0, false
	}
	n, err := strconv.Atoi(name[i+1:])
	if err != nil || n < 0 {
		return "", 0, false
	}
	return name[:i], n, true
}

// Sets returns every set the cache knows: live parents, and purged parents
// whose children still exist.
func (c *Cache) Sets() []backend.SetKey {
	c.mu.RLock()
	defer c.mu.RUnlock()
	return sortedKeys(c.setsLocked())
}

// setsLocked is the set of sets Sets returns, unsorted: Replace starts from
// it so that every set known before a re-list is reconciled after it.
// The caller holds mu.
func (c *Cache) setsLocked() map[backend.SetKey]struct{} {
	m := make(map[backend.SetKey]struct{}, len(c.parents)+len(c.children))
	for k := range c.parents {
		m[k] = struct{}{}
	}
	for k := range c.children {
		m[k] = struct{}{}
	}
	return m
}

func allTerminal(allocs []allocState) bool {
	for _, a := range allocs {
		if !terminalClientStatus(a.clientStatus) {
			return false
		}
	}
	return true
}

func terminalClientStatus(s string) bool {
	switch s {
	case api.AllocClientStatusComplete, api.AllocClientStatusFailed, api.AllocClientStatusLost:
		return true
	}
	return false
}

// ownerOf reports the set a job belongs to: the set itself for a parent, the
// parent's set for a child.
func (c *Cache) ownerOf(namespace, jobID string) (backend.SetKey, bool) {
	if namespace == "" {
		namespace = "default"
	}
	c.mu.RLock()
	defer c.mu.RUnlock()
	if k, ok := c.owner[namespace+"/"+jobID]; ok {
		return k, true
	}
	k := backend.SetKey{Namespace: namespace, Name: jobID}
	if _, ok := c.parents[k]; ok {
		return k, true
	}
	return backend.SetKey{}, false
}
