package hostvolume

import (
	"context"
	"strings"
	"testing"

	"github.com/hashicorp/nomad/api"

	"github.com/nomad-statefulset/nomad-statefulset/internal/nomadsim"
	"github.com/nomad-statefulset/nomad-statefulset/plugin"
)

func newSim(t *testing.T) *nomadsim.Nomad {
	t.Helper()
	sim := nomadsim.NewNomad(nomadsim.NomadConfig{})
	t.Cleanup(sim.Close)
	return sim
}

func request(name string) *plugin.VolumeRequest {
	return &plugin.VolumeRequest{Namespace: "default", Set: "web", Claim: "data", Name: name}
}

func count(t *testing.T, sim *nomadsim.Nomad, name string) int {
	t.Helper()
	stubs, err := sim.ListHostVolumes(context.Background(), "default", name)
	if err != nil {
		t.Fatalf("listing volumes: %v", err)
	}
	n := 0
	for _, s := range stubs {
		if s.Name == name {
			n++
		}
	}
	return n
}

func TestCreateVolume_settingsAndIdempotence(t *testing.T) {
	ctx := context.Background()
	sim := newSim(t)
	p := New(sim, nil)
	if err := p.SetConfig(ctx, map[string]string{"capacity_min": "1GiB"}); err != nil {
		t.Fatalf("SetConfig: %v", err)
	}
	req := request("data-web-1")
	req.AccessMode = "single-node-reader-only"
	req.Config = map[string]string{"capacity_max": "2GiB", "parameters.mode": "0700"}
	v, err := p.CreateVolume(ctx, req)
	if err != nil {
		t.Fatalf("CreateVolume: %v", err)
	}
	if v.ID == "" || v.Name != "data-web-1" || v.PluginID != DefaultPluginID || v.NodeID == "" {
		t.Fatalf("volume = %+v, want an ID, the name, plugin mkdir and a node", v)
	}
	if v.CapacityBytes != 2<<30 {
		t.Fatalf("capacity = %d, want capacity_max 2GiB", v.CapacityBytes)
	}
	again, err := p.CreateVolume(ctx, req)
	if err != nil {
		t.Fatalf("second CreateVolume: %v", err)
	}
	if again.ID != v.ID {
		t.Fatalf("second create returned %s, want the first volume %s", again.ID, v.ID)
	}
	if n := count(t, sim, "data-web-1"); n != 1 {
		t.Fatalf("%d volumes named data-web-1, want 1", n)
	}
}

// recorder wraps the simulator to see the create request the provisioner
// sends.
type recorder struct {
	*nomadsim.Nomad
	created []*api.HostVolume
}

func (r *recorder) CreateHostVolume(ctx context.Context, vol *api.HostVolume) (*api.HostVolume, error) {
	r.created = append(r.created, vol)
	return r.Nomad.CreateHostVolume(ctx, vol)
}

func TestCreateVolume_request(t *testing.T) {
	ctx := context.Background()
	rec := &recorder{Nomad: newSim(t)}
	p := New(rec, nil)
	req := request("data-web-0")
	req.NodePool = "all"
	req.Constraints = []plugin.Constraint{{LTarget: "${attr.kernel.name}", RTarget: "linux", Operand: "="}}
	req.Config = map[string]string{"plugin_id": "mkdir", "capacity_min": "100MB", "parameters.uid": "1000"}
	if _, err := p.CreateVolume(ctx, req); err != nil {
		t.Fatalf("CreateVolume: %v", err)
	}
	if len(rec.created) != 1 {
		t.Fatalf("%d creates, want 1", len(rec.created))
	}
	got := rec.created[0]
	if got.NodePool != "all" || got.RequestedCapacityMinBytes != 100e6 || got.Parameters["uid"] != "1000" {
		t.Fatalf("request = pool %q, min %d, parameters %v", got.NodePool, got.RequestedCapacityMinBytes, got.Parameters)
	}
	if len(got.Constraints) != 1 || got.Constraints[0].RTarget != "linux" {
		t.Fatalf("constraints = %+v, want the set's", got.Constraints)
	}
	if len(got.RequestedCapabilities) != 1 || got.RequestedCapabilities[0].AccessMode != "single-node-writer" ||
		got.RequestedCapabilities[0].AttachmentMode != "file-system" {
		t.Fatalf("capabilities = %+v, want Nomad's defaults", got.RequestedCapabilities)
	}

	// node_pool in the config overrides the set's pool; the simulator knows
	// no pool "gpu", so the create fails naming it.
	req = request("data-web-2")
	req.Config = map[string]string{"node_pool": "gpu"}
	_, err := p.CreateVolume(ctx, req)
	if err == nil || !strings.Contains(err.Error(), `"gpu"`) {
		t.Fatalf("create in pool gpu: err = %v, want Nomad's unknown pool error", err)
	}
}

func TestGetVolume_exactName(t *testing.T) {
	ctx := context.Background()
	sim := newSim(t)
	p := New(sim, nil)
	ten, err := p.CreateVolume(ctx, request("data-web-10"))
	if err != nil {
		t.Fatalf("CreateVolume: %v", err)
	}
	// data-web-1 is a prefix of data-web-10 but does not exist.
	if v, err := p.GetVolume(ctx, request("data-web-1")); err != nil || v != nil {
		t.Fatalf("GetVolume(data-web-1) = %+v, %v; want nil, nil", v, err)
	}
	one, err := p.CreateVolume(ctx, request("data-web-1"))
	if err != nil {
		t.Fatalf("CreateVolume: %v", err)
	}
	if one.ID == ten.ID {
		t.Fatal("data-web-1 was taken for data-web-10")
	}
	if v, err := p.GetVolume(ctx, request("data-web-1")); err != nil || v == nil || v.ID != one.ID {
		t.Fatalf("GetVolume(data-web-1) = %+v, %v; want %s", v, err, one.ID)
	}
	if err := p.DeleteVolume(ctx, request("data-web-1")); err != nil {
		t.Fatalf("DeleteVolume: %v", err)
	}
	if n := count(t, sim, "data-web-10"); n != 1 {
		t.Fatalf("deleting data-web-1 left %d data-web-10, want 1", n)
	}
}

func TestDeleteVolume_duplicatesAndAbsent(t *testing.T) {
	ctx := context.Background()
	sim := newSim(t)
	p := New(sim, nil)
	// Two volumes of one name, as a blind retry of a timed-out create
	// would leave.
	first, err := sim.CreateHostVolume(ctx, &api.HostVolume{Name: "data-web-0"})
	if err != nil {
		t.Fatalf("creating: %v", err)
	}
	if _, err := sim.CreateHostVolume(ctx, &api.HostVolume{Name: "data-web-0"}); err != nil {
		t.Fatalf("creating: %v", err)
	}
	v, err := p.CreateVolume(ctx, request("data-web-0"))
	if err != nil || v.ID != first.ID {
		t.Fatalf("CreateVolume over duplicates = %+v, %v; want the oldest %s", v, err, first.ID)
	}
	if n := count(t, sim, "data-web-0"); n != 2 {
		t.Fatalf("%d volumes after create, want the 2 duplicates only", n)
	}
	if err := p.DeleteVolume(ctx, request("data-web-0")); err != nil {
		t.Fatalf("DeleteVolume: %v", err)
	}
	if n := count(t, sim, "data-web-0"); n != 0 {
		t.Fatalf("%d volumes after delete, want 0", n)
	}
	if err := p.DeleteVolume(ctx, request("data-web-0")); err != nil {
		t.Fatalf("DeleteVolume of a deleted volume: %v, want nil", err)
	}
}

// goneAPI answers every delete as Nomad does for an unknown volume, as
// happens when another agent deleted it between the list and the delete.
type goneAPI struct{ *nomadsim.Nomad }

func (goneAPI) DeleteHostVolume(context.Context, string, string) error {
	return nomadsim.ResponseError(500, "no such volume: abc")
}

func TestDeleteVolume_raceWithAnotherDelete(t *testing.T) {
	ctx := context.Background()
	sim := newSim(t)
	if _, err := sim.CreateHostVolume(ctx, &api.HostVolume{Name: "data-web-0"}); err != nil {
		t.Fatalf("creating: %v", err)
	}
	if err := New(goneAPI{sim}, nil).DeleteVolume(ctx, request("data-web-0")); err != nil {
		t.Fatalf("DeleteVolume = %v, want nil for a volume that is already gone", err)
	}
}

func TestSetConfig_errors(t *testing.T) {
	for _, tc := range []struct {
		name   string
		config map[string]string
		want   string
	}{
		{"unknown key", map[string]string{"plugin": "mkdir"}, `unknown config key "plugin"`},
		{"bad size", map[string]string{"capacity_min": "ten"}, `capacity_min: "ten" is not a size`},
		{"min over max", map[string]string{"capacity_min": "2G", "capacity_max": "1G"}, "larger than capacity_max"},
		{"every error", map[string]string{"x": "1", "capacity_max": "-1"}, `capacity_max: "-1" is not a size`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := New(nil, nil).SetConfig(context.Background(), tc.config)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("SetConfig(%v) = %v, want an error containing %q", tc.config, err, tc.want)
			}
		})
	}
	if err := New(nil, nil).SetConfig(context.Background(), map[string]string{
		"plugin_id": "mkdir", "capacity_min": "1", "capacity_max": "1TiB", "node_pool": "default", "parameters.a": "b",
	}); err != nil {
		t.Fatalf("SetConfig with every known key: %v", err)
	}
}

func TestParseBytes(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want int64
		ok   bool
	}{
		{"", 0, true}, {"1024", 1024, true}, {"10GiB", 10 << 30, true}, {"5 MB", 5e6, true},
		{"1K", 1000, true}, {"3B", 3, true}, {"1.5G", 0, false}, {"-1", 0, false}, {"lots", 0, false},
		{"9999999999TiB", 0, false},
	} {
		got, err := parseBytes(tc.in)
		if (err == nil) != tc.ok || got != tc.want {
			t.Errorf("parseBytes(%q) = %d, %v; want %d, ok=%v", tc.in, got, err, tc.want, tc.ok)
		}
	}
}

func TestPluginInfo(t *testing.T) {
	info, err := New(nil, nil).PluginInfo(context.Background())
	if err != nil || info.Name != Name || info.Type != plugin.TypeVolumeProvisioner {
		t.Fatalf("PluginInfo = %+v, %v", info, err)
	}
}
