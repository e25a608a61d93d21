package e2e

import (
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	nomadapi "github.com/hashicorp/nomad/api"

	"github.com/nomad-statefulset/nomad-statefulset/backend/nomad"
	"github.com/nomad-statefulset/nomad-statefulset/client"
	"github.com/nomad-statefulset/nomad-statefulset/internal/testagent"
)

const gib = 1 << 30

// TestStorageExample runs examples/storage.nomad.hcl as it is, on a real
// Nomad, under a daemon whose "fast" class is the test's sized host volume
// plugin (the example asks for a class of that name; which plugin serves
// it is the agent's business, the only thing the test provides). Each of
// db's three pods gets both its claims' volumes, each made by its class's
// plugin at the size its claim asks, as Nomad's volume API reports them;
// the daemon shows them so. Then the claim is raised as the example's
// comment says ("40GiB"): every data volume grows in place, one pod at a
// time, and the wal volumes are left as they were.
func TestStorageExample(t *testing.T) {
	root, err := testagent.ModuleRoot()
	if err != nil {
		t.Fatal(err)
	}
	c := NewCluster(t, testagent.WithHostVolumePlugin("sized", testagent.SizedHostVolumePlugin))
	d := c.StartDaemon(storageAgentHCL)
	events := recordEvents(t, d, "db")
	RegisterFile(t, c.Nomad.Client, filepath.Join(root, "examples", "storage.nomad.hcl"))
	waitConverged(t, c, d, "db", 3, nil)

	// Nomad's own record of each volume: the fast class's plugin and size
	// for data, the default class's (mkdir, which has no size, so the
	// example asks none) for wal.
	for _, v := range fullVolumes(t, c, "data-db-", 3) {
		if v.PluginID != "sized" || v.Parameters[nomad.ClassParameter] != "fast" || v.CapacityBytes != 10*gib ||
			v.RequestedCapacityMinBytes != 10*gib || v.RequestedCapacityMaxBytes != 20*gib {
			t.Errorf("%s: plugin %q, class %q, capacity %d, requested %d..%d; want sized, fast, 10GiB, 10GiB..20GiB",
				v.Name, v.PluginID, v.Parameters[nomad.ClassParameter], v.CapacityBytes, v.RequestedCapacityMinBytes, v.RequestedCapacityMaxBytes)
		}
	}
	wal := map[string]string{}
	for _, v := range fullVolumes(t, c, "wal-db-", 3) {
		wal[v.Name] = v.ID
		if v.PluginID != "mkdir" || v.Parameters[nomad.ClassParameter] != "" || v.CapacityBytes != 0 || v.RequestedCapacityMinBytes != 0 {
			t.Errorf("%s: plugin %q, class %q, capacity %d, requested %d; want mkdir, no class, 0, 0",
				v.Name, v.PluginID, v.Parameters[nomad.ClassParameter], v.CapacityBytes, v.RequestedCapacityMinBytes)
		}
	}
	// The daemon shows every pod's two volumes with their class and size.
	exampleClaims(t, d, 10*gib)
	out, err := d.CLI("status", "db")
	if err != nil || !strings.Contains(out, "data-db-2 (fast, 10.0 GiB)") {
		t.Errorf("status db (%v) does not show data-db-2 (fast, 10.0 GiB):\n%s", err, out)
	}
	t.Logf("status db:\n%s", out)

	// From here on at most one ordinal of db may be down at once (the
	// budget, statefulset_max_unavailable's default of 1).
	c.Watchdog.TrackDown("db", 3)
	start := time.Now()
	updateParent(t, c, "db", setMeta("statefulset_claim_data_capacity", "40GiB"))
	Eventually(t, convergeTimeout, "db's data volumes to grow to 40GiB", func() error {
		for _, v := range HostVolumes(t, c.Nomad.Client, "default", "data-db-") {
			if v.CapacityBytes != 40*gib || v.State != nomadapi.HostVolumeStateReady {
				return fmt.Errorf("%s: %s, %d bytes", v.Name, v.State, v.CapacityBytes)
			}
		}
		return nil
	})
	waitConverged(t, c, d, "db", 3, nil)
	exampleClaims(t, d, 40*gib)
	t.Logf("db's 3 data volumes grew 10GiB → 40GiB in %s", time.Since(start).Round(time.Millisecond))
	var order []string
	for _, e := range events.expanded("40GiB") {
		order = append(order, strings.SplitN(e.Message, ":", 2)[0])
	}
	if got := strings.Join(order, ","); got != "data-db-2,data-db-1,data-db-0" {
		t.Errorf("VolumeExpanded to 40GiB for %q; want data-db-2,data-db-1,data-db-0, once each, in that order", got)
	}
	if n, at := c.Watchdog.MaxDown("db"); n > 1 {
		t.Errorf("%d ordinals of db were down at once (%s)", n, at)
	}
	for _, v := range fullVolumes(t, c, "wal-db-", 3) {
		if v.ID != wal[v.Name] || v.RequestedCapacityMinBytes != 0 {
			t.Errorf("%s after data grew: ID %s (was %s), requested %d; want it untouched", v.Name, v.ID, wal[v.Name], v.RequestedCapacityMinBytes)
		}
	}
}

// exampleClaims waits until the daemon shows each db pod with its data
// volume of class fast at data bytes, and its wal volume of the default
// class asking no size (mkdir has none).
func exampleClaims(t *testing.T, d *Daemon, data int64) {
	t.Helper()
	Eventually(t, convergeTimeout, fmt.Sprintf("the daemon to show db's volumes with data at %d bytes", data), func() error {
		st, err := setStatus(d, "db")
		if err != nil {
			return err
		}
		if len(st.Pods) != 3 {
			return fmt.Errorf("%d pods", len(st.Pods))
		}
		for _, p := range st.Pods {
			want := map[string]client.ClaimVolume{
				"data": {Claim: "data", Name: "data-" + p.Name, Class: "fast", Capacity: data, Requested: data},
				"wal":  {Claim: "wal", Name: "wal-" + p.Name},
			}
			if len(p.Claims) != len(want) {
				return fmt.Errorf("%s claims %+v", p.Name, p.Claims)
			}
			for _, got := range p.Claims {
				if got != want[got.Claim] {
					return fmt.Errorf("%s: %+v, want %+v", p.Name, got, want[got.Claim])
				}
			}
		}
		return nil
	})
}
