package reconciler

import (
	"testing"
	"time"
)

// TestJudgeReadiness covers every reason JudgeReadiness gives and every rule
// of ReadySince, gate by gate: the allocation's health and task states, the
// Consul checks, then the post_ready hooks. The cases are those the sources
// used to judge on their own (backend/nomad's task states, the agent's
// check and hook gates).
func TestJudgeReadiness(t *testing.T) {
	healthAt := time.Unix(1_000_000, 0)
	// live is an allocation Nomad judged healthy whose every task runs.
	live := func(mod ...func(*AllocFacts)) AllocFacts {
		a := AllocFacts{Live: true, HealthKnown: true, Healthy: true, HealthTime: healthAt, TasksKnown: true,
			TasksStarted: healthAt.Add(-time.Minute)}
		for _, m := range mod {
			m(&a)
		}
		return a
	}
	missed := func(a *AllocFacts) { a.Healthy = false }
	noTasks := func(a *AllocFacts) { a.TasksKnown, a.TasksStarted = false, time.Time{} }
	with := func(ts ...TaskFacts) func(*AllocFacts) {
		return func(a *AllocFacts) { a.Tasks = ts }
	}
	pending := func(name string, lc TaskLifecycle, sidecar bool, restarts uint64) TaskFacts {
		return TaskFacts{Name: name, State: "pending", Lifecycle: lc, Sidecar: sidecar, Restarts: restarts}
	}
	dead := func(name string, lc TaskLifecycle, sidecar, failed bool) TaskFacts {
		return TaskFacts{Name: name, State: "dead", Dead: true, Failed: failed, Lifecycle: lc, Sidecar: sidecar}
	}
	checks := func(c CheckFacts) CheckFacts {
		c.Watched = true
		return c
	}
	passing := checks(CheckFacts{Synced: true, Known: true})
	heldHooks := HookFacts{Configured: true}
	doneAtOnce := HookFacts{Configured: true, Done: true}

	cases := []struct {
		name  string
		facts ReadinessFacts
		ready bool
		since time.Time
		why   string
	}{
		// The allocation.
		{name: "not live: not Ready, and no reason (the phase says it)", facts: ReadinessFacts{Alloc: AllocFacts{HealthKnown: true, Healthy: true}}},
		{name: "not live whatever the checks and hooks say", facts: ReadinessFacts{Checks: passing, Hooks: doneAtOnce}},
		{name: "every task counted runs", facts: ReadinessFacts{Alloc: live()}, ready: true, since: healthAt},
		{name: "without task states Nomad's health decides", facts: ReadinessFacts{Alloc: live(noTasks)}, ready: true, since: healthAt},
		{name: "not judged yet", facts: ReadinessFacts{Alloc: AllocFacts{Live: true, TasksKnown: true}}, why: NotReadyWaitingForHealth},
		{name: "main task restarting", facts: ReadinessFacts{Alloc: live(with(pending("app", TaskMain, false, 3)))},
			why: "task app is restarting (3 restarts)"},
		{name: "main task failed while the sidecar runs", facts: ReadinessFacts{Alloc: live(with(dead("app", TaskMain, false, true)))},
			why: "task app failed"},
		{name: "main task exited", facts: ReadinessFacts{Alloc: live(with(dead("app", TaskMain, false, false)))},
			why: "task app is dead"},
		{name: "main task not started", facts: ReadinessFacts{Alloc: live(with(pending("app", TaskMain, false, 0)))},
			why: "task app is pending"},
		{name: "sidecar restarting", facts: ReadinessFacts{Alloc: live(with(pending("proxy", TaskPrestart, true, 1)))},
			why: "task proxy is restarting (1 restarts)"},
		{name: "sidecar that ended counts", facts: ReadinessFacts{Alloc: live(with(dead("proxy", TaskPrestart, true, false)))},
			why: "task proxy is dead"},
		{name: "prestart task that finished does not count", facts: ReadinessFacts{Alloc: live(with(dead("init", TaskPrestart, false, false)))},
			ready: true, since: healthAt},
		{name: "prestart task that failed counts", facts: ReadinessFacts{Alloc: live(with(dead("init", TaskPrestart, false, true)))},
			why: "task init failed"},
		{name: "poststart task that finished does not count", facts: ReadinessFacts{Alloc: live(with(dead("warm", TaskPoststart, false, false)))},
			ready: true, since: healthAt},
		{name: "poststart task not started yet counts", facts: ReadinessFacts{Alloc: live(with(pending("warm", TaskPoststart, false, 0)))},
			why: "task warm is pending"},
		{name: "poststop task never counts", facts: ReadinessFacts{Alloc: live(with(pending("flush", TaskPoststop, false, 0), dead("flush2", TaskPoststop, false, true)))},
			ready: true, since: healthAt},
		{name: "the first task counted names the reason",
			facts: ReadinessFacts{Alloc: live(with(dead("a-init", TaskPrestart, false, false), pending("b", TaskMain, false, 2), dead("c", TaskMain, false, true)))},
			why:   "task b is restarting (2 restarts)"},
		{name: "a task restarted since Nomad's health stamp moves ReadySince",
			facts: ReadinessFacts{Alloc: live(func(a *AllocFacts) { a.TasksStarted = healthAt.Add(10 * time.Minute) })},
			ready: true, since: healthAt.Add(10 * time.Minute)},
		{name: "no health stamp: ReadySince is the tasks' start",
			facts: ReadinessFacts{Alloc: live(func(a *AllocFacts) { a.HealthTime = time.Time{} })},
			ready: true, since: healthAt.Add(-time.Minute)},
		{name: "no stamp at all: Ready without ReadySince",
			facts: ReadinessFacts{Alloc: live(noTasks, func(a *AllocFacts) { a.HealthTime = time.Time{} })}, ready: true},
		{name: "missed healthy_deadline but every task runs, no checks watched", facts: ReadinessFacts{Alloc: live(missed)},
			ready: true, since: healthAt},
		{name: "missed healthy_deadline and a task still restarts", facts: ReadinessFacts{Alloc: live(missed, with(pending("app", TaskMain, false, 9)))},
			why: "task app is restarting (9 restarts)"},
		{name: "missed healthy_deadline without task states", facts: ReadinessFacts{Alloc: live(missed, noTasks)}, why: NotReadyUnhealthy},

		// The Consul checks.
		{name: "passing checks keep a pod Ready", facts: ReadinessFacts{Alloc: live(), Checks: passing}, ready: true, since: healthAt},
		{name: "a critical check makes it not Ready",
			facts: ReadinessFacts{Alloc: live(), Checks: checks(CheckFacts{Synced: true, Known: true, Critical: "check c is critical"})},
			why:   "check c is critical"},
		{name: "checks passing again move ReadySince",
			facts: ReadinessFacts{Alloc: live(), Checks: checks(CheckFacts{Synced: true, Known: true, PassingSince: healthAt.Add(time.Hour)})},
			ready: true, since: healthAt.Add(time.Hour)},
		{name: "checks passing since before the pod was ready leave ReadySince",
			facts: ReadinessFacts{Alloc: live(), Checks: checks(CheckFacts{Synced: true, Known: true, PassingSince: healthAt.Add(-time.Hour)})},
			ready: true, since: healthAt},
		{name: "checks not read yet leave a healthy pod Ready", facts: ReadinessFacts{Alloc: live(), Checks: checks(CheckFacts{})},
			ready: true, since: healthAt},
		{name: "a pod that missed its deadline waits for its checks to be read",
			facts: ReadinessFacts{Alloc: live(missed), Checks: checks(CheckFacts{})}, why: NotReadyChecksUnknown},
		{name: "a pod that missed its deadline with no checks listed waits",
			facts: ReadinessFacts{Alloc: live(missed), Checks: checks(CheckFacts{Synced: true})}, why: NotReadyChecksUnknown},
		{name: "a pod that missed its deadline is Ready once its checks pass",
			facts: ReadinessFacts{Alloc: live(missed), Checks: passing}, ready: true, since: healthAt},
		{name: "a pod that missed its deadline with a critical check names the check",
			facts: ReadinessFacts{Alloc: live(missed), Checks: checks(CheckFacts{Critical: "check c is critical"})},
			why:   "check c is critical"},
		{name: "checks not watched have no say",
			facts: ReadinessFacts{Alloc: live(), Checks: CheckFacts{Synced: true, Known: true, Critical: "check c is critical"}},
			ready: true, since: healthAt},
		{name: "a task's reason comes before a check's",
			facts: ReadinessFacts{Alloc: live(with(dead("app", TaskMain, false, true))), Checks: checks(CheckFacts{Critical: "check c is critical"})},
			why:   "task app failed"},

		// The post_ready hooks.
		{name: "hooks not configured have no say", facts: ReadinessFacts{Alloc: live(), Hooks: HookFacts{DoneAt: healthAt.Add(time.Hour)}},
			ready: true, since: healthAt},
		{name: "hooks not asked yet hold the pod", facts: ReadinessFacts{Alloc: live(), Checks: passing, Hooks: heldHooks}, why: NotReadyHookHeld},
		{name: "hooks done at once: Nomad's ReadySince stands", facts: ReadinessFacts{Alloc: live(), Hooks: doneAtOnce},
			ready: true, since: healthAt},
		{name: "hooks done after a hold: ready from then",
			facts: ReadinessFacts{Alloc: live(), Hooks: HookFacts{Configured: true, Done: true, DoneAt: healthAt.Add(3 * time.Second)}},
			ready: true, since: healthAt.Add(3 * time.Second)},
		{name: "a task restarted after the hooks said done: from the restart",
			facts: ReadinessFacts{Alloc: live(func(a *AllocFacts) { a.TasksStarted = healthAt.Add(time.Hour) }),
				Hooks: HookFacts{Configured: true, Done: true, DoneAt: healthAt.Add(time.Minute)}},
			ready: true, since: healthAt.Add(time.Hour)},
		{name: "the checks gate before the hooks", facts: ReadinessFacts{Alloc: live(),
			Checks: checks(CheckFacts{Synced: true, Known: true, Critical: "check c is critical"}), Hooks: heldHooks},
			why: "check c is critical"},
		{name: "checks unknown gate before the hooks", facts: ReadinessFacts{Alloc: live(missed), Checks: checks(CheckFacts{}), Hooks: heldHooks},
			why: NotReadyChecksUnknown},
		{name: "waiting for health gates before the hooks", facts: ReadinessFacts{Alloc: AllocFacts{Live: true}, Hooks: heldHooks},
			why: NotReadyWaitingForHealth},
		{name: "the latest gate to open sets ReadySince", facts: ReadinessFacts{Alloc: live(),
			Checks: checks(CheckFacts{Synced: true, Known: true, PassingSince: healthAt.Add(2 * time.Hour)}),
			Hooks:  HookFacts{Configured: true, Done: true, DoneAt: healthAt.Add(time.Hour)}},
			ready: true, since: healthAt.Add(2 * time.Hour)},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got := JudgeReadiness(tc.facts)
			if got.Ready != tc.ready || !got.Since.Equal(tc.since) || got.Why != tc.why {
				t.Fatalf("JudgeReadiness = ready %v since %v, %q; want %v since %v, %q",
					got.Ready, got.Since, got.Why, tc.ready, tc.since, tc.why)
			}
			if got.Ready && got.Why != "" || !got.Ready && !got.Since.IsZero() {
				t.Fatalf("inconsistent verdict %+v", got)
			}
		})
	}
}

func TestAvailable(t *testing.T) {
	now := epoch.Add(time.Hour)
	ready := func(since time.Time) Pod { return Pod{Phase: PhaseRunning, Ready: true, ReadySince: since} }
	cases := []struct {
		name     string
		pod      Pod
		minReady int
		want     bool
	}{
		{"not ready", Pod{Phase: PhaseRunning}, 0, false},
		{"ready but not running", Pod{Phase: PhasePending, Ready: true, ReadySince: epoch}, 0, false},
		{"ready, no min_ready_seconds", ready(now), 0, true},
		{"ready without ReadySince, no min_ready_seconds", ready(time.Time{}), 0, true},
		{"ready without ReadySince under min_ready_seconds", ready(time.Time{}), 10, false},
		{"ready for exactly min_ready_seconds", ready(now.Add(-10 * time.Second)), 10, true},
		{"ready a second short", ready(now.Add(-9 * time.Second)), 10, false},
		{"negative min_ready_seconds counts as none", ready(time.Time{}), -5, true},
		{"terminating is still available (the budget counts it apart)", Pod{Phase: PhaseRunning, Ready: true, ReadySince: epoch, Terminating: true}, 10, true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			if got := Available(tc.pod, tc.minReady, now); got != tc.want {
				t.Fatalf("Available = %v, want %v", got, tc.want)
			}
		})
	}
}

// TestAvailabilityAgrees: the test oracle (world.healthy) and the status the
// reconciler reports count the same pods as available. They once did not:
// the oracle took a Ready pod without ReadySince under min_ready_seconds as
// available, which the reconciler (rightly) does not, since nothing says
// the pod has been ready that long.
func TestAvailabilityAgrees(t *testing.T) {
	now := epoch.Add(time.Hour)
	cases := []struct {
		name     string
		minReady int
		pod      Pod
	}{
		{"ready without ReadySince under min_ready_seconds", 10, Pod{Phase: PhaseRunning, Ready: true}},
		{"ready without ReadySince, no min_ready_seconds", 0, Pod{Phase: PhaseRunning, Ready: true}},
		{"ready long enough", 10, Pod{Phase: PhaseRunning, Ready: true, ReadySince: now.Add(-time.Minute)}},
		{"ready too recently", 10, Pod{Phase: PhaseRunning, Ready: true, ReadySince: now.Add(-time.Second)}},
		{"not ready", 10, Pod{Phase: PhaseRunning}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			in := baseInput()
			in.Now = now
			in.Spec.MinReadySeconds = tc.minReady
			p := tc.pod
			p.Ordinal, p.Revision, p.Created = 0, in.Pods[0].Revision, epoch
			in.Pods[0] = p
			w := newWorld(in.Spec, "v1")
			w.now = now
			oracle := w.healthy(p)
			reported := Reconcile(in).Status.AvailableReplicas == 3
			if oracle != reported || Available(p, tc.minReady, now) != reported {
				t.Fatalf("available: oracle %v, Available %v, reconciler's status %v",
					oracle, Available(p, tc.minReady, now), reported)
			}
		})
	}
}
