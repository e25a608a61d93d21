//go:build realagents

package nomad_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/nomad/api"

	"github.com/nomad-statefulset/nomad-statefulset/backend"
	"github.com/nomad-statefulset/nomad-statefulset/backend/nomad"
	"github.com/nomad-statefulset/nomad-statefulset/internal/testagent"
	"github.com/nomad-statefulset/nomad-statefulset/plugin"
	"github.com/nomad-statefulset/nomad-statefulset/plugin/builtin/hostvolume"
)

// TestRealNomadExpandsAHostVolume takes one volume of a named class through
// the built-in provisioner against a real Nomad 1.10: created at 10MiB
// with its class in its parameters, expanded to 20MiB by an update of its
// ID while nothing uses it, refused a shrink and refused while a job's
// allocation claims it, in Nomad's own words mapped to the plugin
// sentinels. The watcher sees the class (read once, since a list stub has
// no parameters) and each new capacity from the volume's events.
func TestRealNomadExpandsAHostVolume(t *testing.T) {
	n := testagent.Nomad(t)
	if err := os.WriteFile(filepath.Join(n.HostVolumePluginDir, "sized"), []byte(testagent.SizedHostVolumePlugin), 0o755); err != nil {
		t.Fatal(err)
	}
	// Host volume plugins are fingerprinted when the client starts (or
	// reloads): placement asks for ${attr.plugins.host_volume.sized.version}.
	n.Restart()
	testagent.Eventually(t, time.Minute, "the node to fingerprint the sized plugin", func() error {
		node, _, err := n.Client.Nodes().Info(n.NodeID, nil)
		if err != nil {
			return err
		}
		if v := node.Attributes["plugins.host_volume.sized.version"]; v != "0.0.1" {
			return fmt.Errorf("plugins.host_volume.sized.version = %q", v)
		}
		return nil
	})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	client := nomad.NewAPI(n.Client)
	p := hostvolume.New(client, hclog.NewNullLogger())

	// Nomad 1.10.5 refuses a capacity_min without a capacity_max; the
	// provisioner asks for exactly the minimum then.
	_, err := client.CreateHostVolume(ctx, &api.HostVolume{Name: "raw", PluginID: "sized", RequestedCapacityMinBytes: 10 << 20})
	if err == nil || !strings.Contains(err.Error(), "capacity_max (0) must be larger than capacity_min (10485760)") {
		t.Fatalf("Nomad took a capacity_min alone: %v", err)
	}

	req := &plugin.VolumeRequest{Namespace: "default", Set: "web", Claim: "data", Ordinal: 0, Name: "data-web-0",
		AccessMode: "single-node-writer", AttachmentMode: "file-system",
		Config: map[string]string{"plugin_id": "sized"}, Class: "fast", CapacityMin: 10 << 20}
	v, err := p.CreateVolume(ctx, req)
	if err != nil {
		t.Fatalf("CreateVolume: %v", err)
	}
	if v.CapacityBytes != 10<<20 || v.PluginID != "sized" {
		t.Fatalf("created %+v; want plugin sized at 10MiB", v)
	}
	full, err := client.GetHostVolume(ctx, "default", v.ID)
	if err != nil || full.Parameters[nomad.ClassParameter] != "fast" || full.RequestedCapacityMinBytes != 10<<20 ||
		full.RequestedCapacityMaxBytes != 10<<20 || len(full.RequestedCapabilities) != 1 {
		t.Fatalf("Nomad holds %+v, %v", full, err)
	}
	if _, err := client.GetHostVolume(ctx, "default", "00000000-0000-0000-0000-000000000000"); !errors.Is(err, nomad.ErrNotFound) {
		t.Fatalf("GetHostVolume of an unknown ID = %v; want nomad.ErrNotFound", err)
	}
	waitVolume(t, client, "data-web-0", func(s *api.HostVolumeStub) bool { return s.State == api.HostVolumeStateReady })

	// The watcher meets the volume in its first list, which has no
	// parameters: it reads the volume once for its class.
	if _, err := client.RegisterJob(ctx, realJob(parentOf("web"), "default"), false, 0); err != nil {
		t.Fatal(err)
	}
	cache := nomad.NewCache()
	w := nomad.NewWatcher(client, cache, nomad.WatcherConfig{ResyncInterval: time.Hour}, hclog.NewNullLogger(), func(backend.SetKey) {})
	go func() { _ = w.Run(ctx) }()
	observed := func(want int64) {
		t.Helper()
		testagent.Eventually(t, time.Minute, fmt.Sprintf("the cache to show data-web-0 of class fast at %d bytes", want), func() error {
			vols := cache.Observe(backend.SetKey{Namespace: "default", Name: "web"}, []string{"data"}, time.Now()).Volumes
			if len(vols) != 1 || vols[0].Volume.Class != "fast" || vols[0].Volume.Capacity != want {
				return fmt.Errorf("observed %+v", vols)
			}
			return nil
		})
	}
	observed(10 << 20)

	// Nothing uses it: it grows in place, same ID and node.
	grow := *req
	grow.CapacityMin = 20 << 20
	big, err := p.ExpandVolume(ctx, &grow)
	if err != nil {
		t.Fatalf("ExpandVolume to 20MiB: %v", err)
	}
	if big.ID != v.ID || big.NodeID != v.NodeID || big.CapacityBytes != 20<<20 {
		t.Fatalf("expanded %+v; want %s on %s at 20MiB", big, v.ID, v.NodeID)
	}
	waitVolume(t, client, "data-web-0", func(s *api.HostVolumeStub) bool {
		return s.CapacityBytes == 20<<20 && s.State == api.HostVolumeStateReady
	})
	full, err = client.GetHostVolume(ctx, "default", v.ID)
	if err != nil || full.Parameters[nomad.ClassParameter] != "fast" || len(full.RequestedCapabilities) != 1 {
		t.Fatalf("after the expansion Nomad holds %+v, %v; want the class and capability kept", full, err)
	}
	observed(20 << 20)
	if again, err := p.ExpandVolume(ctx, &grow); err != nil || again.ModifyIndex != full.ModifyIndex {
		t.Fatalf("a repeated expansion = %+v, %v; want the volume untouched at index %d", again, err, full.ModifyIndex)
	}

	// Shrinking: Nomad refuses a capacity_max below the capacity.
	shrink := *req
	shrink.CapacityMin, shrink.CapacityMax = 10<<20, 10<<20
	_, err = p.ExpandVolume(ctx, &shrink)
	if !errors.Is(err, plugin.ErrVolumeShrink) || !strings.Contains(err.Error(), "capacity_max (10485760) cannot be less than existing provisioned capacity (20971520)") {
		t.Fatalf("a shrink = %v; want plugin.ErrVolumeShrink with Nomad's words", err)
	}
	t.Logf("shrink refused: %v", err)

	// A job's allocation claims it: Nomad refuses any update.
	job := realJob(childOf("web", 0, "r1"), "default")
	job.TaskGroups[0].Volumes = map[string]*api.VolumeRequest{"data": {Name: "data", Type: "host", Source: "data-web-0",
		AccessMode: "single-node-writer", AttachmentMode: "file-system"}}
	if _, err := client.RegisterJob(ctx, job, false, 0); err != nil {
		t.Fatal(err)
	}
	testagent.Eventually(t, 2*time.Minute, "web-0 to run on the volume", func() error {
		allocs, _, err := n.Client.Jobs().Allocations("web-0", false, nil)
		if err != nil || len(allocs) == 0 || allocs[0].ClientStatus != api.AllocClientStatusRunning {
			return fmt.Errorf("allocations %d, %v", len(allocs), err)
		}
		return nil
	})
	grow.CapacityMin = 30 << 20
	_, err = p.ExpandVolume(ctx, &grow)
	if !errors.Is(err, plugin.ErrVolumeInUse) || !strings.Contains(err.Error(), "cannot update a volume in use: claimed by allocs") {
		t.Fatalf("expanding a claimed volume = %v; want plugin.ErrVolumeInUse with Nomad's words", err)
	}
	t.Logf("in-use refused: %v", err)

	// Once the pod is gone, the same request goes through.
	if err := client.DeregisterJob(ctx, "default", "web-0", true); err != nil {
		t.Fatal(err)
	}
	testagent.Eventually(t, 2*time.Minute, "the volume to be expanded once web-0 is gone", func() error {
		v, err := p.ExpandVolume(ctx, &grow)
		if err != nil {
			return err
		}
		if v.CapacityBytes != 30<<20 {
			return fmt.Errorf("capacity %d", v.CapacityBytes)
		}
		return nil
	})
	observed(30 << 20)
}

// waitVolume waits until Nomad lists the volume called name in a state ok
// accepts.
func waitVolume(t *testing.T, client nomad.API, name string, ok func(*api.HostVolumeStub) bool) {
	t.Helper()
	testagent.Eventually(t, time.Minute, "volume "+name, func() error {
		stubs, err := client.ListHostVolumes(context.Background(), "default", name)
		if err != nil {
			return err
		}
		for _, s := range stubs {
			if s.Name == name {
				if ok(s) {
					return nil
				}
				return fmt.Errorf("%+v", *s)
			}
		}
		return fmt.Errorf("no volume %s", name)
	})
}
