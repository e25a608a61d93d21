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
	for _, reason := range backend.StreamResetReasons {
		// At 0 from the start: increase() over a series that first
		// appears at 1 sees no increase, and the first loss would raise
		// no alert.
		m.streamResets.WithLabelValues(reason)
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

// Per-set series, read from the sets' views at each scrape (setCollector).
// Their names follow kube-state-metrics' kube_statefulset_* so that the
// kubernetes-mixin alerts translate one for one; every one carries the
// labels namespace and set, and the reference (docs/monitoring.md) lists
// them with their label values.
var (
	descReplicas = prometheus.NewDesc("nomad_statefulset_replicas",
		"Desired replicas (statefulset_replicas).", []string{"namespace", "set"}, nil)
	descStatusReplicas = prometheus.NewDesc("nomad_statefulset_status_replicas",
		"Pods the set has (children of a valid ordinal, terminating ones too).", []string{"namespace", "set"}, nil)
	descReady = prometheus.NewDesc("nomad_statefulset_status_replicas_ready",
		"Pods Running and Ready.", []string{"namespace", "set"}, nil)
	descAvailable = prometheus.NewDesc("nomad_statefulset_status_replicas_available",
		"Pods Ready for statefulset_min_ready_seconds.", []string{"namespace", "set"}, nil)
	descUpdated = prometheus.NewDesc("nomad_statefulset_status_replicas_updated",
		"Pods at the update revision.", []string{"namespace", "set"}, nil)
	descCurrent = prometheus.NewDesc("nomad_statefulset_status_replicas_current",
		"Pods at the current revision.", []string{"namespace", "set"}, nil)
	descCurrentRevision = prometheus.NewDesc("nomad_statefulset_status_current_revision",
		"1 for the set's current revision.", []string{"namespace", "set", "revision"}, nil)
	descUpdateRevision = prometheus.NewDesc("nomad_statefulset_status_update_revision",
		"1 for the set's update revision.", []string{"namespace", "set", "revision"}, nil)
	descCondition = prometheus.NewDesc("nomad_statefulset_status_condition",
		"1 for each condition of the set, with its status (true, false) and reason.", []string{"namespace", "set", "type", "status", "reason"}, nil)
	descLeaderOrdinal = prometheus.NewDesc("nomad_statefulset_leader_ordinal",
		"The ordinal of the pod whose leader check passes; -1 while none does. Only for sets with statefulset_leader_check.", []string{"namespace", "set"}, nil)
	descRolloutAge = prometheus.NewDesc("nomad_statefulset_rollout_age_seconds",
		"Seconds since this leader saw the set's rollout to its update revision begin; 0 while no rollout is under way.", []string{"namespace", "set"}, nil)
)

// setCollector publishes the per-set series from views, which returns
// every set's metrics at the moment of a scrape.
type setCollector struct {
	views func() []setMetrics
	now   func() time.Time
}

// Describe implements prometheus.Collector.
func (c setCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{descReplicas, descStatusReplicas, descReady, descAvailable, descUpdated, descCurrent,
		descCurrentRevision, descUpdateRevision, descCondition, descLeaderOrdinal, descRolloutAge} {
		ch <- d
	}
}

// Collect implements prometheus.Collector.
func (c setCollector) Collect(ch chan<- prometheus.Metric) {
	now := c.now()
	gauge := func(d *prometheus.Desc, v float64, labels ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, v, labels...)
	}
	for _, m := range c.views() {
		ns, set := m.key.Namespace, m.key.Name
		st := m.status
		gauge(descReplicas, float64(m.desired), ns, set)
		gauge(descStatusReplicas, float64(st.Replicas), ns, set)
		gauge(descReady, float64(st.ReadyReplicas), ns, set)
		gauge(descAvailable, float64(st.AvailableReplicas), ns, set)
		gauge(descUpdated, float64(st.UpdatedReplicas), ns, set)
		gauge(descCurrent, float64(st.CurrentReplicas), ns, set)
		if st.CurrentRevision != "" {
			gauge(descCurrentRevision, 1, ns, set, st.CurrentRevision)
		}
		if st.UpdateRevision != "" {
			gauge(descUpdateRevision, 1, ns, set, st.UpdateRevision)
		}
		for _, cond := range st.Conditions {
			gauge(descCondition, 1, ns, set, cond.Type, strconv.FormatBool(cond.Status), cond.Reason)
		}
		if m.hasCheck {
			gauge(descLeaderOrdinal, float64(m.leader), ns, set)
		}
		age := 0.0
		if !m.rollout.IsZero() {
			age = now.Sub(m.rollout).Seconds()
		}
		gauge(descRolloutAge, age, ns, set)
	}
}
