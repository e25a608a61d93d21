package e2e

import (
	"fmt"
	"strings"
	"testing"

	nomadapi "github.com/hashicorp/nomad/api"
)

// TestScenarioClaimsChangeWithinBudget is the scenario of the safety issue
// on a real Nomad: a 3-replica set with two group host volumes claims only
// "data"; changing statefulset_volume_claims to "data,logs" makes every
// child drift from what its revision renders. That used to stop all three
// children within a second. Now the children are replaced one at a time,
// highest ordinal first, and a watchdog fed by Nomad's event stream checks
// that no more than statefulset_max_unavailable (1) ordinals are ever down
// at once, and that no ordinal ever runs twice.
func TestScenarioClaimsChangeWithinBudget(t *testing.T) {
	c := NewCluster(t)
	d := c.StartDaemon()

	// "logs" is a plain shared host volume while it is not a claim.
	_, _, err := c.Nomad.Client.HostVolumes().Create(&nomadapi.HostVolumeCreateRequest{Volume: &nomadapi.HostVolume{
		Namespace: "default", Name: "logs", PluginID: "mkdir",
		RequestedCapabilities: []*nomadapi.HostVolumeCapability{{
			AccessMode: nomadapi.HostVolumeAccessModeSingleNodeMultiWriter, AttachmentMode: nomadapi.HostVolumeAttachmentModeFilesystem,
		}},
	}}, nil)
	if err != nil {
		t.Fatalf("creating the shared logs volume: %v", err)
	}
	spec := setSpec{name: "cl", meta: map[string]string{"statefulset_replicas": "3"}, group: `
    volume "logs" {
      type            = "host"
      source          = "logs"
      access_mode     = "single-node-multi-writer"
      attachment_mode = "file-system"
    }`}
	RegisterHCL(t, c.Nomad.Client, spec.hcl())
	waitConverged(t, c, d, "cl", 3, nil)
	c.Watchdog.TrackDown("cl", 3)

	updateParent(t, c, "cl", setMeta("statefulset_volume_claims", "data,logs"))
	Eventually(t, convergeTimeout, "every child of cl to mount its own logs volume", func() error {
		if vols := HostVolumes(t, c.Nomad.Client, "default", "logs-cl-"); len(vols) != 3 {
			return fmt.Errorf("%d logs-cl-* volumes", len(vols))
		}
		for o := 0; o < 3; o++ {
			j, _, err := c.Nomad.Client.Jobs().Info(fmt.Sprintf("cl-%d", o), nil)
			if err != nil {
				return err
			}
			if src := j.TaskGroups[0].Volumes["logs"].Source; src != fmt.Sprintf("logs-cl-%d", o) {
				return fmt.Errorf("cl-%d mounts logs from %q", o, src)
			}
		}
		return nil
	})
	waitConverged(t, c, d, "cl", 3, nil)

	if n, at := c.Watchdog.MaxDown("cl"); n > 1 {
		t.Fatalf("%d ordinals were down at once (%s); statefulset_max_unavailable is 1", n, at)
	}
	st, err := setStatus(d, "cl")
	if err != nil {
		t.Fatal(err)
	}
	if got := strings.Join(deletedPods(st), ","); got != "cl-2,cl-1,cl-0" {
		t.Fatalf("drift replacements %q, want cl-2,cl-1,cl-0 in that order", got)
	}
}
