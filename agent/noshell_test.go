package agent

import (
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nomad-statefulset/nomad-statefulset/backend/nomad"
	"github.com/nomad-statefulset/nomad-statefulset/internal/nomadsim"
	"github.com/nomad-statefulset/nomad-statefulset/reconciler"
)

// shellSwitch plays a task image with or without /bin/sh on the simulator.
// Without it, a command gets what real Nomad's exec driver gives it
// (TestRealNomadExecWithoutShell): no error, no exit code, no output; the
// exec never ends, and ExecAlloc returns at its deadline. With it, every
// command exits 0.
type shellSwitch struct {
	mu      sync.Mutex
	missing bool
	// hung is closed at the end of the test, to let the commands that
	// never answered go.
	hung chan struct{}
	ran  int
}

func newShellSwitch(t *testing.T) *shellSwitch {
	s := &shellSwitch{missing: true, hung: make(chan struct{})}
	t.Cleanup(func() { close(s.hung) })
	return s
}

func (s *shellSwitch) exec() nomadsim.ExecFunc {
	return func(allocID, task string, command []string, env map[string]string) (int, string, error) {
		s.mu.Lock()
		s.ran++
		missing := s.missing
		s.mu.Unlock()
		if missing {
			<-s.hung
			return -1, "", nil
		}
		return 0, "", nil
	}
}

func (s *shellSwitch) restore() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.missing = false
}

// waitHeld waits for the set's Held condition with the reason given and a
// message holding every part.
func (h *harness) waitHeld(set, reason string, parts ...string) string {
	h.t.Helper()
	var msg string
	h.waitFor("the set to be held ("+reason+")", 20*time.Second, func() (bool, string) {
		c, ok := heldCondition(h.view(set))
		if !ok || c.Reason != reason {
			return false, fmt.Sprintf("%+v", c)
		}
		for _, p := range parts {
			if !strings.Contains(c.Message, p) {
				return false, c.Message
			}
		}
		msg = c.Message
		return true, ""
	})
	return msg
}

// TestDisruptionCheckWithoutShellHolds: a disruption check in a task that
// has no /bin/sh cannot run, and real Nomad says nothing about it: the
// rollout is held (DisruptionCheckFailed) at the command's timeout, with a
// message that names the missing shell as a cause, no Ready pod is taken
// down meanwhile, and nothing crashes; once the image has a shell again the
// rollout goes on, each pod asked first.
func TestDisruptionCheckWithoutShellHolds(t *testing.T) {
	fc := newFakeClock()
	var rec *takedowns
	h := startAgentOnClock(t, fastSim(), fc, func(o *Options) {
		wrapNomad(o, func(api nomad.API) nomad.API {
			rec = &takedowns{API: api}
			return rec
		})
	})
	sh := newShellSwitch(t)
	h.sim.SetExec(sh.exec())
	meta := map[string]string{"statefulset_replicas": "3", "statefulset_disruption_check": "/local/can-lose-one.sh",
		"statefulset_exec_timeout": "1s"}
	h.register(parentJob("dc", meta, "v1"))
	h.waitConverged("dc", 3, nil)
	first := h.healthyChildren("dc")[0]
	h.register(parentJob("dc", meta, "v2"))
	msg := h.waitHeld("dc", reconciler.HoldDisruptionCheckFailed,
		"could not run the disruption check", "statefulset_exec_timeout", "a task without /bin/sh")
	if got := rec.order(); len(got) != 0 {
		t.Fatalf("children %v stopped while the disruption check could not run (%s)", got, msg)
	}
	// Asked again with backoff, on the agent's clock: still held, still
	// nothing down. The held pass is followed by one that schedules the
	// retry on the clock: settle first, so that the advance passes it.
	h.settle()
	fc.Advance(30 * time.Second)
	h.waitFor("the check to be asked again", 20*time.Second, func() (bool, string) {
		sh.mu.Lock()
		defer sh.mu.Unlock()
		return sh.ran >= 2, fmt.Sprint(sh.ran, " commands")
	})
	h.waitHeld("dc", reconciler.HoldDisruptionCheckFailed, "a task without /bin/sh")
	if got := rec.order(); len(got) != 0 {
		t.Fatalf("children %v stopped while the disruption check could not run", got)
	}

	sh.restore()
	for i := 0; i < 20 && len(rec.order()) < 3; i++ {
		fc.Advance(time.Minute)
		h.settle()
	}
	h.waitConverged("dc", 3, func(rev string) bool { return rev != first })
	if got, want := rec.order(), []string{"dc-2", "dc-1", "dc-0"}; !slices.Equal(got, want) {
		t.Fatalf("children stopped in the order %v, want %v", got, want)
	}
}

// TestSwitchoverWithoutShellHolds: under switchover, a switchover command
// in a leader whose task has no /bin/sh cannot run: the others are updated,
// and the leader's step is held (SwitchoverFailed) naming the missing
// shell as a cause, and the leader is not taken down while no other pod
// leads.
func TestSwitchoverWithoutShellHolds(t *testing.T) {
	var rec *takedowns
	h := startAgentWith(t, fastSim(), func(o *Options) {
		wrapNomad(o, func(api nomad.API) nomad.API {
			rec = &takedowns{API: api}
			return rec
		})
	})
	sh := newShellSwitch(t)
	h.sim.SetExec(sh.exec())
	meta := map[string]string{"statefulset_leader_update": "switchover", "statefulset_switchover_command": "/local/switchover.sh",
		"statefulset_exec_timeout": "1s"}
	h.register(nativeLeaderJob("pg", meta, "v1"))
	h.waitConverged("pg", 3, nil)
	h.setLeader("pg", 1)
	h.waitLeader("pg", 1)
	h.register(nativeLeaderJob("pg", meta, "v2"))
	h.waitHeld("pg", reconciler.HoldSwitchoverFailed, "could not run the switchover in pg-1", "a task without /bin/sh")
	h.waitFor("the followers to be updated", 20*time.Second, func() (bool, string) {
		hc := h.healthyChildren("pg")
		return len(hc) == 3 && hc[0] == hc[2] && hc[0] != hc[1], fmt.Sprint(hc)
	})
	if got, want := rec.order(), []string{"pg-2", "pg-0"}; !slices.Equal(got, want) {
		t.Fatalf("children stopped: %v, want %v: the leader stays while its switchover cannot run", got, want)
	}
	h.waitLeader("pg", 1)
}
