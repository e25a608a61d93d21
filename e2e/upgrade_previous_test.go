package e2e

import (
	"fmt"
	"maps"
	"os"
	"testing"
	"time"

	"github.com/nomad-statefulset/nomad-statefulset/internal/testagent"
)

// previousDaemonEnv names a nomad-statefulset built from the previous
// release (make previous-release builds the commit the Makefile pins).
const previousDaemonEnv = "NSS_E2E_PREVIOUS_DAEMON"

// The daemon upgraded with sets running restarts nothing (DESIGN §2): the
// previous release creates two sets (one with volumes under OrderedReady,
// one Parallel without), is stopped, and this release starts on the same
// state. No child is registered again and no allocation is replaced, while
// this release goes on managing the sets (a scale-up after the upgrade).
func TestUpgradeFromThePreviousReleaseRestartsNothing(t *testing.T) {
	prev := os.Getenv(previousDaemonEnv)
	if prev == "" {
		t.Fatalf("%s is not set: `make previous-release` builds the previous release into .cache/previous/nomad-statefulset "+
			"(make test-e2e sets it)", previousDaemonEnv)
	}
	if _, err := os.Stat(prev); err != nil {
		t.Fatalf("%s=%s: %v (make previous-release builds it)", previousDaemonEnv, prev, err)
	}
	c := NewCluster(t)
	d := NewDaemon(t, c.Nomad, c.Consul)
	current := d.Proc
	d.Proc = testagent.NewProcess(t, "nomad-statefulset-previous", prev, nil, d.env())
	d.Proc.SetArgs("agent", "-config", d.ConfigPath)
	d.Start()
	RegisterHCL(t, c.Nomad.Client, setSpec{name: "upv", meta: map[string]string{"statefulset_replicas": "2"}}.hcl())
	RegisterHCL(t, c.Nomad.Client, setSpec{name: "upp", noVolume: true, meta: map[string]string{
		"statefulset_replicas": "3", "statefulset_pod_management_policy": "Parallel"}}.hcl())
	waitConverged(t, c, d, "upv", 2, nil)
	waitConverged(t, c, d, "upp", 3, nil)
	before := map[string]map[string]string{"upv": childState(t, c, "upv"), "upp": childState(t, c, "upp")}
	d.Stop()

	d.Proc = current
	d.Start()
	Eventually(t, time.Minute, "this release to lead and show both sets", func() error {
		for _, set := range []string{"upv", "upp"} {
			st, err := setStatus(d, set)
			if err != nil {
				return err
			}
			if st.Status.ReadyReplicas != len(before[set]) {
				return fmt.Errorf("%s: %+v", set, st.Status)
			}
		}
		return nil
	})
	time.Sleep(15 * time.Second) // a daemon that would replace a child has had time to
	for set, want := range before {
		if got := childState(t, c, set); !maps.Equal(got, want) {
			t.Fatalf("%s: the upgrade touched children:\n got %v\nwant %v\n%s", set, got, want, d.Proc.LogTail(40))
		}
	}
	updateParent(t, c, "upp", setMeta("statefulset_replicas", "4"))
	waitConverged(t, c, d, "upp", 4, nil)
	for id, s := range before["upp"] {
		if got := childState(t, c, "upp")[id]; got != s {
			t.Fatalf("the scale-up after the upgrade touched %s: %s, was %s", id, got, s)
		}
	}
}
