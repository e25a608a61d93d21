package agent

import (
	"context"
	"fmt"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/nomad-statefulset/nomad-statefulset/reconciler"
)

// series returns the samples of the registry's families named name, each
// as "label=value,…=value" → value, labels sorted.
func series(t *testing.T, reg *prometheus.Registry, name string) map[string]float64 {
	t.Helper()
	fams, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]float64{}
	for _, f := range fams {
		if f.GetName() != name {
			continue
		}
		for _, m := range f.GetMetric() {
			var labels []string
			for _, l := range m.GetLabel() {
				labels = append(labels, l.GetName()+"="+l.GetValue())
			}
			sort.Strings(labels)
			out[strings.Join(labels, ",")] = m.GetGauge().GetValue()
		}
	}
	return out
}

// The per-set series say what kube-state-metrics says of a StatefulSet,
// follow a rollout, and disappear with their set.
func TestSetMetricsFollowTheSet(t *testing.T) {
	h := startAgent(t, fastSim())
	reg := h.agent.metrics.reg
	h.register(parentJob("m", map[string]string{"statefulset_replicas": "2"}, "v1"))
	h.waitConverged("m", 2, nil)
	set := "namespace=default,set=m"
	want := map[string]float64{
		"nomad_statefulset_replicas": 2, "nomad_statefulset_status_replicas": 2, "nomad_statefulset_status_replicas_ready": 2,
		"nomad_statefulset_status_replicas_available": 2, "nomad_statefulset_status_replicas_updated": 2,
		"nomad_statefulset_status_replicas_current": 2, "nomad_statefulset_rollout_age_seconds": 0,
	}
	h.waitFor("the view to show the converged set", 10*time.Second, func() (bool, string) {
		for name, v := range want {
			if got, ok := series(t, reg, name)[set]; !ok || got != v {
				return false, fmt.Sprintf("%s{%s} = %v (present %v), want %v", name, set, got, ok, v)
			}
		}
		return true, ""
	})
	cur := series(t, reg, "nomad_statefulset_status_current_revision")
	upd := series(t, reg, "nomad_statefulset_status_update_revision")
	if len(cur) != 1 || len(upd) != 1 || fmt.Sprint(cur) != fmt.Sprint(upd) {
		t.Fatalf("revisions: current %v, update %v; want the one revision in both", cur, upd)
	}
	conds := series(t, reg, "nomad_statefulset_status_condition")
	if conds["namespace=default,reason="+reconciler.ReasonComplete+",set=m,status=false,type=Progressing"] != 1 ||
		conds["namespace=default,reason="+reconciler.ReasonReplicasAvailable+",set=m,status=true,type=Available"] != 1 {
		t.Fatalf("conditions of a converged set: %v", conds)
	}
	if _, ok := series(t, reg, "nomad_statefulset_leader_ordinal")[set]; ok {
		t.Fatalf("a set without a leader check has a leader ordinal")
	}

	// A rollout that waits: paused, with a new template.
	h.register(parentJob("m", map[string]string{"statefulset_replicas": "2", "statefulset_paused": "true"}, "v2"))
	h.waitFor("the rollout's age to show", 10*time.Second, func() (bool, string) {
		upd := series(t, reg, "nomad_statefulset_status_update_revision")
		cur := series(t, reg, "nomad_statefulset_status_current_revision")
		age := series(t, reg, "nomad_statefulset_rollout_age_seconds")[set]
		return fmt.Sprint(upd) != fmt.Sprint(cur) && age > 0, fmt.Sprintf("current %v update %v age %v", cur, upd, age)
	})

	// Deleted: every series of the set goes.
	if err := h.sim.DeregisterJob(context.Background(), "default", "m", true); err != nil {
		t.Fatal(err)
	}
	h.waitFor("the set's series to go", 20*time.Second, func() (bool, string) {
		for _, name := range []string{"nomad_statefulset_replicas", "nomad_statefulset_status_condition", "nomad_statefulset_status_current_revision"} {
			if s := series(t, reg, name); len(s) > 0 {
				return false, fmt.Sprintf("%s: %v", name, s)
			}
		}
		return true, ""
	})
}

// The leader's ordinal is published only for a set that declares a leader
// check, as -1 while no pod leads.
func TestLeaderOrdinalMetric(t *testing.T) {
	for _, tc := range []struct {
		name   string
		m      setMetrics
		want   float64
		absent bool
	}{
		{"no leader check", setMetrics{leader: -1}, 0, true},
		{"leading", setMetrics{hasCheck: true, leader: 2}, 2, false},
		{"nobody leads", setMetrics{hasCheck: true, leader: -1}, -1, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tc.m.key.Namespace, tc.m.key.Name = "default", "db"
			reg := prometheus.NewRegistry()
			reg.MustRegister(setCollector{views: func() []setMetrics { return []setMetrics{tc.m} }, now: time.Now})
			got, ok := series(t, reg, "nomad_statefulset_leader_ordinal")["namespace=default,set=db"]
			if ok == tc.absent || got != tc.want {
				t.Fatalf("leader ordinal %v (present %v), want %v (absent %v)", got, ok, tc.want, tc.absent)
			}
		})
	}
}
