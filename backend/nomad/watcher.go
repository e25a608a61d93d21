package nomad

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/nomad/api"

	"github.com/nomad-statefulset/nomad-statefulset/backend"
	"github.com/nomad-statefulset/nomad-statefulset/jobs"
)

// WatcherConfig tunes the watcher.
type WatcherConfig struct {
	// ResyncInterval is how often the whole cluster is re-listed as a safety
	// net against missed events, even when the stream is healthy.
	ResyncInterval time.Duration
	// MinBackoff and MaxBackoff bound the wait between reconnects, and
	// between asking Nomad again how a deregistered job ended when it did
	// not answer.
	MinBackoff time.Duration
	MaxBackoff time.Duration
	// Clock returns the time; time.Now when nil. Every time the watcher
	// records (when a listing was taken, when a purge was seen) comes from
	// it, because the agent compares those times with its own clock's: the
	// agent passes the clock its controller reads.
	Clock func() time.Time
	// OnReset is called with the reason (one of the Reset* constants) each
	// time the event stream is lost and the watcher re-lists because of it,
	// from the watcher's goroutine: the agent counts them as
	// nomad_event_stream_resets_total{reason}. Nil for none. Deliberate
	// re-lists (the periodic resync, RequestResync) are not resets.
	OnReset func(reason string)
	// OnRelist is called after each full listing has replaced the cache
	// and before the sets it touched are reported, from the watcher's
	// goroutine: the agent then drops what it keeps in memory of the
	// store, so that a resync re-reads the store too. Nil for none.
	OnRelist func()
	// Pacer is told how far the stream has got, and whether one is
	// followed, so that it can hold the daemon's writes while the stream
	// trails them. Nil: one that no write waits on.
	Pacer *StreamPacer
}

// The reasons of a reset: why the watcher lost the event stream and
// re-lists, as Resets counts them and OnReset reports them (backend's
// StreamReset* say what each means).
const (
	ResetBufferOverflow = backend.StreamResetBufferOverflow
	ResetServerClosed   = backend.StreamResetServerClosed
	ResetServerError    = backend.StreamResetServerError
	ResetDenied         = backend.StreamResetDenied
	ResetDecode         = backend.StreamResetDecode
	ResetDisconnect     = backend.StreamResetDisconnect
)

// Watcher keeps a Cache current: a subscription to the event stream, a full
// list, then the stream's events from the list's index on. On any stream
// error or reconnect it lists everything again. It never polls.
type Watcher struct {
	api      API
	cache    *Cache
	cfg      WatcherConfig
	log      hclog.Logger
	onChange func(backend.SetKey)
	// healthy is 1 while the last list or stream call succeeded.
	healthy atomic.Bool
	lastErr atomic.Value // string
	// relists counts full listings, for tests and metrics.
	relists atomic.Int64
	// resync asks the loop for a full re-list now.
	resync chan struct{}
	// settles are the deregistered jobs of which Nomad must say whether
	// they were stopped or purged, asked off the event loop.
	settles *settleQueue
	// resets counts lost streams by reason (see Resets), and lastReset is
	// the newest one (see LastReset).
	resetsMu  sync.Mutex
	resets    map[string]uint64
	lastReset StreamReset
}

// StreamReset is one loss of the event stream; see backend.StreamReset.
type StreamReset = backend.StreamReset

// NewWatcher returns a watcher that fills cache from a and calls onChange for
// every set an event or a listing touches. onChange is called from two
// goroutines: the event loop's, and the one that asks Nomad how a
// deregistered job ended.
func NewWatcher(a API, cache *Cache, cfg WatcherConfig, log hclog.Logger, onChange func(backend.SetKey)) *Watcher {
	if cfg.ResyncInterval <= 0 {
		cfg.ResyncInterval = 5 * time.Minute
	}
	if cfg.MinBackoff <= 0 {
		cfg.MinBackoff = 250 * time.Millisecond
	}
	if cfg.MaxBackoff <= 0 {
		cfg.MaxBackoff = 30 * time.Second
	}
	if cfg.Clock == nil {
		cfg.Clock = time.Now
	}
	if cfg.Pacer == nil {
		cfg.Pacer = NewStreamPacer(0)
	}
	w := &Watcher{api: a, cache: cache, cfg: cfg, log: log, onChange: onChange, resync: make(chan struct{}, 1), settles: newSettleQueue()}
	w.lastErr.Store("not yet synced")
	return w
}

// Healthy reports whether Nomad answered the watcher's last call, and the
// last error if not.
func (w *Watcher) Healthy() (bool, string) {
	if w.healthy.Load() {
		return true, ""
	}
	return false, w.lastErr.Load().(string)
}

// Relists returns how many full listings the watcher has made.
func (w *Watcher) Relists() int64 { return w.relists.Load() }

// Resets returns how many times the watcher lost the event stream and
// re-listed because of it, by reason (the Reset* constants): a copy, with
// only the reasons seen.
func (w *Watcher) Resets() map[string]uint64 {
	w.resetsMu.Lock()
	defer w.resetsMu.Unlock()
	out := make(map[string]uint64, len(w.resets))
	for reason, n := range w.resets {
		out[reason] = n
	}
	return out
}

// streamReset is the event stream lost, with why in an operator's words.
type streamReset struct {
	reason  string
	message string
	err     error
}

// Error implements error.
func (r *streamReset) Error() string { return fmt.Sprintf("%s (%v)", r.message, r.err) }

// Unwrap returns the error that ended the stream.
func (r *streamReset) Unwrap() error { return r.err }

// lostStream classifies err, which ended the event stream or refused it.
// Nomad writes its own errors as plain text (StreamError, or the body of
// the api's UnexpectedResponseError): the text says which.
func lostStream(err error) *streamReset {
	reset := func(reason, message string) *streamReset {
		return &streamReset{reason: reason, message: message, err: err}
	}
	var body string
	var se *StreamError
	var ue api.UnexpectedResponseError
	switch {
	case errors.As(err, new(*PermissionError)):
		return reset(ResetDenied, "Nomad refused the event stream to the agent's token; re-listing")
	case errors.As(err, &se):
		body = se.Body
	case errors.As(err, &ue):
		body = ue.Body()
	default:
		// In-process (the simulator) the error is Nomad's own, with its
		// text.
		body = err.Error()
	}
	var syntax *json.SyntaxError
	var typ *json.UnmarshalTypeError
	switch {
	case strings.Contains(body, "event dropped from buffer"):
		return reset(ResetBufferOverflow, "Nomad dropped events the daemon had not read yet (raise event_buffer_size on the servers); re-listing")
	case strings.Contains(body, "subscription closed by server"):
		return reset(ResetServerClosed, "Nomad closed the event stream (a server stepped down, or the token's ACLs changed); re-listing")
	case se != nil || (ue.StatusCode() >= 500 && ue.HasBody()):
		return reset(ResetServerError, "Nomad ended the event stream with an error: "+body+"; re-listing")
	case errors.As(err, &syntax), errors.As(err, &typ):
		return reset(ResetDecode, "the Nomad event stream carried something that is not an event; re-listing")
	default:
		return reset(ResetDisconnect, "lost the Nomad event stream; re-listing")
	}
}

// RequestResync asks for a full re-list as soon as possible.
func (w *Watcher) RequestResync() {
	select {
	case w.resync <- struct{}{}:
	default:
	}
}

// countReset counts one reset, keeps it as the last, and reports it to
// OnReset.
func (w *Watcher) countReset(r *streamReset) {
	w.resetsMu.Lock()
	if w.resets == nil {
		w.resets = map[string]uint64{}
	}
	w.resets[r.reason]++
	w.lastReset = StreamReset{Reason: r.reason, Message: r.message, At: w.cfg.Clock()}
	w.resetsMu.Unlock()
	if w.cfg.OnReset != nil {
		w.cfg.OnReset(r.reason)
	}
}

// LastReset returns the newest loss of the event stream, and false when
// the stream was never lost.
func (w *Watcher) LastReset() (StreamReset, bool) {
	w.resetsMu.Lock()
	defer w.resetsMu.Unlock()
	return w.lastReset, w.lastReset.Reason != ""
}

func (w *Watcher) fail(err error) {
	w.healthy.Store(false)
	w.lastErr.Store(err.Error())
}

// StreamFromNewest is the index the watcher subscribes at. It is beyond
// any Raft index, so Nomad's broker (eventBuffer.StartAtClosest) starts the
// stream at the newest event it holds, with the whole event_buffer_size
// between the reader and the end of the buffer. Any index the buffer no
// longer holds would start it at the oldest event held instead, with no
// room at all: the next event Nomad appends drops the reader. That is
// where the last applied index is after a stream lost in a burst, and the
// new stream was lost again within 1 to 2 s, three and four times in a row
// (BENCHMARKS.md). So is index 0, the first subscription's. The listing
// that follows the subscription holds everything before it, so nothing
// older is needed. Nomad parses the index as a signed 64-bit integer.
//
// Subscribing at the newest event never waits for a new one: Nomad sends
// a heartbeat as the first message of every stream (stream.NewJsonStream),
// so the response's headers come at once even when the newest event is of
// a topic the daemon does not follow.
const StreamFromNewest uint64 = math.MaxInt64

// Run lists and watches until ctx is done.
func (w *Watcher) Run(ctx context.Context) error {
	settled := make(chan struct{})
	go func() {
		defer close(settled)
		w.settle(ctx)
	}()
	// Run returns only once ctx is done; so has settle then, and no
	// onChange follows Run's return.
	defer func() { <-settled }()
	backoff := w.cfg.MinBackoff
	for {
		err := w.listAndWatch(ctx)
		if ctx.Err() != nil {
			return nil
		}
		if err == nil {
			// A resync that was asked for or due: list again at once.
			backoff = w.cfg.MinBackoff
			continue
		}
		w.fail(err)
		var reset *streamReset
		if errors.As(err, &reset) {
			w.countReset(reset)
			w.log.Warn(reset.message, "reason", reset.reason, "error", reset.err, "retry_in", backoff)
		} else {
			w.log.Warn("could not list the cluster from Nomad; will retry", "error", err, "retry_in", backoff)
		}
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(backoff):
		}
		backoff = min(backoff*2, w.cfg.MaxBackoff)
	}
}

// listAndWatch subscribes to the event stream, does one full list, and
// then follows the stream until it ends, the periodic resync is due, or a
// resync is requested. It returns nil when it stopped on purpose.
//
// The subscription comes first (see eventPump): it starts at the newest
// event Nomad holds (StreamFromNewest), and what it carries below the
// listing's index the listing already holds, so only events from that
// index on are applied, as when the stream was opened at it.
func (w *Watcher) listAndWatch(ctx context.Context) error {
	sctx, cancel := context.WithCancel(ctx)
	defer cancel()
	stream, err := w.api.Events(sctx, StreamFromNewest)
	if err != nil {
		if errors.As(err, new(*PermissionError)) {
			return lostStream(err) // the operator must grant it: say so
		}
		// Like a failed listing: Nomad is not answering, no stream was lost.
		return err
	}
	pacer := w.cfg.Pacer
	// Until the listing is in, and once the stream ends, no write waits.
	defer pacer.Lost()
	pump := startPump(sctx, stream, pacer.Saw)
	snap, err := w.list(ctx)
	if err != nil {
		return err
	}
	w.relists.Add(1)
	touched := w.cache.Replace(snap)
	// The listing settled every deregister up to its index.
	w.settles.dropThrough(snap.Index)
	w.healthy.Store(true)
	pacer.Follow(snap.Index)
	w.log.Debug("listed cluster", "index", snap.Index, "jobs_read", len(snap.Jobs), "children_kept", len(snap.kept), "allocs", len(snap.Allocs), "volumes", len(snap.Volumes))
	if w.cfg.OnRelist != nil {
		w.cfg.OnRelist()
	}
	for _, k := range touched {
		w.onChange(k)
	}

	// Jitter spreads the resyncs of many agents.
	resync := time.NewTimer(w.cfg.ResyncInterval + time.Duration(rand.Int64N(int64(w.cfg.ResyncInterval/10)+1)))
	defer resync.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-resync.C:
			return nil
		case <-w.resync:
			return nil
		case <-pump.ready:
		}
		batches, ended := pump.take()
		for _, evs := range batches {
			if evs.Err != nil {
				return lostStream(fmt.Errorf("following the event stream after a listing at index %d: %w", snap.Index, evs.Err))
			}
			if evs.Index >= snap.Index {
				w.apply(evs)
			}
		}
		if ended {
			return lostStream(errors.New("the event stream closed"))
		}
	}
}

// list reads the whole cluster state the daemon cares about, in a few calls
// whatever the number of sets (the jobs come a page of 1,000 a call): the
// jobs, every allocation, and the volumes
// of each namespace with a set. A job is read again only when the cache
// does not hold it at its stub's ModifyIndex, nor, for a child, its spec at
// the stub's JobModifyIndex (Cache.jobAt), so a steady-state resync reads
// no job at all, and a re-list after a lost stream reads only the children
// registered or stopped in the gap, not every child whose status moved.
func (w *Watcher) list(ctx context.Context) (Snapshot, error) {
	stubs, index, err := w.api.ListJobs(ctx, "*")
	if err != nil {
		return Snapshot{}, err
	}
	snap := Snapshot{Index: index, At: w.cfg.Clock()}
	namespaces := map[string]struct{}{}
	children := map[string]struct{}{}
	sets := map[string]bool{} // "namespace/set" of every parent
	// A job that is not annotated is read too when it is a set's parent
	// all the same: children name it, or the cache held it as a parent. Its
	// set is detached, not deleted, and the cache must hold the job to
	// tell.
	named := map[string]bool{}
	for _, s := range stubs {
		if p := s.Meta[jobs.MetaParent]; p != "" {
			named[stubNamespace(s)+"/"+p] = true
		}
	}
	for _, s := range stubs {
		ns := stubNamespace(s)
		if s.Meta[jobs.KeyManaged] != "true" && s.Meta[jobs.MetaParent] == "" &&
			!named[ns+"/"+s.ID] && !w.cache.knowsParent(ns, s.ID) {
			continue
		}
		if s.Meta[jobs.MetaParent] == "" {
			sets[ns+"/"+s.ID] = true
		}
		job, kept := w.cache.jobAt(ns, s)
		switch {
		case kept != nil:
			snap.kept = append(snap.kept, kept)
			namespaces[ns] = struct{}{}
		case job != nil:
			snap.Jobs = append(snap.Jobs, job)
			namespaces[ns] = struct{}{}
		default:
			job, err = w.api.GetJob(ctx, ns, s.ID)
			if errors.Is(err, ErrNotFound) {
				continue
			}
			if err != nil {
				return Snapshot{}, err
			}
			snap.Jobs = append(snap.Jobs, job)
			namespaces[jobNamespace(job)] = struct{}{}
		}
		if s.Meta[jobs.MetaParent] != "" {
			children[ns+"/"+s.ID] = struct{}{}
		}
	}
	if len(children) > 0 {
		allocs, err := w.api.ListAllocations(ctx, "*")
		if err != nil {
			return Snapshot{}, err
		}
		for _, a := range allocs {
			ns := a.Namespace
			if ns == "" {
				ns = "default"
			}
			if _, ok := children[ns+"/"+a.JobID]; ok {
				snap.Allocs = append(snap.Allocs, a)
			}
		}
	}
	for ns := range namespaces {
		vols, err := w.api.ListHostVolumes(ctx, ns, "")
		if err != nil {
			return Snapshot{}, err
		}
		snap.Volumes = append(snap.Volumes, vols...)
	}
	if err := w.readVolumeClasses(ctx, &snap, sets); err != nil {
		return Snapshot{}, err
	}
	if len(children) > 0 {
		// Drains and node states concern only sets with pods.
		if snap.Nodes, err = w.api.ListNodes(ctx); err != nil {
			return Snapshot{}, err
		}
	}
	return snap, nil
}

// stubNamespace is a listed job's namespace, "default" when it has none.
func stubNamespace(s *api.JobListStub) string {
	if s.Namespace == "" {
		return "default"
	}
	return s.Namespace
}

// readVolumeClasses reads, one by one, the listed volumes of the sets whose
// storage class the cache does not know: a list stub has no parameters.
// The cache learns a volume's class from its events too, and a volume
// never changes class, so each volume is read at most once while the
// cache holds it (a cold start reads every one).
func (w *Watcher) readVolumeClasses(ctx context.Context, snap *Snapshot, sets map[string]bool) error {
	for _, v := range snap.Volumes {
		if w.cache.volumeClassKnown(v.ID) || !ofASet(v, sets) {
			continue
		}
		full, err := w.api.GetHostVolume(ctx, v.Namespace, v.ID)
		if errors.Is(err, ErrNotFound) {
			continue // deleted since the list: its event follows
		}
		if err != nil {
			return err
		}
		if snap.VolumeClasses == nil {
			snap.VolumeClasses = map[string]string{}
		}
		snap.VolumeClasses[v.ID] = full.Parameters[ClassParameter]
	}
	return nil
}

// ofASet reports whether a volume's name is "<claim>-<set>-<ordinal>" for
// a set of its namespace.
func ofASet(v *api.HostVolumeStub, sets map[string]bool) bool {
	base, _, ok := splitOrdinal(v.Name)
	if !ok {
		return false
	}
	ns := v.Namespace
	if ns == "" {
		ns = "default"
	}
	for i := 0; i < len(base); i++ {
		if base[i] == '-' && sets[ns+"/"+base[i+1:]] {
			return true
		}
	}
	return false
}

// apply folds one batch of events into the cache.
func (w *Watcher) apply(evs *api.Events) {
	touched := map[backend.SetKey]struct{}{}
	for i := range evs.Events {
		e := &evs.Events[i]
		switch e.Topic {
		case api.TopicJob:
			job, rec, err := w.decodeJobEvent(e)
			if err != nil || job == nil || job.ID == nil {
				w.log.Warn("ignoring a job event that does not decode", "type", e.Type, "key", e.Key, "error", err)
				continue
			}
			// A deregister the event itself tells: a purge removes the
			// job; a stop's payload is the stopped job as Nomad now holds
			// it, applied below like any registration.
			deregister := e.Type == "JobDeregistered" || e.Type == "JobBatchDeregistered"
			kind := deregisterUnknown
			if deregister {
				kind = deregisterKindOf(job, e.Index)
			}
			if kind == deregisterPurged {
				if k, ok := w.cache.notePurge(job, e.Index, w.cfg.Clock()); ok {
					touched[k] = struct{}{}
				}
				continue
			}
			if deregister && kind == deregisterUnknown {
				// Only Nomad can tell this one, and asking it here would
				// hold up the stream (one round trip per event, at a
				// thousand children, overflowed Nomad's event buffer). The
				// cache holds the job as stopping until settle has Nomad's
				// answer.
				k, held, ask := w.cache.noteDeregister(job, rec, e.Index)
				if held {
					touched[k] = struct{}{}
				}
				if ask && !w.settles.add(settleRequest{namespace: jobNamespace(job), id: *job.ID, index: e.Index, held: held}) {
					// Too many to ask one by one: a re-list settles them all.
					w.log.Warn("too many deregistered jobs to settle one by one; re-listing", "pending", maxPendingSettles)
					w.RequestResync()
				}
				continue
			}
			var k backend.SetKey
			var ok bool
			if rec != nil {
				k, ok = w.cache.UpsertChildRecord(rec, e.Index)
			} else {
				k, ok = w.cache.UpsertJob(job, e.Index)
			}
			if ok {
				touched[k] = struct{}{}
			}
		case api.TopicAllocation:
			var alloc *allocPayload
			err := DecodePayload(e, "Allocation", &alloc)
			if err != nil || alloc == nil {
				w.log.Warn("ignoring an allocation event that does not decode", "type", e.Type, "key", e.Key, "error", err)
				continue
			}
			if alloc.Job != nil && alloc.Job.Meta[jobs.MetaParent] != "" {
				// The child may be new to us (adoption, or a missed event).
				if _, known := w.cache.ownerOf(alloc.Namespace, alloc.JobID); !known {
					w.cache.UpsertJob(alloc.Job, 0)
				}
			}
			if k, ok := w.cache.upsertAllocPayload(alloc, e.Index); ok {
				touched[k] = struct{}{}
			}
		case TopicHostVolume:
			// The watcher is the cache's one writer: volumes the daemon
			// creates or deletes show up here like anyone else's.
			var v *api.HostVolume
			if err := DecodePayload(e, "Volume", &v); err != nil || v == nil || v.Name == "" {
				w.log.Warn("ignoring a host volume event that does not decode", "type", e.Type, "key", e.Key, "error", err)
				continue
			}
			for _, k := range w.cache.upsertVolume(v, e.Type == "HostVolumeDeleted", e.Index) {
				touched[k] = struct{}{}
			}
		case api.TopicNode:
			var n *nodePayload
			if err := DecodePayload(e, "Node", &n); err != nil || n == nil || n.ID == "" {
				w.log.Warn("ignoring a node event that does not decode", "type", e.Type, "key", e.Key, "error", err)
				continue
			}
			for _, k := range w.cache.upsertNode(n, e.Type == "NodeDeregistration", e.Index) {
				touched[k] = struct{}{}
			}
		case api.TopicEvaluation:
			// Placement failures: a child Nomad could not place is
			// Blocked, with Nomad's reason, until it is placed.
			var ev *evalPayload
			if err := DecodePayload(e, "Evaluation", &ev); err != nil || ev == nil || ev.JobID == "" {
				continue
			}
			if k, ok := w.cache.notePlacement(ev, e.Index); ok {
				touched[k] = struct{}{}
			}
		}
	}
	w.cache.mu.Lock()
	w.cache.advanceLocked(evs.Index)
	w.cache.mu.Unlock()
	for k := range touched {
		w.onChange(k)
	}
}

// decodeJobEvent decodes a job event's job. From raw JSON (the real
// client) a child is decoded straight into the record the cache keeps of it
// (jobs.DecodeChildRecord, returned as rec, with job its compact form for
// the job's identity), and only a parent, which the agent renders from, is
// decoded whole. Children's events are nearly all of a busy stream. The
// digest of a child's spec, which finds hand edits, costs several times the
// rest: it is carried over from the cache while the child's
// JobModifyIndex is the one the cache holds (a status change), and
// computed only for a new spec.
//
// A child whose spec is new is decoded once, whole (jobs.DecodeChild), for
// both its record and its digest, rather than into its record and again
// for the digest: which way is taken is told from the payload's text
// (specKeyOf), and either way gives the same record and digest.
func (w *Watcher) decodeJobEvent(e *api.Event) (job *api.Job, rec *jobs.ChildRecord, err error) {
	if raw, ok := e.Payload["Job"].(json.RawMessage); ok {
		if ns, id, index, ok := specKeyOf(raw); ok {
			if _, known := w.cache.digestAt(ns, id, index); !known {
				if job, rec, ok := w.decodeNewSpec(raw); ok {
					return job, rec, nil
				}
			}
		}
		rec, err := jobs.DecodeChildRecord(raw)
		if err != nil {
			return nil, nil, err
		}
		if job := rec.Job(); !isParent(job) {
			d, ok := w.cache.digestAt(jobNamespace(job), rec.ID(), rec.JobModifyIndex())
			if !ok {
				// Unknown stays unknown on error: never a reason to
				// replace a pod.
				d, _ = jobs.DigestChildJSON(raw)
			}
			return job, rec.WithDigest(d), nil
		}
	}
	err = DecodePayload(e, "Job", &job)
	return job, nil, err
}

// decodeNewSpec is decodeJobEvent of a job decoded whole, for a child
// whose spec the cache does not hold: the digest is computed from the
// same decoding as the record. A parent is returned whole and without a
// record, as decodeJobEvent returns it. Not ok when the job does not decode
// whole, which decodeJobEvent's other way then reports or reads.
func (w *Watcher) decodeNewSpec(raw json.RawMessage) (*api.Job, *jobs.ChildRecord, bool) {
	rec, whole, err := jobs.DecodeChild(raw)
	if err != nil {
		return nil, nil, false
	}
	job := rec.Job()
	if isParent(job) {
		return whole, nil, true
	}
	d, ok := w.cache.digestAt(jobNamespace(job), rec.ID(), rec.JobModifyIndex())
	if !ok {
		// Unknown stays unknown on error, as in decodeJobEvent.
		d, _ = jobs.DigestDecoded(whole)
	}
	return job, rec.WithDigest(d), true
}

// specKeyOf finds a job's namespace, ID and JobModifyIndex in its JSON
// without decoding it, to choose how to decode it: the first "Namespace"
// and "ID" members (Nomad writes them second and third, before any nested
// object) and the last "JobModifyIndex" (Nomad writes it near the end,
// after the meta, whose keys could be anything). A member name cannot
// occur inside a string, whose quotes are escaped. Not ok when one is
// missing or is not plain; a wrong answer costs only time, as both ways of
// decoding give the same.
func specKeyOf(raw []byte) (ns, id string, index uint64, ok bool) {
	ns, ok = plainString(raw, bytes.Index(raw, []byte(`"Namespace":"`)), len(`"Namespace":"`))
	if !ok {
		return "", "", 0, false
	}
	if id, ok = plainString(raw, bytes.Index(raw, []byte(`"ID":"`)), len(`"ID":"`)); !ok {
		return "", "", 0, false
	}
	i := bytes.LastIndex(raw, []byte(`"JobModifyIndex":`))
	if i < 0 {
		return "", "", 0, false
	}
	i += len(`"JobModifyIndex":`)
	end := i
	for end < len(raw) && raw[end] >= '0' && raw[end] <= '9' {
		end++
	}
	index, err := strconv.ParseUint(string(raw[i:end]), 10, 64)
	if err != nil {
		return "", "", 0, false
	}
	if ns == "" {
		ns = "default"
	}
	return ns, id, index, true
}

// plainString is the JSON string whose text starts n bytes after at, when
// it has no escapes.
func plainString(raw []byte, at, n int) (string, bool) {
	if at < 0 {
		return "", false
	}
	s := raw[at+n:]
	end := bytes.IndexByte(s, '"')
	if end < 0 || bytes.IndexByte(s[:end], '\\') >= 0 {
		return "", false
	}
	return string(s[:end]), true
}

// allocPayload is the part of an allocation event's payload the cache keeps,
// with the api.Allocation field names so that it decodes from the same JSON.
// Decoding only these skips building the task events, resources and
// metrics of every allocation update.
type allocPayload struct {
	ID, Namespace, NodeID, JobID string
	DesiredStatus, ClientStatus  string
	DeploymentStatus             *api.AllocDeploymentStatus
	CreateIndex, ModifyIndex     uint64
	// AllocModifyIndex moves only when a server changes the allocation
	// (an in-place update to a new job version, a stop), never for a
	// client's report. Events carry it; list stubs carry JobVersion
	// instead (nil in events).
	AllocModifyIndex uint64
	JobVersion       *uint64
	ModifyTime       int64
	// TaskStates are decoded without their events (taskStatePayload).
	TaskStates map[string]*taskStatePayload
	// Job is set when Nomad includes the job, which lets the watcher adopt
	// a child it did not know yet.
	Job *api.Job
}

// DecodePayload decodes the object under key of an event's payload into
// out. The real client (Client.Events) keeps each payload object as the JSON
// Nomad sent, which is decoded once. Any other value (the simulator's typed
// objects, or a generic map) goes through a JSON round trip, which also
// copies it. Both are JSON-faithful, unlike the api package's Event.Job()
// and friends: those use mapstructure, which follows the structs'
// snake_case `mapstructure` tags while the payload uses Go field names, so
// fields such as MaxParallel, StopOnClientAfter and the reschedule policy
// silently come out nil.
func DecodePayload(e *api.Event, key string, out any) error {
	raw, ok := e.Payload[key]
	if !ok {
		return fmt.Errorf("event %s has no %s payload", e.Type, key)
	}
	b, isRaw := raw.(json.RawMessage)
	if !isRaw {
		var err error
		if b, err = json.Marshal(raw); err != nil {
			return fmt.Errorf("re-encoding the %s payload: %w", key, err)
		}
	}
	if err := json.Unmarshal(b, out); err != nil {
		return fmt.Errorf("decoding the %s payload: %w", key, err)
	}
	return nil
}
