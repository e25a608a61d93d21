// Package nomad connects nomad-statefulset to a real Nomad cluster: the
// watcher that keeps a cache from the event stream, and the effects that
// register child jobs and manage host volumes.
package nomad

import (
	"context"

	"github.com/hashicorp/nomad/api"

	"github.com/nomad-statefulset/nomad-statefulset/backend"
)

// ErrNotFound is returned by API getters when the object does not exist.
var ErrNotFound = backend.ErrNotFound

// API is the slice of the Nomad HTTP API that nomad-statefulset uses. NewAPI
// wraps a real *api.Client; internal/nomadsim.Nomad simulates it for fast tests,
// fault injection and scale benchmarks. Keeping it narrow keeps the simulator
// honest.
//
// Adding a call touches three files: this one (the method, its Verb
// constant and its Verbs entry), client.go (the real call) and
// internal/nomadsim (the simulated one). Metrics, /v1/health, ACL errors
// and simulated faults read Verbs and the CallTrace, so none of them
// changes.
type API interface {
	// ListJobs lists the jobs of a namespace ("*" for all namespaces), with
	// their Meta. Callers may rely only on a stub's ID, Namespace, Status,
	// Stop, Meta, indexes and SubmitTime: the real client decodes no more.
	ListJobs(ctx context.Context, namespace string) ([]*api.JobListStub, uint64, error)
	// GetJob returns one job, or ErrNotFound.
	GetJob(ctx context.Context, namespace, id string) (*api.Job, error)
	// RegisterJob registers a job. With enforce set, the register succeeds
	// only if the job's current JobModifyIndex equals modifyIndex (0 means the
	// job must not exist yet): this is the check-and-set every write uses.
	RegisterJob(ctx context.Context, job *api.Job, enforce bool, modifyIndex uint64) (*api.JobRegisterResponse, error)
	// DeregisterJob stops a job, and purges it when purge is set.
	DeregisterJob(ctx context.Context, namespace, id string, purge bool) error
	// ListAllocations lists every allocation of a namespace ("*" for all
	// namespaces) in one call: the re-list reads all children's allocations
	// with it rather than one request per child. Callers may rely only on
	// a stub's ID, Namespace, NodeID, JobID, statuses, DeploymentStatus,
	// indexes, ModifyTime, and of its TaskStates State, Failed, Restarts,
	// StartedAt and FinishedAt: the real client decodes no more.
	ListAllocations(ctx context.Context, namespace string) ([]*api.AllocationListStub, error)
	// CreateHostVolume creates a dynamic host volume.
	CreateHostVolume(ctx context.Context, vol *api.HostVolume) (*api.HostVolume, error)
	// ListHostVolumes lists host volumes in a namespace whose name has prefix.
	ListHostVolumes(ctx context.Context, namespace, prefix string) ([]*api.HostVolumeStub, error)
	// GetHostVolume returns one host volume by ID with what its list stub
	// leaves out (its parameters, which record its storage class, and its
	// requested capabilities and capacities), or ErrNotFound.
	GetHostVolume(ctx context.Context, namespace, id string) (*api.HostVolume, error)
	// DeleteHostVolume deletes a host volume by ID.
	DeleteHostVolume(ctx context.Context, namespace, id string) error
	// ListNodes lists the client nodes with their status, drain and
	// scheduling eligibility: a pod on a draining node is the daemon's to
	// move, within the set's budget.
	ListNodes(ctx context.Context) ([]*api.NodeListStub, error)
	// GetNode returns one client node with its attributes and meta, which
	// spreading reads (statefulset_spread), or ErrNotFound.
	GetNode(ctx context.Context, id string) (*api.Node, error)
	// EvaluateJob asks Nomad to evaluate a job again: a child whose
	// placement was blocked (its volume's node was ineligible) stays blocked
	// when the node comes back, until something evaluates it.
	EvaluateJob(ctx context.Context, namespace, id string) error
	// ExecAlloc runs command in task of an allocation, with env set for it,
	// and returns its exit code and the end of its combined output (see
	// ExecResult). nodeID is the allocation's node (its stub's NodeID), for
	// the api client to reach it directly when it can; the call goes
	// through Nomad's servers otherwise. A command that has not exited when
	// ctx is done has failed: the error wraps ctx.Err(). An exit code other
	// than 0 is not an error; an allocation or task that is not running is.
	ExecAlloc(ctx context.Context, namespace, nodeID, allocID, task string, command []string, env map[string]string) (ExecResult, error)
	// AllocChecks returns the latest result of each Nomad-native service
	// check (a service with provider = "nomad") of an allocation, by check
	// name, or ErrNotFound.
	AllocChecks(ctx context.Context, namespace, allocID string) (map[string]CheckStatus, error)
	// Events subscribes to the event stream from index for the Job,
	// Allocation, Node, HostVolume and Evaluation topics. The
	// channel closes when the stream ends; the caller then re-lists and
	// subscribes again.
	//
	// A payload value is either the typed api object (*api.Job, …) or its
	// JSON as Nomad sent it (json.RawMessage), which the real client keeps
	// so that each payload is decoded once; DecodePayload reads both.
	Events(ctx context.Context, index uint64) (<-chan *api.Events, error)
}

// ExecResult is how a command run by ExecAlloc ended; see
// backend.ExecResult. Its Output holds at most ExecOutputLimit bytes.
type ExecResult = backend.ExecResult

// CheckStatus is the latest result of one Nomad-native service check.
type CheckStatus struct {
	// Passing is set when Nomad reports the check's status "success";
	// "failure" and "pending" (not run yet) are not passing.
	Passing bool
	// Output is what the check last reported (an HTTP status line, a TCP
	// dial result).
	Output string
}

// The verbs of API: each is a method name, so that metrics, /v1/health and
// the simulator's fault injection name a call the same way.
const (
	VerbListJobs         = "ListJobs"
	VerbGetJob           = "GetJob"
	VerbRegisterJob      = "RegisterJob"
	VerbDeregisterJob    = "DeregisterJob"
	VerbListAllocations  = "ListAllocations"
	VerbCreateHostVolume = "CreateHostVolume"
	VerbListHostVolumes  = "ListHostVolumes"
	VerbGetHostVolume    = "GetHostVolume"
	VerbDeleteHostVolume = "DeleteHostVolume"
	VerbListNodes        = "ListNodes"
	VerbGetNode          = "GetNode"
	VerbEvaluateJob      = "EvaluateJob"
	VerbExecAlloc        = "ExecAlloc"
	VerbAllocChecks      = "AllocChecks"
	VerbEvents           = "Events"
)

// Verb describes one method of API.
type Verb struct {
	// Write is set for the verbs that change Nomad's state, and for
	// ExecAlloc, which runs code in a pod. A set at rest makes none of
	// them: that is the steady-state "zero writes" promise.
	Write bool
	// Capability is the Nomad ACL capability the call needs, named in the
	// PermissionError of a 403, which Nomad answers with a bare
	// "Permission denied".
	Capability string
	// Method and Path are the HTTP route the real client calls (Path up to
	// the first variable part), so that simulated errors read like real ones.
	Method, Path string
}

// Verbs describes every method of API, by name.
//
// ExecAlloc changes nothing Nomad stores, but it runs code in a pod, and
// that code can change anything the pod holds (a switchover moves a
// database's primary): a set at rest must run none, so it counts as a
// write. Its route is a websocket, opened with a GET.
var Verbs = map[string]Verb{
	VerbListJobs:         {Capability: "list-jobs", Method: "GET", Path: "/v1/jobs"},
	VerbGetJob:           {Capability: "read-job", Method: "GET", Path: "/v1/job/"},
	VerbRegisterJob:      {Write: true, Capability: "submit-job", Method: "PUT", Path: "/v1/jobs"},
	VerbDeregisterJob:    {Write: true, Capability: "submit-job", Method: "DELETE", Path: "/v1/job/"},
	VerbListAllocations:  {Capability: "read-job", Method: "GET", Path: "/v1/allocations"},
	VerbCreateHostVolume: {Write: true, Capability: "host-volume-create", Method: "PUT", Path: "/v1/volume/host/create"},
	VerbListHostVolumes:  {Capability: "host-volume-read", Method: "GET", Path: "/v1/volumes"},
	VerbGetHostVolume:    {Capability: "host-volume-read", Method: "GET", Path: "/v1/volume/host/"},
	VerbDeleteHostVolume: {Write: true, Capability: "host-volume-write", Method: "DELETE", Path: "/v1/volume/host/"},
	VerbListNodes:        {Capability: "node:read", Method: "GET", Path: "/v1/nodes"},
	VerbGetNode:          {Capability: "node:read", Method: "GET", Path: "/v1/node/"},
	VerbEvaluateJob:      {Write: true, Capability: "submit-job", Method: "PUT", Path: "/v1/job/"},
	VerbExecAlloc:        {Write: true, Capability: "alloc-exec", Method: "GET", Path: "/v1/client/allocation/"},
	VerbAllocChecks:      {Capability: "read-job", Method: "GET", Path: "/v1/client/allocation/"},
	VerbEvents:           {Capability: "read-job", Method: "GET", Path: "/v1/event/stream"},
}

// CallTrace is told the outcome of every API call made with a context that
// carries it; see backend.CallTrace.
type CallTrace = backend.CallTrace

// WithCallTrace returns a copy of ctx that carries trace; see
// backend.WithCallTrace.
func WithCallTrace(ctx context.Context, trace CallTrace) context.Context {
	return backend.WithCallTrace(ctx, trace)
}

// TraceCall reports one call of verb to ctx's CallTrace, if it has one,
// with the error *errp the call returns. Every implementation of API calls
// it exactly once per call, deferred at the top of each method:
//
//	defer nomad.TraceCall(ctx, nomad.VerbGetJob, &err)
func TraceCall(ctx context.Context, verb string, errp *error) {
	backend.TraceCall(ctx, verb, errp)
}
