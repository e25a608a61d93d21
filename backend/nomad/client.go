package nomad

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"sync/atomic"
	"unicode"

	"github.com/hashicorp/nomad/api"

	"github.com/nomad-statefulset/nomad-statefulset/backend"
	"github.com/nomad-statefulset/nomad-statefulset/jobs"
)

// Client implements API over a real Nomad agent.
type Client struct {
	c *api.Client
	// written is the highest Raft index an answer to a write carried
	// (LastWriteIndex).
	written atomic.Uint64
}

// LastWriteIndex implements WriteIndexer: the highest Raft index any of
// the client's writes returned.
func (n *Client) LastWriteIndex() uint64 { return n.written.Load() }

// wrote records the index of a write's answer.
func (n *Client) wrote(meta *api.WriteMeta) {
	if meta == nil {
		return
	}
	for {
		cur := n.written.Load()
		if meta.LastIndex <= cur || n.written.CompareAndSwap(cur, meta.LastIndex) {
			return
		}
	}
}

// NewAPI wraps a Nomad API client.
func NewAPI(c *api.Client) *Client { return &Client{c: c} }

func query(ctx context.Context, namespace string) *api.QueryOptions {
	return (&api.QueryOptions{Namespace: namespace}).WithContext(ctx)
}

// uncompressed asks Nomad not to gzip its answer. The api package asks for
// gzip on every call, adding its Accept-Encoding after any the caller sets,
// and Nomad's HTTP server reads only the first. Gzip costs Nomad's servers
// CPU the daemon's calls should not: a new compressor (about a megabyte of
// state) for every answer, however small, and on the event stream a
// flush of it after every batch. Profiled on Nomad 1.10.5 with 1,000
// children, gzip was 9% of the server's CPU in the first 25 s of a
// rollout, spent on the answers to the daemon's register and deregister
// calls and on its event stream. Lists, the daemon's only large answers,
// stay compressed.
func uncompressed() map[string]string { return map[string]string{"Accept-Encoding": "identity"} }

func write(ctx context.Context, namespace string) *api.WriteOptions {
	return (&api.WriteOptions{Namespace: namespace, Headers: uncompressed()}).WithContext(ctx)
}

// IsNotFound reports whether err is Nomad's 404; see backend.IsNotFound.
func IsNotFound(err error) bool { return backend.IsNotFound(err) }

// PermissionError is Nomad refusing a call for lack of an ACL capability.
type PermissionError struct {
	Verb       string
	Namespace  string
	Capability string
	Err        error
}

// Error implements error.
func (e *PermissionError) Error() string {
	return fmt.Sprintf("Nomad refused %s in namespace %q: the agent's token lacks the %q capability "+
		"(see the Nomad ACL policy in docs/operations.md): %v", e.Verb, e.Namespace, e.Capability, e.Err)
}

// Unwrap returns Nomad's error.
func (e *PermissionError) Unwrap() error { return e.Err }

// denied wraps err in a PermissionError when Nomad answered 403.
func denied(verb, namespace string, err error) error {
	var ue api.UnexpectedResponseError
	if errors.As(err, &ue) && ue.StatusCode() == http.StatusForbidden {
		return &PermissionError{Verb: verb, Namespace: namespace, Capability: Verbs[verb].Capability, Err: err}
	}
	if err != nil && strings.Contains(err.Error(), "403") && strings.Contains(err.Error(), "Permission denied") {
		return &PermissionError{Verb: verb, Namespace: namespace, Capability: Verbs[verb].Capability, Err: err}
	}
	return err
}

// IsConflict reports whether err is Nomad refusing a register because the
// job's modify index is not the one enforced; see backend.IsConflict.
func IsConflict(err error) bool { return backend.IsConflict(err) }

// jobStub is the part of Nomad's job list stub that the watcher reads. A
// re-list lists every job of the cluster; decoding each stub's job summary,
// datacenters and the rest was most of a re-list's memory and CPU, so only
// these fields are decoded.
type jobStub struct {
	ID, Namespace, Status                    string
	Stop                                     bool
	Meta                                     stubMeta
	CreateIndex, ModifyIndex, JobModifyIndex uint64
	SubmitTime                               int64
}

// stubMeta is the part of a stub's Meta the re-list reads: whether the job
// is a set's parent (jobs.KeyManaged) or child (jobs.MetaParent). Decoded
// as a struct, the other keys are skipped without a copy: a child's meta
// also holds the record of its rendering (jobs.MetaRendered), about a
// kilobyte, and a parent's its annotations, for every job of the cluster
// at each re-list.
type stubMeta struct {
	Managed *string `json:"statefulset"`
	Parent  *string `json:"statefulset_parent"`
}

// stubMetaKeys are the keys of stubMeta's fields, which its tags spell.
var stubMetaKeys = [...]string{jobs.KeyManaged, jobs.MetaParent}

// toMap returns the meta as the stub's Meta: the keys present, nil when
// none is.
func (m stubMeta) toMap() map[string]string {
	var out map[string]string
	for i, v := range [...]*string{m.Managed, m.Parent} {
		if v != nil {
			if out == nil {
				out = make(map[string]string, 2)
			}
			out[stubMetaKeys[i]] = *v
		}
	}
	return out
}

// listJobsPage is how many job stubs a listing asks Nomad for at once. A
// child's stub is about two kilobytes (half of it the record of its
// rendering, jobs.MetaRendered), and the api package buffers a whole answer
// before decoding it, so one answer for every job of a 1,000-set cluster
// was a buffer of tens of megabytes at each re-list; a page bounds it
// whatever the cluster's size.
const listJobsPage = 1000

// ListJobs implements API. The stubs carry only ID, Namespace, Status,
// Stop, Meta, the three indexes and SubmitTime (see jobStub), and their
// Meta only the keys of stubMeta, which the watcher reads. Nomad answers
// in pages (listJobsPage); the index is the first page's: every page holds
// the jobs as of at least that index, and the event stream from it on
// replays what later pages hold too, which the cache folds as it folds
// the overlap of its other listings with the stream.
func (n *Client) ListJobs(ctx context.Context, namespace string) (_ []*api.JobListStub, _ uint64, err error) {
	defer TraceCall(ctx, VerbListJobs, &err)
	var stubs []*api.JobListStub
	var index uint64
	q := query(ctx, namespace)
	q.PerPage = listJobsPage
	for page := 0; ; page++ {
		// Nomad leaves Meta out of job stubs unless asked; the watcher
		// needs it to tell parents and children from every other job
		// without a read each.
		var raw []jobStub
		meta, err := n.c.Raw().Query("/v1/jobs?meta=true", &raw, q)
		if err != nil {
			return nil, 0, fmt.Errorf("listing jobs in namespace %q: %w", namespace, denied(VerbListJobs, namespace, err))
		}
		if page == 0 {
			index = meta.LastIndex
		}
		for i := range raw {
			r := &raw[i]
			stubs = append(stubs, &api.JobListStub{
				ID: r.ID, Namespace: r.Namespace, Status: r.Status, Stop: r.Stop, Meta: r.Meta.toMap(),
				CreateIndex: r.CreateIndex, ModifyIndex: r.ModifyIndex, JobModifyIndex: r.JobModifyIndex, SubmitTime: r.SubmitTime,
			})
		}
		if meta.NextToken == "" {
			break
		}
		q.NextToken = meta.NextToken
	}
	if stubs == nil {
		stubs = []*api.JobListStub{}
	}
	return stubs, index, nil
}

// GetJob implements API.
func (n *Client) GetJob(ctx context.Context, namespace, id string) (_ *api.Job, err error) {
	defer TraceCall(ctx, VerbGetJob, &err)
	job, _, err := n.c.Jobs().Info(id, query(ctx, namespace))
	if err != nil {
		if IsNotFound(err) {
			return nil, ErrNotFound
		}
		return nil, fmt.Errorf("reading job %s/%s: %w", namespace, id, denied(VerbGetJob, namespace, err))
	}
	return job, nil
}

// RegisterJob implements API.
func (n *Client) RegisterJob(ctx context.Context, job *api.Job, enforce bool, modifyIndex uint64) (_ *api.JobRegisterResponse, err error) {
	defer TraceCall(ctx, VerbRegisterJob, &err)
	ns := ""
	if job.Namespace != nil {
		ns = *job.Namespace
	}
	opts := &api.RegisterOptions{EnforceIndex: enforce, ModifyIndex: modifyIndex}
	resp, meta, err := n.c.Jobs().RegisterOpts(job, opts, write(ctx, ns))
	n.wrote(meta)
	if err != nil {
		return nil, fmt.Errorf("registering job %s/%s: %w", ns, deref(job.ID), denied(VerbRegisterJob, ns, err))
	}
	return resp, nil
}

// DeregisterJob implements API.
func (n *Client) DeregisterJob(ctx context.Context, namespace, id string, purge bool) (err error) {
	defer TraceCall(ctx, VerbDeregisterJob, &err)
	_, meta, err := n.c.Jobs().Deregister(id, purge, write(ctx, namespace))
	n.wrote(meta)
	if err != nil {
		if IsNotFound(err) {
			return ErrNotFound
		}
		return fmt.Errorf("stopping job %s/%s: %w", namespace, id, denied(VerbDeregisterJob, namespace, err))
	}
	return nil
}

// CreateHostVolume implements API.
func (n *Client) CreateHostVolume(ctx context.Context, vol *api.HostVolume) (_ *api.HostVolume, err error) {
	defer TraceCall(ctx, VerbCreateHostVolume, &err)
	resp, meta, err := n.c.HostVolumes().Create(&api.HostVolumeCreateRequest{Volume: vol}, write(ctx, vol.Namespace))
	n.wrote(meta)
	if err != nil {
		return nil, fmt.Errorf("creating host volume %s/%s: %w", vol.Namespace, vol.Name, denied(VerbCreateHostVolume, vol.Namespace, err))
	}
	if resp == nil || resp.Volume == nil {
		return nil, fmt.Errorf("creating host volume %s/%s: Nomad returned no volume", vol.Namespace, vol.Name)
	}
	return resp.Volume, nil
}

// EvaluateJob implements API.
func (n *Client) EvaluateJob(ctx context.Context, namespace, id string) (err error) {
	defer TraceCall(ctx, VerbEvaluateJob, &err)
	_, meta, err := n.c.Jobs().EvaluateWithOpts(id, api.EvalOptions{}, write(ctx, namespace))
	n.wrote(meta)
	if err != nil {
		if IsNotFound(err) {
			return ErrNotFound
		}
		return fmt.Errorf("evaluating job %s/%s: %w", namespace, id, denied(VerbEvaluateJob, namespace, err))
	}
	return nil
}

// ExecAlloc implements API through Nomad's alloc exec API, a websocket at
// /v1/client/allocation/<id>/exec, running command under ExecCommand's
// shell so that env is set.
//
// The api client first reads the allocation's node (GET /v1/node/<id>) and
// tries a websocket to it directly, for up to api.ClientConnTimeout (1s);
// failing that, it opens the websocket at the Nomad address the daemon was
// given, which forwards the exec to the node. Hence nodeID: without one,
// that read is GET /v1/node/, which Nomad answers 500 "missing node ID"
// and logs as an error at every call.
func (n *Client) ExecAlloc(ctx context.Context, namespace, nodeID, allocID, task string, command []string, env map[string]string) (_ ExecResult, err error) {
	defer TraceCall(ctx, VerbExecAlloc, &err)
	what := fmt.Sprintf("running %q in task %q of allocation %s/%s", command, task, namespace, allocID)
	res := ExecResult{ExitCode: -1}
	argv, err := ExecCommand(command, env)
	if err != nil {
		return res, fmt.Errorf("%s: %w", what, err)
	}
	out := newTailBuffer(ExecOutputLimit)
	type exit struct {
		code int
		err  error
	}
	done := make(chan exit, 1)
	go func() {
		// Exec reads the allocation's ID and NodeID alone (TaskGroup for
		// job actions, which this is not); the namespace goes in the query.
		alloc := &api.Allocation{ID: allocID, Namespace: namespace, NodeID: nodeID}
		// No stdin: the command reads end of file at once.
		code, err := n.c.Allocations().Exec(ctx, alloc, task, false, argv, strings.NewReader(""), out, out, nil, query(ctx, namespace))
		done <- exit{code, err}
	}()
	var e exit
	select {
	case e = <-done:
	case <-ctx.Done():
		// The api client heeds ctx once the websocket is open, but not
		// while it opens it (its dial takes no context): a Nomad that
		// accepts the connection and never answers would hold the call
		// past its deadline. The goroutine ends when the dial does.
		e = exit{err: ctx.Err()}
	}
	res.Output, res.Truncated = out.tail()
	switch {
	case e.err == nil:
		res.ExitCode = e.code
		return res, nil
	case ctx.Err() != nil:
		// Closing the websocket does not stop the command: Nomad lets it
		// run to its end in the task.
		return res, fmt.Errorf("%s: it did not exit in time, and may still be running: %w", what, ctx.Err())
	default:
		return res, fmt.Errorf("%s: %w", what, deniedExec(namespace, e.err))
	}
}

// deniedExec is denied for ExecAlloc. Nomad checks the token's alloc-exec
// after the websocket is open, so its refusal is no 403: it is the text of
// the close frame, Nomad's ErrPermissionDenied ("Permission denied"), which
// the api client returns as a bare error. Nomad recognises that error by
// its text too (structs.IsErrPermissionDenied).
func deniedExec(namespace string, err error) error {
	if err = denied(VerbExecAlloc, namespace, err); errors.As(err, new(*PermissionError)) {
		return err
	}
	if strings.Contains(err.Error(), "Permission denied") {
		return &PermissionError{Verb: VerbExecAlloc, Namespace: namespace, Capability: Verbs[VerbExecAlloc].Capability, Err: err}
	}
	return err
}

// AllocChecks implements API with GET /v1/client/allocation/<id>/checks,
// which Nomad's servers forward to the allocation's node: only that node's
// client runs the checks of provider = "nomad" services, and holds their
// results.
func (n *Client) AllocChecks(ctx context.Context, namespace, allocID string) (_ map[string]CheckStatus, err error) {
	defer TraceCall(ctx, VerbAllocChecks, &err)
	statuses, err := n.c.Allocations().Checks(allocID, query(ctx, namespace))
	if err != nil {
		if IsNotFound(err) {
			return nil, ErrNotFound
		}
		return nil, fmt.Errorf("reading the service checks of allocation %s/%s: %w", namespace, allocID, denied(VerbAllocChecks, namespace, err))
	}
	return checksByName(statuses), nil
}

// GetNode implements API.
func (n *Client) GetNode(ctx context.Context, id string) (_ *api.Node, err error) {
	defer TraceCall(ctx, VerbGetNode, &err)
	node, _, err := n.c.Nodes().Info(id, query(ctx, ""))
	if err != nil {
		if IsNotFound(err) {
			return nil, ErrNotFound
		}
		return nil, fmt.Errorf("reading node %s: %w", id, denied(VerbGetNode, "", err))
	}
	return node, nil
}

// ListNodes implements API.
func (n *Client) ListNodes(ctx context.Context) (_ []*api.NodeListStub, err error) {
	defer TraceCall(ctx, VerbListNodes, &err)
	nodes, _, err := n.c.Nodes().List(query(ctx, ""))
	if err != nil {
		return nil, fmt.Errorf("listing nodes: %w", denied(VerbListNodes, "", err))
	}
	return nodes, nil
}

// ListHostVolumes implements API.
func (n *Client) ListHostVolumes(ctx context.Context, namespace, prefix string) (_ []*api.HostVolumeStub, err error) {
	defer TraceCall(ctx, VerbListHostVolumes, &err)
	q := query(ctx, namespace)
	q.Prefix = prefix
	vols, _, err := n.c.HostVolumes().List(nil, q)
	if err != nil {
		return nil, fmt.Errorf("listing host volumes in namespace %q: %w", namespace, denied(VerbListHostVolumes, namespace, err))
	}
	return vols, nil
}

// GetHostVolume implements API.
func (n *Client) GetHostVolume(ctx context.Context, namespace, id string) (_ *api.HostVolume, err error) {
	defer TraceCall(ctx, VerbGetHostVolume, &err)
	v, _, err := n.c.HostVolumes().Get(id, query(ctx, namespace))
	if err != nil {
		if IsNotFound(err) {
			return nil, ErrNotFound
		}
		return nil, fmt.Errorf("reading host volume %s/%s: %w", namespace, id, denied(VerbGetHostVolume, namespace, err))
	}
	if v == nil {
		return nil, ErrNotFound
	}
	return v, nil
}

// DeleteHostVolume implements API. A volume whose node Nomad no longer
// knows (`nomad node purge` of a machine gone for good) cannot be deleted
// by its client, and Nomad refuses to drop it without force; its data went
// with the machine, so it is then deleted with force. A volume on a node
// that is only down is never forced: its data may come back with it.
func (n *Client) DeleteHostVolume(ctx context.Context, namespace, id string) (err error) {
	defer TraceCall(ctx, VerbDeleteHostVolume, &err)
	_, meta, err := n.c.HostVolumes().Delete(&api.HostVolumeDeleteRequest{ID: id}, write(ctx, namespace))
	if err != nil && !IsNotFound(err) && n.volumeNodeGone(ctx, namespace, id) {
		_, meta, err = n.c.HostVolumes().Delete(&api.HostVolumeDeleteRequest{ID: id, Force: true}, write(ctx, namespace))
	}
	n.wrote(meta)
	if err != nil {
		if IsNotFound(err) {
			return ErrNotFound
		}
		return fmt.Errorf("deleting host volume %s/%s: %w", namespace, id, denied(VerbDeleteHostVolume, namespace, err))
	}
	return nil
}

// volumeNodeGone reports whether Nomad holds volume id on a node it no
// longer knows. Any error reading either says no: only Nomad's own "no such
// node" lets a delete be forced.
func (n *Client) volumeNodeGone(ctx context.Context, namespace, id string) bool {
	v, _, err := n.c.HostVolumes().Get(id, query(ctx, namespace))
	if err != nil || v == nil || v.NodeID == "" {
		return false
	}
	_, _, err = n.c.Nodes().Info(v.NodeID, query(ctx, ""))
	return IsNotFound(err)
}

// allocStub is the part of Nomad's allocation list stub that the cache
// keeps, decoded alone for the same reason as jobStub.
type allocStub struct {
	ID, Namespace, NodeID, JobID string
	DesiredStatus, ClientStatus  string
	DeploymentStatus             *api.AllocDeploymentStatus
	CreateIndex, ModifyIndex     uint64
	JobVersion                   uint64
	ModifyTime                   int64
	TaskStates                   map[string]*taskStatePayload
}

// ListAllocations implements API with one GET /v1/allocations. Task states
// are read (readiness needs them) but decoded without their events, which
// are most of a stub's size. The stubs carry only the fields of allocStub,
// and of a task state only State, Failed, Restarts, StartedAt and
// FinishedAt. The answer is decoded as it is read, one stub at a time: the
// api package would buffer all of it first, tens of megabytes for a
// cluster of 10,000 allocations, at every re-list. The listing's index is
// not read: the watcher's snapshot takes the job listing's.
func (n *Client) ListAllocations(ctx context.Context, namespace string) (_ []*api.AllocationListStub, err error) {
	defer TraceCall(ctx, VerbListAllocations, &err)
	body, err := n.c.Raw().Response("/v1/allocations", query(ctx, namespace))
	if err != nil {
		return nil, fmt.Errorf("listing allocations in namespace %q: %w", namespace, denied(VerbListAllocations, namespace, err))
	}
	defer body.Close()
	allocs := []*api.AllocationListStub{}
	dec := json.NewDecoder(body)
	switch tok, err := dec.Token(); {
	case err != nil:
		return nil, fmt.Errorf("listing allocations in namespace %q: %w", namespace, err)
	case tok == nil:
		return allocs, nil // null: none
	case tok != json.Delim('['):
		return nil, fmt.Errorf("listing allocations in namespace %q: the answer is not a list (%v)", namespace, tok)
	}
	for dec.More() {
		var r allocStub
		if err := dec.Decode(&r); err != nil {
			return nil, fmt.Errorf("listing allocations in namespace %q: %w", namespace, err)
		}
		a := &api.AllocationListStub{
			ID: r.ID, Namespace: r.Namespace, NodeID: r.NodeID, JobID: r.JobID,
			DesiredStatus: r.DesiredStatus, ClientStatus: r.ClientStatus, DeploymentStatus: r.DeploymentStatus,
			CreateIndex: r.CreateIndex, ModifyIndex: r.ModifyIndex, JobVersion: r.JobVersion, ModifyTime: r.ModifyTime,
		}
		if len(r.TaskStates) > 0 {
			a.TaskStates = make(map[string]*api.TaskState, len(r.TaskStates))
			for name, t := range r.TaskStates {
				if t != nil {
					a.TaskStates[name] = &api.TaskState{State: t.State, Failed: t.Failed, Restarts: t.Restarts, StartedAt: t.StartedAt, FinishedAt: t.FinishedAt}
				}
			}
		}
		allocs = append(allocs, a)
	}
	if _, err := dec.Token(); err != nil {
		return nil, fmt.Errorf("listing allocations in namespace %q: %w", namespace, err)
	}
	return allocs, nil
}

// eventTopics are the topics the watcher follows. Not Deployment: every
// change of a child's deployment that a decision reads (an allocation's
// health) changes the allocation too, and comes as its event; the
// deployment's own events were a fifth of what Nomad sent for a create of
// 1,000 children (BENCHMARKS.md), encoded for nothing.
var eventTopics = []api.Topic{api.TopicJob, api.TopicAllocation, api.TopicNode, TopicHostVolume, api.TopicEvaluation}

// TopicHostVolume is Nomad's event topic of dynamic host volumes (events
// HostVolumeRegistered and HostVolumeDeleted, the volume under the payload
// key "Volume"). The api package at the pinned version has no constant.
const TopicHostVolume api.Topic = "HostVolume"

// rawEvents is one message of Nomad's event stream, read with each payload
// object kept as the JSON Nomad sent. The api package's own stream decodes
// payloads into generic maps, which the watcher then had to re-encode to
// JSON to decode them faithfully (its Event.Job() and friends go through
// mapstructure and lose fields): 92% of the watcher's time per event.
type rawEvents struct {
	Index  uint64
	Events []rawEvent
}

// rawEvent is api.Event with an undecoded payload.
type rawEvent struct {
	Topic      api.Topic
	Type       string
	Key        string
	FilterKeys []string
	Index      uint64
	Payload    map[string]json.RawMessage
}

// StreamError is Nomad ending the event stream, or refusing it, with an
// error of its own. Nomad's HTTP handler writes it as plain text: as the
// body of a 500 when the stream had not started, or after the last event
// when it had (the 200 was sent already), where the next JSON message was
// expected.
type StreamError struct {
	// Body is Nomad's message, such as "event dropped from buffer" (the
	// daemon fell behind by more than the servers' event_buffer_size).
	Body string
	// Err is the api client's error for a refused stream; nil when the
	// stream had started.
	Err error
}

// Error implements error.
func (e *StreamError) Error() string {
	if e.Err != nil {
		return "Nomad refused the event stream: " + e.Body
	}
	return "Nomad ended the event stream: " + e.Body
}

// Unwrap returns the api client's error, if any.
func (e *StreamError) Unwrap() error { return e.Err }

// streamText returns the plain text Nomad wrote in place of the next
// message of the stream, if what the decoder stopped at is that: words
// (Nomad's errors are sentences), not a broken JSON object. Only what the
// decoder has already read is looked at: Nomad writes its error in one
// piece and closes the stream, while reading on could block on a stream
// that is merely garbled.
func streamText(dec *json.Decoder) (string, bool) {
	b, _ := io.ReadAll(io.LimitReader(dec.Buffered(), 4096))
	text := strings.TrimSpace(string(b))
	if text == "" || !unicode.IsLetter(rune(text[0])) {
		return "", false
	}
	return text, true
}

// Events implements API. It reads /v1/event/stream itself, as the api
// package's EventStream does, but hands each payload object over as its
// json.RawMessage, so DecodePayload decodes it once into the typed struct.
// An error Nomad ends or refuses the stream with is a *StreamError.
func (n *Client) Events(ctx context.Context, index uint64) (_ <-chan *api.Events, err error) {
	defer TraceCall(ctx, VerbEvents, &err)
	params := url.Values{}
	for _, t := range eventTopics {
		params.Add("topic", string(t)+":*")
	}
	params.Set("index", strconv.FormatUint(index, 10))
	q := query(ctx, "*")
	q.Headers = uncompressed()
	body, err := n.c.Raw().Response("/v1/event/stream?"+params.Encode(), q)
	if err != nil {
		var ue api.UnexpectedResponseError
		if errors.As(err, &ue) && ue.StatusCode() >= http.StatusInternalServerError && ue.HasBody() {
			err = &StreamError{Body: ue.Body(), Err: err}
		}
		return nil, fmt.Errorf("subscribing to the event stream from index %d: %w", index, denied(VerbEvents, "*", err))
	}
	ch := make(chan *api.Events, 10)
	go func() {
		defer close(ch)
		defer body.Close()
		dec := json.NewDecoder(body)
		for ctx.Err() == nil {
			var raw rawEvents
			if err := dec.Decode(&raw); err != nil {
				err = fmt.Errorf("reading the event stream: %w", err)
				var syntax *json.SyntaxError
				if text, ok := streamText(dec); ok && errors.As(err, &syntax) {
					// Its text says it all; the decoder's would mislead.
					err = &StreamError{Body: text}
				}
				select {
				case ch <- &api.Events{Err: err}:
				case <-ctx.Done():
				}
				return
			}
			evs := toAPIEvents(&raw)
			if evs.IsHeartbeat() {
				continue
			}
			select {
			case ch <- evs:
			case <-ctx.Done():
				return
			}
		}
	}()
	return ch, nil
}

// toAPIEvents converts a stream message to the api's type, each payload
// object a json.RawMessage.
func toAPIEvents(raw *rawEvents) *api.Events {
	out := &api.Events{Index: raw.Index}
	if len(raw.Events) > 0 {
		out.Events = make([]api.Event, len(raw.Events))
	}
	for i, e := range raw.Events {
		payload := make(map[string]any, len(e.Payload))
		for k, v := range e.Payload {
			payload[k] = v
		}
		out.Events[i] = api.Event{Topic: e.Topic, Type: e.Type, Key: e.Key, FilterKeys: e.FilterKeys, Index: e.Index, Payload: payload}
	}
	return out
}

func deref(s *string) string {
	if s == nil {
		return ""
	}
	return *s
}
