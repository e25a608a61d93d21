package e2e

import (
	"context"
	"fmt"
	"sort"
	"strconv"
	"sync"
	"testing"
	"time"

	nomadapi "github.com/hashicorp/nomad/api"
)

// Meta keys that child jobs carry (DESIGN §2).
const (
	MetaParent  = "statefulset_parent"
	MetaOrdinal = "statefulset_ordinal"
)

// ChildRecord is what the watchdog saw of one child job.
type ChildRecord struct {
	// Namespace and JobID identify the child job.
	Namespace, JobID string
	// Parent is the set (meta statefulset_parent) and Ordinal its ordinal.
	Parent  string
	Ordinal int
	// RegisteredAt is when the child job was first registered (its first
	// version's SubmitTime, or when the watchdog first saw it).
	RegisteredAt time.Time
	// HealthyAt is when an allocation of the child first became healthy
	// (its deployment status timestamp, taken by the Nomad client), zero if
	// never.
	HealthyAt time.Time
	// RegisteredSeenAt and HealthySeenAt are when the watchdog first saw the
	// registration and the healthy allocation on Nomad's event stream, as
	// the daemon would. Their difference across two ordinals is the
	// daemon's own share of a step: the Nomad client reports health to the
	// servers up to a second after HealthyAt (see BENCHMARKS.md).
	RegisteredSeenAt, HealthySeenAt time.Time
	// Registrations counts the distinct job versions seen (JobModifyIndex).
	Registrations int
}

// allocState is the watchdog's view of one allocation.
type allocState struct {
	id, namespace, jobID string
	modifyIndex          uint64
	running              bool
	terminal             bool
	// healthy is set once Nomad judged the allocation healthy; stopping
	// once Nomad asked it to stop (desired status stop or evict).
	healthy, stopping bool
}

// downTrack counts the ordinals of one set that are down at once.
type downTrack struct {
	ordinals int
	max      int
	at       string
}

// Watchdog watches every allocation of every child job and records a
// violation whenever two allocations of one ordinal run at once: two
// allocations of the same child job, or of two child jobs with the same
// statefulset_parent and statefulset_ordinal meta. An allocation counts as
// running while its client status is "running" or "unknown" (a disconnected
// client may still run it). It also records when each child was registered
// and first became healthy, for ordering assertions and latency measurement.
//
// It is fed by the Nomad event stream, with a periodic listing of all jobs
// and allocations as a safety net. Updates are applied by ModifyIndex and a
// terminal allocation never counts as running again, so the two sources
// cannot make a false violation by arriving out of order. The detection
// logic (ObserveJob, ObserveAlloc) needs no Nomad and is unit-tested.
type Watchdog struct {
	mu         sync.Mutex
	jobs       map[string]*ChildRecord // namespace/jobID of child jobs
	jobIndex   map[string]map[uint64]bool
	allocs     map[string]*allocState // alloc ID
	pending    map[string][]string    // namespace/jobID -> alloc IDs seen before their job
	violations []string
	reported   map[[2]string]bool // alloc ID pairs already reported
	now        func() time.Time

	cancel  context.CancelFunc
	done    chan struct{}
	lastErr error

	// down holds the sets whose down ordinals are counted (TrackDown).
	down map[string]*downTrack
}

// NewWatchdog returns a watchdog that is fed by hand (for unit tests); Start
// attaches it to Nomad.
func NewWatchdog() *Watchdog {
	return &Watchdog{
		jobs:     map[string]*ChildRecord{},
		jobIndex: map[string]map[uint64]bool{},
		allocs:   map[string]*allocState{},
		pending:  map[string][]string{},
		reported: map[[2]string]bool{},
		now:      time.Now,
		down:     map[string]*downTrack{},
	}
}

// TrackDown starts counting how many of the ordinals 0..ordinals-1 of the
// set parent are down at once: an ordinal is up while one of its
// allocations runs, has been judged healthy by Nomad and has not been asked
// to stop. Call it once the set is converged; MaxDown reports the worst
// moment seen since.
func (w *Watchdog) TrackDown(parent string, ordinals int) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.down[parent] = &downTrack{ordinals: ordinals}
	w.countDownLocked()
}

// MaxDown returns the most ordinals of parent seen down at once since
// TrackDown, and which ones were down then.
func (w *Watchdog) MaxDown(parent string) (int, string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if d := w.down[parent]; d != nil {
		return d.max, d.at
	}
	return 0, ""
}

// ObserveDesired records the desired status Nomad gave an allocation.
func (w *Watchdog) ObserveDesired(id, desiredStatus string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if a := w.allocs[id]; a != nil && (desiredStatus == "stop" || desiredStatus == "evict") && !a.stopping {
		a.stopping = true
		w.countDownLocked()
	}
}

// countDownLocked updates the down counts of the tracked sets. w.mu must be
// held.
func (w *Watchdog) countDownLocked() {
	if len(w.down) == 0 {
		return
	}
	up := map[string]map[int]bool{}
	for _, a := range w.allocs {
		if !a.running || !a.healthy || a.stopping {
			continue
		}
		rec := w.jobs[jobKey(a.namespace, a.jobID)]
		if rec == nil || w.down[rec.Parent] == nil {
			continue
		}
		if up[rec.Parent] == nil {
			up[rec.Parent] = map[int]bool{}
		}
		up[rec.Parent][rec.Ordinal] = true
	}
	for parent, d := range w.down {
		var downs []string
		for o := 0; o < d.ordinals; o++ {
			if !up[parent][o] {
				downs = append(downs, strconv.Itoa(o))
			}
		}
		if len(downs) > d.max {
			d.max = len(downs)
			d.at = fmt.Sprintf("%s: ordinals %v down", w.now().Format("15:04:05.000"), downs)
		}
	}
}

func jobKey(namespace, id string) string {
	if namespace == "" {
		namespace = "default"
	}
	return namespace + "/" + id
}

// ObserveJob records a job. Jobs without statefulset_parent meta are ignored.
func (w *Watchdog) ObserveJob(namespace, id string, meta map[string]string, submitTime int64, jobModifyIndex uint64) {
	parent, ok := meta[MetaParent]
	if !ok || parent == "" {
		return
	}
	ord, err := strconv.Atoi(meta[MetaOrdinal])
	if err != nil {
		ord = -1
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	k := jobKey(namespace, id)
	rec := w.jobs[k]
	if rec == nil {
		rec = &ChildRecord{Namespace: namespace, JobID: id, Parent: parent, Ordinal: ord}
		rec.RegisteredSeenAt = w.now()
		if submitTime > 0 {
			rec.RegisteredAt = time.Unix(0, submitTime)
		} else {
			rec.RegisteredAt = rec.RegisteredSeenAt
		}
		w.jobs[k] = rec
		w.jobIndex[k] = map[uint64]bool{}
	}
	rec.Parent, rec.Ordinal = parent, ord
	if jobModifyIndex > 0 && !w.jobIndex[k][jobModifyIndex] {
		w.jobIndex[k][jobModifyIndex] = true
		rec.Registrations++
	}
	// Allocations seen before their job now get checked against the set's
	// other ordinals too.
	for _, id := range w.pending[k] {
		if a := w.allocs[id]; a != nil && a.running {
			w.checkLocked(a)
		}
	}
	delete(w.pending, k)
}

// ObserveAlloc records an allocation's state. healthyAt is the time it
// became healthy, zero if it is not (yet).
func (w *Watchdog) ObserveAlloc(id, namespace, jobID, clientStatus string, modifyIndex uint64, healthyAt time.Time) {
	w.mu.Lock()
	defer w.mu.Unlock()
	a := w.allocs[id]
	if a == nil {
		a = &allocState{id: id, namespace: namespace, jobID: jobID}
		w.allocs[id] = a
	} else if modifyIndex < a.modifyIndex {
		return // stale
	}
	a.modifyIndex = modifyIndex
	if a.terminal {
		return
	}
	switch clientStatus {
	case "complete", "failed", "lost":
		a.running, a.terminal = false, true
	case "running", "unknown":
		wasRunning := a.running
		a.running = true
		if !wasRunning {
			w.checkLocked(a)
		}
	default: // pending
		a.running = false
	}
	if !healthyAt.IsZero() {
		a.healthy = true
	}
	w.countDownLocked()
	k := jobKey(namespace, jobID)
	if rec := w.jobs[k]; rec != nil {
		if !healthyAt.IsZero() && (rec.HealthyAt.IsZero() || healthyAt.Before(rec.HealthyAt)) {
			rec.HealthyAt = healthyAt
		}
		if !healthyAt.IsZero() && rec.HealthySeenAt.IsZero() {
			rec.HealthySeenAt = w.now()
		}
	} else {
		w.pending[k] = append(w.pending[k], id)
	}
}

// checkLocked records a violation if another allocation of a's ordinal is
// running. w.mu must be held.
func (w *Watchdog) checkLocked(a *allocState) {
	rec := w.jobs[jobKey(a.namespace, a.jobID)]
	for _, b := range w.allocs {
		if b == a || !b.running {
			continue
		}
		sameJob := b.namespace == a.namespace && b.jobID == a.jobID
		sameOrdinal := false
		if rec != nil && rec.Ordinal >= 0 {
			if rb := w.jobs[jobKey(b.namespace, b.jobID)]; rb != nil {
				sameOrdinal = rb.Namespace == rec.Namespace && rb.Parent == rec.Parent && rb.Ordinal == rec.Ordinal
			}
		}
		// Only child jobs are checked: a sameJob pair of a job that is not
		// (yet) known as a child is kept in pending and checked later.
		if sameJob && rec == nil {
			continue
		}
		if sameJob || sameOrdinal {
			pair := [2]string{a.id, b.id}
			if pair[0] > pair[1] {
				pair[0], pair[1] = pair[1], pair[0]
			}
			if w.reported[pair] {
				continue
			}
			w.reported[pair] = true
			v := fmt.Sprintf("%s: two allocations of one ordinal running at once: %s (job %s) and %s (job %s)",
				w.now().Format("15:04:05.000"), b.id, b.jobID, a.id, a.jobID)
			w.violations = append(w.violations, v)
		}
	}
}

// ForgetAllocs marks allocations as no longer running. Nomad 1.10 deletes a
// purged job's allocations without an event, so the watchdog cannot see
// them end: a test that purges a job proves itself that their processes
// are gone (by PID) and then calls this.
func (w *Watchdog) ForgetAllocs(ids ...string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	for _, id := range ids {
		if a := w.allocs[id]; a != nil {
			a.running, a.terminal = false, true
		}
	}
	w.countDownLocked()
}

// Violations returns every violation recorded so far.
func (w *Watchdog) Violations() []string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return append([]string(nil), w.violations...)
}

// Children returns the records of a set's children, by ordinal.
func (w *Watchdog) Children(parent string) []ChildRecord {
	w.mu.Lock()
	defer w.mu.Unlock()
	var out []ChildRecord
	for _, r := range w.jobs {
		if r.Parent == parent {
			out = append(out, *r)
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Ordinal < out[j].Ordinal })
	return out
}

// Child returns the record of one child job.
func (w *Watchdog) Child(namespace, jobID string) (ChildRecord, bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	r, ok := w.jobs[jobKey(namespace, jobID)]
	if !ok {
		return ChildRecord{}, false
	}
	return *r, true
}

// RegisteredAfterHealthy checks OrderedReady's one-at-a-time rule on the
// child jobs jobIDs, in ordinal order: each was first registered no earlier
// than the one before it first became healthy. A child the watchdog never
// saw, or a predecessor it never saw healthy, is an error too: a missed
// record must not pass as "in order".
func (w *Watchdog) RegisteredAfterHealthy(namespace string, jobIDs ...string) error {
	for i := 1; i < len(jobIDs); i++ {
		prev, ok := w.Child(namespace, jobIDs[i-1])
		if !ok || prev.HealthyAt.IsZero() {
			return fmt.Errorf("the watchdog never saw %s healthy (record %+v)", jobIDs[i-1], prev)
		}
		cur, ok := w.Child(namespace, jobIDs[i])
		if !ok {
			return fmt.Errorf("the watchdog never saw %s registered", jobIDs[i])
		}
		if cur.RegisteredAt.Before(prev.HealthyAt) {
			return fmt.Errorf("%s registered at %s, before %s was healthy at %s",
				jobIDs[i], cur.RegisteredAt.Format(time.RFC3339Nano), jobIDs[i-1], prev.HealthyAt.Format(time.RFC3339Nano))
		}
	}
	return nil
}

// RegistrationOrder returns a set's child job IDs in the order they were
// first registered.
func (w *Watchdog) RegistrationOrder(parent string) []string {
	recs := w.Children(parent)
	sort.SliceStable(recs, func(i, j int) bool { return recs[i].RegisteredAt.Before(recs[j].RegisteredAt) })
	ids := make([]string, len(recs))
	for i, r := range recs {
		ids[i] = r.JobID
	}
	return ids
}

// HealthyOrder returns the IDs of a set's children that became healthy, in
// the order they first did.
func (w *Watchdog) HealthyOrder(parent string) []string {
	var recs []ChildRecord
	for _, r := range w.Children(parent) {
		if !r.HealthyAt.IsZero() {
			recs = append(recs, r)
		}
	}
	sort.SliceStable(recs, func(i, j int) bool { return recs[i].HealthyAt.Before(recs[j].HealthyAt) })
	ids := make([]string, len(recs))
	for i, r := range recs {
		ids[i] = r.JobID
	}
	return ids
}

// Check fails the test with every violation seen so far.
func (w *Watchdog) Check(t testing.TB) {
	t.Helper()
	for _, v := range w.Violations() {
		t.Errorf("watchdog: %s", v)
	}
}

// StartWatchdog attaches a new watchdog to Nomad: the event stream of the
// Job and Allocation topics in all namespaces, and a full listing every
// pollEvery as a safety net. At cleanup it stops and fails the test with any
// violation.
func StartWatchdog(t testing.TB, client *nomadapi.Client) *Watchdog {
	t.Helper()
	w := NewWatchdog()
	w.Watch(client)
	t.Cleanup(func() {
		w.Stop()
		w.Check(t)
	})
	return w
}

// Watch feeds the watchdog from Nomad (the event stream, and a full listing
// every second) until Stop. StartWatchdog calls it; call it directly for a
// watchdog whose violations a test inspects itself.
func (w *Watchdog) Watch(client *nomadapi.Client) {
	ctx, cancel := context.WithCancel(context.Background())
	w.cancel, w.done = cancel, make(chan struct{})
	w.poll(client) // a first listing, so the watchdog starts from the current state
	go w.run(ctx, client, time.Second)
}

// Stop stops the watchdog's goroutines.
func (w *Watchdog) Stop() {
	if w.cancel == nil {
		return
	}
	w.cancel()
	<-w.done
}

func (w *Watchdog) run(ctx context.Context, client *nomadapi.Client, pollEvery time.Duration) {
	defer close(w.done)
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		tick := time.NewTicker(pollEvery)
		defer tick.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-tick.C:
				w.poll(client)
			}
		}
	}()
	w.stream(ctx, client)
	wg.Wait()
}

// stream follows the event stream, reconnecting from the last index.
func (w *Watchdog) stream(ctx context.Context, client *nomadapi.Client) {
	var index uint64
	topics := map[nomadapi.Topic][]string{
		nomadapi.TopicJob:        {"*"},
		nomadapi.TopicAllocation: {"*"},
	}
	for ctx.Err() == nil {
		ch, err := client.EventStream().Stream(ctx, topics, index, &nomadapi.QueryOptions{Namespace: "*"})
		if err != nil {
			w.setErr(err)
			sleepCtx(ctx, 500*time.Millisecond)
			continue
		}
		for evs := range ch {
			if evs.Err != nil {
				w.setErr(evs.Err)
				break
			}
			if evs.IsHeartbeat() {
				continue
			}
			for i := range evs.Events {
				w.observeEvent(&evs.Events[i])
			}
			index = evs.Index
		}
		sleepCtx(ctx, 200*time.Millisecond)
	}
}

func (w *Watchdog) observeEvent(e *nomadapi.Event) {
	switch e.Topic {
	case nomadapi.TopicJob:
		if j, err := e.Job(); err == nil && j != nil && j.ID != nil {
			var submit int64
			if derefUint64(j.Version) == 0 {
				submit = derefInt64(j.SubmitTime)
			}
			w.ObserveJob(deref(j.Namespace), *j.ID, j.Meta, submit, derefUint64(j.JobModifyIndex))
		}
	case nomadapi.TopicAllocation:
		if a, err := e.Allocation(); err == nil && a != nil {
			if a.Job != nil && a.Job.ID != nil {
				w.ObserveJob(a.Namespace, *a.Job.ID, a.Job.Meta, 0, 0)
			}
			w.ObserveAlloc(a.ID, a.Namespace, a.JobID, a.ClientStatus, a.ModifyIndex, healthyAt(a.DeploymentStatus))
			w.ObserveDesired(a.ID, a.DesiredStatus)
		}
	}
}

// poll lists every job and allocation.
func (w *Watchdog) poll(client *nomadapi.Client) {
	q := &nomadapi.QueryOptions{Namespace: "*"}
	jobs, _, err := client.Jobs().List(q)
	if err != nil {
		w.setErr(err)
		return
	}
	for _, j := range jobs {
		var submit int64
		if j.CreateIndex == j.JobModifyIndex { // still its first version
			submit = j.SubmitTime
		}
		w.ObserveJob(j.Namespace, j.ID, j.Meta, submit, j.JobModifyIndex)
	}
	allocs, _, err := client.Allocations().List(q)
	if err != nil {
		w.setErr(err)
		return
	}
	for _, a := range allocs {
		w.ObserveAlloc(a.ID, a.Namespace, a.JobID, a.ClientStatus, a.ModifyIndex, healthyAt(a.DeploymentStatus))
		w.ObserveDesired(a.ID, a.DesiredStatus)
	}
}

// LastError returns the last error talking to Nomad, if any (for debugging
// a watchdog that saw nothing).
func (w *Watchdog) LastError() error {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.lastErr
}

func (w *Watchdog) setErr(err error) {
	w.mu.Lock()
	w.lastErr = err
	w.mu.Unlock()
}

func healthyAt(ds *nomadapi.AllocDeploymentStatus) time.Time {
	if ds == nil || ds.Healthy == nil || !*ds.Healthy {
		return time.Time{}
	}
	if ds.Timestamp.IsZero() {
		return time.Now()
	}
	return ds.Timestamp
}

func sleepCtx(ctx context.Context, d time.Duration) {
	select {
	case <-ctx.Done():
	case <-time.After(d):
	}
}

func deref(s *string) string {
	if s == nil {
		return ""
	}
	return *s
}

func derefInt64(p *int64) int64 {
	if p == nil {
		return 0
	}
	return *p
}

func derefUint64(p *uint64) uint64 {
	if p == nil {
		return 0
	}
	return *p
}
