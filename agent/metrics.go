package agent

import (
	"context"
	"strconv"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"

	"github.com/nomad-statefulset/nomad-statefulset/backend"
)

// metrics are the agent's Prometheus series, all prefixed nomad_statefulset_.
type metrics struct {
	reg               *prometheus.Registry
	reconcileDuration prometheus.Histogram
	pods              *prometheus.GaugeVec
	apiCalls          *prometheus.CounterVec
	apiErrors         *prometheus.CounterVec
	leader            prometheus.Gauge
	streamResets      *prometheus.CounterVec
	// calls remembers failing Nomad verbs for /v1/health.
	calls callHealth
}

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
		streamResets: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "nomad_statefulset_nomad_event_stream_resets_total",
			Help: "Times the Nomad event stream was lost and Nomad re-listed, by reason (buffer_overflow: Nomad dropped events the daemon had not read; raise event_buffer_size on the servers).",
		}, []string{"reason"}),
	}
	m.reg.MustRegister(m.reconcileDuration, m.pods, m.apiCalls, m.apiErrors, m.leader, m.streamResets,
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "nomad_statefulset_queue_depth", Help: "Sets waiting to be reconciled.",
		}, queueDepth),
		collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	return m
}

// setPods publishes the pod counts of one set, given the states it
// published last (kept in the set's state), and returns the states now
// published; nil counts remove the set.
func (m *metrics) setPods(key backend.SetKey, prev map[string]bool, counts map[string]int) map[string]bool {
	for state := range prev {
		if _, ok := counts[state]; !ok {
			m.pods.DeleteLabelValues(key.Namespace, key.Name, state)
		}
	}
	if counts == nil {
		return nil
	}
	seen := make(map[string]bool, len(counts))
	for state, n := range counts {
		m.pods.WithLabelValues(key.Namespace, key.Name, state).Set(float64(n))
		seen[state] = true
	}
	return seen
}

// observeNomadCall counts one Nomad call made on the agent's behalf, by
// verb and whether it writes (backend.Cluster's WriteVerb), and remembers
// its outcome for /v1/health. It is the backend.CallTrace of the agent's
// context: the implementations of backend/nomad.API report their calls,
// so a verb added to the API is counted with no change here.
func (m *metrics) observeNomadCall(_ context.Context, verb string, write bool, err error) {
	m.apiCalls.WithLabelValues(verb, strconv.FormatBool(write)).Inc()
	m.calls.observe(verb, err, time.Now())
	if err != nil && !backend.IsNotFound(err) {
		m.apiErrors.WithLabelValues(verb).Inc()
	}
}

// streamReset counts one loss of the Nomad event stream, by the watcher's
// reason for it.
func (m *metrics) streamReset(reason string) {
	m.streamResets.WithLabelValues(reason).Inc()
}
