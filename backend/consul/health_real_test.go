//go:build realagents

package consul

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/hashicorp/consul/api"

	"github.com/nomad-statefulset/nomad-statefulset/backend"
	"github.com/nomad-statefulset/nomad-statefulset/internal/testagent"
)

// A real Consul's health of services registered as Nomad registers them
// (service IDs _nomad-task-<alloc ID>-group-<group>-<service>-<port>, each
// check named as the job names it), laid out as DESIGN §3b advises: the
// readiness check "data" on service pg, the leader check "primary" on a
// service of its own, pg-primary. The watcher, over real blocking queries,
// names the leader where "primary" passes and follows it when it moves,
// while the followers' critical "primary" keeps none of them from being
// Ready. A set naming no leader check sees "primary" as an ordinary check.
//
// The checks are TTL checks the test sets, so that the statuses are the
// test's to choose and to flip at once; Consul reports them in the same
// health entries as the script and HTTP checks Nomad registers
// (testdata/README.md).
func TestCheckWatcherRealConsulLeaderCheck(t *testing.T) {
	agent := testagent.Consul(t)
	ctx, cancel := context.WithCancel(context.Background())
	w := NewCheckWatcher(ctx, CheckWatcherConfig{API: NewHealthAPI(agent.Client), Logger: testLogger(t), OnChange: func(backend.SetKey) {}})
	t.Cleanup(func() {
		cancel()
		w.Wait()
	})
	allocs := []string{"0a0a0a0a-0000-4000-8000-000000000000", "1b1b1b1b-1111-4111-8111-111111111111"}
	checkID := func(alloc, name string) string { return "_nomad-check-" + alloc + "-" + name }
	for i, alloc := range allocs {
		primary := api.HealthCritical
		if i == 0 {
			primary = api.HealthPassing
		}
		for _, r := range []*api.AgentServiceRegistration{
			{ID: "_nomad-task-" + alloc + "-group-db-pg-db", Name: "pg", Port: 5432 + i, Tags: []string{fmt.Sprintf("pg-%d", i)},
				Check: &api.AgentServiceCheck{CheckID: checkID(alloc, "data"), Name: "data", TTL: "10m", Status: api.HealthPassing}},
			{ID: "_nomad-task-" + alloc + "-group-db-pg-primary-db", Name: "pg-primary", Port: 5432 + i, Tags: []string{fmt.Sprintf("pg-%d", i)},
				Check: &api.AgentServiceCheck{CheckID: checkID(alloc, "primary"), Name: "primary", TTL: "10m", Status: primary}},
		} {
			if err := agent.Client.Agent().ServiceRegister(r); err != nil {
				t.Fatalf("registering %s: %v", r.ID, err)
			}
		}
	}

	pg := backend.SetKey{Namespace: "default", Name: "pg"}
	plain := backend.SetKey{Namespace: "default", Name: "plain"}
	w.Watch(pg, []string{"pg", "pg-primary"}, "primary")
	w.Watch(plain, []string{"pg-primary"}, "")

	// expect waits until the watcher says of each allocation, to set pg,
	// that it leads as leads says and is not critical; and to set plain
	// that the allocations that do not lead are critical.
	expect := func(step string, leads ...bool) {
		t.Helper()
		testagent.Eventually(t, 30*time.Second, step, func() error {
			for i, alloc := range allocs {
				got, synced := w.Checks(pg, alloc)
				if !synced || !got.Known || got.Critical != "" || got.Leader != leads[i] {
					return fmt.Errorf("set pg, alloc %d: %+v synced %v; want known, not critical, leader %v", i, got, synced, leads[i])
				}
				got, synced = w.Checks(plain, alloc)
				if !synced || got.Leader || (got.Critical != "") == leads[i] {
					return fmt.Errorf("set plain, alloc %d: %+v synced %v; want critical %v, no leader", i, got, synced, !leads[i])
				}
			}
			return nil
		})
	}
	expect("alloc 0 leads", true, false)

	// A switchover: the old primary's check fails, then the new one's
	// passes.
	if err := agent.Client.Agent().UpdateTTL(checkID(allocs[0], "primary"), "replica", api.HealthCritical); err != nil {
		t.Fatal(err)
	}
	if err := agent.Client.Agent().UpdateTTL(checkID(allocs[1], "primary"), "primary", api.HealthPassing); err != nil {
		t.Fatal(err)
	}
	expect("alloc 1 leads", false, true)

	// The new primary's data check failing makes it not Ready; it still
	// leads.
	if err := agent.Client.Agent().UpdateTTL(checkID(allocs[1], "data"), "disk full", api.HealthCritical); err != nil {
		t.Fatal(err)
	}
	testagent.Eventually(t, 30*time.Second, "alloc 1 critical", func() error {
		got, _ := w.Checks(pg, allocs[1])
		if want := `check "data" of service "pg" is critical: disk full`; got.Critical != want || !got.Leader {
			return fmt.Errorf("%+v; want critical %q, leader", got, want)
		}
		return nil
	})
}
