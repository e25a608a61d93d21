package backend

import (
	"context"
	"errors"
	"strings"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/nomad-statefulset/nomad-statefulset/jobs/specdigest"
	"github.com/nomad-statefulset/nomad-statefulset/reconciler"
)

// This file is the Nomad cluster as the agent sees it: what it observes of
// a set and the small interfaces its effects go through. backend/nomad
// implements them over Nomad's HTTP API (or the simulator), with jobs/
// reading and rendering Nomad's jobs. Nothing here names a Nomad type, so
// the agent, which decides and executes, never depends on Nomad's API
// package (DESIGN §5).

// ErrNotFound is a Nomad object (a job, a node, an allocation) that does
// not exist.
var ErrNotFound = errors.New("not found")

// ErrPermissionDenied is Nomad refusing a caller's ACL token: the agent's
// HTTP API answers 403 for it. An error that wraps it carries Nomad's reason.
var ErrPermissionDenied = errors.New("permission denied")

// IsNotFound reports whether err is a Nomad object that does not exist:
// ErrNotFound, or Nomad answering 404. Only Nomad's own answer counts
// (an error with StatusCode 404): matching "404" in the text would take a
// dial error to a port like 14046 for "not found".
func IsNotFound(err error) bool {
	if err == nil {
		return false
	}
	if errors.Is(err, ErrNotFound) {
		return true
	}
	var status interface{ StatusCode() int }
	return errors.As(err, &status) && status.StatusCode() == 404
}

// IsConflict reports whether err is a check-and-set write refused because
// the object changed since it was read: ErrConflict, or Nomad refusing a
// register because the job's modify index is not the one enforced. Nomad
// answers that with HTTP 500 and the text "Enforcing job modify index …",
// so the text is what identifies it.
func IsConflict(err error) bool {
	return err != nil && (errors.Is(err, ErrConflict) || strings.Contains(err.Error(), "Enforcing job modify index"))
}

// CallTrace is told the outcome of every Nomad call made with a context
// that carries it, the way net/http/httptrace hooks the requests of a
// context. The agent counts its own calls with it: a trace in the context,
// rather than a wrapper around the API, sees only the calls made on the
// agent's behalf (not a test's calls to a shared simulator), and needs no
// change when a verb is added. It is given the call's context, so that a
// caller can tell its calls apart by what it put there (the agent tags each
// action's calls with the action).
type CallTrace func(ctx context.Context, verb string, err error)

type callTraceKey struct{}

// WithCallTrace returns a copy of ctx that carries trace. A trace already in
// ctx is replaced.
func WithCallTrace(ctx context.Context, trace CallTrace) context.Context {
	return context.WithValue(ctx, callTraceKey{}, trace)
}

// TraceCall reports one call of verb to ctx's CallTrace, if it has one,
// with the error *errp the call returns. Every implementation of a Nomad
// call reports it exactly once, deferred at the top of the method:
//
//	defer backend.TraceCall(ctx, nomad.VerbGetJob, &err)
func TraceCall(ctx context.Context, verb string, errp *error) {
	if trace, ok := ctx.Value(callTraceKey{}).(CallTrace); ok && trace != nil {
		trace(ctx, verb, *errp)
	}
}

// Observation is everything the cache knows about one set.
type Observation struct {
	// Parent is the parent job; nil if Nomad no longer has it.
	Parent ParentJob
	// ParentPurged is true when the parent was purged; Parent then holds
	// its last known version so the cascading delete can follow its policy.
	ParentPurged bool
	Pods         []PodDetail
	Stopped      []StoppedChild
	Volumes      []VolumeDetail
	// RecheckAfter is how soon the observation changes by the clock alone
	// (a purged child's kill grace, or a lost allocation's wait, running
	// out); zero when it does not.
	RecheckAfter time.Duration
	// Nodes holds the state of the nodes of the set's allocations and
	// volumes that are not plainly fine (draining, ineligible or not
	// ready), so that status can say why a pod is down; nil when all are.
	Nodes map[string]NodeState
}

// ParentJob is what the agent reads of a set's parent job. jobs/ derives
// each answer from Nomad's job; the agent never sees the job itself.
type ParentJob interface {
	// Managed reports whether the job carries the statefulset annotations
	// that make it a set's parent.
	Managed() bool
	// NotAnnotatedBecause says what the job's meta holds when it is not
	// Managed ("its meta says statefulset = \"True\", …"), for the
	// Detached condition.
	NotAnnotatedBecause() string
	// Spec parses the set's spec from the job's annotations.
	Spec() (reconciler.Spec, error)
	// Version returns the job's version and its JobModifyIndex.
	Version() (version, modifyIndex uint64)
	// RevisionData returns the job in the normal form a revision stores.
	RevisionData() ([]byte, error)
	// KillGrace is how long a task of the job may take to stop (its
	// shutdown_delay and kill_timeout).
	KillGrace() time.Duration
	// KillGraceOf is KillGrace of the job at a stored revision's data.
	KillGraceOf(revisionData []byte) (time.Duration, error)
	// NativeLeaderCheck reports whether leaderCheck names a Nomad-native
	// check of the job (a service with provider = "nomad"), and how often
	// Nomad runs it.
	NativeLeaderCheck(leaderCheck string) (interval time.Duration, native bool)
	// ConsulServices returns the names of the job's Consul services.
	ConsulServices() []string
	// Placement returns what a claim's volume must honour of the job.
	Placement(claim string) ClaimPlacement
}

// ClaimPlacement is what a claim's volume must honour of the parent job:
// its node pool and job-level constraints, and the claim's access and
// attachment modes.
type ClaimPlacement struct {
	NodePool                   string
	Constraints                []Constraint
	AccessMode, AttachmentMode string
}

// Constraint is one placement constraint of the parent job, as a volume
// provisioner receives it.
type Constraint struct {
	LTarget, RTarget, Operand string
}

// ChildJob is what the agent reads of a child job as Nomad has it. jobs/
// answers from its compact record of the job.
type ChildJob interface {
	// Matches reports whether the child still carries what the daemon
	// rendered for (spec, rev, ordinal): its identity, storage and safety
	// settings. False is a hand edit the daemon repairs.
	Matches(spec reconciler.Spec, rev reconciler.Revision, ordinal int) bool
	// ScaledCount is the child's count when it was scaled above 1 by hand,
	// or 0.
	ScaledCount() int
	// SpreadRecord returns the daemon's record of the nodes the child was
	// spread away from, and whether the child has the record at all (one
	// registered before the record existed has not).
	SpreadRecord() (record string, recorded bool)
	// Rendered is the digest of the child as the daemon registered it,
	// which the child records (jobs.MetaRendered); unknown for a child
	// registered before the record existed.
	Rendered() specdigest.Digest
}

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
	// Job is the child job as Nomad has it: what drift detection reads.
	// Nil when the cache has no record of it.
	Job ChildJob
	// Digest is the digest of the child's whole spec, which drift
	// detection compares with its revision rendered for its ordinal to find
	// a hand edit of any field (unknown when the cache could not read it).
	Digest specdigest.Digest
	// AllTerminal is true when no allocation of the child can still run.
	AllTerminal bool
	// NotReady says why a pod whose allocation runs is not Ready, as a
	// user reads it ("task app is restarting (3 restarts)"); empty when it
	// is Ready or not running. Judge sets it with Pod.Ready and
	// Pod.ReadySince.
	NotReady string
	// Facts are what the pod's readiness is judged from. Observe records
	// the allocation's; the agent adds the Consul checks' and the
	// post_ready hooks' and judges again, so that every source is heard by
	// the one judge (reconciler.JudgeReadiness) and none overrules
	// another's verdict.
	Facts reconciler.ReadinessFacts
	// Blocked is Nomad's placement failure for a pod whose child has no
	// allocation since Nomad last failed to place it; empty otherwise, and
	// empty while the failure is only the wait for its own new volume.
	Blocked string
	// Waiting says what a pod that is not placed waits for when that is no
	// failure (Nomad marking its new volume ready), in words for status;
	// empty otherwise.
	Waiting string
}

// Judge sets the pod's Ready, ReadySince and NotReady from its Facts, as
// reconciler.JudgeReadiness finds them. It is the only place they are set,
// so they are always the verdict on every fact recorded so far.
func (d *PodDetail) Judge() {
	r := reconciler.JudgeReadiness(d.Facts)
	d.Pod.Ready, d.Pod.ReadySince, d.NotReady = r.Ready, r.Since, r.Why
}

// WaitingForHealth is the NotReady of a running pod whose allocation Nomad
// has not judged healthy yet: every new pod's first wait.
const WaitingForHealth = reconciler.NotReadyWaitingForHealth

// DefaultKillTimeout is Nomad's kill_timeout when a task sets none: the
// kill grace of a job the daemon cannot read.
const DefaultKillTimeout = 5 * time.Second

// PurgeMargin is added to a purged child's kill grace (kill_timeout and
// shutdown_delay) before its ordinal is placed again: the client may still
// be killing the old task when the server has already forgotten it, and a
// new child is a new job, whose allocation does not wait for the old one.
const PurgeMargin = 5 * time.Second

// StoppedChild is a child job that is stopped and fully terminal: its
// ordinal has no pod, but re-registering must name its modify index.
type StoppedChild struct {
	Ordinal        int
	JobID          string
	JobModifyIndex uint64
}

// VolumeDetail is one observed per-ordinal volume. Its Volume's Capacity
// is Nomad's CapacityBytes (what the host volume plugin reported; Nomad's
// mkdir plugin reports 0), and its Class the volume's storage class.
type VolumeDetail struct {
	Volume reconciler.Volume
	ID     string
	NodeID string
}

// NodeState is what the daemon needs to know of a client node: whether pods
// on it must leave (a drain), whether pods may be placed on it, and whether
// it is up.
type NodeState struct {
	// Draining is set while a drain is in progress on the node.
	Draining bool
	// Eligible is false while the node takes no new allocations (a drain,
	// or an operator marking it ineligible).
	Eligible bool
	// Status is Nomad's node status: ready, down, disconnected, initializing.
	Status string
	// FineSince is the Nomad index at which the node last became ready,
	// eligible and not draining (from a listing: its modify index). A child
	// whose placement was blocked before then is evaluated again.
	FineSince uint64
}

// Nomad's node statuses that NodeState reads (api.NodeStatus*).
const (
	NodeStatusReady        = "ready"
	NodeStatusDown         = "down"
	NodeStatusDisconnected = "disconnected"
)

// Fine reports whether pods may run and be placed on the node.
func (n NodeState) Fine() bool {
	return n.Status == NodeStatusReady && n.Eligible && !n.Draining
}

// Down reports whether the node is down or disconnected: its allocations
// are not running, or not known to be.
func (n NodeState) Down() bool {
	return n.Status == NodeStatusDown || n.Status == NodeStatusDisconnected
}

// StreamReset is one loss of Nomad's event stream, as the watcher saw it.
type StreamReset struct {
	// Reason is one of backend/nomad's Reset* constants.
	Reason string
	// Message says what happened and what to do, e.g. "Nomad dropped
	// events the daemon had not read yet (raise event_buffer_size on the
	// servers); re-listing".
	Message string
	// At is when the watcher saw it, by the watcher's clock.
	At time.Time
}

// WritePacing is how the daemon's writes waited for Nomad's event stream,
// since the agent started.
type WritePacing struct {
	// Holds counts the writes that waited, and Held is how long they
	// waited in all.
	Holds uint64
	Held  time.Duration
	// MaxBehind is the most the daemon's writes were ahead of the
	// stream when a write was about to be made (the indexes the stream
	// trailed the newest write by, and the writes then in flight): how
	// close the stream came to Nomad's event_buffer_size.
	MaxBehind uint64
}

// ExecResult is how a command run in a pod ended.
type ExecResult struct {
	// ExitCode is the command's exit status; -1 when the call failed
	// before the command exited.
	ExitCode int
	// Output is the end of what the command wrote to stdout and stderr, in
	// the order Nomad streamed it (which keeps the order within each, not
	// between them), cut at a UTF-8 boundary. It is set on failure too,
	// with what arrived before it, so that an event can say how far a
	// command got.
	Output string
	// Truncated is set when Output lost the start of the output.
	Truncated bool
}

// Cluster is the Nomad cluster as the agent drives it: the writes its pod
// actions make, the reads they need, and the watchers of one leadership
// term. backend/nomad.Cluster implements it; cmd/ wires it.
type Cluster interface {
	Children
	// NodeValue returns the value on a node of a Nomad attribute
	// interpolation ("${node.unique.id}", "${meta.rack}", …), or an
	// error that IsNotFound when the node is gone.
	NodeValue(ctx context.Context, nodeID, attr string) (string, error)
	// Exec runs command in task of an allocation, with env set for it.
	// An exit code other than 0 is not an error; an allocation or task
	// that is not running is.
	Exec(ctx context.Context, namespace, nodeID, allocID, task string, command []string, env map[string]string) (ExecResult, error)
	// RenderedDigest is the digest of ordinal's child rendered from rev,
	// with the spread record a child carries (recorded false: none), to be
	// compared with PodDetail.Digest.
	RenderedDigest(spec reconciler.Spec, rev reconciler.Revision, ordinal int, spread string, recorded bool) (specdigest.Digest, error)
	// WriteVerb reports whether a call verb (as a CallTrace names it)
	// changes Nomad's state, or runs code in a pod.
	WriteVerb(verb string) bool
	// WritePacing says how the daemon's writes waited for the event
	// stream to catch up with its earlier writes.
	WritePacing() WritePacing
	// NewTerm returns a leadership term's cache of Nomad and the watcher
	// that keeps it, telling onChange of each set whose state changed.
	NewTerm(cfg TermConfig, log hclog.Logger, onChange func(SetKey)) Term
	// NewLeaderChecks returns a reader of the Nomad-native leader checks
	// whose reads stop when ctx is done, telling onChange of each set
	// whose leader changed.
	NewLeaderChecks(ctx context.Context, log hclog.Logger, onChange func(SetKey)) LeaderChecks
}

// Children are the writes of child jobs. Each is one action's effect; none
// decides anything.
type Children interface {
	// RegisterChild renders ordinal's child of spec at rev and
	// registers it, fenced on index (0: the child must not exist). A
	// spread that is not nil adds its rules first. It returns the child's
	// new JobModifyIndex with the record of the rendering the child
	// carries, or an error that IsConflict when the child changed since it
	// was observed.
	RegisterChild(ctx context.Context, spec reconciler.Spec, rev reconciler.Revision, ordinal int, spread *Spread, index uint64) (Registration, error)
	// DeregisterChild stops a child, and purges it when purge is set.
	// Nomad 1.10 answers a deregister of a job it does not have with
	// success (nomad/job_endpoint.go, Deregister); an error that wraps
	// ErrNotFound (a 404) says the same, and nothing was written.
	DeregisterChild(ctx context.Context, namespace, id string, purge bool) error
	// RestoreCount registers a child scaled up by hand again as Nomad has
	// it, with its count back at 1, fenced on observed, its
	// JobModifyIndex as the cache saw it. It returns the new
	// JobModifyIndex, or 0 when there was nothing to do (the child is not
	// scaled, or Nomad has a newer version than observed).
	RestoreCount(ctx context.Context, namespace, id string, observed uint64) (uint64, error)
	// EvaluateChild asks Nomad to place a child again. A child that is
	// gone already (ErrNotFound) is not an error: there is nothing to place.
	EvaluateChild(ctx context.Context, namespace, id string) error
}

// Registration is what RegisterChild registered.
type Registration struct {
	// JobModifyIndex is the child's new JobModifyIndex.
	JobModifyIndex uint64
	// Rendered is the digest the child records of its rendering
	// (ChildJob.Rendered), and SpreadRecord its spread record
	// (ChildJob.SpreadRecord). Rendered is also RenderedDigest of the
	// child's revision and ordinal with that record: the agent keeps it
	// for drift detection rather than render the child a second time
	// when it first sees it. Rendered is unknown for a child without a
	// spread record.
	Rendered     specdigest.Digest
	SpreadRecord string
}

// Spread is how a child without volumes is spread away from the nodes of
// its set's other ordinals.
type Spread struct {
	// Attr is the node attribute spread on (statefulset_spread).
	Attr string
	// Required makes the rules constraints rather than affinities.
	Required bool
	// Used are Attr's values the other ordinals hold.
	Used []string
}

// TermConfig tunes a leadership term's watcher.
type TermConfig struct {
	// ResyncInterval is how often the whole cluster is re-listed as a
	// safety net against missed events.
	ResyncInterval time.Duration
	// Clock returns the time; the agent passes its controller's clock.
	Clock func() time.Time
	// OnReset is told the reason each time the event stream is lost.
	OnReset func(reason string)
	// OnRelist is called after each full re-list of the cluster (the
	// first listing, every resync and every recovery from a lost stream),
	// before the sets are queued again.
	OnRelist func()
}

// Term is one leadership term's view of Nomad: a cache of the cluster and
// the watcher that keeps it current from the event stream.
type Term interface {
	// Run watches Nomad until ctx is done.
	Run(ctx context.Context) error
	// RequestResync asks for a full re-list.
	RequestResync()
	// Healthy reports whether the event stream is up, and why not.
	Healthy() (bool, string)
	// Resets counts the losses of the event stream, by reason.
	Resets() map[string]uint64
	// LastReset returns the last loss of the stream, if any.
	LastReset() (StreamReset, bool)
	// Observe returns the set's observed state at time now. claims are
	// the set's volume claim names, used to find its volumes.
	Observe(key SetKey, claims []string, now time.Time) Observation
	// NodeState returns what the cache knows of a node.
	NodeState(id string) (NodeState, bool)
	// HasFineNodeOutside reports whether a ready, eligible node that is
	// not draining exists whose ID is not in ids.
	HasFineNodeOutside(ids []string) bool
}

// LeaderChecks reads the sets' Nomad-native leader checks.
type LeaderChecks interface {
	// Watch sets what is read for a set: its leader check ("" to stop
	// watching the set), how often Nomad runs it, and the set's live
	// allocations.
	Watch(key SetKey, check string, interval time.Duration, allocs []string)
	// Leader reports whether an allocation's leader check passes, and
	// whether it was read at all.
	Leader(key SetKey, allocID string) (leader, read bool)
	// Wait returns once every read has ended.
	Wait()
}

// The reasons the watcher loses Nomad's event stream and re-lists: the
// values of the metric nomad_statefulset_nomad_event_stream_resets_total's
// reason label.
const (
	// StreamResetBufferOverflow is Nomad dropping events the daemon had
	// not read yet: the subscriber fell further behind than the servers'
	// event_buffer_size. The daemon must raise it, or keep up.
	StreamResetBufferOverflow = "buffer_overflow"
	// StreamResetServerClosed is Nomad closing the subscription itself, as
	// it does when the token's ACLs change or a server steps down.
	StreamResetServerClosed = "server_closed"
	// StreamResetServerError is Nomad ending the stream, or refusing it,
	// with another error of its own.
	StreamResetServerError = "server_error"
	// StreamResetDenied is Nomad refusing the stream to the daemon's token.
	StreamResetDenied = "denied"
	// StreamResetDecode is the stream carrying something that is neither
	// an event nor an error Nomad wrote.
	StreamResetDecode = "decode"
	// StreamResetDisconnect is the connection to Nomad failing or ending.
	StreamResetDisconnect = "disconnect"
)

// StreamResetReasons are every StreamReset* reason.
var StreamResetReasons = []string{StreamResetBufferOverflow, StreamResetServerClosed, StreamResetServerError,
	StreamResetDenied, StreamResetDecode, StreamResetDisconnect}
