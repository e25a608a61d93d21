package agent

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/nomad-statefulset/nomad-statefulset/agent/config"
	"github.com/nomad-statefulset/nomad-statefulset/backend"
	"github.com/nomad-statefulset/nomad-statefulset/backend/nomad"
	"github.com/nomad-statefulset/nomad-statefulset/client"
	"github.com/nomad-statefulset/nomad-statefulset/internal/bytesize"
	"github.com/nomad-statefulset/nomad-statefulset/plugin"
	"github.com/nomad-statefulset/nomad-statefulset/plugin/manager"
	"github.com/nomad-statefulset/nomad-statefulset/reconciler"
)

// scriptedRunner answers commands as a test says, and records them.
type scriptedRunner struct {
	answer func(allocID, command string, env map[string]string) (int, string, error)
	ran    []map[string]string
	allocs []string
}

func (s *scriptedRunner) RunCommand(_ context.Context, _, _, allocID, _, command string, env map[string]string) (int, string, error) {
	s.ran, s.allocs = append(s.ran, env), append(s.allocs, allocID)
	return s.answer(allocID, command, env)
}

// askRig is a podControl over three running pods of set "pg", whose commands
// a scriptedRunner answers.
func askRig(answer func(allocID, command string, env map[string]string) (int, string, error)) (*podControl, *pass, *scriptedRunner) {
	now := time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC)
	run := &scriptedRunner{answer: answer}
	e := &podControl{log: hclog.NewNullLogger(), clock: func() time.Time { return now }, exec: run}
	p := &pass{key: backend.SetKey{Namespace: "default", Name: "pg"}, st: &setState{}, now: now,
		spec: reconciler.Spec{Name: "pg", ExecTask: "postgres", DisruptionCheck: "check", SwitchoverCommand: "promote"}}
	for o := 0; o < 3; o++ {
		p.obs.Pods = append(p.obs.Pods, nomad.PodDetail{Pod: reconciler.Pod{Ordinal: o}, JobID: reconciler.PodName("pg", o), AllocID: "alloc-" + string(rune('0'+o))})
	}
	return e, p, run
}

// runAsk carries out act as the controller does: the effect, then its
// result settled into the set's memory. It returns the effect's outcome
// and the hold it became, if any.
func runAsk(t *testing.T, e *podControl, p *pass, act reconciler.Action) (outcome, *reconciler.Hold) {
	t.Helper()
	c := &controller{log: hclog.NewNullLogger(), clock: e.clock, sets: newSetStates(nil), effector: e, expectTTL: time.Minute}
	o := e.execute(context.Background(), p, act)
	var res acted
	if err := c.settle(p, act, o, &res); err != nil {
		t.Fatalf("%s: %v", act.Type, err)
	}
	if len(res.held) == 0 {
		return o, nil
	}
	return o, &res.held[0]
}

// TestDisruptionCheckRunsInAnotherPod: the check runs in the pod the
// reconciler named, with the env of DESIGN §3b; a pass clears the pod for a
// while, a refusal holds it with the command's output and a growing backoff,
// and a check that cannot run at all holds it too, saying why.
func TestDisruptionCheckRunsInAnotherPod(t *testing.T) {
	exit, out := 0, ""
	e, p, run := askRig(func(string, string, map[string]string) (int, string, error) { return exit, out, nil })
	act := reconciler.Action{Type: reconciler.ActionCheckDisruption, Ordinal: 2, Target: 0}
	if _, h := runAsk(t, e, p, act); h != nil {
		t.Fatalf("a pass held: %+v", h)
	}
	env := run.ran[0]
	if run.allocs[0] != "alloc-0" || env["NSS_SET"] != "pg" || env["NSS_POD"] != "pg-0" || env["NSS_ORDINAL"] != "0" ||
		env["NSS_TARGET_POD"] != "pg-2" || env["NSS_TARGET_ORDINAL"] != "2" {
		t.Fatalf("ran in %s with %v", run.allocs[0], env)
	}
	if c := p.st.memory.Cleared; len(c) != 1 || c[0].Ordinal != 2 || !c[0].Until.After(p.now) {
		t.Fatalf("clearances after a pass: %+v", c)
	}
	if env["NSS_SCOPE"] != "pod" {
		t.Fatalf("NSS_SCOPE %q for one pod's check, want pod", env["NSS_SCOPE"])
	}
	// A Recreate's one check is about the whole set.
	whole := act
	whole.Revision = reconciler.Revision{Name: "pg-2"}
	runAsk(t, e, p, whole)
	if got := run.ran[len(run.ran)-1]["NSS_SCOPE"]; got != "set" {
		t.Fatalf("NSS_SCOPE %q for a Recreate's check, want set", got)
	}

	exit, out = 1, "replica lag\n 12 MB"
	var waits []time.Duration
	for i := 0; i < 2; i++ {
		_, h := runAsk(t, e, p, act)
		if h == nil || h.Reason != reconciler.HoldDisruptionCheckFailed || h.Step != reconciler.StepDisrupt ||
			!strings.Contains(h.Message, "replica lag 12 MB") {
			t.Fatalf("a refusal gave %+v", h)
		}
		waits = append(waits, h.Until.Sub(p.now))
	}
	if waits[1] <= waits[0] {
		t.Fatalf("backoff did not grow: %v", waits)
	}

	e.exec = nil
	if _, h := runAsk(t, e, p, act); h == nil || !strings.Contains(h.Message, "could not run the disruption check") {
		t.Fatalf("a check that cannot run gave %+v", h)
	}
}

// TestSwitchoverWaitsForTheLeaderToMove: a switchover that ran holds the old
// leader (SwitchingOver) until another pod leads, and the switch is
// announced once, with how long it took; one that fails is held and says why.
func TestSwitchoverWaitsForTheLeaderToMove(t *testing.T) {
	exit := 0
	e, p, run := askRig(func(string, string, map[string]string) (int, string, error) { return exit, "promoting", nil })
	act := reconciler.Action{Type: reconciler.ActionSwitchover, Ordinal: 1, Target: 2}
	if _, h := runAsk(t, e, p, act); h != nil {
		t.Fatalf("a switchover that ran held: %+v", h)
	}
	if run.allocs[0] != "alloc-1" || run.ran[0]["NSS_TARGET_POD"] != "pg-2" {
		t.Fatalf("switchover ran in %s with %v", run.allocs[0], run.ran[0])
	}
	holds := p.st.memory.Holds
	if len(holds) != 1 || holds[0].Reason != reconciler.HoldSwitchingOver || holds[0].Ordinal != 1 ||
		holds[0].Until.Sub(p.now) != reconciler.DefaultSwitchoverTimeout {
		t.Fatalf("holds after a switchover: %+v", holds)
	}
	// The next decisions see the leader move; the agent announces the
	// change the reconciler reports, once.
	c := &controller{log: hclog.NewNullLogger(), clock: e.clock, sets: newSetStates(nil), effector: e}
	decide := func(pods ...reconciler.Pod) {
		p.now = p.now.Add(time.Second)
		out := reconciler.Reconcile(reconciler.Input{Spec: p.spec, Now: p.now, Memory: p.st.memory, Pods: pods})
		if _, err := c.act(context.Background(), p, reconciler.Output{Memory: out.Memory, LeaderChange: out.LeaderChange}); err != nil {
			t.Fatal(err)
		}
	}
	decide(reconciler.Pod{Ordinal: 1, Leader: true})
	decide(reconciler.Pod{Ordinal: 1, Leader: true}, reconciler.Pod{Ordinal: 2, Leader: true})
	if holds := p.st.memory.Holds; len(holds) != 1 {
		t.Fatalf("holds while pg-1 and pg-2 both look like leaders: %+v", holds)
	}
	decide(reconciler.Pod{Ordinal: 2, Leader: true})
	decide(reconciler.Pod{Ordinal: 2, Leader: true})
	d, _ := c.sets.get(p.key)
	if n := len(d.Events); n != 1 || !strings.Contains(d.Events[0].Message, "pg-2 leads, after a switchover from pg-1 in 2s") {
		t.Fatalf("events: %+v", d.Events)
	}
	// The switch is done: the hold is gone, and does not come back to
	// life should pg-1 lead again before the command's timeout.
	if holds := p.st.memory.Holds; len(holds) != 0 {
		t.Fatalf("holds once only pg-2 leads: %+v", holds)
	}

	exit = 3
	if _, h := runAsk(t, e, p, act); h == nil || h.Reason != reconciler.HoldSwitchoverFailed || !strings.Contains(h.Message, "exit 3") {
		t.Fatalf("a failed switchover gave %+v", h)
	}
}

// TestDisruptionCheckHoldsARolloutOnSimulatedNomad: the whole agent on the
// simulated Nomad, with a disruption check the application refuses three
// times: the rollout holds (Held, DisruptionCheckFailed, with the
// command's output), no Ready pod goes down without a passing answer, and
// the rollout completes once the check passes.
func TestDisruptionCheckHoldsARolloutOnSimulatedNomad(t *testing.T) {
	fc := newFakeClock()
	h := startAgentOnClock(t, fastSim(), fc, nil)
	var mu sync.Mutex
	refusals, passes := 0, 0
	h.sim.SetExec(func(allocID, task string, command []string, env map[string]string) (int, string, error) {
		mu.Lock()
		defer mu.Unlock()
		if refusals < 3 {
			refusals++
			return 1, "standby lag too high", nil
		}
		passes++
		return 0, "", nil
	})
	meta := map[string]string{"statefulset_replicas": "3", "statefulset_disruption_check": "check-lag"}
	h.register(parentJob("dc", meta, "v1"))
	h.waitConverged("dc", 3, nil)
	first := h.healthyChildren("dc")[0]
	h.register(parentJob("dc", meta, "v2"))
	h.waitFor("the rollout to be held by the check", 20*time.Second, func() (bool, string) {
		c, ok := heldCondition(h.view("dc"))
		return ok && c.Reason == reconciler.HoldDisruptionCheckFailed && strings.Contains(c.Message, "standby lag too high"), fmt.Sprintf("%+v", c)
	})
	// The refusals back off (5s, 10s, 20s): time moves on the agent's clock.
	for i := 0; i < 10; i++ {
		fc.Advance(30 * time.Second)
		h.settle()
	}
	h.waitConverged("dc", 3, func(rev string) bool { return rev != first })
	mu.Lock()
	defer mu.Unlock()
	if passes < 3 {
		t.Fatalf("3 pods went down with %d passing checks", passes)
	}
}

// TestClaimGrowthOnSimulatedNomad: the whole agent on the simulated Nomad.
// Raising a claim's capacity grows each volume in place, one pod at a time,
// each named in a VolumeExpanded event with its sizes, and the pods come
// back on their volumes. With the mkdir plugin, which cannot expand, the
// provisioner says so before anything is stopped: the set says the volumes
// keep their size, an event names the class once, and no pod is restarted,
// not even the first.
func TestClaimGrowthOnSimulatedNomad(t *testing.T) {
	for _, tc := range []struct {
		plugin string
		grows  bool
	}{{"lvm", true}, {"mkdir", false}} {
		t.Run(tc.plugin, func(t *testing.T) {
			h := startAgentWith(t, fastSim(), func(o *Options) {
				o.Plugins = manager.ConfigOf(config.Default())
				o.Plugins.VolumeProvisioner.Config = map[string]string{"plugin_id": tc.plugin}
			})
			meta := map[string]string{"statefulset_replicas": "3", "statefulset_claim_data_capacity": "10MiB"}
			h.register(parentJob("grow", meta, "v1"))
			h.waitConverged("grow", 3, nil)
			created, stopped := h.sim.Calls()[nomad.VerbRegisterJob], h.sim.Calls()[nomad.VerbDeregisterJob]
			meta["statefulset_claim_data_capacity"] = "20MiB"
			h.register(parentJob("grow", meta, "v1"))
			if tc.grows {
				h.waitFor("every volume to grow", 20*time.Second, func() (bool, string) {
					vols := h.sim.HostVolumes()
					for _, v := range vols {
						if v.CapacityBytes < 20<<20 {
							return false, fmt.Sprintf("%s at %d", v.Name, v.CapacityBytes)
						}
					}
					return len(vols) == 3, fmt.Sprint(len(vols), " volumes")
				})
				h.waitConverged("grow", 3, nil)
				if n := countEvents(h.view("grow"), "VolumeExpanded", "10MiB → 20MiB"); n != 3 {
					t.Fatalf("%d VolumeExpanded events, want 3: %+v", n, h.view("grow").Events)
				}
				return
			}
			h.waitFor("the set to say its volumes keep their size", 20*time.Second, func() (bool, string) {
				d := h.view("grow")
				for _, c := range d.Status.Conditions {
					if c.Type == string(reconciler.ConditionVolumeClaimRefused) && strings.Contains(c.Message, "cannot expand") {
						return true, ""
					}
				}
				return false, fmt.Sprintf("%+v", d.Status.Conditions)
			})
			// The condition comes out of the pass that would have taken
			// the first pod down for the growth: once it shows, the
			// decision is made.
			h.waitConverged("grow", 3, nil)
			h.settle()
			// The one registration is the test's own, of the parent.
			if n := h.sim.Calls()[nomad.VerbRegisterJob] - created; n != 1 {
				t.Fatalf("%d registrations after the claim grew on a provisioner that cannot expand; want the parent's alone", n)
			}
			if n := h.sim.Calls()[nomad.VerbDeregisterJob] - stopped; n != 0 {
				t.Fatalf("%d children stopped after the claim grew on a provisioner that cannot expand; want none", n)
			}
			if n := countEvents(h.view("grow"), "ExpandUnsupported", `class (default) cannot expand volumes (Nomad's mkdir plugin`); n != 1 {
				t.Fatalf("%d ExpandUnsupported events naming the class and why, want 1: %+v", n, h.view("grow").Events)
			}
			if n := countEvents(h.view("grow"), "DeletePod", ""); n != 0 {
				t.Fatalf("%d DeletePod events: %+v", n, h.view("grow").Events)
			}
		})
	}
}

// growthHooks is a built-in pre_update hook for TestClaimGrowthRunsPreUpdateHooks:
// it records, for each call, the pod and the capacity its volume had then
// (capacity), and says wait while held.
type growthHooks struct {
	fakeHooks
	capacity func(pod string) int64
	mu       sync.Mutex
	held     bool
	calls    []string
}

func (g *growthHooks) PreUpdate(_ context.Context, p plugin.Pod) (*plugin.HookResponse, error) {
	size := g.capacity(p.Name)
	g.mu.Lock()
	defer g.mu.Unlock()
	g.calls = append(g.calls, fmt.Sprintf("%s alloc=%v at %s", p.Name, p.AllocID != "", bytesize.Format(size)))
	if g.held {
		return plugin.Wait(20*time.Millisecond, "replica catching up"), nil
	}
	return plugin.Done(), nil
}

func (g *growthHooks) seen() []string {
	g.mu.Lock()
	defer g.mu.Unlock()
	return slices.Clone(g.calls)
}

// TestClaimGrowthRunsPreUpdateHooks: a pod stopped to grow its volume is
// first put to the pre_update hooks, as a rolling update's pod is: each of
// the three is asked about while it runs and its volume still has the old
// size, and a hook that says wait holds the growth, nothing stopped or
// grown, until it says done.
func TestClaimGrowthRunsPreUpdateHooks(t *testing.T) {
	var h *harness
	hooks := &growthHooks{capacity: func(pod string) int64 {
		for _, v := range h.sim.HostVolumes() {
			if v.Name == "data-"+pod {
				return v.CapacityBytes
			}
		}
		return -1
	}}
	h = startAgentWith(t, fastSim(), func(o *Options) {
		withHooks(hooks)(o)
		o.Plugins.VolumeProvisioner.Config = map[string]string{"plugin_id": "lvm"}
	})
	meta := map[string]string{"statefulset_replicas": "3", "statefulset_claim_data_capacity": "10MiB"}
	h.register(parentJob("gh", meta, "v1"))
	h.waitConverged("gh", 3, nil)
	if got := hooks.seen(); len(got) != 0 {
		t.Fatalf("pre_update asked before any growth: %v", got)
	}
	stopped := h.sim.Calls()[nomad.VerbDeregisterJob]
	hooks.mu.Lock()
	hooks.held = true
	hooks.mu.Unlock()
	meta["statefulset_claim_data_capacity"] = "20MiB"
	h.register(parentJob("gh", meta, "v1"))
	h.waitFor("the growth of gh-2 to be held by its pre_update hook", 20*time.Second, func() (bool, string) {
		c, ok := heldCondition(h.view("gh"))
		return ok && c.Reason == "HookWaiting" && strings.Contains(c.Message, `hook "drain" (pre_update) on pod gh-2 is waiting: replica catching up`),
			fmt.Sprintf("%+v", c)
	})
	// The hook still holds: nothing can have been stopped or grown.
	if n := h.sim.Calls()[nomad.VerbDeregisterJob] - stopped; n != 0 {
		t.Fatalf("%d children stopped while pre_update held the growth", n)
	}
	for _, v := range h.sim.HostVolumes() {
		if v.CapacityBytes != 10<<20 {
			t.Fatalf("%s has %d bytes while pre_update held the growth", v.Name, v.CapacityBytes)
		}
	}
	hooks.mu.Lock()
	hooks.held = false
	hooks.mu.Unlock()
	h.waitFor("every volume to grow", 20*time.Second, func() (bool, string) {
		for _, v := range h.sim.HostVolumes() {
			if v.CapacityBytes != 20<<20 {
				return false, fmt.Sprintf("%s at %d", v.Name, v.CapacityBytes)
			}
		}
		return true, ""
	})
	h.waitConverged("gh", 3, nil)
	seen := hooks.seen()
	for _, pod := range []string{"gh-0", "gh-1", "gh-2"} {
		if !slices.Contains(seen, pod+" alloc=true at 10MiB") {
			t.Errorf("pre_update was not asked about %s while it ran on its 10MiB volume: %v", pod, seen)
		}
		if slices.Contains(seen, pod+" alloc=true at 20MiB") {
			t.Errorf("pre_update asked about %s again after its volume grew: %v", pod, seen)
		}
	}
	if n := countEvents(h.view("gh"), "VolumeExpanded", "10MiB → 20MiB"); n != 3 {
		t.Fatalf("%d VolumeExpanded events, want 3: %+v", n, h.view("gh").Events)
	}
}

// countEvents counts the events of a type whose message holds text.
func countEvents(d client.SetDetail, typ, text string) int {
	n := 0
	for _, e := range d.Events {
		if e.Type == typ && strings.Contains(e.Message, text) {
			n++
		}
	}
	return n
}

// TestUnknownClassHoldsNamingTheKey: a claim naming a storage class the
// agent has no volume_provisioner block for holds that ordinal's creation,
// and the set says which key names it; nothing is created.
func TestUnknownClassHoldsNamingTheKey(t *testing.T) {
	h := startAgent(t, fastSim())
	h.register(parentJob("uc", map[string]string{"statefulset_replicas": "1", "statefulset_claim_data_class": "fsat"}, "v1"))
	h.waitFor("the set to name the unknown class's key", 20*time.Second, func() (bool, string) {
		c, ok := heldCondition(h.view("uc"))
		return ok && c.Reason == "UnknownClass" && strings.Contains(c.Message, "statefulset_claim_data_class") &&
			strings.Contains(c.Message, "fsat"), fmt.Sprintf("%+v", c)
	})
	if n := len(h.sim.HostVolumes()); n != 0 {
		t.Fatalf("%d volumes created for a claim of an unknown class", n)
	}
}
