package agent

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/nomad/api"

	"github.com/nomad-statefulset/nomad-statefulset/backend/nomad"
	"github.com/nomad-statefulset/nomad-statefulset/reconciler"
)

// takedowns records the children the agent stops, in order.
type takedowns struct {
	nomad.API
	mu      sync.Mutex
	stopped []string
}

func (t *takedowns) DeregisterJob(ctx context.Context, namespace, id string, purge bool) error {
	t.mu.Lock()
	t.stopped = append(t.stopped, id)
	t.mu.Unlock()
	return t.API.DeregisterJob(ctx, namespace, id, purge)
}

func (t *takedowns) order() []string {
	t.mu.Lock()
	defer t.mu.Unlock()
	return slices.Clone(t.stopped)
}

// nativeLeaderJob is a set whose leader check "primary" is on a service of
// its own with provider = "nomad": Nomad's client runs it, and keeps its
// results. on_update = "ignore": a follower's failing "primary" must not
// make Nomad judge it unhealthy.
func nativeLeaderJob(name string, meta map[string]string, image string) *api.Job {
	m := map[string]string{"statefulset_replicas": "3", "statefulset_leader_check": "primary"}
	for k, v := range meta {
		m[k] = v
	}
	j := parentJob(name, m, image)
	j.TaskGroups[0].Services = []*api.Service{{
		Name: name + "-primary", Provider: "nomad", PortLabel: "db",
		Checks: []api.ServiceCheck{{Name: "primary", Type: "http", Path: "/primary", Interval: time.Second, Timeout: time.Second, OnUpdate: "ignore"}},
	}}
	return j
}

// setLeader sets the Nomad-native checks of the set's running allocations:
// "primary" passes on ordinal leader alone (-1: on none).
func (h *harness) setLeader(set string, leader int) {
	h.t.Helper()
	for o := 0; o < 3; o++ {
		for _, a := range h.sim.Allocs("default", reconciler.PodName(set, o)) {
			if a.ClientStatus != api.AllocClientStatusRunning {
				continue
			}
			if err := h.sim.SetAllocChecks(a.ID, map[string]bool{"primary": o == leader}); err != nil {
				h.t.Fatal(err)
			}
		}
	}
}

// waitLeader waits until the set's view shows ordinal leader as its one
// leader (-1: none).
func (h *harness) waitLeader(set string, leader int) {
	h.t.Helper()
	h.waitFor(fmt.Sprintf("%s's leader to be %d", set, leader), 20*time.Second, func() (bool, string) {
		var leads []int
		for _, p := range h.view(set).Pods {
			if p.Leader {
				leads = append(leads, p.Ordinal)
			}
		}
		want := []int{leader}
		if leader < 0 {
			want = nil
		}
		return slices.Equal(leads, want), fmt.Sprint("leaders ", leads)
	})
}

// startNativeLeaderSet runs an agent whose stops are recorded, with set pg
// of nativeLeaderJob converged at v1.
func startNativeLeaderSet(t *testing.T) (*harness, *takedowns) {
	t.Helper()
	var rec *takedowns
	h := startAgentWith(t, fastSim(), func(o *Options) {
		wrapNomad(o, func(api nomad.API) nomad.API {
			rec = &takedowns{API: api}
			return rec
		})
	})
	h.register(nativeLeaderJob("pg", nil, "v1"))
	h.waitConverged("pg", 3, nil)
	return h, rec
}

// TestNativeLeaderCheckOnSimulatedNomad: a leader check on a provider =
// "nomad" service is read from Nomad's own check results (AllocChecks),
// without Consul: the pod where it passes is shown as the leader, a
// failover is followed, and a rolling update takes the others down first,
// highest ordinal first, and the leader last. The leader check never
// makes a follower not Ready.
func TestNativeLeaderCheckOnSimulatedNomad(t *testing.T) {
	h, rec := startNativeLeaderSet(t)
	h.setLeader("pg", 2)
	h.waitLeader("pg", 2)
	// The database fails over by itself: the leader follows.
	h.setLeader("pg", 1)
	h.waitLeader("pg", 1)
	for _, p := range h.view("pg").Pods {
		if p.ReadySince.IsZero() || p.NotReady != "" {
			t.Fatalf("pod %d is not Ready (%s, %q): the leader check counted against readiness", p.Ordinal, p.State, p.NotReady)
		}
	}
	first := h.healthyChildren("pg")[0]
	h.register(nativeLeaderJob("pg", nil, "v2"))
	h.waitConverged("pg", 3, func(rev string) bool { return rev != first })
	if got, want := rec.order(), []string{"pg-2", "pg-0", "pg-1"}; !slices.Equal(got, want) {
		t.Fatalf("children stopped in the order %v, want %v: the leader (pg-1) last", got, want)
	}
	if reads := h.term().native.(*nomad.NativeCheckWatcher).Reads(); reads == 0 {
		t.Fatal("the native leader check was never read")
	}
}

// TestNativeLeaderUnknownUntilRead: until every live pod's native leader
// check has been read, the leader is unknown and no Ready pod is taken
// down for a rollout (any may lead); once Nomad answers, the rollout goes
// on, leader last.
func TestNativeLeaderUnknownUntilRead(t *testing.T) {
	h, rec := startNativeLeaderSet(t)
	h.setLeader("pg", 0)
	h.waitLeader("pg", 0)
	first := h.healthyChildren("pg")[0]
	// Nomad's client cannot be reached for the checks: nothing is read.
	h.sim.FailVerb(nomad.VerbAllocChecks, 1<<30, fmt.Errorf("Unexpected response code: 500 (no path to node)"))
	// A new pod's checks are not read yet: replace pg-2 by hand, so the set
	// has a live allocation the watcher never read.
	h.sim.StopAlloc(h.sim.Allocs("default", "pg-2")[0].ID)
	h.waitFor("pg-2 to come back", 20*time.Second, func() (bool, string) {
		return h.healthyChildren("pg")[2] != "" && len(h.sim.Allocs("default", "pg-2")) > 1, fmt.Sprint(h.healthyChildren("pg"))
	})
	// ...and the agent to have seen it Ready: a pod it has not seen Ready
	// yet is unavailable, and a rollout may take it down first whoever
	// leads, as upstream's does.
	var back string
	for _, a := range h.sim.Allocs("default", "pg-2") {
		if a.ClientStatus == api.AllocClientStatusRunning {
			back = a.ID
		}
	}
	h.waitFor("the agent to see pg-2 Ready again", 20*time.Second, func() (bool, string) {
		for _, p := range h.view("pg").Pods {
			if p.Ordinal == 2 {
				return p.AllocID == back && !p.ReadySince.IsZero(), fmt.Sprintf("%+v", p)
			}
		}
		return false, "no pod 2"
	})
	// Only the rollout's stops count: when the agent sees the stopped
	// allocation of pg-2 before Nomad replaces it, it repairs the pod
	// (a Succeeded pod is stopped and created again, as upstream deletes
	// and recreates it), which is not a takedown for the rollout.
	repairs := len(rec.order())
	h.register(nativeLeaderJob("pg", nil, "v2"))
	h.waitFor("the rollout to wait to learn the leader", 20*time.Second, func() (bool, string) {
		d := h.view("pg")
		for _, c := range d.Status.Conditions {
			if strings.Contains(c.Message, "to learn which pod leads") {
				return true, ""
			}
		}
		return false, fmt.Sprintf("%+v", d.Status.Conditions)
	})
	if got := rec.order()[repairs:]; len(got) != 0 {
		t.Fatalf("children %v stopped while the leader was unknown", got)
	}
	h.sim.ClearFaults()
	h.waitConverged("pg", 3, func(rev string) bool { return rev != first })
	if got, want := rec.order()[repairs:], []string{"pg-2", "pg-1", "pg-0"}; !slices.Equal(got, want) {
		t.Fatalf("children stopped in the order %v, want %v: the leader (pg-0) last", got, want)
	}
}
