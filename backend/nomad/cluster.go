package nomad

import (
	"context"
	"errors"
	"fmt"

	"github.com/hashicorp/go-hclog"

	"github.com/nomad-statefulset/nomad-statefulset/backend"
	"github.com/nomad-statefulset/nomad-statefulset/jobs"
	"github.com/nomad-statefulset/nomad-statefulset/jobs/specdigest"
	"github.com/nomad-statefulset/nomad-statefulset/reconciler"
)

// Cluster is backend.Cluster over an API: the agent's view of Nomad. It
// renders and edits jobs with jobs/ and calls Nomad through the API, so the
// agent handles none of Nomad's types. Its one state is the StreamPacer
// its writes wait on, which outlives leadership terms (its counters are
// the agent's metrics); a term's state is in the Term it returns.
type Cluster struct {
	// api is unpaced behind pacer: the API the cluster calls.
	api, unpaced API
	pacer        *StreamPacer
}

var _ backend.Cluster = (*Cluster)(nil)

// ClusterOption configures a Cluster.
type ClusterOption func(*clusterOptions)

type clusterOptions struct {
	eventBufferSize int
	log             hclog.Logger
}

// WithEventBufferSize tells the cluster the servers' event_buffer_size,
// which the daemon's writes pace themselves by (StreamPacer); Nomad's
// default, DefaultEventBufferSize, when not given.
func WithEventBufferSize(n int) ClusterOption {
	return func(o *clusterOptions) { o.eventBufferSize = n }
}

// WithLogger gives the cluster a logger for what its writes wait for: the
// watcher's, as holds concern the event stream.
func WithLogger(log hclog.Logger) ClusterOption {
	return func(o *clusterOptions) { o.log = log }
}

// NewCluster returns the agent's view of the Nomad behind a. Its writes
// wait for the event stream when it trails them (StreamPacer).
func NewCluster(a API, opts ...ClusterOption) *Cluster {
	var o clusterOptions
	for _, opt := range opts {
		opt(&o)
	}
	pacer := NewStreamPacer(o.eventBufferSize)
	if o.log != nil {
		pacer.log = o.log
	}
	return &Cluster{api: newPacedAPI(a, pacer), unpaced: a, pacer: pacer}
}

// API returns the API the cluster calls, its writes paced, for what is
// wired beside the agent (the built-in host volume provisioner).
func (c *Cluster) API() API { return c.api }

// Unpaced returns the API the cluster was made with, its writes not
// paced: for wrapping in another API (a fault injector) and a new Cluster.
func (c *Cluster) Unpaced() API { return c.unpaced }

// WritePacing implements backend.Cluster from the cluster's StreamPacer.
func (c *Cluster) WritePacing() backend.WritePacing {
	holds, held := c.pacer.Holds()
	return backend.WritePacing{Holds: holds, Held: held, MaxBehind: c.pacer.MaxBehind()}
}

// RegisterChild implements backend.Children.
func (c *Cluster) RegisterChild(ctx context.Context, spec reconciler.Spec, rev reconciler.Revision, ordinal int, spread *backend.Spread, index uint64) (backend.Registration, error) {
	child, err := jobs.RenderChild(spec, rev, ordinal)
	if err != nil {
		return backend.Registration{}, fmt.Errorf("rendering child %s: %w", reconciler.PodName(spec.Name, ordinal), err)
	}
	if spread != nil {
		jobs.SpreadChild(child, spread.Attr, spread.Required, spread.Used)
	}
	rendered, err := jobs.RecordRendering(child)
	if err != nil {
		return backend.Registration{}, err
	}
	resp, err := c.api.RegisterJob(ctx, child, true, index)
	if err != nil {
		if IsConflict(err) {
			return backend.Registration{}, fmt.Errorf("%s changed since it was observed: %w", *child.ID, backend.ErrConflict)
		}
		return backend.Registration{}, err
	}
	reg := backend.Registration{JobModifyIndex: resp.JobModifyIndex}
	// RenderChild gives every child a spread record; a child without one
	// would be rendered as one registered before the record existed, so
	// its digest is left for the agent to render.
	if record, ok := child.Meta[jobs.MetaSpreadAvoid]; ok {
		reg.Rendered, reg.SpreadRecord = rendered, record
	}
	return reg, nil
}

// DeregisterChild implements backend.Children.
func (c *Cluster) DeregisterChild(ctx context.Context, namespace, id string, purge bool) error {
	return c.api.DeregisterJob(ctx, namespace, id, purge)
}

// RestoreCount implements backend.Children. It reads the child whole
// (the cache keeps only its compact record) and registers it again with
// only the count changed, so Nomad stops only the extra allocations.
func (c *Cluster) RestoreCount(ctx context.Context, namespace, id string, observed uint64) (uint64, error) {
	job, err := c.api.GetJob(ctx, namespace, id)
	if err != nil {
		return 0, fmt.Errorf("reading %s: %w", id, err)
	}
	if _, idx := jobs.Version(job); idx != observed || !jobs.RestoreCount(job) {
		// The cache is behind Nomad: the event that says so is on its way.
		return 0, nil
	}
	resp, err := c.api.RegisterJob(ctx, job, true, observed)
	if err != nil {
		return 0, fmt.Errorf("re-registering %s at count 1: %w", id, err)
	}
	return resp.JobModifyIndex, nil
}

// EvaluateChild implements backend.Children.
func (c *Cluster) EvaluateChild(ctx context.Context, namespace, id string) error {
	if err := c.api.EvaluateJob(ctx, namespace, id); err != nil && !errors.Is(err, ErrNotFound) {
		return fmt.Errorf("asking Nomad to place %s again: %w", id, err)
	}
	return nil
}

// NodeValue implements backend.Cluster with one GetNode.
func (c *Cluster) NodeValue(ctx context.Context, nodeID, attr string) (string, error) {
	n, err := c.api.GetNode(ctx, nodeID)
	if err != nil {
		return "", err
	}
	return NodeValue(n, attr), nil
}

// Exec implements backend.Cluster with ExecAlloc.
func (c *Cluster) Exec(ctx context.Context, namespace, nodeID, allocID, task string, command []string, env map[string]string) (backend.ExecResult, error) {
	return c.api.ExecAlloc(ctx, namespace, nodeID, allocID, task, command, env)
}

// RenderedDigest implements backend.Cluster (jobs.RenderedDigest).
func (c *Cluster) RenderedDigest(spec reconciler.Spec, rev reconciler.Revision, ordinal int, spread string, recorded bool) (specdigest.Digest, error) {
	return jobs.RenderedDigest(spec, rev, ordinal, spread, recorded)
}

// WriteVerb implements backend.Cluster from Verbs.
func (c *Cluster) WriteVerb(verb string) bool { return Verbs[verb].Write }

// NewTerm implements backend.Cluster: a fresh Cache and the Watcher that
// fills it.
func (c *Cluster) NewTerm(cfg backend.TermConfig, log hclog.Logger, onChange func(backend.SetKey)) backend.Term {
	cache := NewCache()
	w := NewWatcher(c.api, cache, WatcherConfig{ResyncInterval: cfg.ResyncInterval, Clock: cfg.Clock, OnReset: cfg.OnReset, OnRelist: cfg.OnRelist, Pacer: c.pacer}, log, onChange)
	return &Term{Cache: cache, Watcher: w}
}

// NewLeaderChecks implements backend.Cluster with a NativeCheckWatcher.
func (c *Cluster) NewLeaderChecks(ctx context.Context, log hclog.Logger, onChange func(backend.SetKey)) backend.LeaderChecks {
	return NewNativeCheckWatcher(ctx, NativeCheckWatcherConfig{API: c.api, Logger: log, OnChange: onChange})
}

// Term is backend.Term: one leadership term's Cache and the Watcher that
// keeps it.
type Term struct {
	*Cache
	*Watcher
}

var _ backend.Term = (*Term)(nil)
