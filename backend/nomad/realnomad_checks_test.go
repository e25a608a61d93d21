//go:build realagents

package nomad_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/hashicorp/nomad/api"

	"github.com/nomad-statefulset/nomad-statefulset/backend"
	"github.com/nomad-statefulset/nomad-statefulset/backend/nomad"
	"github.com/nomad-statefulset/nomad-statefulset/internal/testagent"
)

// leaderJob is a job run by the exec driver with a provider = "nomad"
// service whose check "primary" asks the agent's own HTTP API for the
// Nomad variable "leader": it passes (200) while the variable exists and
// fails (404) once it is gone, so the test moves leadership by writing
// and deleting it. on_update = "ignore", as a leader check needs: a
// follower's failing check must not make Nomad judge it unhealthy.
func leaderJob(id string, agentPort int) *api.Job {
	return &api.Job{
		ID: ptr(id), Name: ptr(id), Namespace: ptr("default"), Type: ptr("service"), Datacenters: []string{"dc1"},
		TaskGroups: []*api.TaskGroup{{
			Name:     ptr("db"),
			Count:    ptr(1),
			Networks: []*api.NetworkResource{{ReservedPorts: []api.Port{{Label: "agent", Value: agentPort}}}},
			Services: []*api.Service{{
				Name: id + "-primary", Provider: "nomad", PortLabel: "agent",
				Checks: []api.ServiceCheck{{Name: "primary", Type: "http", Path: "/v1/var/leader",
					Interval: time.Second, Timeout: time.Second, OnUpdate: "ignore"}},
			}},
			Tasks: []*api.Task{{
				Name:      "main",
				Driver:    "exec",
				Config:    map[string]any{"command": "/bin/sleep", "args": []string{"3600"}},
				Resources: &api.Resources{CPU: ptr(20), MemoryMB: ptr(32)},
			}},
		}},
	}
}

// runningAlloc waits for the job's allocation to run its task "main", and
// returns its ID and node.
func runningAlloc(t *testing.T, n *testagent.NomadAgent, job string) (allocID, nodeID string) {
	t.Helper()
	testagent.Eventually(t, 2*time.Minute, job+"'s task to run", func() error {
		allocs, _, err := n.Client.Jobs().Allocations(job, false, nil)
		if err != nil {
			return err
		}
		for _, a := range allocs {
			if ts := a.TaskStates["main"]; a.ClientStatus == api.AllocClientStatusRunning && ts != nil && ts.State == "running" {
				allocID, nodeID = a.ID, a.NodeID
				return nil
			}
		}
		return fmt.Errorf("allocations %d, none running", len(allocs))
	})
	return allocID, nodeID
}

// TestRealNomadNativeLeaderCheck runs the NativeCheckWatcher against a real
// Nomad agent whose client runs a provider = "nomad" check: the watcher
// reads the allocation's check results (not leading while the check
// fails), sees the check pass once the application says so, queues the
// set, and sees it fail again.
func TestRealNomadNativeLeaderCheck(t *testing.T) {
	n := testagent.Nomad(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	client := nomad.NewAPI(n.Client)
	if _, err := client.RegisterJob(ctx, leaderJob("native-leader", n.HTTPPort), false, 0); err != nil {
		t.Fatal(err)
	}
	allocID, _ := runningAlloc(t, n, "native-leader")

	changes := make(chan backend.SetKey, 100)
	w := nomad.NewNativeCheckWatcher(ctx, nomad.NativeCheckWatcherConfig{
		API: client, OnChange: func(k backend.SetKey) { changes <- k },
	})
	defer w.Wait()
	defer cancel()
	key := backend.SetKey{Namespace: "default", Name: "native-leader"}
	w.Watch(key, "primary", time.Second, []string{allocID})
	leads := func(want bool) func() error {
		return func() error {
			if l, read := w.Leader(key, allocID); !read || l != want {
				return fmt.Errorf("leads %v, read %v", l, read)
			}
			return nil
		}
	}
	testagent.Eventually(t, time.Minute, "the check to be read, failing", leads(false))
	for len(changes) > 0 {
		<-changes
	}

	if _, _, err := n.Client.Variables().Create(&api.Variable{Path: "leader", Items: api.VariableItems{"pod": "native-leader-0"}}, nil); err != nil {
		t.Fatal(err)
	}
	testagent.Eventually(t, time.Minute, "the check to pass: the pod leads", leads(true))
	select {
	case k := <-changes:
		if k != key {
			t.Fatalf("queued %v, want %v", k, key)
		}
	default:
		t.Fatal("the set was not queued when its pod started leading")
	}

	if _, err := n.Client.Variables().Delete("leader", nil); err != nil {
		t.Fatal(err)
	}
	testagent.Eventually(t, time.Minute, "the check to fail again: the pod no longer leads", leads(false))
}
