package agent

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/nomad-statefulset/nomad-statefulset/agent/config"
	"github.com/nomad-statefulset/nomad-statefulset/backend"
	"github.com/nomad-statefulset/nomad-statefulset/backend/nomad"
	"github.com/nomad-statefulset/nomad-statefulset/client"
	"github.com/nomad-statefulset/nomad-statefulset/plugin"
	"github.com/nomad-statefulset/nomad-statefulset/plugin/manager"
	"github.com/nomad-statefulset/nomad-statefulset/reconciler"
)

// readyHook is an in-process lifecycle-hook plugin whose post_ready answer
// a test scripts. It counts its post_ready calls per pod and allocation.
type readyHook struct {
	mu     sync.Mutex
	answer func(pod plugin.Pod) *plugin.HookResponse
	calls  map[string]map[string]int // pod name → alloc ID → calls
}

func newReadyHook(answer func(plugin.Pod) *plugin.HookResponse) *readyHook {
	return &readyHook{answer: answer, calls: map[string]map[string]int{}}
}

func (h *readyHook) PluginInfo(context.Context) (*plugin.Info, error) {
	return &plugin.Info{Name: "ready-hook", Type: plugin.TypeLifecycleHook}, nil
}
func (h *readyHook) SetConfig(context.Context, map[string]string) error { return nil }
func (h *readyHook) PreDelete(context.Context, plugin.Pod) (*plugin.HookResponse, error) {
	return plugin.Done(), nil
}
func (h *readyHook) PreUpdate(context.Context, plugin.Pod) (*plugin.HookResponse, error) {
	return plugin.Done(), nil
}
func (h *readyHook) PostReady(_ context.Context, pod plugin.Pod) (*plugin.HookResponse, error) {
	h.mu.Lock()
	if h.calls[pod.Name] == nil {
		h.calls[pod.Name] = map[string]int{}
	}
	h.calls[pod.Name][pod.AllocID]++
	answer := h.answer
	h.mu.Unlock()
	return answer(pod), nil
}

func (h *readyHook) setAnswer(answer func(plugin.Pod) *plugin.HookResponse) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.answer = answer
}

// callsOf returns the post_ready calls made for pod, by allocation ID.
func (h *readyHook) callsOf(pod string) map[string]int {
	h.mu.Lock()
	defer h.mu.Unlock()
	out := map[string]int{}
	for id, n := range h.calls[pod] {
		out[id] = n
	}
	return out
}

func total(m map[string]int) int {
	n := 0
	for _, v := range m {
		n += v
	}
	return n
}

// startWithReadyHook starts an agent on the simulator whose hooks run
// through the real plugin manager: one built-in plugin, hook, with a
// post_ready hook block under policy.
func startWithReadyHook(t *testing.T, hook *readyHook, policy plugin.FailurePolicy) *harness {
	t.Helper()
	cfg := config.Default()
	cfg.PluginDir = ""
	cfg.Plugins = append(cfg.Plugins, &config.PluginConfig{Name: "ready", Driver: "ready-hook", Config: map[string]string{}})
	cfg.Hooks = append(cfg.Hooks, &config.HookConfig{
		Name: "caught-up", Plugin: "ready", Events: []plugin.Event{plugin.EventPostReady},
		Timeout: 10 * time.Second, FailurePolicy: policy,
	})
	return startAgentWith(t, fastSim(), func(o *Options) {
		o.Plugins = manager.ConfigOf(cfg)
		o.PluginBuiltins["ready-hook"] = func(hclog.Logger) plugin.Base { return hook }
	})
}

// view returns the set's view as GET /v1/statefulset shows it.
func (h *harness) view(set string) client.SetDetail {
	d, _ := h.agent.view(backend.SetKey{Namespace: "default", Name: set})
	return d
}

// heldCondition returns the set's Held condition, if it shows one.
func heldCondition(d client.SetDetail) (client.Condition, bool) {
	for _, c := range d.Status.Conditions {
		if c.Type == string(ConditionHeld) && c.Status {
			return c, true
		}
	}
	return client.Condition{}, false
}

func hasEvent(d client.SetDetail, typ string, parts ...string) bool {
	for _, e := range d.Events {
		if e.Type != typ {
			continue
		}
		all := true
		for _, p := range parts {
			all = all && strings.Contains(e.Message, p)
		}
		if all {
			return true
		}
	}
	return false
}

// TestPostReadyHoldsTheNextOrdinalUntilDone: under OrderedReady, ordinal 1
// is not created while ordinal 0's post_ready hook waits, the set shows why,
// and another set carries on meanwhile. The hook runs once per allocation:
// not on every reconcile, and again for a new allocation of the pod.
func TestPostReadyHoldsTheNextOrdinalUntilDone(t *testing.T) {
	caughtUp := func(pod plugin.Pod) *plugin.HookResponse {
		if pod.Set == "pr" && pod.Ordinal == 0 {
			return plugin.Wait(20*time.Millisecond, "replica %s is catching up", pod.Name)
		}
		return plugin.Done()
	}
	hook := newReadyHook(caughtUp)
	h := startWithReadyHook(t, hook, plugin.FailureBlock)
	h.register(parentJob("pr", map[string]string{"statefulset_replicas": "3"}, "v1"))
	h.register(parentJob("other", map[string]string{"statefulset_replicas": "3"}, "v1"))

	// The hook is asked again and again about pr-0 (so pr was reconciled
	// while held), and the other set converges in the meantime.
	h.waitFor("several askings about pr-0", 20*time.Second, func() (bool, string) {
		c := hook.callsOf("pr-0")
		return total(c) >= 5, fmt.Sprint(c)
	})
	h.waitConverged("other", 3, nil)
	if n := h.liveChildren("pr"); n != 1 {
		t.Fatalf("pr has %d live children while pr-0's post_ready hook waits; want 1 (pr-1 must not be created)", n)
	}
	if hc := h.healthyChildren("pr"); len(hc) != 1 {
		t.Fatalf("pr-0 must be healthy in Nomad (it is the hook that holds it): healthy %v", hc)
	}
	h.waitFor("pr's view to show the hold", 5*time.Second, func() (bool, string) {
		d := h.view("pr")
		ok := d.Status.ReadyReplicas == 0 && len(d.Pods) == 1 && d.Pods[0].State == "Running" &&
			hasEvent(d, "HookWaiting", "pr-0", `hook "caught-up" (post_ready)`, "replica pr-0 is catching up")
		held, isHeld := heldCondition(d)
		ok = ok && isHeld && held.Reason == "HookWaiting"
		return ok, fmt.Sprintf("status %+v pods %+v events %+v", d.Status, d.Pods, d.Events)
	})

	hook.setAnswer(func(plugin.Pod) *plugin.HookResponse { return plugin.Done() })
	h.waitConverged("pr", 3, nil)
	h.waitFor("pr to count 3 ready", 5*time.Second, func() (bool, string) {
		d := h.view("pr")
		_, held := heldCondition(d)
		return d.Status.ReadyReplicas == 3 && hasEvent(d, "HookDone", "pr-0") && !held, fmt.Sprintf("%+v %+v", d.Status, d.Events)
	})

	// Once per allocation: one allocation each, asked until it said done
	// (pr-0) or exactly once.
	before := map[string]map[string]int{}
	for _, pod := range []string{"pr-0", "pr-1", "pr-2", "other-0", "other-1", "other-2"} {
		c := hook.callsOf(pod)
		before[pod] = c
		if len(c) != 1 {
			t.Fatalf("%s: post_ready asked about allocations %v; want its one allocation", pod, c)
		}
		if pod != "pr-0" && total(c) != 1 {
			t.Fatalf("%s: post_ready asked %d times; want once (it said done at once)", pod, total(c))
		}
	}
	// More reconciles of pr (a spec change that touches no pod) ask nothing.
	job := h.sim.Job("default", "pr")
	job.Meta["statefulset_revision_history_limit"] = "7"
	h.register(job)
	h.waitFor("pr to reconcile the new spec", 5*time.Second, func() (bool, string) {
		d := h.view("pr")
		return d.Spec.RevisionHistoryLimit == 7, fmt.Sprintf("%+v", d.Spec)
	})
	for pod, c := range before {
		if got := hook.callsOf(pod); fmt.Sprint(got) != fmt.Sprint(c) {
			t.Fatalf("%s: post_ready calls went from %v to %v on a reconcile; want once per allocation", pod, c, got)
		}
	}

	// A new allocation of a pod (its child stopped and recreated) is asked
	// about again.
	if err := h.sim.DeregisterJob(context.Background(), "default", "pr-2", false); err != nil {
		t.Fatal(err)
	}
	h.waitFor("pr-2's new allocation to be asked about", 20*time.Second, func() (bool, string) {
		c := hook.callsOf("pr-2")
		return len(c) == 2, fmt.Sprint(c)
	})
	for id, n := range hook.callsOf("pr-2") {
		if n != 1 {
			t.Fatalf("pr-2 allocation %s asked %d times; want once", id, n)
		}
	}
	h.waitConverged("pr", 3, nil)
}

// TestPostReadyFailurePolicy: a failing post_ready hook holds the pod under
// failure_policy "block" (the next ordinal is not created, the reason is
// shown) and is skipped under "ignore".
func TestPostReadyFailurePolicy(t *testing.T) {
	behind := func(pod plugin.Pod) *plugin.HookResponse {
		if pod.Ordinal == 0 {
			return &plugin.HookResponse{Status: plugin.HookFail, RetryAfter: 20 * time.Millisecond, Message: "replica is behind"}
		}
		return plugin.Done()
	}
	t.Run("block", func(t *testing.T) {
		hook := newReadyHook(behind)
		h := startWithReadyHook(t, hook, plugin.FailureBlock)
		h.register(parentJob("fb", map[string]string{"statefulset_replicas": "2"}, "v1"))
		h.waitFor("the failing hook to be asked about fb-0 again", 20*time.Second, func() (bool, string) {
			c := hook.callsOf("fb-0")
			return total(c) >= 5, fmt.Sprint(c)
		})
		if n := h.liveChildren("fb"); n != 1 {
			t.Fatalf("fb has %d live children while fb-0's post_ready hook fails under block; want 1", n)
		}
		h.waitFor("fb's view to show the failure", 5*time.Second, func() (bool, string) {
			d := h.view("fb")
			ok := d.Status.ReadyReplicas == 0 && hasEvent(d, "HookWaiting", "fb-0", "failed: replica is behind")
			return ok, fmt.Sprintf("%+v %+v", d.Status, d.Events)
		})
	})
	t.Run("ignore", func(t *testing.T) {
		hook := newReadyHook(behind)
		h := startWithReadyHook(t, hook, plugin.FailureIgnore)
		h.register(parentJob("fi", map[string]string{"statefulset_replicas": "2"}, "v1"))
		h.waitConverged("fi", 2, nil)
		h.waitFor("fi to count 2 ready", 5*time.Second, func() (bool, string) {
			d := h.view("fi")
			return d.Status.ReadyReplicas == 2, fmt.Sprintf("%+v", d.Status)
		})
		if c := hook.callsOf("fi-0"); total(c) != 1 {
			t.Fatalf("fi-0: asked %v; an ignored failure counts as done and is not asked again", c)
		}
	})
}

// TestPostReadyGate covers the gate: which pods await the hooks and are
// asked, when a held pod is asked again, ReadySince, and forgetting gone
// allocations. The answers are the set's memory; the agent judges every
// pod once with them, and the reconciler asks the hooks.
func TestPostReadyGate(t *testing.T) {
	now := time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC)
	nomadReady := now.Add(-time.Minute)
	key := backend.SetKey{Namespace: "default", Name: "web"}
	// pod is a running pod as Observe hands it over: ready by Nomad since
	// nomadReady, or still waiting for Nomad's health.
	pod := func(alloc string, ready bool) nomad.PodDetail {
		d := nomad.PodDetail{Pod: reconciler.Pod{Ordinal: 0, Phase: reconciler.PhaseRunning}, JobID: "web-0", AllocID: alloc,
			Facts: reconciler.ReadinessFacts{Alloc: reconciler.AllocFacts{Live: true}}}
		if ready {
			d.Facts.Alloc.HealthKnown, d.Facts.Alloc.Healthy, d.Facts.Alloc.HealthTime = true, true, nomadReady
		}
		return d
	}
	// critical is ready by Nomad, but a Consul check is critical: the checks
	// gate before the hooks, so it is neither asked about nor held.
	critical := pod("a", true)
	critical.Facts.Checks = reconciler.CheckFacts{Watched: true, Synced: true, Known: true, Critical: "check c is critical"}
	wait := reconciler.HookAnswer{RetryAfter: 5 * time.Second}
	done := reconciler.HookAnswer{Proceed: true}
	tests := []struct {
		name      string
		answers   []reconciler.HookAnswer // about alloc "a", 3s apart, the last at now
		pod       nomad.PodDetail
		wantAsked bool
		wantReady bool
		wantSince time.Time
		wantAgain time.Duration
	}{
		{name: "never asked: asked, and held", pod: pod("a", true), wantAsked: true},
		{name: "not ready in Nomad: nothing to do", pod: pod("a", false)},
		{name: "a critical check: nothing to do", pod: critical},
		{name: "waiting: held until the retry", answers: []reconciler.HookAnswer{wait}, pod: pod("a", true), wantAgain: 5 * time.Second},
		{name: "done at once: Nomad's ReadySince stands", answers: []reconciler.HookAnswer{done}, pod: pod("a", true), wantReady: true, wantSince: nomadReady},
		{name: "done after a wait: ready from then", answers: []reconciler.HookAnswer{wait, done}, pod: pod("a", true), wantReady: true, wantSince: now},
		{name: "another allocation: asked afresh", answers: []reconciler.HookAnswer{done}, pod: pod("b", true), wantAsked: true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			c := &controller{log: hclog.NewNullLogger(), sets: newSetStates(nil), hooks: hookFunc(nil)}
			st := c.sets.of(key)
			for i, a := range tc.answers {
				at := now.Add(time.Duration(i-len(tc.answers)+1) * 3 * time.Second)
				st.memory, _ = reconciler.Fold(reconciler.Spec{}, st.memory, reconciler.Action{Type: reconciler.ActionPostReady, Pod: reconciler.Pod{AllocID: "a"}},
					reconciler.Result{PostReady: &a}, at)
			}
			obs := nomad.Observation{Pods: []nomad.PodDetail{tc.pod}}
			c.judge(st, obs)
			got := obs.Pods[0]
			if got.Pod.Ready != tc.wantReady || !got.Pod.ReadySince.Equal(tc.wantSince) {
				t.Fatalf("judged ready %v since %v; want %v %v", got.Pod.Ready, got.Pod.ReadySince, tc.wantReady, tc.wantSince)
			}
			p := &pass{st: st, obs: obs, spec: reconciler.Spec{Name: "web", Replicas: 1}}
			in := atCurrentRevision(reconciler.Input{Spec: p.spec, Now: now, Memory: st.memory, Pods: c.inputPods(p)})
			out := reconciler.Reconcile(in)
			asked := false
			for _, a := range out.Actions {
				asked = asked || a.Type == reconciler.ActionPostReady
			}
			if asked != tc.wantAsked {
				t.Fatalf("asked %v, want %v (actions %+v)", asked, tc.wantAsked, out.Actions)
			}
			if tc.wantAgain > 0 && (out.Requeue <= 0 || out.Requeue > tc.wantAgain) {
				t.Fatalf("looks again in %v, want within %v", out.Requeue, tc.wantAgain)
			}
		})
	}

	// Answers about allocations the set no longer has are forgotten.
	mem, _ := reconciler.Fold(reconciler.Spec{}, reconciler.Memory{}, reconciler.Action{Type: reconciler.ActionPostReady, Pod: reconciler.Pod{AllocID: "old"}},
		reconciler.Result{PostReady: &done}, now)
	out := reconciler.Reconcile(reconciler.Input{Spec: reconciler.Spec{Name: "web"}, Now: now, Memory: mem,
		Pods: []reconciler.Pod{{Ordinal: 0, Phase: reconciler.PhaseRunning, AllocID: "new"}}})
	if _, ok := out.Memory.PostReady["old"]; ok {
		t.Fatal("the answer about a gone allocation was kept")
	}
}

// TestPostReadyHoldsARollingUpdate: a rolling update does not move on from
// an updated pod until its new allocation's post_ready hooks say done.
func TestPostReadyHoldsARollingUpdate(t *testing.T) {
	hook := newReadyHook(func(plugin.Pod) *plugin.HookResponse { return plugin.Done() })
	h := startWithReadyHook(t, hook, plugin.FailureBlock)
	h.register(parentJob("ru", map[string]string{"statefulset_replicas": "3"}, "v1"))
	h.waitConverged("ru", 3, nil)
	old := h.healthyChildren("ru")[2]

	hook.setAnswer(func(pod plugin.Pod) *plugin.HookResponse {
		if pod.Revision != old {
			return plugin.Wait(20*time.Millisecond, "%s is replaying the log", pod.Name)
		}
		return plugin.Done()
	})
	job := h.sim.Job("default", "ru")
	job.TaskGroups[0].Tasks[0].Config["args"] = []string{"-c", "v2"}
	h.register(job)
	// ru-2 is updated first; the hook holds its new allocation.
	h.waitFor("the hook to hold the updated ru-2", 20*time.Second, func() (bool, string) {
		c := hook.callsOf("ru-2")
		return len(c) == 2 && total(c) >= 5, fmt.Sprint(c)
	})
	hc := h.healthyChildren("ru")
	if hc[2] == old || hc[1] != old || hc[0] != old {
		t.Fatalf("healthy revisions %v while the updated ru-2 is held; want only ru-2 updated (old %s)", hc, old)
	}
	if h.liveChildren("ru") != 3 {
		t.Fatalf("%d live children; the update must not take ru-1 down while ru-2 is held", h.liveChildren("ru"))
	}
	hook.setAnswer(func(plugin.Pod) *plugin.HookResponse { return plugin.Done() })
	h.waitConverged("ru", 3, func(r string) bool { return r != old })
}

// hookFunc is a HookRunner made of a function.
type hookFunc func(ctx context.Context, event plugin.Event, pod plugin.Pod) plugin.HookResult

func (f hookFunc) RunHooks(ctx context.Context, event plugin.Event, pod plugin.Pod) plugin.HookResult {
	return f(ctx, event, pod)
}

// HasHooks implements HookRunner: a hookFunc answers every event.
func (f hookFunc) HasHooks(plugin.Event) bool { return true }

// TestPostReadyCutShortRecordsNothing: an answer given while the worker's
// context ends (leadership lost, shutdown) is not remembered, least of all a
// failure that failure_policy "ignore" turned into done; the pod stays held
// and is asked again.
func TestPostReadyCutShortRecordsNothing(t *testing.T) {
	now := time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC)
	key := backend.SetKey{Namespace: "default", Name: "web"}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	asked := 0
	hooks := hookFunc(func(context.Context, plugin.Event, plugin.Pod) plugin.HookResult {
		asked++
		cancel()
		return plugin.HookResult{Proceed: true, Failed: true, Reason: "context canceled"}
	})
	control := &podControl{log: hclog.NewNullLogger(), clock: func() time.Time { return now }, hooks: hooks}
	c := &controller{log: hclog.NewNullLogger(), clock: func() time.Time { return now }, sets: newSetStates(nil), hooks: hooks, effector: control}
	p := &pass{key: key, st: c.sets.of(key), now: now, spec: reconciler.Spec{Name: "web"}}
	act := reconciler.Action{Type: reconciler.ActionPostReady, Pod: reconciler.Pod{Ordinal: 0, AllocID: "a"}}
	var res acted
	if err := c.settle(p, act, control.execute(ctx, p, act), &res); err == nil {
		t.Fatal("an ask cut short counted as an answer")
	}
	if _, ok := p.st.memory.PostReady["a"]; ok {
		t.Fatal("an answer given as the context ended was remembered")
	}
	// On a live context the same answer counts.
	if err := c.settle(p, act, control.execute(context.Background(), p, act), &res); err != nil {
		t.Fatal(err)
	}
	if a := p.st.memory.PostReady["a"]; !a.Done || asked != 2 {
		t.Fatalf("live: answer %+v after %d askings; want done after the second", a, asked)
	}
}

// TestHookEventByCause: a drift repair and a volume growth take a healthy
// member down like an update does, so they run the pre_update hooks (a
// repair used to run none, and a claims change stopped every member with
// no hook asked).
func TestHookEventByCause(t *testing.T) {
	for _, tc := range []struct {
		cause reconciler.DeleteCause
		want  plugin.Event
		ok    bool
	}{
		{reconciler.CauseScaleDown, plugin.EventPreDelete, true},
		{reconciler.CauseSetDeleted, plugin.EventPreDelete, true},
		{reconciler.CauseUpdate, plugin.EventPreUpdate, true},
		{reconciler.CauseRepair, plugin.EventPreUpdate, true},
		{reconciler.CauseResize, plugin.EventPreUpdate, true},
		{reconciler.CauseDrain, plugin.EventPreDelete, true},
		{reconciler.CauseReplace, plugin.EventPreDelete, true},
		{reconciler.CauseEnded, "", false},
		{reconciler.CauseDuplicate, "", false},
	} {
		got, ok := hookEvent(reconciler.Action{Type: reconciler.ActionDeletePod, Cause: tc.cause})
		if got != tc.want || ok != tc.ok {
			t.Errorf("hookEvent(%s) = %q, %v; want %q, %v", tc.cause, got, ok, tc.want, tc.ok)
		}
	}
}
