// Package nomadsim is a simulated Nomad (Nomad) behind the nomad.API
// interface, for the agent's fast tests, fault injection and scale
// benchmarks. It is test tooling: nothing in the product imports it.
package nomadsim

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/nomad/api"

	"github.com/nomad-statefulset/nomad-statefulset/backend/nomad"
)

// Nomad is an in-memory simulation of the slice of Nomad that
// nomad-statefulset uses (nomad.API): jobs with Nomad's versioning and
// check-and-set, allocations that go pending → running → healthy, stop,
// fail or get lost, deployments, dynamic host volumes and an event stream
// with Nomad's index and buffer semantics.
//
// Time is either manual (NomadConfig.Manual: nothing moves until the test calls
// Step, Advance or Settle) or real (transitions fire after the configured
// durations on a background goroutine). Every call can have a fault injected
// into it, and every call is counted by verb.
//
// All methods are safe for concurrent use. Objects handed in and out are
// deep copies; event payloads are shared by all subscribers and must be
// treated as read-only.
//
// A typical agent test:
//
//	sim := nomadsim.NewNomad(nomadsim.NomadConfig{Manual: true, StopDelay: 5 * time.Second})
//	defer sim.Close()
//	sim.FailCall(3, nomadsim.ServerError()) // the third call answers 500
//	// ... run the agent against sim (a nomad.API) ...
//	sim.Settle()                          // let every allocation come to rest
//	if sim.MaxConcurrentAllocsPerJob() > 1 { /* two allocations of a pod ran at once */ }
//	if sim.Writes() != 0 { /* not steady */ }
type Nomad struct {
	cfg NomadConfig

	mu sync.Mutex

	// index is the simulated Raft index: every write takes the next one,
	// as every Raft apply does in Nomad.
	index uint64
	// written is the index of the newest write of the API (beginWrite).
	written uint64
	ids     uint64

	jobs        map[jobKey]*jobRec
	allocs      map[string]*allocRec
	allocsByJob map[jobKey][]*allocRec
	stats       map[jobKey]*runStats
	maxRunning  int
	vols        map[string]*volRec
	volNames    map[jobKey][]string // (namespace, name) → volume IDs
	// volNameIndex holds the keys of volNames sorted, so that a list by
	// name prefix is a binary search, not a scan of every volume.
	volNameIndex []jobKey
	blocked      map[jobKey]struct{}
	// ineligible are the nodes marked ineligible for scheduling
	// (SetNodeEligibility), and nodeIndex each node's last change.
	ineligible map[string]bool
	nodeIndex  map[string]uint64
	behavior   func(job *api.Job, group string) AllocBehavior
	nodeCursor int

	// Time and the transitions waiting for it.
	now     time.Time
	queue   taskQueue
	seq     uint64
	wake    chan struct{}
	closed  bool
	stopped chan struct{}

	// Event stream: a linked list of published items, like Nomad's event
	// buffer, so publishing is O(1) and slow subscribers never stall writes.
	head, tail *eventItem
	bufLen     int
	subs       map[*subscription]struct{}
	// gate is closed while events flow and open while they are paused;
	// gate and eventDelay are atomics so that delivering an event never
	// takes s.mu, which writers hold.
	gate       atomic.Pointer[chan struct{}]
	eventDelay atomic.Int64
	dropEvents int

	// Faults and accounting.
	calls       map[string]int
	totalCalls  uint64
	callFaults  map[uint64]fault
	verbFaults  map[string][]verbFault
	unreachable bool

	// exec runs the commands of ExecAlloc (SetExec); nil exits 0 silently.
	exec ExecFunc
}

// NomadConfig sets up a simulated Nomad. The zero value is a valid configuration:
// real time, with every transition immediate.
type NomadConfig struct {
	// Manual freezes time: transitions wait for Step, Advance or Settle.
	// Use it for deterministic tests; leave it off for benchmarks and agent
	// tests that run against the clock.
	Manual bool
	// Start is the manual clock's initial time (default 2026-01-01 UTC).
	Start time.Time

	// PlaceDelay is how long the scheduler takes from a job write (register,
	// stop, purge) to the plan that creates or stops allocations.
	PlaceDelay time.Duration
	// StartDelay is how long a new allocation stays pending before running.
	StartDelay time.Duration
	// HealthyDelay is how long a running allocation takes to be reported
	// healthy to its deployment (Nomad's min_healthy_time).
	HealthyDelay time.Duration
	// StopDelay is how long a stopped allocation takes to become complete
	// (the task's kill_timeout and shutdown_delay).
	StopDelay time.Duration

	// EventBufferSize is how many indexes the event stream retains for
	// subscribers that start from an old index (default 100, Nomad's
	// event_buffer_size). Like Nomad's buffer it trims after appending, so
	// the oldest retained index is the newest minus EventBufferSize.
	EventBufferSize int
	// DropSlowSubscribers ends a subscription whose reader fell more than
	// EventBufferSize indexes behind, with ErrEventDropped, as Nomad's
	// event broker does (its bufferItem.Next: "event dropped from
	// buffer", which the HTTP stream turns into a 500). Off, a slow reader
	// only delays itself; tests that pause the stream rely on that.
	DropSlowSubscribers bool
	// JSONPayloads makes each event payload object its JSON encoding
	// (json.RawMessage), as nomad.Client delivers it, instead of a typed
	// api object. It is slower, and catches a consumer that reads payloads
	// without nomad.DecodePayload.
	JSONPayloads bool

	// Nodes are the client node IDs that allocations and volumes are placed
	// on (default node-1, node-2, node-3). All are in the "default" pool.
	Nodes []string
}

// AllocBehavior scripts how the allocations placed for a job behave.
type AllocBehavior struct {
	// FailOnStart makes the allocation fail instead of starting to run.
	FailOnStart bool
	// Unhealthy makes the allocation run but be reported unhealthy, which
	// fails its deployment.
	Unhealthy bool
	// NeverHealthy makes the allocation run and never be reported healthy
	// either way, as a task stuck before its checks pass.
	NeverHealthy bool
}

// jobKey identifies a job: namespace and ID.
type jobKey struct{ ns, id string }

// jobRec is a registered job and its scheduler state.
type jobRec struct {
	job *api.Job
	// pendingEval is set from a job write until its plan has run: the job
	// then reads "pending" as it does in Nomad while an eval is queued.
	pendingEval bool
	// evaluated is set once a plan has run, so a job without allocations
	// (count = 0) reads "dead" afterwards, as in Nomad.
	evaluated  bool
	deployment *api.Deployment
}

// runStats counts a job's allocations in client status running.
type runStats struct{ running, max int }

// volRec is a dynamic host volume and the allocations claiming it.
type volRec struct {
	vol    *api.HostVolume
	claims map[*allocRec]struct{}
}

// NewNomad starts a simulated Nomad. Close it when done.
func NewNomad(cfg NomadConfig) *Nomad {
	if cfg.EventBufferSize <= 0 {
		cfg.EventBufferSize = 100
	}
	if len(cfg.Nodes) == 0 {
		cfg.Nodes = []string{"node-1", "node-2", "node-3"}
	} else {
		cfg.Nodes = append([]string(nil), cfg.Nodes...)
	}
	if cfg.Start.IsZero() {
		cfg.Start = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	}
	sentinel := newEventItem(&api.Events{})
	gate := make(chan struct{})
	close(gate)
	s := &Nomad{
		cfg:         cfg,
		jobs:        make(map[jobKey]*jobRec),
		allocs:      make(map[string]*allocRec),
		allocsByJob: make(map[jobKey][]*allocRec),
		stats:       make(map[jobKey]*runStats),
		vols:        make(map[string]*volRec),
		volNames:    make(map[jobKey][]string),
		blocked:     make(map[jobKey]struct{}),
		ineligible:  make(map[string]bool),
		nodeIndex:   make(map[string]uint64),
		now:         cfg.Start,
		wake:        make(chan struct{}, 1),
		stopped:     make(chan struct{}),
		head:        sentinel,
		tail:        sentinel,
		subs:        make(map[*subscription]struct{}),
		calls:       make(map[string]int),
		callFaults:  make(map[uint64]fault),
		verbFaults:  make(map[string][]verbFault),
	}
	s.gate.Store(&gate)
	if cfg.Manual {
		close(s.stopped)
	} else {
		go s.runClock()
	}
	return s
}

// Close stops the clock and ends every event stream. The simulation's state
// stays readable.
func (s *Nomad) Close() {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return
	}
	s.closed = true
	s.mu.Unlock()
	s.poke()
	<-s.stopped
	s.CloseEventStreams(nil)
}

var _ nomad.API = (*Nomad)(nil)

// ListJobs implements nomad.API. Stubs carry Meta (as the real API gives
// with meta=true) and a JobSummary, sorted by namespace and ID like Nomad's
// index; the returned index is the current Raft index.
func (s *Nomad) ListJobs(ctx context.Context, namespace string) (_ []*api.JobListStub, _ uint64, err error) {
	stubs, _, index, err := s.listJobs(ctx, namespace, "", 0)
	return stubs, index, err
}

// listJobs is ListJobs paginated as Nomad paginates /v1/jobs (its
// paginator and NamespaceIDTokenizer): a job's token is
// "<namespace>.<id>", jobs whose token sorts before nextToken are skipped,
// at most perPage are listed (0: all), and next is the token of the first
// job past the page ("" after the last). Only the page's stubs are built,
// as Nomad's iterator builds them.
func (s *Nomad) listJobs(ctx context.Context, namespace, nextToken string, perPage int) (_ []*api.JobListStub, next string, _ uint64, err error) {
	defer nomad.TraceCall(ctx, nomad.VerbListJobs, &err)
	if err := s.enterRead(ctx, nomad.VerbListJobs); err != nil {
		return nil, "", 0, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	keys := make([]jobKey, 0, len(s.jobs))
	for k := range s.jobs {
		if namespace != "*" && k.ns != namespaceOrDefault(namespace) {
			continue
		}
		keys = append(keys, k)
	}
	sort.Slice(keys, func(i, j int) bool {
		if keys[i].ns != keys[j].ns {
			return keys[i].ns < keys[j].ns
		}
		return keys[i].id < keys[j].id
	})
	out := make([]*api.JobListStub, 0, min(len(keys), max(perPage, 0)))
	for _, k := range keys {
		token := k.ns + "." + k.id
		if nextToken != "" && token < nextToken {
			continue
		}
		if perPage > 0 && len(out) == perPage {
			return out, token, s.index, nil
		}
		out = append(out, s.stub(k, s.jobs[k]))
	}
	return out, "", s.index, nil
}

// GetJob implements nomad.API.
func (s *Nomad) GetJob(ctx context.Context, namespace, id string) (_ *api.Job, err error) {
	defer nomad.TraceCall(ctx, nomad.VerbGetJob, &err)
	if err := s.enterRead(ctx, nomad.VerbGetJob); err != nil {
		return nil, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	rec, ok := s.jobs[jobKey{namespaceOrDefault(namespace), id}]
	if !ok {
		return nil, nomad.ErrNotFound
	}
	return deepCopy(rec.job), nil
}

// RegisterJob implements nomad.API with Nomad's semantics: the job is
// canonicalized as the server does; a job whose spec did not change keeps its
// version and indexes; otherwise Version goes up by one and JobModifyIndex
// and ModifyIndex become the new index. With enforce, the check-and-set is
// Nomad's exactly, a stopped job counting as existing; a conflict is a 500
// api.UnexpectedResponseError whose body starts with
// api.RegisterEnforceIndexErrPrefix, exactly as the real client returns it.
func (s *Nomad) RegisterJob(ctx context.Context, job *api.Job, enforce bool, modifyIndex uint64) (_ *api.JobRegisterResponse, err error) {
	defer nomad.TraceCall(ctx, nomad.VerbRegisterJob, &err)
	after, err := s.enter(ctx, nomad.VerbRegisterJob)
	if err != nil {
		return nil, err
	}
	resp, err := s.registerJob(job, enforce, modifyIndex)
	if after != nil {
		return nil, after // the response was lost, whatever it was
	}
	return resp, err
}

func (s *Nomad) registerJob(job *api.Job, enforce bool, modifyIndex uint64) (*api.JobRegisterResponse, error) {
	if job == nil {
		return nil, ResponseError(400, "Job must be specified")
	}
	j := deepCopy(job)
	j.Canonicalize()
	if *j.ID == "" {
		return nil, ResponseError(400, "Job ID hasn't been provided")
	}
	if len(j.TaskGroups) == 0 {
		return nil, ResponseError(500, "1 error occurred:\n\t* Missing job task groups\n\n")
	}
	key := jobKey{*j.Namespace, *j.ID}

	s.mu.Lock()
	defer s.mu.Unlock()
	rec := s.jobs[key]
	if enforce {
		if msg := enforceIndexError(rec, modifyIndex); msg != "" {
			return nil, ResponseError(500, msg)
		}
	}

	// Server-set fields are the server's, whatever the client sent.
	j.Status, j.StatusDescription = nil, nil
	j.Stable = ptr(false)
	j.SubmitTime = ptr(s.simNow().UnixNano())
	if rec != nil && !specChanged(rec.job, j) {
		// Nomad writes only an evaluation: no new version, no job event.
		idx := s.nextIndex()
		return &api.JobRegisterResponse{
			EvalID:          s.newID(),
			EvalCreateIndex: idx,
			JobModifyIndex:  *rec.job.JobModifyIndex,
			QueryMeta:       api.QueryMeta{LastIndex: idx},
		}, nil
	}

	tx := s.beginWrite(typeJobRegistered)
	if rec == nil {
		rec = &jobRec{}
		s.jobs[key] = rec
		j.Version = ptr(uint64(0))
		j.CreateIndex = ptr(tx.index)
	} else {
		j.Version = ptr(*rec.job.Version + 1)
		j.CreateIndex = rec.job.CreateIndex
	}
	j.ModifyIndex = ptr(tx.index)
	j.JobModifyIndex = ptr(tx.index)
	rec.job = j
	rec.pendingEval = true
	j.Status = ptr(s.jobStatus(key, rec))
	tx.jobEvent(s, j)
	tx.commit(s)
	s.schedulePlan(key)
	return &api.JobRegisterResponse{
		EvalID:          s.newID(),
		EvalCreateIndex: tx.index,
		JobModifyIndex:  tx.index,
		QueryMeta:       api.QueryMeta{LastIndex: tx.index},
	}, nil
}

// enforceIndexError returns the message Nomad's Job.Register gives when the
// check-and-set fails (nomad/job_endpoint.go), or "" when it passes.
func enforceIndexError(rec *jobRec, jmi uint64) string {
	if rec != nil {
		if jmi == 0 {
			return fmt.Sprintf("%s 0: job already exists", api.RegisterEnforceIndexErrPrefix)
		}
		if jmi != *rec.job.JobModifyIndex {
			return fmt.Sprintf("%s %d: job exists with conflicting job modify index: %d",
				api.RegisterEnforceIndexErrPrefix, jmi, *rec.job.JobModifyIndex)
		}
		return ""
	}
	if jmi != 0 {
		return fmt.Sprintf("%s %d: job does not exist", api.RegisterEnforceIndexErrPrefix, jmi)
	}
	return ""
}

// specChanged mirrors structs.Job.SpecChanged: everything but the fields
// the server sets counts.
func specChanged(old, next *api.Job) bool {
	c := *next
	c.Status = old.Status
	c.StatusDescription = old.StatusDescription
	c.Stable = old.Stable
	c.Version = old.Version
	c.CreateIndex = old.CreateIndex
	c.ModifyIndex = old.ModifyIndex
	c.JobModifyIndex = old.JobModifyIndex
	c.SubmitTime = old.SubmitTime
	return !deepEqual(old, &c)
}

// DeregisterJob implements nomad.API. Stopping sets Stop, which is a new
// version (Version, JobModifyIndex and ModifyIndex move), and the plan then
// stops the allocations; purging deletes the job, its allocations staying
// listed until GC. A job that does not exist is not an error, as in Nomad.
func (s *Nomad) DeregisterJob(ctx context.Context, namespace, id string, purge bool) (err error) {
	defer nomad.TraceCall(ctx, nomad.VerbDeregisterJob, &err)
	after, err := s.enter(ctx, nomad.VerbDeregisterJob)
	if err != nil {
		return err
	}
	s.deregisterJob(namespace, id, purge)
	return after
}

func (s *Nomad) deregisterJob(namespace, id string, purge bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	key := jobKey{namespaceOrDefault(namespace), id}
	rec, ok := s.jobs[key]
	if !ok {
		return
	}
	tx := s.beginWrite(typeJobDeregistered)
	if purge {
		delete(s.jobs, key)
		delete(s.blocked, key)
		tx.jobEvent(s, rec.job)
	} else {
		j := rec.job
		j.Stop = ptr(true)
		j.Version = ptr(*j.Version + 1)
		j.ModifyIndex = ptr(tx.index)
		j.JobModifyIndex = ptr(tx.index)
		// Nomad's FSM stops a copy of the current job: Stable carries over.
		rec.pendingEval = true
		j.Status = ptr(s.jobStatus(key, rec))
		tx.jobEvent(s, j)
	}
	tx.commit(s)
	s.schedulePlan(key)
}

// ListAllocations implements nomad.API: every allocation of the namespace
// ("*" for all) not yet garbage collected, newest first as the api client
// sorts them, without task states (the daemon asks Nomad to leave them out).
func (s *Nomad) ListAllocations(ctx context.Context, namespace string) (_ []*api.AllocationListStub, err error) {
	defer nomad.TraceCall(ctx, nomad.VerbListAllocations, &err)
	if err := s.enterRead(ctx, nomad.VerbListAllocations); err != nil {
		return nil, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]*api.AllocationListStub, 0, len(s.allocs))
	for _, a := range s.allocs {
		if namespace != "*" && a.ns != namespaceOrDefault(namespace) {
			continue
		}
		st := a.stub()
		st.TaskStates = nil
		out = append(out, st)
	}
	sort.Slice(out, func(i, j int) bool {
		if out[i].CreateIndex != out[j].CreateIndex {
			return out[i].CreateIndex > out[j].CreateIndex
		}
		return out[i].ID < out[j].ID
	})
	return out, nil
}

// CreateHostVolume implements nomad.API. A new volume gets an ID and, unless
// it names one, the first node (in ID order) of its pool that has no volume
// of that name yet, as Nomad places it; it is ready at once. Its capacity
// is what a sizing host volume plugin would report: capacity_max, else
// capacity_min (Nomad's own mkdir plugin reports 0; the simulation sizes
// every plugin, so that expansions can be tested). A volume with an
// existing ID is updated, which is how Nomad expands one: the update is
// refused with Nomad's errors (HostVolume.Validate and ValidateUpdate)
// while an allocation that is not client-terminal claims the volume, when
// capacity_max is below the volume's capacity, or when it moves the
// volume's node or node pool; it keeps the volume's node, pool,
// constraints and path, and takes the request's plugin ID (the old one
// when empty), capacities, parameters and capabilities. Jobs waiting for
// a volume of this name are planned again.
func (s *Nomad) CreateHostVolume(ctx context.Context, vol *api.HostVolume) (_ *api.HostVolume, err error) {
	defer nomad.TraceCall(ctx, nomad.VerbCreateHostVolume, &err)
	after, err := s.enter(ctx, nomad.VerbCreateHostVolume)
	if err != nil {
		return nil, err
	}
	v, err := s.createHostVolume(vol)
	if after != nil {
		return nil, after
	}
	return v, err
}

func (s *Nomad) createHostVolume(vol *api.HostVolume) (*api.HostVolume, error) {
	if vol == nil {
		return nil, ResponseError(400, "missing volume definition")
	}
	v := deepCopy(vol)
	v.Namespace = namespaceOrDefault(v.Namespace)
	if v.Name == "" {
		return nil, ResponseError(500, "volume validation failed: 1 error occurred:\n\t* missing name\n\n")
	}
	if v.RequestedCapacityMaxBytes < v.RequestedCapacityMinBytes {
		// Nomad 1.10.5 checks this whether or not capacity_max is set.
		return nil, ResponseError(500, fmt.Sprintf("volume validation failed: capacity_max (%d) must be larger than capacity_min (%d)",
			v.RequestedCapacityMaxBytes, v.RequestedCapacityMinBytes))
	}

	s.mu.Lock()
	defer s.mu.Unlock()
	now := s.simNow().UnixNano()
	if v.ID != "" {
		rec, ok := s.vols[v.ID]
		if !ok || rec.vol.Namespace != v.Namespace {
			return nil, ResponseError(500, fmt.Sprintf("cannot update volume %q: volume does not exist", v.ID))
		}
		if v.Name != rec.vol.Name {
			return nil, ResponseError(500, "volume validation failed: 1 error occurred:\n\t* volume name cannot be updated\n\n")
		}
		if err := validateVolumeUpdate(v, rec); err != nil {
			return nil, err
		}
		if v.PluginID == "" {
			v.PluginID = rec.vol.PluginID
		}
		v.NodeID, v.NodePool, v.Constraints = rec.vol.NodeID, rec.vol.NodePool, rec.vol.Constraints
		v.CreateIndex, v.CreateTime, v.HostPath = rec.vol.CreateIndex, rec.vol.CreateTime, rec.vol.HostPath
	} else {
		if v.PluginID == "" {
			v.PluginID = "mkdir"
		}
		if err := s.placeVolume(v); err != nil {
			return nil, err
		}
		v.ID = s.newID()
		v.CreateTime = now
		v.HostPath = "/opt/nomad/data/host_volumes/" + v.ID
	}
	if v.NodePool == "" {
		v.NodePool = "default"
	}
	v.CapacityBytes = v.RequestedCapacityMaxBytes
	if v.CapacityBytes == 0 {
		v.CapacityBytes = v.RequestedCapacityMinBytes
	}
	v.State = api.HostVolumeStateReady
	v.ModifyTime = now
	v.Allocations = nil

	tx := s.beginWrite(typeHostVolumeRegistered)
	if v.CreateIndex == 0 {
		v.CreateIndex = tx.index
	}
	v.ModifyIndex = tx.index
	rec, ok := s.vols[v.ID]
	if !ok {
		rec = &volRec{claims: make(map[*allocRec]struct{})}
		s.vols[v.ID] = rec
		nk := jobKey{v.Namespace, v.Name}
		if len(s.volNames[nk]) == 0 {
			s.indexVolumeName(nk, true)
		}
		s.volNames[nk] = append(s.volNames[nk], v.ID)
	}
	rec.vol = v
	tx.volumeEvent(s, v, false)
	tx.commit(s)

	// A job blocked on this volume can now be placed: its blocked eval is
	// unblocked, as in Nomad.
	for k := range s.blocked {
		if k.ns == v.Namespace {
			delete(s.blocked, k)
			s.schedulePlan(k)
		}
	}
	return deepCopy(v), nil
}

// validateVolumeUpdate refuses an update as Nomad's HostVolume.ValidateUpdate
// does, with its words: all problems in one multierror. Callers hold s.mu.
func validateVolumeUpdate(v *api.HostVolume, rec *volRec) error {
	var errs []string
	if len(rec.claims) > 0 {
		errs = append(errs, "cannot update a volume in use: claimed by allocs ("+strings.Join(rec.claimIDs(), ", ")+")")
	}
	if v.NodeID != "" && v.NodeID != rec.vol.NodeID {
		errs = append(errs, "node ID cannot be updated")
	}
	if v.NodePool != "" && v.NodePool != rec.vol.NodePool {
		errs = append(errs, "node pool cannot be updated")
	}
	if v.RequestedCapacityMaxBytes > 0 && v.RequestedCapacityMaxBytes < rec.vol.CapacityBytes {
		errs = append(errs, fmt.Sprintf("capacity_max (%d) cannot be less than existing provisioned capacity (%d)",
			v.RequestedCapacityMaxBytes, rec.vol.CapacityBytes))
	}
	if len(errs) == 0 {
		return nil
	}
	return ResponseError(500, fmt.Sprintf("validating volume %q update failed: %s", v.ID, multierror(errs)))
}

// multierror renders errors as hashicorp/go-multierror does.
func multierror(errs []string) string {
	head := "1 error occurred:"
	if len(errs) != 1 {
		head = fmt.Sprintf("%d errors occurred:", len(errs))
	}
	return head + "\n\t* " + strings.Join(errs, "\n\t* ") + "\n\n"
}

// claimIDs lists the IDs of the allocations claiming the volume, sorted.
func (r *volRec) claimIDs() []string {
	ids := make([]string, 0, len(r.claims))
	for a := range r.claims {
		ids = append(ids, a.id)
	}
	sort.Strings(ids)
	return ids
}

// GetHostVolume implements nomad.API: the whole volume, with the stubs of
// the allocations that claim it, as Nomad denormalizes them on read.
func (s *Nomad) GetHostVolume(ctx context.Context, namespace, id string) (_ *api.HostVolume, err error) {
	defer nomad.TraceCall(ctx, nomad.VerbGetHostVolume, &err)
	if err := s.enterRead(ctx, nomad.VerbGetHostVolume); err != nil {
		return nil, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	rec, ok := s.vols[id]
	if !ok || rec.vol.Namespace != namespaceOrDefault(namespace) {
		return nil, nomad.ErrNotFound
	}
	v := deepCopy(rec.vol)
	claims := make([]*allocRec, 0, len(rec.claims))
	for a := range rec.claims {
		claims = append(claims, a)
	}
	sort.Slice(claims, func(i, j int) bool { return claims[i].id < claims[j].id })
	for _, a := range claims {
		v.Allocations = append(v.Allocations, a.stub())
	}
	return v, nil
}

// placeVolume picks the volume's node: the given one if it exists, else the
// first node without a volume of the same name, as Nomad's placeHostVolume.
func (s *Nomad) placeVolume(v *api.HostVolume) error {
	if v.NodeID != "" {
		for _, n := range s.cfg.Nodes {
			if n == v.NodeID {
				v.NodePool = "default"
				return nil
			}
		}
		return ResponseError(500, fmt.Sprintf("could not place volume %q: no such node %s", v.Name, v.NodeID))
	}
	if v.NodePool != "" && v.NodePool != "default" && v.NodePool != "all" {
		return ResponseError(500, fmt.Sprintf("validating volume %q against state failed: node pool %q does not exist", v.Name, v.NodePool))
	}
	taken := make(map[string]bool)
	for _, r := range s.volsByName(v.Namespace, v.Name) {
		taken[r.vol.NodeID] = true
	}
	nodes := append([]string(nil), s.cfg.Nodes...)
	sort.Strings(nodes)
	for _, n := range nodes {
		if !taken[n] {
			v.NodeID, v.NodePool = n, "default"
			return nil
		}
	}
	return ResponseError(500, fmt.Sprintf("could not place volume %q: no node meets constraints: "+
		"%d nodes had existing volume, 0 nodes filtered by node pool governance, 0 nodes were infeasible",
		v.Name, len(taken)))
}

// EvaluateJob implements nomad.API: the simulation places what it can at
// once, so only a blocked job (its volumes' node ineligible, or a volume
// missing) is planned again; it is counted like the real one.
func (s *Nomad) EvaluateJob(ctx context.Context, namespace, id string) (err error) {
	defer nomad.TraceCall(ctx, nomad.VerbEvaluateJob, &err)
	after, err := s.enter(ctx, nomad.VerbEvaluateJob)
	if err != nil {
		return err
	}
	s.mu.Lock()
	key := jobKey{namespaceOrDefault(namespace), id}
	if _, ok := s.blocked[key]; ok {
		delete(s.blocked, key)
		s.schedulePlan(key)
	}
	s.mu.Unlock()
	return after
}

// ExecFunc plays the command that ExecAlloc runs in task of allocation
// allocID, with env set for it (the command and env the caller gave, not
// the shell that nomad.Client wraps them in). It returns the command's exit
// code and output, or an error for a call that failed before the command
// exited.
type ExecFunc func(allocID, task string, command []string, env map[string]string) (exitCode int, output string, err error)

// SetExec makes fn play every command ExecAlloc runs from now on; nil
// resets to commands that exit 0 with no output. fn is called without the
// simulation's lock held, so it may call the simulation, and on a
// goroutine of its own: one that blocks past the caller's deadline plays a
// command that hangs, and ExecAlloc returns at the deadline, as
// nomad.Client does.
func (s *Nomad) SetExec(fn ExecFunc) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.exec = fn
}

// SetAllocChecks sets the results of the Nomad-native service checks of a
// running allocation, by check name (true = passing), as AllocChecks
// reports them; nil clears them. They go with the allocation: its
// replacement starts with none.
func (s *Nomad) SetAllocChecks(allocID string, checks map[string]bool) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	a, err := s.liveAlloc(allocID)
	if err != nil {
		return err
	}
	a.checks = maps.Clone(checks)
	return nil
}

// ExecAlloc implements nomad.API: it refuses, as Nomad does and in its
// words, a command for an allocation it does not know (or of another
// namespace), for a task the allocation does not have, and for an
// allocation that is not running; otherwise SetExec's function plays the
// command. nodeID is not checked: without one, Nomad's servers forward the
// exec to the allocation's node. The command and env are checked as
// nomad.Client checks them (nomad.ExecCommand), before anything is sent.
// A lost response (LoseResponse) is a command that ran and whose exit was
// never heard.
func (s *Nomad) ExecAlloc(ctx context.Context, namespace, nodeID, allocID, task string, command []string, env map[string]string) (_ nomad.ExecResult, err error) {
	defer nomad.TraceCall(ctx, nomad.VerbExecAlloc, &err)
	what := fmt.Sprintf("running %q in task %q of allocation %s/%s", command, task, namespace, allocID)
	res := nomad.ExecResult{ExitCode: -1}
	if _, err := nomad.ExecCommand(command, env); err != nil {
		return res, fmt.Errorf("%s: %w", what, err)
	}
	after, err := s.enter(ctx, nomad.VerbExecAlloc)
	if err != nil {
		return res, err
	}
	s.mu.Lock()
	fn := s.exec
	refused := s.execRefusal(namespace, allocID, task)
	s.mu.Unlock()
	if refused != nil {
		return res, fmt.Errorf("%s: %w", what, refused)
	}
	if fn == nil {
		fn = func(string, string, []string, map[string]string) (int, string, error) { return 0, "", nil }
	}
	type exit struct {
		code   int
		output string
		err    error
	}
	done := make(chan exit, 1)
	command, env = slices.Clone(command), maps.Clone(env)
	go func() {
		code, output, err := fn(allocID, task, command, env)
		done <- exit{code, output, err}
	}()
	select {
	case e := <-done:
		if after != nil {
			return res, after
		}
		res.Output, res.Truncated = nomad.TailOutput(e.output)
		if e.err != nil {
			return res, fmt.Errorf("%s: %w", what, e.err)
		}
		res.ExitCode = e.code
		return res, nil
	case <-ctx.Done():
		return res, fmt.Errorf("%s: it did not exit in time, and may still be running: %w", what, ctx.Err())
	}
}

// execRefusal is Nomad's refusal of an exec into task of allocation
// allocID, in Nomad's words, or nil. Callers hold s.mu.
func (s *Nomad) execRefusal(namespace, allocID, task string) error {
	a, ok := s.allocs[allocID]
	if !ok || a.ns != namespaceOrDefault(namespace) {
		//lint:ignore ST1005 Nomad's own wording
		return fmt.Errorf("Unknown allocation %q", allocID)
	}
	if !slices.Contains(a.tasks, task) {
		return errors.New("task not found")
	}
	if a.clientStatus != api.AllocClientStatusRunning {
		//lint:ignore ST1005 Nomad's own wording
		return fmt.Errorf("task %q is not running.", task)
	}
	return nil
}

// AllocChecks implements nomad.API: the results SetAllocChecks gave a
// running allocation, with no output; none for an allocation that is not
// running, as Nomad's client drops them when it stops one. An allocation
// the simulation does not know (or of another namespace) is
// nomad.ErrNotFound.
func (s *Nomad) AllocChecks(ctx context.Context, namespace, allocID string) (_ map[string]nomad.CheckStatus, err error) {
	defer nomad.TraceCall(ctx, nomad.VerbAllocChecks, &err)
	if err := s.enterRead(ctx, nomad.VerbAllocChecks); err != nil {
		return nil, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	a, ok := s.allocs[allocID]
	if !ok || a.ns != namespaceOrDefault(namespace) {
		return nil, nomad.ErrNotFound
	}
	out := make(map[string]nomad.CheckStatus, len(a.checks))
	if a.clientStatus == api.AllocClientStatusRunning {
		for name, passing := range a.checks {
			out[name] = nomad.CheckStatus{Passing: passing}
		}
	}
	return out, nil
}

// GetNode implements nomad.API: a configured node, ready, eligible unless
// SetNodeEligibility says otherwise, in datacenter dc1, with no meta.
func (s *Nomad) GetNode(ctx context.Context, id string) (_ *api.Node, err error) {
	defer nomad.TraceCall(ctx, nomad.VerbGetNode, &err)
	if err := s.enterRead(ctx, nomad.VerbGetNode); err != nil {
		return nil, err
	}
	for _, n := range s.cfg.Nodes {
		if n == id {
			s.mu.Lock()
			defer s.mu.Unlock()
			n := s.node(id)
			n.Datacenter, n.NodePool, n.Attributes, n.Meta = "dc1", "default", map[string]string{}, map[string]string{}
			return n, nil
		}
	}
	return nil, nomad.ErrNotFound
}

// ListNodes implements nomad.API: the configured nodes, all ready and not
// draining (the simulation has no drains), eligible unless
// SetNodeEligibility says otherwise.
func (s *Nomad) ListNodes(ctx context.Context) (_ []*api.NodeListStub, err error) {
	defer nomad.TraceCall(ctx, nomad.VerbListNodes, &err)
	if err := s.enterRead(ctx, nomad.VerbListNodes); err != nil {
		return nil, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]*api.NodeListStub, 0, len(s.cfg.Nodes))
	for _, id := range s.cfg.Nodes {
		n := s.node(id)
		out = append(out, &api.NodeListStub{ID: id, Name: id, Status: n.Status,
			SchedulingEligibility: n.SchedulingEligibility, ModifyIndex: n.ModifyIndex})
	}
	return out, nil
}

// node describes a configured node as it is now. Callers hold s.mu.
func (s *Nomad) node(id string) *api.Node {
	elig := api.NodeSchedulingEligible
	if s.ineligible[id] {
		elig = api.NodeSchedulingIneligible
	}
	return &api.Node{ID: id, Name: id, Status: api.NodeStatusReady, SchedulingEligibility: elig, ModifyIndex: s.nodeIndex[id]}
}

// SetNodeEligibility marks a node eligible or ineligible for scheduling, as
// `nomad node eligibility -disable` does, and publishes the Node event.
// Nothing new is placed on an ineligible node: a job whose volumes live
// there is blocked. Making the node eligible again does not place it, as
// Nomad 1.10 leaves such a job blocked (issue 14) until an evaluation
// (EvaluateJob) or a change of its volumes.
func (s *Nomad) SetNodeEligibility(id string, eligible bool) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if !slices.Contains(s.cfg.Nodes, id) {
		return fmt.Errorf("nomadsim: no node %q", id)
	}
	if s.ineligible[id] == !eligible {
		return nil
	}
	s.ineligible[id] = !eligible
	tx := s.begin(typeNodeEligibility)
	s.nodeIndex[id] = tx.index
	tx.touch(api.TopicNode, s.node(id), false)
	tx.commit(s)
	return nil
}

// ListHostVolumes implements nomad.API: volumes of the namespace ("*" for
// all) whose name or ID starts with prefix, as Nomad's list filters, in
// namespace and ID order.
func (s *Nomad) ListHostVolumes(ctx context.Context, namespace, prefix string) (_ []*api.HostVolumeStub, err error) {
	defer nomad.TraceCall(ctx, nomad.VerbListHostVolumes, &err)
	if err := s.enterRead(ctx, nomad.VerbListHostVolumes); err != nil {
		return nil, err
	}
	ns := namespaceOrDefault(namespace)
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []*api.HostVolumeStub
	seen := make(map[string]bool)
	add := func(v *api.HostVolume) {
		if seen[v.ID] || (namespace != "*" && v.Namespace != ns) {
			return
		}
		seen[v.ID] = true
		out = append(out, &api.HostVolumeStub{
			Namespace: v.Namespace, ID: v.ID, Name: v.Name, PluginID: v.PluginID,
			NodePool: v.NodePool, NodeID: v.NodeID, CapacityBytes: v.CapacityBytes,
			State: v.State, CreateIndex: v.CreateIndex, CreateTime: v.CreateTime,
			ModifyIndex: v.ModifyIndex, ModifyTime: v.ModifyTime,
		})
	}
	if prefix == "" || namespace == "*" || couldBeID(prefix) {
		// Rare in practice: every volume has to be looked at.
		for _, r := range s.vols {
			if strings.HasPrefix(r.vol.Name, prefix) || strings.HasPrefix(r.vol.ID, prefix) {
				add(r.vol)
			}
		}
	} else {
		i := sort.Search(len(s.volNameIndex), func(i int) bool {
			return !keyLess(s.volNameIndex[i], jobKey{ns, prefix})
		})
		for ; i < len(s.volNameIndex); i++ {
			k := s.volNameIndex[i]
			if k.ns != ns || !strings.HasPrefix(k.id, prefix) {
				break
			}
			for _, id := range s.volNames[k] {
				add(s.vols[id].vol)
			}
		}
	}
	sort.Slice(out, func(i, j int) bool {
		if out[i].Namespace != out[j].Namespace {
			return out[i].Namespace < out[j].Namespace
		}
		return out[i].ID < out[j].ID
	})
	return out, nil
}

// couldBeID reports whether prefix could start a volume ID (hex digits and
// dashes); only then must the list look beyond names.
func couldBeID(prefix string) bool {
	for _, c := range prefix {
		if !strings.ContainsRune("0123456789abcdef-", c) {
			return false
		}
	}
	return true
}

func keyLess(a, b jobKey) bool {
	if a.ns != b.ns {
		return a.ns < b.ns
	}
	return a.id < b.id
}

// indexVolumeName adds a (namespace, name) key to the sorted name index, or
// removes it. Callers hold s.mu.
func (s *Nomad) indexVolumeName(k jobKey, add bool) {
	i := sort.Search(len(s.volNameIndex), func(i int) bool { return !keyLess(s.volNameIndex[i], k) })
	found := i < len(s.volNameIndex) && s.volNameIndex[i] == k
	switch {
	case add && !found:
		s.volNameIndex = append(s.volNameIndex, jobKey{})
		copy(s.volNameIndex[i+1:], s.volNameIndex[i:])
		s.volNameIndex[i] = k
	case !add && found:
		s.volNameIndex = append(s.volNameIndex[:i], s.volNameIndex[i+1:]...)
	}
}

// DeleteHostVolume implements nomad.API with Nomad's errors: an unknown ID
// is "no such volume", and a volume claimed by an allocation that is not
// client-terminal is "in use".
func (s *Nomad) DeleteHostVolume(ctx context.Context, namespace, id string) (err error) {
	defer nomad.TraceCall(ctx, nomad.VerbDeleteHostVolume, &err)
	after, err := s.enter(ctx, nomad.VerbDeleteHostVolume)
	if err != nil {
		return err
	}
	if err := s.deleteHostVolume(namespace, id); after == nil {
		return err
	}
	return after
}

func (s *Nomad) deleteHostVolume(namespace, id string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	rec, ok := s.vols[id]
	if !ok || rec.vol.Namespace != namespaceOrDefault(namespace) {
		return ResponseError(500, "no such volume: "+id)
	}
	if len(rec.claims) > 0 {
		return ResponseError(500, fmt.Sprintf("volume %s in use by allocations: %v", id, rec.claimIDs()))
	}
	tx := s.beginWrite(typeHostVolumeDeleted)
	delete(s.vols, id)
	nk := jobKey{rec.vol.Namespace, rec.vol.Name}
	ids := s.volNames[nk]
	for i, vid := range ids {
		if vid == id {
			ids = append(ids[:i:i], ids[i+1:]...)
			break
		}
	}
	if len(ids) == 0 {
		delete(s.volNames, nk)
		s.indexVolumeName(nk, false)
	} else {
		s.volNames[nk] = ids
	}
	tx.volumeEvent(s, rec.vol, true)
	tx.commit(s)
	return nil
}

// namespaceOrDefault maps the empty namespace to "default", as the api
// client and server do.
func namespaceOrDefault(ns string) string {
	if ns == "" {
		return api.DefaultNamespace
	}
	return ns
}

func ptr[T any](v T) *T { return &v }

// beginWrite starts a write of the API at the next index, which
// LastWriteIndex then returns, as the answer to a real write carries it.
// Callers hold s.mu.
func (s *Nomad) beginWrite(typ string) *txn {
	tx := s.begin(typ)
	s.written = tx.index
	return tx
}

// LastWriteIndex implements nomad.WriteIndexer: the index of the newest
// write made through the API (register, deregister, volume create and
// delete), not of the simulation's own plans and updates after it.
func (s *Nomad) LastWriteIndex() uint64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.written
}

// nextIndex takes the next Raft index. Callers hold s.mu.
func (s *Nomad) nextIndex() uint64 {
	s.index++
	return s.index
}

// newID returns a UUID-shaped ID. IDs are sequential so runs are
// reproducible and allocation order is creation order. Callers hold s.mu.
func (s *Nomad) newID() string {
	s.ids++
	return fmt.Sprintf("%08x-0000-4000-8000-%012x", uint32(s.ids*2654435761), s.ids)
}

// stub builds a job's list stub. Callers hold s.mu.
func (s *Nomad) stub(k jobKey, rec *jobRec) *api.JobListStub {
	j := rec.job
	summary := &api.JobSummary{
		JobID: k.id, Namespace: k.ns,
		Summary:     make(map[string]api.TaskGroupSummary, len(j.TaskGroups)),
		CreateIndex: *j.CreateIndex, ModifyIndex: *j.ModifyIndex,
	}
	for _, tg := range j.TaskGroups {
		summary.Summary[*tg.Name] = api.TaskGroupSummary{}
	}
	for _, a := range s.allocsByJob[k] {
		if a.jobCreateIndex != *j.CreateIndex {
			continue
		}
		g := summary.Summary[a.group]
		switch a.clientStatus {
		case api.AllocClientStatusPending:
			g.Starting++
		case api.AllocClientStatusRunning:
			g.Running++
		case api.AllocClientStatusComplete:
			g.Complete++
		case api.AllocClientStatusFailed:
			g.Failed++
		case api.AllocClientStatusLost:
			g.Lost++
		}
		summary.Summary[a.group] = g
	}
	var meta map[string]string
	if j.Meta != nil {
		meta = make(map[string]string, len(j.Meta))
		for mk, mv := range j.Meta {
			meta[mk] = mv
		}
	}
	return &api.JobListStub{
		ID: k.id, ParentID: deref(j.ParentID), Name: deref(j.Name), Namespace: k.ns,
		Datacenters: append([]string(nil), j.Datacenters...),
		Type:        deref(j.Type), Priority: deref(j.Priority),
		Periodic: j.Periodic != nil, ParameterizedJob: j.ParameterizedJob != nil,
		Stop: deref(j.Stop), Status: deref(j.Status), StatusDescription: deref(j.StatusDescription),
		JobSummary:  summary,
		CreateIndex: *j.CreateIndex, ModifyIndex: *j.ModifyIndex, JobModifyIndex: *j.JobModifyIndex,
		SubmitTime: deref(j.SubmitTime), Meta: meta,
	}
}

func deref[T any](p *T) T {
	var zero T
	if p == nil {
		return zero
	}
	return *p
}
