package nomad

import (
	"testing"
	"time"

	"github.com/hashicorp/nomad/api"

	"github.com/nomad-statefulset/nomad-statefulset/backend"
	"github.com/nomad-statefulset/nomad-statefulset/reconciler"
)

// lifecycleChild is a child whose group has a main task "app", a sidecar
// "proxy", a prestart task "init", a poststart task "warm" and a poststop
// task "flush".
func lifecycleChild() *api.Job {
	j := childJob("web", "0", "web-abc", false, 7)
	j.TaskGroups[0].Tasks = []*api.Task{
		{Name: "app"},
		{Name: "proxy", Lifecycle: &api.TaskLifecycle{Hook: api.TaskLifecycleHookPrestart, Sidecar: true}},
		{Name: "init", Lifecycle: &api.TaskLifecycle{Hook: api.TaskLifecycleHookPrestart}},
		{Name: "warm", Lifecycle: &api.TaskLifecycle{Hook: api.TaskLifecycleHookPoststart}},
		{Name: "flush", Lifecycle: &api.TaskLifecycle{Hook: api.TaskLifecycleHookPoststop}},
	}
	return j
}

// Readiness follows the task states once Nomad judged the allocation's
// health, as DESIGN §2 says: a restarting or dead task makes the pod not
// Ready at once, finished lifecycle tasks and poststop tasks do not count,
// a pod that missed its healthy_deadline is Ready once its tasks run (and
// must then be confirmed by its checks: the facts recorded say so), and
// ReadySince moves when a task restarted.
func TestLiveReadinessFromTaskStates(t *testing.T) {
	healthAt := time.Unix(1_000_000, 0)
	now := healthAt.Add(time.Hour)
	running := func(started time.Time) *api.TaskState { return &api.TaskState{State: "running", StartedAt: started} }
	finished := &api.TaskState{State: "dead", StartedAt: healthAt.Add(-time.Minute), FinishedAt: healthAt.Add(-50 * time.Second)}
	steady := func() map[string]*api.TaskState {
		return map[string]*api.TaskState{
			"app": running(healthAt.Add(-time.Minute)), "proxy": running(healthAt.Add(-2 * time.Minute)),
			"init": finished, "warm": finished, "flush": {State: "pending"},
		}
	}
	with := func(task string, ts *api.TaskState) map[string]*api.TaskState {
		m := steady()
		m[task] = ts
		return m
	}
	cases := []struct {
		name       string
		healthy    *bool
		tasks      map[string]*api.TaskState
		ready      bool
		readySince time.Time
		notReady   string
		unhealthy  bool // the facts say Nomad judged it unhealthy
	}{
		{name: "every task counted runs", healthy: ptr(true), tasks: steady(), ready: true, readySince: healthAt},
		{name: "without task states Nomad's health decides", healthy: ptr(true), ready: true, readySince: healthAt},
		{name: "not judged yet", tasks: steady(), notReady: "waiting for Nomad to judge the allocation healthy"},
		{name: "main task restarting", healthy: ptr(true),
			tasks:    with("app", &api.TaskState{State: "pending", Restarts: 3, StartedAt: healthAt.Add(time.Minute)}),
			notReady: "task app is restarting (3 restarts)"},
		{name: "main task crash-looping while the sidecar runs", healthy: ptr(true),
			tasks:    with("app", &api.TaskState{State: "dead", Failed: true}),
			notReady: "task app failed"},
		{name: "main task exited", healthy: ptr(true),
			tasks:    with("app", &api.TaskState{State: "dead"}),
			notReady: "task app is dead"},
		{name: "sidecar restarting", healthy: ptr(true),
			tasks:    with("proxy", &api.TaskState{State: "pending", Restarts: 1}),
			notReady: "task proxy is restarting (1 restarts)"},
		{name: "prestart task that failed counts", healthy: ptr(true),
			tasks:    with("init", &api.TaskState{State: "dead", Failed: true}),
			notReady: "task init failed"},
		{name: "poststart task not started yet counts", healthy: ptr(true),
			tasks:    with("warm", &api.TaskState{State: "pending"}),
			notReady: "task warm is pending"},
		{name: "a task restarted since it became healthy moves ReadySince", healthy: ptr(true),
			tasks: with("app", running(healthAt.Add(10*time.Minute))), ready: true, readySince: healthAt.Add(10 * time.Minute)},
		{name: "missed healthy_deadline but every task runs", healthy: ptr(false), tasks: steady(),
			ready: true, readySince: healthAt, unhealthy: true},
		{name: "missed healthy_deadline and a task still restarts", healthy: ptr(false),
			tasks:    with("app", &api.TaskState{State: "pending", Restarts: 9}),
			notReady: "task app is restarting (9 restarts)", unhealthy: true},
		{name: "missed healthy_deadline without task states", healthy: ptr(false),
			notReady: "Nomad judged the allocation unhealthy", unhealthy: true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			a := alloc("a1", "web-0", "running", "run", tc.healthy, 10, healthAt)
			a.TaskStates = tc.tasks
			c := NewCache()
			c.Replace(Snapshot{Index: 5, Jobs: []*api.Job{lifecycleChild()}, Allocs: []*api.AllocationListStub{a}})
			obs := c.Observe(backend.SetKey{Namespace: "default", Name: "web"}, nil, now)
			if len(obs.Pods) != 1 {
				t.Fatalf("want one pod, got %+v", obs.Pods)
			}
			d := obs.Pods[0]
			unhealthy := d.Facts.Alloc.HealthKnown && !d.Facts.Alloc.Healthy
			if d.Pod.Ready != tc.ready || !d.Pod.ReadySince.Equal(tc.readySince) || d.NotReady != tc.notReady || unhealthy != tc.unhealthy {
				t.Fatalf("ready %v since %v, not ready %q, unhealthy %v; want %v since %v, %q, %v",
					d.Pod.Ready, d.Pod.ReadySince, d.NotReady, unhealthy, tc.ready, tc.readySince, tc.notReady, tc.unhealthy)
			}
			// A pod Ready on its tasks after Nomad judged it unhealthy is
			// not Ready once its checks are watched but not yet read.
			if d.Pod.Ready && tc.unhealthy {
				d.Facts.Checks = reconciler.CheckFacts{Watched: true}
				if d.Judge(); d.Pod.Ready || d.NotReady != reconciler.NotReadyChecksUnknown {
					t.Fatalf("with its checks unread: ready %v, %q; want %q", d.Pod.Ready, d.NotReady, reconciler.NotReadyChecksUnknown)
				}
			}
		})
	}
}

// An allocation event updates the readiness at once: a task that starts
// restarting makes the pod not Ready, and running again makes it Ready with
// a later ReadySince, so min_ready_seconds starts over.
func TestAllocationEventsMoveReadiness(t *testing.T) {
	healthAt := time.Unix(1_000_000, 0)
	c := NewCache()
	a := alloc("a1", "web-0", "running", "run", ptr(true), 10, healthAt)
	a.TaskStates = map[string]*api.TaskState{"app": {State: "running", StartedAt: healthAt.Add(-time.Minute)}}
	c.Replace(Snapshot{Index: 5, Jobs: []*api.Job{lifecycleChild()}, Allocs: []*api.AllocationListStub{a}})
	key := backend.SetKey{Namespace: "default", Name: "web"}
	steps := []struct {
		task       taskStatePayload
		ready      bool
		readySince time.Time
	}{
		{task: taskStatePayload{State: "pending", Restarts: 1, StartedAt: healthAt.Add(-time.Minute)}},
		{task: taskStatePayload{State: "running", Restarts: 1, StartedAt: healthAt.Add(time.Hour)}, ready: true, readySince: healthAt.Add(time.Hour)},
	}
	for i, s := range steps {
		p := stubPayload(a)
		p.ModifyIndex = uint64(20 + i)
		p.TaskStates = map[string]*taskStatePayload{"app": &s.task}
		if _, ok := c.upsertAllocPayload(p, uint64(20+i)); !ok {
			t.Fatalf("step %d: the event was not recorded", i)
		}
		d := c.Observe(key, nil, healthAt.Add(2*time.Hour)).Pods[0]
		if d.Pod.Ready != s.ready || !d.Pod.ReadySince.Equal(s.readySince) {
			t.Fatalf("step %d: ready %v since %v (%s); want %v since %v", i, d.Pod.Ready, d.Pod.ReadySince, d.NotReady, s.ready, s.readySince)
		}
	}
}
