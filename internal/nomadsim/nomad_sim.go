package nomadsim

import (
	"container/heap"
	"fmt"
	"sort"
	"time"

	"github.com/hashicorp/nomad/api"
)

// Event types, as Nomad names them after the Raft message that caused the
// change (nomad/structs/event.go, nomad/state/events.go).
const (
	typeJobRegistered        = "JobRegistered"
	typeJobDeregistered      = "JobDeregistered"
	typePlanResult           = "PlanResult"
	typeAllocationUpdated    = "AllocationUpdated"
	typeDeploymentUpdate     = "DeploymentStatusUpdate"
	typeHostVolumeRegistered = "HostVolumeRegistered"
	typeHostVolumeDeleted    = "HostVolumeDeleted"
	typeNodeEligibility      = "NodeEligibility"
)

// Descriptions Nomad's scheduler and client give allocations.
const (
	descUpdating  = "alloc is being updated due to job update"
	descNotNeeded = "alloc not needed due to job update"
	descLost      = "alloc is lost since its node is down"
	descMigrating = "alloc is being migrated"
	descRunning   = "Tasks are running"
	descComplete  = "All tasks have completed"
	descFailed    = "Failed tasks"
	descPending   = "No tasks have started"
)

// allocRec is one allocation. api objects are built from it on demand, so
// a stub costs nothing until it is asked for.
type allocRec struct {
	id, ns, jobID, group, name, nodeID, evalID, deploymentID string
	jobType                                                  string
	jobVersion, jobCreateIndex                               uint64
	idx                                                      int
	desiredStatus, desiredDesc, clientStatus, clientDesc     string
	healthy                                                  *bool
	healthTime                                               time.Time
	healthIndex                                              uint64
	prev, next                                               string
	createIndex, modifyIndex, allocModifyIndex               uint64
	createTime, modifyTime                                   int64
	tasks                                                    []string

	// gen invalidates scheduled transitions when the allocation changes
	// course (stopped while pending, failed while running, …).
	gen      uint64
	behavior AllocBehavior
	vols     []*volRec
	// waitFor is the previous allocation this one waits to terminate before
	// it starts, as Nomad's client does (client/allocwatcher).
	waitFor *allocRec
	waiters []*allocRec
	// replace marks a lost or migrated allocation whose replacement the next
	// plan places with PreviousAllocation pointing back at it.
	replace bool
	// checks are the results of the Nomad-native service checks, by name
	// (SetAllocChecks).
	checks map[string]bool
}

func (a *allocRec) key() jobKey { return jobKey{a.ns, a.jobID} }

func clientTerminal(status string) bool {
	switch status {
	case api.AllocClientStatusComplete, api.AllocClientStatusFailed, api.AllocClientStatusLost:
		return true
	}
	return false
}

// serverTerminal is structs.Allocation.TerminalStatus: desired to stop, or
// terminal on the client.
func (a *allocRec) serverTerminal() bool {
	return a.desiredStatus != api.AllocDesiredStatusRun || clientTerminal(a.clientStatus)
}

func (a *allocRec) deploymentStatus() *api.AllocDeploymentStatus {
	if a.healthy == nil {
		return nil
	}
	return &api.AllocDeploymentStatus{Healthy: ptr(*a.healthy), Timestamp: a.healthTime, ModifyIndex: a.healthIndex}
}

func (a *allocRec) taskStates() map[string]*api.TaskState {
	state, failed := "pending", false
	switch a.clientStatus {
	case api.AllocClientStatusRunning:
		state = "running"
	case api.AllocClientStatusComplete, api.AllocClientStatusLost:
		state = "dead"
	case api.AllocClientStatusFailed:
		state, failed = "dead", true
	}
	out := make(map[string]*api.TaskState, len(a.tasks))
	for _, t := range a.tasks {
		out[t] = &api.TaskState{State: state, Failed: failed}
	}
	return out
}

func (a *allocRec) stub() *api.AllocationListStub {
	return &api.AllocationListStub{
		ID: a.id, EvalID: a.evalID, Name: a.name, Namespace: a.ns, NodeID: a.nodeID, NodeName: a.nodeID,
		JobID: a.jobID, JobType: a.jobType, JobVersion: a.jobVersion, TaskGroup: a.group,
		DesiredStatus: a.desiredStatus, DesiredDescription: a.desiredDesc,
		ClientStatus: a.clientStatus, ClientDescription: a.clientDesc,
		TaskStates: a.taskStates(), DeploymentStatus: a.deploymentStatus(), NextAllocation: a.next,
		CreateIndex: a.createIndex, ModifyIndex: a.modifyIndex,
		CreateTime: a.createTime, ModifyTime: a.modifyTime,
	}
}

// full is the allocation as an event carries it: without its Job, which
// Nomad strips from allocation events.
func (a *allocRec) full() *api.Allocation {
	return &api.Allocation{
		ID: a.id, Namespace: a.ns, EvalID: a.evalID, Name: a.name, NodeID: a.nodeID, NodeName: a.nodeID,
		JobID: a.jobID, TaskGroup: a.group,
		DesiredStatus: a.desiredStatus, DesiredDescription: a.desiredDesc,
		ClientStatus: a.clientStatus, ClientDescription: a.clientDesc,
		TaskStates: a.taskStates(), DeploymentID: a.deploymentID, DeploymentStatus: a.deploymentStatus(),
		PreviousAllocation: a.prev, NextAllocation: a.next,
		CreateIndex: a.createIndex, ModifyIndex: a.modifyIndex, AllocModifyIndex: a.allocModifyIndex,
		CreateTime: a.createTime, ModifyTime: a.modifyTime,
	}
}

// ---- Time ----

// task is a transition due at a point of simulated time.
type task struct {
	at  time.Time
	seq uint64
	run func()
}

// taskQueue is a min-heap of tasks by time, then by scheduling order, so
// equal times run first-scheduled first and runs are reproducible.
type taskQueue []*task

func (q taskQueue) Len() int { return len(q) }
func (q taskQueue) Less(i, j int) bool {
	if !q[i].at.Equal(q[j].at) {
		return q[i].at.Before(q[j].at)
	}
	return q[i].seq < q[j].seq
}
func (q taskQueue) Swap(i, j int) { q[i], q[j] = q[j], q[i] }
func (q *taskQueue) Push(x any)   { *q = append(*q, x.(*task)) }
func (q *taskQueue) Pop() any {
	old := *q
	t := old[len(old)-1]
	old[len(old)-1] = nil
	*q = old[:len(old)-1]
	return t
}

// simNow is the simulated time. Callers hold s.mu.
func (s *Nomad) simNow() time.Time {
	if s.cfg.Manual {
		return s.now
	}
	return time.Now()
}

// after schedules fn to run under s.mu once d has passed. Callers hold s.mu.
func (s *Nomad) after(d time.Duration, fn func()) {
	s.seq++
	heap.Push(&s.queue, &task{at: s.simNow().Add(d), seq: s.seq, run: fn})
	if !s.cfg.Manual {
		s.poke()
	}
}

// poke wakes the real-time clock goroutine.
func (s *Nomad) poke() {
	select {
	case s.wake <- struct{}{}:
	default:
	}
}

// runClock fires due transitions in real-time mode.
func (s *Nomad) runClock() {
	defer close(s.stopped)
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	for {
		s.mu.Lock()
		if s.closed {
			s.mu.Unlock()
			return
		}
		wait := time.Duration(-1)
		for s.queue.Len() > 0 {
			now := time.Now()
			t := s.queue[0]
			if t.at.After(now) {
				wait = t.at.Sub(now)
				break
			}
			heap.Pop(&s.queue)
			t.run()
		}
		s.mu.Unlock()
		if wait >= 0 {
			timer.Reset(wait)
		} else {
			timer.Stop()
		}
		select {
		case <-s.wake:
		case <-timer.C:
		}
	}
}

func (s *Nomad) mustManual(op string) {
	if !s.cfg.Manual {
		panic("nomadsim.Nomad." + op + " needs NomadConfig.Manual: in real-time mode the clock moves by itself")
	}
}

// Step runs the next scheduled transition, moving the manual clock to its
// time, and reports whether there was one. Transitions due at the same time
// run in the order they were scheduled.
func (s *Nomad) Step() bool {
	s.mustManual("Step")
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.queue.Len() == 0 {
		return false
	}
	t := heap.Pop(&s.queue).(*task)
	if t.at.After(s.now) {
		s.now = t.at
	}
	t.run()
	return true
}

// Advance moves the manual clock forward by d, running every transition due
// by then in order, including those that the transitions themselves
// schedule. Advance(0) runs what is due now.
func (s *Nomad) Advance(d time.Duration) {
	s.mustManual("Advance")
	s.mu.Lock()
	defer s.mu.Unlock()
	target := s.now.Add(d)
	for s.queue.Len() > 0 && !s.queue[0].at.After(target) {
		t := heap.Pop(&s.queue).(*task)
		if t.at.After(s.now) {
			s.now = t.at
		}
		t.run()
	}
	s.now = target
}

// Settle runs scheduled transitions until none is left, moving the manual
// clock as far as needed, and returns how many ran: every allocation then
// rests (healthy, failed, complete, …).
func (s *Nomad) Settle() int {
	n := 0
	for s.Step() {
		n++
	}
	return n
}

// Pending returns the number of scheduled transitions.
func (s *Nomad) Pending() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.queue.Len()
}

// Now returns the simulated time: the manual clock, or the wall clock.
func (s *Nomad) Now() time.Time {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.simNow()
}

// ---- Transactions and events ----

// txn gathers the objects one Raft index changes. Their events are built at
// commit, from their final state, one per object as memdb reports changes.
type txn struct {
	index   uint64
	typ     string
	touched []touched
	seen    map[any]int
}

type touched struct {
	topic   api.Topic
	obj     any
	deleted bool
}

// begin starts a write at the next index. Callers hold s.mu.
func (s *Nomad) begin(typ string) *txn {
	return &txn{index: s.nextIndex(), typ: typ, seen: make(map[any]int, 4)}
}

func (t *txn) touch(topic api.Topic, obj any, deleted bool) {
	if i, ok := t.seen[obj]; ok {
		t.touched[i].deleted = t.touched[i].deleted || deleted
		return
	}
	t.seen[obj] = len(t.touched)
	t.touched = append(t.touched, touched{topic: topic, obj: obj, deleted: deleted})
}

func (t *txn) jobEvent(_ *Nomad, j *api.Job)     { t.touch(api.TopicJob, j, false) }
func (t *txn) allocEvent(a *allocRec)            { t.touch(api.TopicAllocation, a, false) }
func (t *txn) deploymentEvent(d *api.Deployment) { t.touch(api.TopicDeployment, d, false) }
func (t *txn) volumeEvent(_ *Nomad, v *api.HostVolume, deleted bool) {
	t.touch(TopicHostVolume, v, deleted)
}

// commit publishes the transaction's events. Callers hold s.mu.
func (t *txn) commit(s *Nomad) {
	if len(t.touched) == 0 {
		return
	}
	events := make([]api.Event, 0, len(t.touched))
	for _, c := range t.touched {
		ev := api.Event{Topic: c.topic, Type: t.typ, Index: t.index}
		switch o := c.obj.(type) {
		case *api.Job:
			ev.Key = *o.ID
			ev.Payload = s.payload("Job", o, func() any { return deepCopy(o) })
		case *allocRec:
			ev.Key = o.id
			ev.FilterKeys = []string{o.jobID, o.deploymentID}
			ev.Payload = s.payload("Allocation", o.full(), nil)
		case *api.Deployment:
			ev.Key = o.ID
			ev.FilterKeys = []string{o.JobID}
			ev.Payload = s.payload("Deployment", o, func() any { return deepCopy(o) })
		case *api.Node:
			ev.Key = o.ID
			ev.Payload = s.payload("Node", o, nil)
		case *api.HostVolume:
			// Nomad leaves Key empty on a deleted host volume's event.
			if !c.deleted {
				ev.Key = o.ID
			}
			ev.FilterKeys = []string{o.ID, o.Name, o.PluginID}
			ev.Payload = s.payload("Volume", o, func() any { return deepCopy(o) })
		}
		events = append(events, ev)
	}
	s.publish(&api.Events{Index: t.index, Events: events})
}

// ---- Scheduler ----

// schedulePlan queues the scheduler's plan for a job. Callers hold s.mu.
func (s *Nomad) schedulePlan(key jobKey) {
	s.after(s.cfg.PlaceDelay, func() { s.plan(key) })
}

// jobStatus is the state store's getJobStatus for a service job. Callers
// hold s.mu.
func (s *Nomad) jobStatus(key jobKey, rec *jobRec) string {
	list := s.allocsByJob[key]
	for _, a := range list {
		if !a.serverTerminal() {
			return "running"
		}
	}
	if rec.pendingEval {
		return "pending"
	}
	if rec.evaluated || len(list) > 0 {
		return "dead"
	}
	return "pending"
}

// refreshJobStatus writes the job's status when it changed, as Nomad's
// setJobStatuses does in the same transaction. Callers hold s.mu.
func (s *Nomad) refreshJobStatus(tx *txn, key jobKey) {
	rec, ok := s.jobs[key]
	if !ok {
		return
	}
	st := s.jobStatus(key, rec)
	if st == deref(rec.job.Status) {
		return
	}
	rec.job.Status = ptr(st)
	rec.job.ModifyIndex = ptr(tx.index)
	tx.jobEvent(s, rec.job)
}

// plan is the scheduler's evaluation of one job: it stops allocations that
// are no longer wanted, replaces those of an older version destructively
// (the replacement waits for the old one to terminate), and places missing
// ones. Callers hold s.mu.
func (s *Nomad) plan(key jobKey) {
	rec := s.jobs[key]
	tx := s.begin(typePlanResult)
	var live []*allocRec
	for _, a := range s.allocsByJob[key] {
		if a.desiredStatus == api.AllocDesiredStatusRun {
			live = append(live, a)
		}
	}
	if rec == nil {
		for _, a := range live {
			s.stopAlloc(tx, a, descNotNeeded)
		}
		tx.commit(s)
		return
	}
	j := rec.job
	blocked := false
	var mine []*allocRec
	for _, a := range live {
		if a.jobCreateIndex != *j.CreateIndex {
			// An earlier incarnation's allocation (the job was purged and
			// registered again): its own plan stops it.
			s.stopAlloc(tx, a, descNotNeeded)
			continue
		}
		mine = append(mine, a)
	}
	if deref(j.Stop) {
		for _, a := range mine {
			s.stopAlloc(tx, a, descNotNeeded)
		}
		if d := rec.deployment; d != nil && d.Status == api.DeploymentStatusRunning {
			s.setDeployment(tx, d, api.DeploymentStatusCancelled, "Cancelled because job is stopped")
		}
	} else {
		for _, tg := range j.TaskGroups {
			if !s.planGroup(tx, key, rec, tg, mine) {
				blocked = true
			}
		}
	}
	rec.pendingEval = blocked
	if blocked {
		s.blocked[key] = struct{}{}
	}
	rec.evaluated = true
	s.refreshJobStatus(tx, key)
	tx.commit(s)
}

// planGroup plans one task group. It returns false when the group cannot be
// placed for want of a host volume (Nomad then blocks the eval). Callers
// hold s.mu.
func (s *Nomad) planGroup(tx *txn, key jobKey, rec *jobRec, tg *api.TaskGroup, mine []*allocRec) bool {
	j := rec.job
	group := deref(tg.Name)
	count := deref(tg.Count)
	var keep, outdated []*allocRec
	for _, a := range mine {
		if a.group != group {
			continue
		}
		if a.jobVersion == *j.Version {
			keep = append(keep, a)
		} else {
			outdated = append(outdated, a)
		}
	}
	have := make(map[int]bool, len(keep))
	for _, a := range keep {
		have[a.idx] = true
	}
	wanted := 0
	for i := 0; i < count; i++ {
		if !have[i] {
			wanted++
		}
	}
	var node string
	var vols []*volRec
	if wanted > 0 {
		var ok bool
		node, vols, ok = s.resolveVolumes(key.ns, tg)
		if !ok {
			return false
		}
	}
	// Destructive updates: the replacement takes the old allocation's name
	// and waits for it to stop.
	for _, a := range outdated {
		if a.idx < count && !have[a.idx] {
			n := s.placeAlloc(tx, rec, tg, a.idx, node, vols, a)
			keep = append(keep, n)
			have[a.idx] = true
		}
		s.stopAlloc(tx, a, descUpdating)
	}
	for i := 0; i < count; i++ {
		if have[i] {
			continue
		}
		var prev *allocRec
		for _, a := range s.allocsByJob[key] {
			if a.replace && a.next == "" && a.idx == i && a.group == group && a.jobCreateIndex == *j.CreateIndex {
				prev = a
			}
		}
		keep = append(keep, s.placeAlloc(tx, rec, tg, i, node, vols, prev))
		have[i] = true
	}
	sort.Slice(keep, func(x, y int) bool { return keep[x].idx < keep[y].idx })
	for _, a := range keep {
		if a.idx >= count {
			s.stopAlloc(tx, a, descNotNeeded)
		}
	}
	return true
}

// resolveVolumes finds the node a group must run on: the node of the
// dynamic host volumes its "host" volume requests name, or the next node
// round-robin when it has none. ok is false when a volume is missing, the
// volumes are on different nodes, or their node is ineligible. Callers hold s.mu.
func (s *Nomad) resolveVolumes(ns string, tg *api.TaskGroup) (node string, vols []*volRec, ok bool) {
	names := make([]string, 0, len(tg.Volumes))
	for _, v := range tg.Volumes {
		if v != nil && v.Type == "host" {
			names = append(names, v.Source)
		}
	}
	if len(names) == 0 {
		for range s.cfg.Nodes {
			node = s.cfg.Nodes[s.nodeCursor%len(s.cfg.Nodes)]
			s.nodeCursor++
			if !s.ineligible[node] {
				return node, nil, true
			}
		}
		return "", nil, false
	}
	sort.Strings(names)
	// Candidate nodes are those holding every requested volume.
	var candidates map[string][]*volRec
	for i, name := range names {
		next := make(map[string][]*volRec)
		for _, r := range s.volsByName(ns, name) {
			if i == 0 {
				next[r.vol.NodeID] = []*volRec{r}
			} else if prev, ok := candidates[r.vol.NodeID]; ok {
				next[r.vol.NodeID] = append(append([]*volRec(nil), prev...), r)
			}
		}
		candidates = next
	}
	if len(candidates) == 0 {
		return "", nil, false
	}
	nodes := make([]string, 0, len(candidates))
	for n := range candidates {
		if !s.ineligible[n] {
			nodes = append(nodes, n)
		}
	}
	if len(nodes) == 0 {
		return "", nil, false
	}
	sort.Strings(nodes)
	return nodes[0], candidates[nodes[0]], true
}

// volsByName returns the volumes of one name in a namespace. Callers hold
// s.mu.
func (s *Nomad) volsByName(ns, name string) []*volRec {
	var out []*volRec
	for _, id := range s.volNames[jobKey{ns, name}] {
		if r, ok := s.vols[id]; ok {
			out = append(out, r)
		}
	}
	return out
}

// placeAlloc creates a pending allocation. With prev, it is prev's
// replacement: it starts only once prev is client-terminal. Callers hold
// s.mu.
func (s *Nomad) placeAlloc(tx *txn, rec *jobRec, tg *api.TaskGroup, idx int, node string, vols []*volRec, prev *allocRec) *allocRec {
	j := rec.job
	group := deref(tg.Name)
	now := s.simNow().UnixNano()
	a := &allocRec{
		id: s.newID(), ns: *j.Namespace, jobID: *j.ID, group: group,
		name:   fmt.Sprintf("%s.%s[%d]", *j.ID, group, idx),
		nodeID: node, evalID: s.newID(), jobType: deref(j.Type),
		jobVersion: *j.Version, jobCreateIndex: *j.CreateIndex, idx: idx,
		desiredStatus: api.AllocDesiredStatusRun, clientStatus: api.AllocClientStatusPending,
		clientDesc:  descPending,
		createIndex: tx.index, modifyIndex: tx.index, allocModifyIndex: tx.index,
		createTime: now, modifyTime: now, vols: vols,
	}
	for _, t := range tg.Tasks {
		if t != nil {
			a.tasks = append(a.tasks, t.Name)
		}
	}
	if s.behavior != nil {
		a.behavior = s.behavior(deepCopy(j), group)
	}
	if deref(j.Type) == api.JobTypeService {
		d := s.deploymentFor(tx, rec)
		a.deploymentID = d.ID
		if st := d.TaskGroups[group]; st != nil {
			st.PlacedAllocs++
		}
	}
	for _, v := range vols {
		v.claims[a] = struct{}{}
	}
	if prev != nil {
		a.prev = prev.id
		prev.next = a.id
		tx.allocEvent(prev)
		if !clientTerminal(prev.clientStatus) {
			a.waitFor = prev
			prev.waiters = append(prev.waiters, a)
		}
	}
	s.allocs[a.id] = a
	s.allocsByJob[a.key()] = append(s.allocsByJob[a.key()], a)
	tx.allocEvent(a)
	if a.waitFor == nil {
		s.scheduleStart(a)
	}
	return a
}

// deploymentFor returns the running deployment of the job's current
// version, creating it (and cancelling an older one) on the version's first
// placement. Callers hold s.mu.
func (s *Nomad) deploymentFor(tx *txn, rec *jobRec) *api.Deployment {
	j := rec.job
	if d := rec.deployment; d != nil && d.JobVersion == *j.Version && d.JobCreateIndex == *j.CreateIndex {
		return d
	}
	if d := rec.deployment; d != nil && d.Status == api.DeploymentStatusRunning {
		s.setDeployment(tx, d, api.DeploymentStatusCancelled, "Cancelled due to newer version of job")
	}
	d := &api.Deployment{
		ID: s.newID(), Namespace: *j.Namespace, JobID: *j.ID, JobVersion: *j.Version,
		JobModifyIndex: *j.ModifyIndex, JobSpecModifyIndex: *j.JobModifyIndex, JobCreateIndex: *j.CreateIndex,
		TaskGroups: make(map[string]*api.DeploymentState, len(j.TaskGroups)),
		Status:     api.DeploymentStatusRunning, StatusDescription: "Deployment is running",
		CreateIndex: tx.index, ModifyIndex: tx.index,
	}
	for _, tg := range j.TaskGroups {
		d.TaskGroups[deref(tg.Name)] = &api.DeploymentState{DesiredTotal: deref(tg.Count)}
	}
	rec.deployment = d
	tx.deploymentEvent(d)
	return d
}

func (s *Nomad) setDeployment(tx *txn, d *api.Deployment, status, desc string) {
	d.Status, d.StatusDescription, d.ModifyIndex = status, desc, tx.index
	tx.deploymentEvent(d)
}

// deploymentOf returns the allocation's deployment if it is still the job's
// current one. Callers hold s.mu.
func (s *Nomad) deploymentOf(a *allocRec) (*jobRec, *api.Deployment) {
	rec, ok := s.jobs[a.key()]
	if !ok || rec.deployment == nil || rec.deployment.ID != a.deploymentID {
		return nil, nil
	}
	return rec, rec.deployment
}

// ---- Allocation lifecycle ----

func (s *Nomad) scheduleStart(a *allocRec) {
	gen := a.gen
	s.after(s.cfg.StartDelay, func() { s.start(a, gen) })
}

// start moves a pending allocation to running (or failed, if scripted so).
func (s *Nomad) start(a *allocRec, gen uint64) {
	if a.gen != gen || a.desiredStatus != api.AllocDesiredStatusRun || a.clientStatus != api.AllocClientStatusPending {
		return
	}
	tx := s.begin(typeAllocationUpdated)
	if a.behavior.FailOnStart {
		s.failAlloc(tx, a)
		tx.commit(s)
		s.settleDeployment(a)
		return
	}
	s.setClient(tx, a, api.AllocClientStatusRunning, descRunning)
	tx.commit(s)
	if a.deploymentID != "" && !a.behavior.NeverHealthy {
		gen := a.gen
		s.after(s.cfg.HealthyDelay, func() { s.health(a, gen) })
	}
}

// health reports a running allocation's health to its deployment, and the
// deployment watcher then settles the deployment in a second write, as in
// Nomad.
func (s *Nomad) health(a *allocRec, gen uint64) {
	if a.gen != gen || a.desiredStatus != api.AllocDesiredStatusRun || a.clientStatus != api.AllocClientStatusRunning {
		return
	}
	tx := s.begin(typeAllocationUpdated)
	s.setHealth(tx, a, !a.behavior.Unhealthy)
	tx.commit(s)
	s.settleDeployment(a)
}

func (s *Nomad) setHealth(tx *txn, a *allocRec, healthy bool) {
	a.healthy = ptr(healthy)
	a.healthTime = s.simNow()
	a.healthIndex = tx.index
	a.modifyIndex = tx.index
	a.modifyTime = a.healthTime.UnixNano()
	tx.allocEvent(a)
	if _, d := s.deploymentOf(a); d != nil {
		if st := d.TaskGroups[a.group]; st != nil {
			if healthy {
				st.HealthyAllocs++
			} else {
				st.UnhealthyAllocs++
			}
			d.ModifyIndex = tx.index
			tx.deploymentEvent(d)
		}
	}
}

// settleDeployment marks the allocation's deployment successful (and the
// job version stable) once every group is healthy, or failed once any
// allocation is unhealthy.
func (s *Nomad) settleDeployment(a *allocRec) {
	rec, d := s.deploymentOf(a)
	if d == nil || d.Status != api.DeploymentStatusRunning {
		return
	}
	done, failed := true, false
	for _, st := range d.TaskGroups {
		if st.UnhealthyAllocs > 0 {
			failed = true
		}
		if st.HealthyAllocs < st.DesiredTotal {
			done = false
		}
	}
	switch {
	case failed:
		tx := s.begin(typeDeploymentUpdate)
		s.setDeployment(tx, d, api.DeploymentStatusFailed, "Failed due to unhealthy allocations")
		tx.commit(s)
	case done:
		tx := s.begin(typeDeploymentUpdate)
		s.setDeployment(tx, d, api.DeploymentStatusSuccessful, "Deployment completed successfully")
		if d.JobVersion == *rec.job.Version {
			// Stability is not a new version: ModifyIndex moves,
			// JobModifyIndex and Version do not.
			rec.job.Stable = ptr(true)
			rec.job.ModifyIndex = ptr(tx.index)
			tx.jobEvent(s, rec.job)
		}
		tx.commit(s)
	}
}

// setClient records a client status change and everything that follows
// from it in the same write: running counters, volume claims, replacements
// waiting to start, the job's status. Callers hold s.mu.
func (s *Nomad) setClient(tx *txn, a *allocRec, status, desc string) {
	old := a.clientStatus
	a.clientStatus, a.clientDesc = status, desc
	a.modifyIndex = tx.index
	a.modifyTime = s.simNow().UnixNano()
	st := s.stats[a.key()]
	if st == nil {
		st = &runStats{}
		s.stats[a.key()] = st
	}
	if old == api.AllocClientStatusRunning && status != api.AllocClientStatusRunning {
		st.running--
	}
	if status == api.AllocClientStatusRunning && old != api.AllocClientStatusRunning {
		st.running++
		st.max = max(st.max, st.running)
		s.maxRunning = max(s.maxRunning, st.running)
	}
	if clientTerminal(status) {
		a.gen++
		for _, v := range a.vols {
			delete(v.claims, a)
		}
		for _, w := range a.waiters {
			if w.waitFor == a {
				w.waitFor = nil
				if w.desiredStatus == api.AllocDesiredStatusRun && w.clientStatus == api.AllocClientStatusPending {
					s.scheduleStart(w)
				}
			}
		}
		a.waiters = nil
	}
	tx.allocEvent(a)
	s.refreshJobStatus(tx, a.key())
}

// failAlloc fails an allocation for good: the child jobs disable
// rescheduling, so nothing replaces it. Callers hold s.mu.
func (s *Nomad) failAlloc(tx *txn, a *allocRec) {
	s.setClient(tx, a, api.AllocClientStatusFailed, descFailed)
	if a.healthy == nil && a.deploymentID != "" {
		if _, d := s.deploymentOf(a); d != nil && d.Status == api.DeploymentStatusRunning {
			s.setHealth(tx, a, false)
		}
	}
}

// stopAlloc sets an allocation's desired status to stop; the client
// completes it after StopDelay. Callers hold s.mu.
func (s *Nomad) stopAlloc(tx *txn, a *allocRec, desc string) {
	if a.desiredStatus != api.AllocDesiredStatusRun {
		return
	}
	a.desiredStatus, a.desiredDesc = api.AllocDesiredStatusStop, desc
	a.modifyIndex, a.allocModifyIndex = tx.index, tx.index
	a.gen++
	tx.allocEvent(a)
	if !clientTerminal(a.clientStatus) {
		gen := a.gen
		s.after(s.cfg.StopDelay, func() { s.complete(a, gen) })
	}
	s.refreshJobStatus(tx, a.key())
}

func (s *Nomad) complete(a *allocRec, gen uint64) {
	if a.gen != gen || clientTerminal(a.clientStatus) {
		return
	}
	tx := s.begin(typeAllocationUpdated)
	s.setClient(tx, a, api.AllocClientStatusComplete, descComplete)
	tx.commit(s)
}

// ---- Test controls ----

// SetBehavior scripts the allocations placed from now on: fn is called with
// a copy of the job and the group name at each placement. nil resets to
// well-behaved allocations.
func (s *Nomad) SetBehavior(fn func(job *api.Job, group string) AllocBehavior) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.behavior = fn
}

func (s *Nomad) liveAlloc(id string) (*allocRec, error) {
	a, ok := s.allocs[id]
	if !ok {
		return nil, fmt.Errorf("memory: no allocation %q", id)
	}
	if clientTerminal(a.clientStatus) {
		return nil, fmt.Errorf("memory: allocation %q is already %s", id, a.clientStatus)
	}
	return a, nil
}

// FailAlloc makes an allocation fail (client status failed). Nothing
// replaces it; a deployment waiting for its health fails.
func (s *Nomad) FailAlloc(id string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	a, err := s.liveAlloc(id)
	if err != nil {
		return err
	}
	tx := s.begin(typeAllocationUpdated)
	s.failAlloc(tx, a)
	tx.commit(s)
	s.settleDeployment(a)
	return nil
}

// LoseAlloc makes an allocation lost, as when its node goes down: client
// status lost, desired status stop. Nomad replaces lost allocations, so a
// plan follows that places a replacement (PreviousAllocation set) unless
// the job is stopped.
func (s *Nomad) LoseAlloc(id string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	a, err := s.liveAlloc(id)
	if err != nil {
		return err
	}
	tx := s.begin(typePlanResult)
	a.replace = true
	if a.desiredStatus == api.AllocDesiredStatusRun {
		a.desiredStatus, a.desiredDesc = api.AllocDesiredStatusStop, descLost
		a.allocModifyIndex = tx.index
	}
	s.setClient(tx, a, api.AllocClientStatusLost, descLost)
	tx.commit(s)
	s.schedulePlan(a.key())
	return nil
}

// StopAlloc stops one allocation as `nomad alloc stop` does: Nomad migrates
// it, so a replacement is placed that starts once this one has stopped.
func (s *Nomad) StopAlloc(id string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	a, err := s.liveAlloc(id)
	if err != nil {
		return err
	}
	if a.desiredStatus != api.AllocDesiredStatusRun {
		return fmt.Errorf("memory: allocation %q is already stopping", id)
	}
	tx := s.begin(typePlanResult)
	a.replace = true
	s.stopAlloc(tx, a, descMigrating)
	tx.commit(s)
	s.schedulePlan(a.key())
	return nil
}

// GC removes terminal allocations (client-terminal, and not wanted running
// or belonging to a job that no longer exists), as `nomad system gc` does.
// It returns how many it removed.
func (s *Nomad) GC() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	n := 0
	for key, list := range s.allocsByJob {
		_, jobExists := s.jobs[key]
		kept := list[:0]
		for _, a := range list {
			if clientTerminal(a.clientStatus) && (a.desiredStatus != api.AllocDesiredStatusRun || !jobExists) {
				delete(s.allocs, a.id)
				n++
				continue
			}
			kept = append(kept, a)
		}
		for i := len(kept); i < len(list); i++ {
			list[i] = nil
		}
		if len(kept) == 0 {
			delete(s.allocsByJob, key)
		} else {
			s.allocsByJob[key] = kept
		}
	}
	return n
}

// ---- Assertions ----

// Allocs lists every allocation ever placed for the job ID and not yet
// garbage collected, oldest first, including those of a purged or earlier
// incarnation of the job (as Nomad's job allocations endpoint lists them),
// without counting a call or meeting a fault: for test assertions.
func (s *Nomad) Allocs(namespace, id string) []*api.AllocationListStub {
	s.mu.Lock()
	defer s.mu.Unlock()
	list := s.allocsByJob[jobKey{namespaceOrDefault(namespace), id}]
	out := make([]*api.AllocationListStub, 0, len(list))
	for _, a := range list {
		out = append(out, a.stub())
	}
	return out
}

// Alloc returns one allocation as the event stream carries it (without its
// Job), or nil: for test assertions.
func (s *Nomad) Alloc(id string) *api.Allocation {
	s.mu.Lock()
	defer s.mu.Unlock()
	if a, ok := s.allocs[id]; ok {
		return a.full()
	}
	return nil
}

// Job returns a copy of a job, or nil, without counting a call: for test
// assertions.
func (s *Nomad) Job(namespace, id string) *api.Job {
	s.mu.Lock()
	defer s.mu.Unlock()
	if rec, ok := s.jobs[jobKey{namespaceOrDefault(namespace), id}]; ok {
		return deepCopy(rec.job)
	}
	return nil
}

// Blocked reports whether the scheduler's last plan for a job could not
// place it (a volume missing, or its node ineligible) and nothing has
// planned it since, without counting a call: for test assertions.
func (s *Nomad) Blocked(namespace, id string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	_, ok := s.blocked[jobKey{namespaceOrDefault(namespace), id}]
	return ok
}

// Deployment returns a copy of a job's latest deployment, or nil.
func (s *Nomad) Deployment(namespace, id string) *api.Deployment {
	s.mu.Lock()
	defer s.mu.Unlock()
	if rec, ok := s.jobs[jobKey{namespaceOrDefault(namespace), id}]; ok && rec.deployment != nil {
		return deepCopy(rec.deployment)
	}
	return nil
}

// HostVolumes returns copies of every host volume, in ID order, without
// counting a call.
func (s *Nomad) HostVolumes() []*api.HostVolume {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]*api.HostVolume, 0, len(s.vols))
	for _, r := range s.vols {
		out = append(out, deepCopy(r.vol))
	}
	sort.Slice(out, func(i, j int) bool { return out[i].ID < out[j].ID })
	return out
}

// Index returns the current Raft index.
func (s *Nomad) Index() uint64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.index
}

// RunningAllocs returns how many of a job's allocations are in client
// status running now.
func (s *Nomad) RunningAllocs(namespace, id string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	if st := s.stats[jobKey{namespaceOrDefault(namespace), id}]; st != nil {
		return st.running
	}
	return 0
}

// MaxConcurrentAllocs returns the highest number of allocations of one job
// ID (across stops, purges and re-registrations) that were ever in client
// status running at the same time.
func (s *Nomad) MaxConcurrentAllocs(namespace, id string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	if st := s.stats[jobKey{namespaceOrDefault(namespace), id}]; st != nil {
		return st.max
	}
	return 0
}

// MaxConcurrentAllocsPerJob returns the highest number of simultaneously
// running allocations any one job ever had: the watchdog for "never two
// allocations of an ordinal at once" is MaxConcurrentAllocsPerJob() <= 1.
// Note that a stopping allocation still counts until it is complete, as its
// task is still running.
func (s *Nomad) MaxConcurrentAllocsPerJob() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.maxRunning
}
