package e2e

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/nomad-statefulset/nomad-statefulset/client"
)

// everyDayWindow is a statefulset_maintenance_window of every day, from
// start for length, in UTC (minutes are its grain).
func everyDayWindow(start time.Time, length time.Duration) string {
	start = start.UTC()
	return start.Format("15:04") + "-" + start.Add(length).Format("15:04") + " UTC"
}

// condOf returns the condition of type typ in a set's status.
func condOf(st client.SetDetail, typ string) (client.Condition, bool) {
	for _, c := range st.Status.Conditions {
		if c.Type == typ {
			return c, true
		}
	}
	return client.Condition{}, false
}

// TestMaintenanceWindow runs DESIGN §3b's maintenance window on real Nomad
// and Consul: with the window closed, a template change restarts no child,
// the set shows WaitingForMaintenanceWindow with the next start (in the API
// and in `status`), and the short progress deadline does not fire while it
// waits; `rollout approve` lets exactly one pod through; and once a window
// opens (with no other event: the daemon's requeue) the rollout completes.
func TestMaintenanceWindow(t *testing.T) {
	c := NewCluster(t)
	d := c.StartDaemon()
	now := time.Now()
	closed := everyDayWindow(now.Add(6*time.Hour), time.Hour)
	RegisterHCL(t, c.Nomad.Client, setSpec{name: "mw", noVolume: true, meta: map[string]string{
		"statefulset_replicas":           "3",
		"statefulset_maintenance_window": closed,
		"statefulset_progress_deadline":  "15s",
	}}.hcl())
	old := waitConverged(t, c, d, "mw", 3, nil)[0]

	// Which allocation each child runs, to see that none is restarted.
	allocs := map[string]string{}
	for o := 0; o < 3; o++ {
		id := fmt.Sprintf("mw-%d", o)
		allocs[id] = Allocations(t, c.Nomad.Client, "default", id)[0].ID
	}
	update := newTemplate(t, c, d, "mw", old)
	var cond client.Condition
	Eventually(t, time.Minute, "the set to wait for its maintenance window", func() error {
		st, err := setStatus(d, "mw")
		if err != nil {
			return err
		}
		var ok bool
		if cond, ok = condOf(st, "WaitingForMaintenanceWindow"); !ok || !cond.Status {
			return fmt.Errorf("no WaitingForMaintenanceWindow condition: %+v", st.Status.Conditions)
		}
		return nil
	})
	if cond.Reason != "OutsideMaintenanceWindow" || !strings.Contains(cond.Message, closed) || !strings.Contains(cond.Message, "the next window opens at ") {
		t.Fatalf("condition %+v, want it to name the window %q and its next start", cond, closed)
	}
	// Longer than the progress deadline: nothing is restarted, and the
	// set is not stuck.
	deadline := time.Now().Add(25 * time.Second)
	for time.Now().Before(deadline) {
		st, err := setStatus(d, "mw")
		if err != nil {
			t.Fatal(err)
		}
		if c, ok := condOf(st, "RolloutStuck"); ok && c.Status {
			t.Fatalf("RolloutStuck while waiting for the window: %+v", c)
		}
		if del := deletedPods(st); len(del) > 0 {
			t.Fatalf("pods deleted outside the window: %v", del)
		}
		for id, alloc := range allocs {
			got := Allocations(t, c.Nomad.Client, "default", id)
			if len(got) != 1 || got[0].ID != alloc {
				t.Fatalf("%s restarted outside the window: allocations %d, newest %s, was %s", id, len(got), got[0].ID, alloc)
			}
		}
		time.Sleep(time.Second)
	}
	out, err := d.CLI("status", "mw")
	if err != nil {
		t.Fatalf("status: %v\n%s", err, out)
	}
	for _, want := range []string{"Maintenance Window", closed, "WaitingForMaintenanceWindow", "OutsideMaintenanceWindow"} {
		if !strings.Contains(out, want) {
			t.Errorf("status does not show %q:\n%s", want, out)
		}
	}

	// rollout approve: one pod goes, the highest, and no other.
	if out, err := d.CLI("rollout", "approve", "mw"); err != nil {
		t.Fatalf("rollout approve: %v\n%s", err, out)
	}
	waitConverged(t, c, d, "mw", 3, func(o int, r string) error {
		if (o == 2) != (r == update) {
			return fmt.Errorf("ordinal %d at %s after one approval (update %s)", o, r, update)
		}
		return nil
	})
	time.Sleep(5 * time.Second)
	st, err := setStatus(d, "mw")
	if err != nil {
		t.Fatal(err)
	}
	if del := deletedPods(st); strings.Join(del, ",") != "mw-2" {
		t.Fatalf("one approval deleted %v, want mw-2 alone", del)
	}
	if c, ok := condOf(st, "WaitingForMaintenanceWindow"); !ok || !c.Status {
		t.Fatalf("not waiting for the window after the approved step: %+v", st.Status.Conditions)
	}

	// A window that opens at the next minute at least 30s away: setting
	// it is the last event; the daemon must look again when it opens.
	opens := time.Now().Add(30 * time.Second).Truncate(time.Minute).Add(time.Minute)
	updateParent(t, c, "mw", setMeta("statefulset_maintenance_window", everyDayWindow(opens, 10*time.Minute)))
	time.Sleep(time.Until(opens) - 5*time.Second)
	if st, err := setStatus(d, "mw"); err != nil || len(deletedPods(st)) != 1 {
		t.Fatalf("pods deleted before the window opened: %v %v", deletedPods(st), err)
	}
	waitConverged(t, c, d, "mw", 3, func(o int, r string) error {
		if r != update {
			return fmt.Errorf("ordinal %d still at %s", o, r)
		}
		return nil
	})
	st, err = setStatus(d, "mw")
	if err != nil {
		t.Fatal(err)
	}
	if c, ok := condOf(st, "WaitingForMaintenanceWindow"); ok && c.Status {
		t.Fatalf("still waiting after the rollout: %+v", c)
	}
	if c, ok := condOf(st, "RolloutStuck"); ok && c.Status {
		t.Fatalf("RolloutStuck after the rollout: %+v", c)
	}
	t.Logf("the window opened at %s; rollout done at %s", opens.Format(time.RFC3339), time.Now().UTC().Format(time.RFC3339))
}
