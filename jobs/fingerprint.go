package jobs

import (
	"encoding/json"
	"fmt"
	"strconv"
	"sync"
	"time"

	"github.com/hashicorp/nomad/api"

	"github.com/nomad-statefulset/nomad-statefulset/backend"
	"github.com/nomad-statefulset/nomad-statefulset/jobs/specdigest"
)

// CompactChild returns a copy of a child job read from Nomad that keeps only
// what ChildMatches and ParseChild read, and what an observation of the pod
// needs: identity, the statefulset meta, status, stop flag, version and
// indexes, submit time, and per group its count, host volume sources,
// disconnect, reschedule and update settings, service tags, and the identity
// env and lifecycle block of each task (readiness reads the latter). Drift detection gives the same answer on it as on the
// whole job (TestCompactChildKeepsDrift proves it field by field). It is
// kept next to ChildMatches so that a new check there comes with the field
// it needs here. CompactChild(nil) is nil.
func CompactChild(j *api.Job) *api.Job {
	if j == nil {
		return nil
	}
	return newChildRecord(j).Job()
}

// ChildRecord is a child job reduced to what CompactChild keeps, in plain
// values rather than api structs: about a third of the memory of the
// compact *api.Job (which is a tenth of the decoded job). A watcher keeps
// one per pod of every set; Job rebuilds the compact job when drift
// detection asks for it. A ChildRecord is immutable.
type ChildRecord struct {
	// killGrace is how long after a stop the child's tasks may still run:
	// the longest kill_timeout plus shutdown_delays.
	killGrace                                         time.Duration
	id, namespace, status                             opt[string]
	stop, stable                                      opt[bool]
	version, createIndex, modifyIndex, jobModifyIndex opt[uint64]
	submitTime                                        opt[int64]
	meta                                              pairs
	groups                                            []*groupRecord
	hasGroups                                         bool
	// digest is the whole spec's SpecDigest, which finds hand edits of
	// any field; unknown for a record made from a compact job.
	digest SpecDigest
	// rendered is what the child's MetaRendered says the daemon
	// registered; unknown for a child without it (registered by a release
	// before the record) or whose record does not decode.
	rendered SpecDigest
}

type groupRecord struct {
	name       opt[string]
	count      opt[int]
	volumes    []volumeRecord
	hasVolumes bool
	disconnect *api.DisconnectStrategy
	reschedule *api.ReschedulePolicy
	update     *api.UpdateStrategy
	services   []*serviceRecord
	hasSvcs    bool
	tasks      []*taskRecord
	hasTasks   bool
}

type volumeRecord struct {
	key               string
	isNil             bool
	name, typ, source string
}

type serviceRecord struct {
	name string
	tags []string
}

type taskRecord struct {
	name     string
	env      pairs
	services []*serviceRecord
	hasSvcs  bool
	// lifecycle is the task's lifecycle block, which readiness reads: a
	// finished prestart task or a pending poststop task does not make the
	// pod unready. Nil for a main task.
	lifecycle *api.TaskLifecycle
}

// opt is a value that may be absent: a pointer field without the pointer.
type opt[T any] struct {
	v  T
	ok bool
}

func optOf[T any](p *T) opt[T] {
	if p == nil {
		return opt[T]{}
	}
	return opt[T]{v: *p, ok: true}
}

func (o opt[T]) ptr() *T {
	if !o.ok {
		return nil
	}
	v := o.v
	return &v
}

// pairs is a small string map as key, value, key, value…; isMap tells an
// empty map from none.
type pairs struct {
	kv    []string
	isMap bool
}

func (p pairs) get(k string) string {
	v, _ := p.lookup(k)
	return v
}

// lookup returns k's value and whether k is there at all.
func (p pairs) lookup(k string) (string, bool) {
	for i := 0; i+1 < len(p.kv); i += 2 {
		if p.kv[i] == k {
			return p.kv[i+1], true
		}
	}
	return "", false
}

func (p pairs) toMap() map[string]string {
	if !p.isMap {
		return nil
	}
	m := make(map[string]string, len(p.kv)/2)
	for i := 0; i+1 < len(p.kv); i += 2 {
		m[p.kv[i]] = p.kv[i+1]
	}
	return m
}

// keep copies the entries of m for which want is true.
func keep(m map[string]string, want func(string) bool) pairs {
	if m == nil {
		return pairs{}
	}
	p := pairs{isMap: true}
	for k, v := range m {
		if want(k) {
			p.kv = append(p.kv, k, v)
		}
	}
	return p
}

// Shared settings: children of a set carry the same disconnect, reschedule
// and update values, so records point at one read-only copy of each.
var (
	sharedMu         sync.Mutex
	sharedDisconnect = map[[4]int64]*api.DisconnectStrategy{}
	sharedReschedule = map[[4]int64]*api.ReschedulePolicy{}
	sharedUpdate     = map[[4]int64]*api.UpdateStrategy{}
)

// optKey encodes two optional values as a map key.
func optKey(a, b *int64) [4]int64 {
	var k [4]int64
	if a != nil {
		k[0], k[1] = 1, *a
	}
	if b != nil {
		k[2], k[3] = 1, *b
	}
	return k
}

func i64(p *int) *int64 {
	if p == nil {
		return nil
	}
	v := int64(*p)
	return &v
}

func b64(p *bool) *int64 {
	if p == nil {
		return nil
	}
	var v int64
	if *p {
		v = 1
	}
	return &v
}

func intern[T any](m map[[4]int64]*T, k [4]int64, mk func() *T) *T {
	sharedMu.Lock()
	defer sharedMu.Unlock()
	if v, ok := m[k]; ok {
		return v
	}
	// The tables hold distinct settings only; a cluster has a handful.
	if len(m) >= 1024 {
		return mk()
	}
	v := mk()
	m[k] = v
	return v
}

// NewChildRecord reduces a child job, whole as Nomad gave it, to its
// record, with the digest of its spec.
func NewChildRecord(j *api.Job) *ChildRecord {
	r := newChildRecord(j)
	// A job that is not one group (not a well-formed child) has no
	// digest: ChildMatches rejects it anyway.
	r.digest, _ = DigestChild(j)
	return r
}

// Digest returns the digest of the child's whole spec (unknown when the
// record was made from a compact job).
func (r *ChildRecord) Digest() SpecDigest { return r.digest }

// Rendered implements backend.ChildJob: the digest of the child as the
// daemon registered it (MetaRendered), unknown when the child has no such
// record.
func (r *ChildRecord) Rendered() SpecDigest { return r.rendered }

func newChildRecord(j *api.Job) *ChildRecord {
	r := &ChildRecord{
		id: optOf(j.ID), namespace: optOf(j.Namespace), status: optOf(j.Status),
		stop: optOf(j.Stop), stable: optOf(j.Stable),
		version: optOf(j.Version), createIndex: optOf(j.CreateIndex), modifyIndex: optOf(j.ModifyIndex),
		jobModifyIndex: optOf(j.JobModifyIndex), submitTime: optOf(j.SubmitTime),
		// The managed flag and every statefulset_* key: the identity keys
		// plus the parent's annotations, which tell parents from children.
		meta:      keep(j.Meta, func(k string) bool { return isSetKey(k) && k != MetaRendered }),
		hasGroups: j.TaskGroups != nil,
	}
	if v, ok := j.Meta[MetaRendered]; ok {
		// Kept as a digest (a handle shared with the equal digests of the
		// child as Nomad holds it and as rendered), not as the text, which is
		// a kilobyte a child.
		r.rendered, _ = specdigest.Decode(v)
	}
	if len(j.TaskGroups) > 0 {
		r.groups = make([]*groupRecord, len(j.TaskGroups))
	}
	for i, g := range j.TaskGroups {
		if g != nil {
			r.groups[i] = newGroupRecord(g)
			r.killGrace = max(r.killGrace, killGrace(g))
		}
	}
	return r
}

// defaultKillTimeout is Nomad's kill_timeout when a task sets none.
const defaultKillTimeout = backend.DefaultKillTimeout

// KillGrace is the longest a task of job may still run after Nomad was told
// to stop it: its group's and its own shutdown_delay, then its kill_timeout.
func KillGrace(job *api.Job) time.Duration {
	var grace time.Duration
	if job != nil {
		for _, g := range job.TaskGroups {
			if g != nil {
				grace = max(grace, killGrace(g))
			}
		}
	}
	if grace == 0 {
		return defaultKillTimeout
	}
	return grace
}

// killGrace is the longest a group's task may run after a stop: its
// shutdown_delays, then its kill_timeout.
func killGrace(g *api.TaskGroup) time.Duration {
	var grace time.Duration
	for _, t := range g.Tasks {
		if t == nil {
			continue
		}
		kill := defaultKillTimeout
		if t.KillTimeout != nil {
			kill = *t.KillTimeout
		}
		grace = max(grace, kill+t.ShutdownDelay)
	}
	if g.ShutdownDelay != nil {
		grace += *g.ShutdownDelay
	}
	return grace
}

// KillGrace is how long after a stop the child's tasks may still run: the
// longest kill_timeout plus the task's and group's shutdown_delay (Nomad's
// default kill_timeout, 5s, when a task sets none).
func (r *ChildRecord) KillGrace() time.Duration {
	if r.killGrace == 0 {
		return defaultKillTimeout
	}
	return r.killGrace
}

func newGroupRecord(g *api.TaskGroup) *groupRecord {
	r := &groupRecord{name: optOf(g.Name), count: optOf(g.Count), hasVolumes: g.Volumes != nil}
	for k, v := range g.Volumes {
		if v == nil {
			r.volumes = append(r.volumes, volumeRecord{key: k, isNil: true})
			continue
		}
		r.volumes = append(r.volumes, volumeRecord{key: k, name: v.Name, typ: v.Type, source: v.Source})
	}
	if d := g.Disconnect; d != nil {
		var after *int64
		if d.StopOnClientAfter != nil {
			v := int64(*d.StopOnClientAfter)
			after = &v
		}
		r.disconnect = intern(sharedDisconnect, optKey(b64(d.Replace), after), func() *api.DisconnectStrategy {
			return &api.DisconnectStrategy{Replace: d.Replace, StopOnClientAfter: d.StopOnClientAfter}
		})
	}
	if p := g.ReschedulePolicy; p != nil {
		r.reschedule = intern(sharedReschedule, optKey(i64(p.Attempts), b64(p.Unlimited)), func() *api.ReschedulePolicy {
			return &api.ReschedulePolicy{Attempts: p.Attempts, Unlimited: p.Unlimited}
		})
	}
	if u := g.Update; u != nil {
		r.update = intern(sharedUpdate, optKey(i64(u.Canary), i64(u.MaxParallel)), func() *api.UpdateStrategy {
			return &api.UpdateStrategy{Canary: u.Canary, MaxParallel: u.MaxParallel}
		})
	}
	r.services, r.hasSvcs = newServiceRecords(g.Services)
	r.hasTasks = g.Tasks != nil
	if len(g.Tasks) > 0 {
		r.tasks = make([]*taskRecord, len(g.Tasks))
	}
	for i, t := range g.Tasks {
		if t == nil {
			continue
		}
		tr := &taskRecord{name: t.Name, env: keep(t.Env, isIdentityEnv), lifecycle: sharedLifecycle(t.Lifecycle)}
		tr.services, tr.hasSvcs = newServiceRecords(t.Services)
		r.tasks[i] = tr
	}
	return r
}

// sharedLifecycles holds one read-only copy of each lifecycle block: there
// are six that matter (three hooks, sidecar or not).
var sharedLifecycles sync.Map // "hook/sidecar" -> *api.TaskLifecycle

func sharedLifecycle(l *api.TaskLifecycle) *api.TaskLifecycle {
	if l == nil {
		return nil
	}
	k := l.Hook + "/" + strconv.FormatBool(l.Sidecar)
	if v, ok := sharedLifecycles.Load(k); ok {
		return v.(*api.TaskLifecycle)
	}
	v, _ := sharedLifecycles.LoadOrStore(k, &api.TaskLifecycle{Hook: l.Hook, Sidecar: l.Sidecar})
	return v.(*api.TaskLifecycle)
}

func isIdentityEnv(k string) bool { return k == EnvName || k == EnvOrdinal || k == EnvPodName }

func newServiceRecords(ss []*api.Service) ([]*serviceRecord, bool) {
	if len(ss) == 0 {
		return nil, ss != nil
	}
	out := make([]*serviceRecord, len(ss))
	for i, s := range ss {
		if s != nil {
			out[i] = &serviceRecord{name: s.Name, tags: s.Tags}
		}
	}
	return out, true
}

// Job rebuilds the compact job. Each call returns a new job that the
// caller may keep; the shared disconnect, reschedule and update settings
// are copied too, so changing the result changes nothing else.
func (r *ChildRecord) Job() *api.Job {
	j := &api.Job{
		ID: r.id.ptr(), Namespace: r.namespace.ptr(), Status: r.status.ptr(),
		Stop: r.stop.ptr(), Stable: r.stable.ptr(),
		Version: r.version.ptr(), CreateIndex: r.createIndex.ptr(), ModifyIndex: r.modifyIndex.ptr(),
		JobModifyIndex: r.jobModifyIndex.ptr(), SubmitTime: r.submitTime.ptr(),
		Meta: r.meta.toMap(),
	}
	if r.hasGroups {
		j.TaskGroups = make([]*api.TaskGroup, len(r.groups))
	}
	for i, g := range r.groups {
		if g != nil {
			j.TaskGroups[i] = g.group()
		}
	}
	return j
}

func (g *groupRecord) group() *api.TaskGroup {
	tg := &api.TaskGroup{Name: g.name.ptr(), Count: g.count.ptr(), Services: services(g.services, g.hasSvcs)}
	if g.hasVolumes {
		tg.Volumes = make(map[string]*api.VolumeRequest, len(g.volumes))
		for _, v := range g.volumes {
			if v.isNil {
				tg.Volumes[v.key] = nil
				continue
			}
			tg.Volumes[v.key] = &api.VolumeRequest{Name: v.name, Type: v.typ, Source: v.source}
		}
	}
	if d := g.disconnect; d != nil {
		tg.Disconnect = &api.DisconnectStrategy{Replace: copyPtr(d.Replace), StopOnClientAfter: copyPtr(d.StopOnClientAfter)}
	}
	if p := g.reschedule; p != nil {
		tg.ReschedulePolicy = &api.ReschedulePolicy{Attempts: copyPtr(p.Attempts), Unlimited: copyPtr(p.Unlimited)}
	}
	if u := g.update; u != nil {
		tg.Update = &api.UpdateStrategy{Canary: copyPtr(u.Canary), MaxParallel: copyPtr(u.MaxParallel)}
	}
	if g.hasTasks {
		tg.Tasks = make([]*api.Task, len(g.tasks))
	}
	for i, t := range g.tasks {
		if t != nil {
			tg.Tasks[i] = &api.Task{Name: t.name, Env: t.env.toMap(), Services: services(t.services, t.hasSvcs)}
			if l := t.lifecycle; l != nil {
				tg.Tasks[i].Lifecycle = &api.TaskLifecycle{Hook: l.Hook, Sidecar: l.Sidecar}
			}
		}
	}
	return tg
}

func copyPtr[T any](p *T) *T {
	if p == nil {
		return nil
	}
	v := *p
	return &v
}

func services(in []*serviceRecord, has bool) []*api.Service {
	if !has {
		return nil
	}
	out := make([]*api.Service, len(in))
	for i, s := range in {
		if s != nil {
			out[i] = &api.Service{Name: s.name, Tags: append([]string(nil), s.tags...)}
		}
	}
	return out
}

// TaskLifecycle returns the lifecycle hook of a task of the first group
// ("prestart", "poststart", "poststop") and whether it is a sidecar; ""
// for a main task or a task the record does not know.
func (r *ChildRecord) TaskLifecycle(task string) (hook string, sidecar bool) {
	if len(r.groups) == 0 || r.groups[0] == nil {
		return "", false
	}
	for _, t := range r.groups[0].tasks {
		if t != nil && t.name == task && t.lifecycle != nil {
			return t.lifecycle.Hook, t.lifecycle.Sidecar
		}
	}
	return "", false
}

// ID returns the job's ID ("" if unset).
func (r *ChildRecord) ID() string { return r.id.v }

// Namespace returns the job's namespace ("" if unset).
func (r *ChildRecord) Namespace() string { return r.namespace.v }

// Meta returns one of the job's statefulset meta values ("" if unset).
func (r *ChildRecord) Meta(key string) string { return r.meta.get(key) }

// Stopped reports whether the job is stopped.
func (r *ChildRecord) Stopped() bool { return r.stop.ok && r.stop.v }

// Version returns the job's version (0 if unset).
func (r *ChildRecord) Version() uint64 { return r.version.v }

// CreateIndex returns the job's CreateIndex (0 if unset): a job purged and
// registered again under its ID has a new one.
func (r *ChildRecord) CreateIndex() uint64 { return r.createIndex.v }

// ModifyIndex returns the job's ModifyIndex (0 if unset).
func (r *ChildRecord) ModifyIndex() uint64 { return r.modifyIndex.v }

// JobModifyIndex returns the job's JobModifyIndex (0 if unset).
func (r *ChildRecord) JobModifyIndex() uint64 { return r.jobModifyIndex.v }

// SubmitTime returns the job's submit time in Unix nanoseconds, if known.
func (r *ChildRecord) SubmitTime() (int64, bool) { return r.submitTime.v, r.submitTime.ok }

// StopOnClientAfter returns the first group's stop_on_client_after, or 0.
func (r *ChildRecord) StopOnClientAfter() time.Duration {
	if len(r.groups) == 0 || r.groups[0] == nil || r.groups[0].disconnect == nil || r.groups[0].disconnect.StopOnClientAfter == nil {
		return 0
	}
	return *r.groups[0].disconnect.StopOnClientAfter
}

// WithListing returns a copy of the record brought up to a job list stub
// of the same spec, and true; or false when the stub is of another spec or
// job (its JobModifyIndex, CreateIndex, stop flag or SubmitTime differ, or
// it is older), which only a read of the job can tell. Nomad moves
// JobModifyIndex (and Version) with every write of a job's spec, a stop
// included, and only ModifyIndex when the status, stability or a version
// tag changes (nomad/state: upsertJobImpl, setJobStatus,
// updateJobStabilityImpl, updateJobVersionTagImpl). The
// status and ModifyIndex are the stub's; stability is not in a stub, and is
// unknown in the copy (nothing the daemon decides reads it).
func (r *ChildRecord) WithListing(s *api.JobListStub) (*ChildRecord, bool) {
	if !r.jobModifyIndex.ok || r.jobModifyIndex.v != s.JobModifyIndex || r.createIndex.v != s.CreateIndex ||
		r.Stopped() != s.Stop || r.submitTime.v != s.SubmitTime || r.modifyIndex.v > s.ModifyIndex {
		return nil, false
	}
	c := *r
	c.status = opt[string]{v: s.Status, ok: true}
	c.stable = opt[bool]{}
	c.modifyIndex = opt[uint64]{v: s.ModifyIndex, ok: true}
	return &c, true
}

// WithStop returns a copy of the record with the stop flag set: how a
// purged child whose allocations still stop is shown.
func (r *ChildRecord) WithStop() *ChildRecord {
	c := *r
	c.stop = opt[bool]{v: true, ok: true}
	return &c
}

// DecodeCompactChild decodes a job's JSON (an event payload, as Nomad sent
// it) straight into its compact form: CompactChild(job) without building
// the whole job first. It is what a watcher does with every job event, and
// skipping the fields the compact form drops makes it several times faster
// than decoding an api.Job. The types below mirror api.Job's field names,
// so the decoding is as faithful as api.Job's own for the fields kept
// (TestDecodeCompactChildMatches proves it field by field).
func DecodeCompactChild(data []byte) (*api.Job, error) {
	r, err := decodeRecord(data)
	if err != nil {
		return nil, err
	}
	return r.Job(), nil
}

// DecodeChildRecord decodes a child job's JSON (an event payload, as Nomad
// sent it) into its record, kill grace included, without the digest of its
// spec: DigestChildJSON is several times the cost of the record, and a
// child's spec changes far less often than its status, so the watcher
// carries a known digest over (WithDigest) and computes it only for a new
// JobModifyIndex.
func DecodeChildRecord(data []byte) (*ChildRecord, error) {
	return decodeRecord(data)
}

// WithDigest returns a copy of the record with the digest of its spec set.
func (r *ChildRecord) WithDigest(d SpecDigest) *ChildRecord {
	c := *r
	c.digest = d
	return &c
}

func decodeRecord(data []byte) (*ChildRecord, error) {
	var j compactJobJSON
	if err := json.Unmarshal(data, &j); err != nil {
		return nil, fmt.Errorf("decoding a child job: %w", err)
	}
	out := &api.Job{
		ID: j.ID, Namespace: j.Namespace, Stop: j.Stop, Status: j.Status,
		Version: j.Version, SubmitTime: j.SubmitTime, Stable: j.Stable,
		CreateIndex: j.CreateIndex, ModifyIndex: j.ModifyIndex, JobModifyIndex: j.JobModifyIndex,
		Meta: j.Meta,
	}
	if j.TaskGroups != nil {
		out.TaskGroups = make([]*api.TaskGroup, len(j.TaskGroups))
		for i, g := range j.TaskGroups {
			if g == nil {
				continue
			}
			tg := &api.TaskGroup{
				Name: g.Name, Count: g.Count, Volumes: g.Volumes, Disconnect: g.Disconnect, ShutdownDelay: g.ShutdownDelay,
				ReschedulePolicy: g.ReschedulePolicy, Update: g.Update, Services: decodedServices(g.Services),
			}
			if g.Tasks != nil {
				tg.Tasks = make([]*api.Task, len(g.Tasks))
				for k, t := range g.Tasks {
					if t != nil {
						tg.Tasks[k] = &api.Task{Name: t.Name, Env: t.Env, Services: decodedServices(t.Services), Lifecycle: t.Lifecycle,
							KillTimeout: t.KillTimeout, ShutdownDelay: t.ShutdownDelay}
					}
				}
			}
			out.TaskGroups[i] = tg
		}
	}
	// The same trimming as for a decoded job: what is kept is defined once.
	return newChildRecord(out), nil
}

// compactJobJSON is the part of api.Job that CompactChild keeps, by the
// same field names.
type compactJobJSON struct {
	ID, Namespace, Status                             *string
	Stop, Stable                                      *bool
	Version, CreateIndex, ModifyIndex, JobModifyIndex *uint64
	SubmitTime                                        *int64
	Meta                                              map[string]string
	TaskGroups                                        []*compactGroupJSON
}

type compactGroupJSON struct {
	Name             *string
	ShutdownDelay    *time.Duration
	Count            *int
	Volumes          map[string]*api.VolumeRequest
	Disconnect       *api.DisconnectStrategy
	ReschedulePolicy *api.ReschedulePolicy
	Update           *api.UpdateStrategy
	Services         []*compactServiceJSON
	Tasks            []*compactTaskJSON
}

type compactTaskJSON struct {
	Name          string
	KillTimeout   *time.Duration
	ShutdownDelay time.Duration
	Env           map[string]string
	Services      []*compactServiceJSON
	Lifecycle     *api.TaskLifecycle
}

type compactServiceJSON struct {
	Name string
	Tags []string
}

func decodedServices(in []*compactServiceJSON) []*api.Service {
	if in == nil {
		return nil
	}
	out := make([]*api.Service, len(in))
	for i, s := range in {
		if s != nil {
			out[i] = &api.Service{Name: s.Name, Tags: s.Tags}
		}
	}
	return out
}
