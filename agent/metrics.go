package agent

import (
	"context"
	"sync"
	"time"

	"github.com/hashicorp/nomad/api"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"

	"github.com/nomad-statefulset/nomad-statefulset/backend"
	"github.com/nomad-statefulset/nomad-statefulset/backend/nomad"
)

// metrics are the agent's Prometheus series, all prefixed nomad_statefulset_.
type metrics struct {
	reg               *prometheus.Registry
	reconcileDuration prometheus.Histogram
	pods              *prometheus.GaugeVec
	apiCalls          *prometheus.CounterVec
	apiErrors         *prometheus.CounterVec
	leader            prometheus.Gauge
	// calls remembers failing Nomad verbs for /v1/health.
	calls callHealth

	mu      sync.Mutex
	podKeys map[backend.SetKey]map[string]bool
}

// nomadWriteVerbs are the API verbs that change Nomad; steady state must make
// none of them.
var nomadWriteVerbs = map[string]bool{"RegisterJob": true, "DeregisterJob": true, "CreateHostVolume": true, "DeleteHostVolume": true, "EvaluateJob": true}

func newMetrics(queueDepth func() float64) *metrics {
	m := &metrics{
		reg: prometheus.NewRegistry(),
		reconcileDuration: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name: "nomad_statefulset_reconcile_duration_seconds", Help: "Time to reconcile one set once.",
			Buckets: []float64{.0005, .001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5},
		}),
		pods: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "nomad_statefulset_pods", Help: "Pods by state for each set.",
		}, []string{"namespace", "set", "state"}),
		apiCalls: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "nomad_statefulset_nomad_api_calls_total", Help: "Nomad API calls by verb.",
		}, []string{"verb", "write"}),
		apiErrors: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "nomad_statefulset_nomad_api_errors_total", Help: "Failed Nomad API calls by verb.",
		}, []string{"verb"}),
		leader: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "nomad_statefulset_leader", Help: "1 while this agent is the leader.",
		}),
		podKeys: map[backend.SetKey]map[string]bool{},
	}
	m.reg.MustRegister(m.reconcileDuration, m.pods, m.apiCalls, m.apiErrors, m.leader,
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "nomad_statefulset_queue_depth", Help: "Sets waiting to be reconciled.",
		}, queueDepth),
		collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	return m
}

// setPods publishes the pod counts of one set; nil counts remove the set.
func (m *metrics) setPods(key backend.SetKey, counts map[string]int) {
	m.mu.Lock()
	defer m.mu.Unlock()
	for state := range m.podKeys[key] {
		if _, ok := counts[state]; !ok {
			m.pods.DeleteLabelValues(key.Namespace, key.Name, state)
		}
	}
	if counts == nil {
		delete(m.podKeys, key)
		return
	}
	seen := map[string]bool{}
	for state, n := range counts {
		m.pods.WithLabelValues(key.Namespace, key.Name, state).Set(float64(n))
		seen[state] = true
	}
	m.podKeys[key] = seen
}

// instrumented wraps a nomad.API and counts calls and errors by verb.
type instrumented struct {
	inner nomad.API
	m     *metrics
}

func (i instrumented) count(verb string, err error) {
	w := "false"
	if nomadWriteVerbs[verb] {
		w = "true"
	}
	i.m.apiCalls.WithLabelValues(verb, w).Inc()
	i.m.calls.observe(verb, err, time.Now())
	if err != nil && !nomad.IsNotFound(err) {
		i.m.apiErrors.WithLabelValues(verb).Inc()
	}
}

func (i instrumented) ListJobs(ctx context.Context, ns string) ([]*api.JobListStub, uint64, error) {
	a, b, err := i.inner.ListJobs(ctx, ns)
	i.count("ListJobs", err)
	return a, b, err
}

func (i instrumented) GetJob(ctx context.Context, ns, id string) (*api.Job, error) {
	a, err := i.inner.GetJob(ctx, ns, id)
	i.count("GetJob", err)
	return a, err
}

func (i instrumented) RegisterJob(ctx context.Context, job *api.Job, enforce bool, idx uint64) (*api.JobRegisterResponse, error) {
	a, err := i.inner.RegisterJob(ctx, job, enforce, idx)
	i.count("RegisterJob", err)
	return a, err
}

func (i instrumented) DeregisterJob(ctx context.Context, ns, id string, purge bool) error {
	err := i.inner.DeregisterJob(ctx, ns, id, purge)
	i.count("DeregisterJob", err)
	return err
}

func (i instrumented) ListAllocations(ctx context.Context, ns string) ([]*api.AllocationListStub, error) {
	a, err := i.inner.ListAllocations(ctx, ns)
	i.count("ListAllocations", err)
	return a, err
}

func (i instrumented) CreateHostVolume(ctx context.Context, v *api.HostVolume) (*api.HostVolume, error) {
	a, err := i.inner.CreateHostVolume(ctx, v)
	i.count("CreateHostVolume", err)
	return a, err
}

func (i instrumented) ListHostVolumes(ctx context.Context, ns, prefix string) ([]*api.HostVolumeStub, error) {
	a, err := i.inner.ListHostVolumes(ctx, ns, prefix)
	i.count("ListHostVolumes", err)
	return a, err
}

func (i instrumented) DeleteHostVolume(ctx context.Context, ns, id string) error {
	err := i.inner.DeleteHostVolume(ctx, ns, id)
	i.count("DeleteHostVolume", err)
	return err
}

func (i instrumented) EvaluateJob(ctx context.Context, ns, id string) error {
	err := i.inner.EvaluateJob(ctx, ns, id)
	i.count("EvaluateJob", err)
	return err
}

func (i instrumented) GetNode(ctx context.Context, id string) (*api.Node, error) {
	a, err := i.inner.GetNode(ctx, id)
	i.count("GetNode", err)
	return a, err
}

func (i instrumented) ListNodes(ctx context.Context) ([]*api.NodeListStub, error) {
	a, err := i.inner.ListNodes(ctx)
	i.count("ListNodes", err)
	return a, err
}

func (i instrumented) Events(ctx context.Context, index uint64) (<-chan *api.Events, error) {
	a, err := i.inner.Events(ctx, index)
	i.count("Events", err)
	return a, err
}
