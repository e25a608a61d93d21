package reconciler

import (
	"fmt"
	"time"
)

// The NotReady reasons JudgeReadiness gives that are not a task's or a
// check's own words. Status and events show them to users, and the agent
// tells some of them apart (a pod's first wait for health, or a hook's
// release, is no readiness event), so they are constants.
const (
	// NotReadyWaitingForHealth: Nomad has not judged the allocation's
	// health yet; every new pod's first wait.
	NotReadyWaitingForHealth = "waiting for Nomad to judge the allocation healthy"
	// NotReadyUnhealthy: Nomad judged the allocation unhealthy and there
	// are no task states to recover on, so Nomad's word stands.
	NotReadyUnhealthy = "Nomad judged the allocation unhealthy"
	// NotReadyChecksUnknown: the allocation missed its healthy deadline and
	// its Consul checks have not been read yet; only passing checks can
	// overrule Nomad.
	NotReadyChecksUnknown = "Nomad judged the allocation unhealthy; waiting for its Consul checks to pass"
	// NotReadyHookHeld: a post_ready hook has not said done. Its release is
	// announced by the HookDone event, not by a PodReady one.
	NotReadyHookHeld = "a post_ready hook holds it"
)

// ReadinessFacts is everything a pod's readiness is judged from, each part
// gathered where it is known: the allocation from Nomad, the checks from
// Consul, the post_ready hooks from the agent. JudgeReadiness alone turns
// them into a verdict (DESIGN §5: whether a pod is ready is judged in one
// pure function), so the sources only record facts and never overrule one
// another's verdicts.
type ReadinessFacts struct {
	// Alloc is what Nomad says of the allocation; backend/nomad records it.
	Alloc AllocFacts
	// Checks is what Consul says of its checks; the agent records it.
	Checks CheckFacts
	// Hooks is what the post_ready hooks said; the agent records it.
	Hooks HookFacts
}

// AllocFacts is what Nomad says about a pod's newest allocation.
type AllocFacts struct {
	// Live is set when the allocation runs (client status running, desired
	// status run), the pod is not on its way out and no older allocation
	// runs beside it. Only a live pod can be Ready; any other is not Ready
	// without a reason, since its phase already says why.
	Live bool
	// HealthKnown is set once Nomad's deployment judged the allocation's
	// health, Healthy is that judgement and HealthTime when it was made.
	// The judgement is one-shot: it is not revised when a task later fails.
	HealthKnown, Healthy bool
	HealthTime           time.Time
	// TasksKnown is set when Nomad reported the allocation's task states.
	// Without them readiness rests on Nomad's health alone.
	TasksKnown bool
	// Tasks are the allocation's tasks that are not running, in name order
	// (the first is the one a NotReady names, so the order must be stable);
	// nil when every task runs.
	Tasks []TaskFacts
	// TasksStarted is the latest start of a running task: a task that
	// restarted since Nomad's health stamp makes the pod Ready only from
	// then. Zero when unknown.
	TasksStarted time.Time
}

// TaskLifecycle is a task's lifecycle hook in the job, which says whether a
// task that is not running keeps the pod from being ready.
type TaskLifecycle int

// The lifecycle hooks of Nomad's task lifecycle block.
const (
	// TaskMain is a task without a lifecycle block (or with one unknown
	// here): it must run.
	TaskMain TaskLifecycle = iota
	// TaskPrestart runs before the main tasks.
	TaskPrestart
	// TaskPoststart runs after the main tasks started.
	TaskPoststart
	// TaskPoststop runs after the main tasks ended.
	TaskPoststop
)

// TaskFacts is one task of an allocation that is not running.
type TaskFacts struct {
	// Name is the task's name.
	Name string
	// State is Nomad's task state as a user reads it ("pending", "dead").
	State string
	// Dead is set when the task ended (Nomad's state "dead").
	Dead bool
	// Failed is set when the task ended in failure.
	Failed bool
	// Restarts is how often the task was restarted.
	Restarts uint64
	// Lifecycle is the task's lifecycle hook; Sidecar its sidecar flag.
	Lifecycle TaskLifecycle
	Sidecar   bool
}

// CheckFacts is what Consul says about the checks of the services of a pod's
// allocation.
type CheckFacts struct {
	// Watched is set when the set has Consul services whose checks are
	// watched. Without (no services, or no Consul under -dev) the checks
	// have no say and the task states alone decide.
	Watched bool
	// Synced is set once every watched service was read from Consul.
	Synced bool
	// Known is set when Consul lists at least one service of the
	// allocation.
	Known bool
	// Critical names the first critical check and its output, as a user
	// reads it; empty when none is critical.
	Critical string
	// PassingSince is when the checks stopped being critical; zero when
	// they were not seen critical.
	PassingSince time.Time
}

// HookFacts is what the post_ready hooks said about a pod's allocation.
type HookFacts struct {
	// Configured is set when post_ready hooks gate readiness. Without it
	// the hooks have no say.
	Configured bool
	// Done is set once every hook said done (or failed under
	// failure_policy "ignore") for this allocation. Until then, and while
	// they were not asked yet, the hooks hold the pod.
	Done bool
	// DoneAt is when the hooks said done after having held the pod at least
	// once; zero when they said done at the first asking, so that a new
	// leader, which asks again, does not restart min_ready_seconds.
	DoneAt time.Time
}

// Readiness is JudgeReadiness's verdict on a pod.
type Readiness struct {
	// Ready means Running and Ready (DESIGN §2).
	Ready bool
	// Since is when the pod last became Ready; zero when it is not Ready
	// (or, on a Ready pod, when no source said when).
	Since time.Time
	// Why says why a live pod is not Ready, as a user reads it; empty when
	// it is Ready or not live.
	Why string
}

// JudgeReadiness judges whether a pod is Running and Ready (DESIGN §2), since
// when, and if not, why. The gates come in order, and the first that fails
// gives the reason:
//
//  1. The allocation is live and Nomad has judged its health. Nomad's
//     deployment health is one-shot, so from then on the pod is Ready only
//     while every task counted runs. A pod Nomad judged unhealthy (it missed
//     its healthy_deadline) is judged on its tasks too, so that it can
//     recover; without task states Nomad's word stands.
//  2. No Consul check is critical, and a pod that missed its healthy
//     deadline has had its checks read: only they can overrule Nomad.
//  3. The post_ready hooks said done. They come after the checks: a pod the
//     checks make not Ready is not one whose hooks should be asked.
//
// Since is the latest moment a gate opened: Nomad's health stamp, a task's
// restart, the checks passing again, the hooks saying done after a hold. So
// min_ready_seconds starts over whenever any of them had held the pod.
func JudgeReadiness(f ReadinessFacts) Readiness {
	a := f.Alloc
	switch {
	case !a.Live:
		return Readiness{}
	case !a.HealthKnown:
		return Readiness{Why: NotReadyWaitingForHealth}
	case !a.Healthy && !a.TasksKnown:
		return Readiness{Why: NotReadyUnhealthy}
	}
	if why := tasksNotReady(a.Tasks); why != "" {
		return Readiness{Why: why}
	}
	since := a.HealthTime
	if a.TasksStarted.After(since) {
		since = a.TasksStarted
	}
	if c := f.Checks; c.Watched {
		switch {
		case c.Critical != "":
			return Readiness{Why: c.Critical}
		case !a.Healthy && (!c.Synced || !c.Known):
			return Readiness{Why: NotReadyChecksUnknown}
		case c.PassingSince.After(since):
			since = c.PassingSince
		}
	}
	if h := f.Hooks; h.Configured {
		if !h.Done {
			return Readiness{Why: NotReadyHookHeld}
		}
		if h.DoneAt.After(since) {
			since = h.DoneAt
		}
	}
	return Readiness{Ready: true, Since: since}
}

// tasksNotReady says which task keeps an allocation from being ready: one
// that is restarting, dead or not started. As Nomad's own health tracker
// (client/allochealth), it leaves out poststop tasks, which wait for the
// main tasks to end, and prestart and poststart tasks (not sidecars) that
// finished successfully. Empty when every task counted runs.
func tasksNotReady(tasks []TaskFacts) string {
	for _, t := range tasks {
		if !t.Sidecar {
			switch t.Lifecycle {
			case TaskPoststop:
				continue
			case TaskPrestart, TaskPoststart:
				if t.Dead && !t.Failed {
					continue
				}
			}
		}
		switch {
		case t.Dead && t.Failed:
			return fmt.Sprintf("task %s failed", t.Name)
		case t.Dead:
			return fmt.Sprintf("task %s is dead", t.Name)
		case t.Restarts > 0:
			return fmt.Sprintf("task %s is restarting (%d restarts)", t.Name, t.Restarts)
		default:
			return fmt.Sprintf("task %s is %s", t.Name, t.State)
		}
	}
	return ""
}

// Available reports whether pod p counts as available at now: Running and
// Ready for at least minReadySeconds (DESIGN §2). The reconciler, the
// agent's views and the tests all judge it here, so that a pod the status
// counts as available is the one the user sees as Available.
//
// A Ready pod whose ReadySince is unknown (zero) is available only when
// minReadySeconds is 0: nothing says it has been ready that long, and
// counting it would let a rollout spend the budget on a pod that may have
// just come up.
func Available(p Pod, minReadySeconds int, now time.Time) bool {
	if p.Phase != PhaseRunning || !p.Ready {
		return false
	}
	if minReadySeconds <= 0 {
		return true
	}
	if p.ReadySince.IsZero() {
		return false
	}
	return !now.Before(p.ReadySince.Add(time.Duration(minReadySeconds) * time.Second))
}
