package hostvolume

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/hashicorp/nomad/api"

	"github.com/nomad-statefulset/nomad-statefulset/backend/nomad"
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
	// capacity_max follows capacity_min: Nomad 1.10 refuses a maximum
	// below the minimum even when none is set.
	if got.NodePool != "all" || got.RequestedCapacityMinBytes != 100e6 || got.RequestedCapacityMaxBytes != 100e6 || got.Parameters["uid"] != "1000" {
		t.Fatalf("request = pool %q, min %d, max %d, parameters %v", got.NodePool, got.RequestedCapacityMinBytes, got.RequestedCapacityMaxBytes, got.Parameters)
	}
	if _, ok := got.Parameters[nomad.ClassParameter]; ok {
		t.Fatalf("the default class recorded itself: %v", got.Parameters)
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

// TestCreateVolume_claimSizeAndClass: a claim's own size wins over the
// config's pair, a minimum alone asks for exactly that, and a named class
// is recorded in the volume's parameters, next to the config's.
func TestCreateVolume_claimSizeAndClass(t *testing.T) {
	ctx := context.Background()
	for _, tc := range []struct {
		name               string
		config             map[string]string
		reqMin, reqMax     int64
		class              string
		wantMin, wantMax   int64
		wantErr, wantClass string
	}{
		{name: "config pair", config: map[string]string{"capacity_min": "1GiB", "capacity_max": "2GiB"}, wantMin: 1 << 30, wantMax: 2 << 30},
		{name: "claim pair wins", config: map[string]string{"capacity_min": "1GiB", "capacity_max": "2GiB"},
			reqMin: 10 << 20, reqMax: 20 << 20, wantMin: 10 << 20, wantMax: 20 << 20},
		{name: "claim minimum alone", config: map[string]string{"capacity_max": "2GiB"}, reqMin: 10 << 20, wantMin: 10 << 20, wantMax: 10 << 20},
		{name: "nothing", wantMin: 0, wantMax: 0},
		{name: "named class", config: map[string]string{"plugin_id": "lvm", "parameters.vg": "fast"}, class: "fast",
			reqMin: 1 << 30, wantMin: 1 << 30, wantMax: 1 << 30, wantClass: "fast"},
		{name: "named class on mkdir", class: "fast", wantErr: `class "fast": host volume default/data-web-0: Nomad's mkdir plugin refuses parameters`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rec := &recorder{Nomad: newSim(t)}
			req := request("data-web-0")
			req.Config, req.CapacityMin, req.CapacityMax, req.Class = tc.config, tc.reqMin, tc.reqMax, tc.class
			v, err := New(rec, nil).CreateVolume(ctx, req)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) || len(rec.created) != 0 {
					t.Fatalf("CreateVolume = %v after %d creates; want %q and no create", err, len(rec.created), tc.wantErr)
				}
				return
			}
			if err != nil || len(rec.created) != 1 {
				t.Fatalf("CreateVolume = %+v, %v after %d creates", v, err, len(rec.created))
			}
			got := rec.created[0]
			if got.RequestedCapacityMinBytes != tc.wantMin || got.RequestedCapacityMaxBytes != tc.wantMax {
				t.Fatalf("capacity %d..%d, want %d..%d", got.RequestedCapacityMinBytes, got.RequestedCapacityMaxBytes, tc.wantMin, tc.wantMax)
			}
			if c := got.Parameters[nomad.ClassParameter]; c != tc.wantClass {
				t.Fatalf("recorded class %q, want %q (parameters %v)", c, tc.wantClass, got.Parameters)
			}
			if tc.config["parameters.vg"] != "" && got.Parameters["vg"] != tc.config["parameters.vg"] {
				t.Fatalf("the config's parameters are lost: %v", got.Parameters)
			}
			if v.CapacityBytes != max(tc.wantMax, tc.wantMin) {
				t.Fatalf("capacity %d reported, want %d", v.CapacityBytes, max(tc.wantMax, tc.wantMin))
			}
		})
	}
	if err := New(nil, nil).SetConfig(ctx, map[string]string{"parameters." + nomad.ClassParameter: "x"}); err == nil ||
		!strings.Contains(err.Error(), "records the storage class") {
		t.Fatalf("SetConfig with the class parameter = %v; want a refusal", err)
	}
}

// podJob is a one-pod job that mounts the host volume source.
func podJob(id, source string) *api.Job {
	j := api.NewServiceJob(id, id, "global", 50)
	tg := api.NewTaskGroup("pod", 1)
	tg.AddTask(api.NewTask("app", "mock_driver"))
	tg.Volumes = map[string]*api.VolumeRequest{"data": {Name: "data", Type: "host", Source: source,
		AccessMode: "single-node-single-writer", AttachmentMode: "file-system"}}
	j.AddTaskGroup(tg)
	return j
}

// TestExpandVolume: a volume grows through Nomad's update-by-ID, keeping
// its node, class, parameters and capabilities; a retry writes nothing;
// Nomad's refusals come back as the plugin sentinels.
func TestExpandVolume(t *testing.T) {
	ctx := context.Background()
	sim := nomadsim.NewNomad(nomadsim.NomadConfig{Manual: true})
	t.Cleanup(sim.Close)
	rec := &recorder{Nomad: sim}
	p := New(rec, nil)
	req := request("data-web-0")
	req.Config = map[string]string{"plugin_id": "lvm", "parameters.vg": "fast"}
	req.AccessMode, req.Class, req.CapacityMin = "single-node-single-writer", "fast", 10<<20
	v, err := p.CreateVolume(ctx, req)
	if err != nil || v.CapacityBytes != 10<<20 {
		t.Fatalf("CreateVolume = %+v, %v", v, err)
	}

	grow := *req
	grow.CapacityMin = 20 << 20
	big, err := p.ExpandVolume(ctx, &grow)
	if err != nil || big.ID != v.ID || big.NodeID != v.NodeID || big.CapacityBytes != 20<<20 {
		t.Fatalf("ExpandVolume = %+v, %v; want %s on %s at 20MiB", big, err, v.ID, v.NodeID)
	}
	got, err := sim.GetHostVolume(ctx, "default", v.ID)
	if err != nil || got.Parameters[nomad.ClassParameter] != "fast" || got.Parameters["vg"] != "fast" ||
		len(got.RequestedCapabilities) != 1 || got.RequestedCapabilities[0].AccessMode != "single-node-single-writer" ||
		got.PluginID != "lvm" || got.RequestedCapacityMaxBytes != 20<<20 {
		t.Fatalf("after the expansion Nomad has %+v, %v", got, err)
	}
	// Already that large: nothing is written, whatever the claim asks
	// below it.
	writes := len(rec.created)
	for _, min := range []int64{20 << 20, 15 << 20} {
		again := *req
		again.CapacityMin = min
		if v, err := p.ExpandVolume(ctx, &again); err != nil || v.CapacityBytes != 20<<20 || len(rec.created) != writes {
			t.Fatalf("ExpandVolume(%d) of a 20MiB volume = %+v, %v, %d writes", min, v, err, len(rec.created)-writes)
		}
	}

	// An explicit maximum below the capacity is a shrink: Nomad refuses it.
	shrink := *req
	shrink.CapacityMin, shrink.CapacityMax = 10<<20, 10<<20
	if _, err := p.ExpandVolume(ctx, &shrink); !errors.Is(err, plugin.ErrVolumeShrink) || errors.Is(err, plugin.ErrVolumeInUse) ||
		!strings.Contains(err.Error(), "capacity_max (10485760) cannot be less than existing provisioned capacity (20971520)") {
		t.Fatalf("shrink = %v; want ErrVolumeShrink with Nomad's words", err)
	}

	// A pod mounts it: Nomad refuses the update until the pod is gone.
	if _, err := sim.RegisterJob(ctx, podJob("web-0", "data-web-0"), false, 0); err != nil {
		t.Fatal(err)
	}
	sim.Settle()
	grow.CapacityMin = 30 << 20
	if _, err := p.ExpandVolume(ctx, &grow); !errors.Is(err, plugin.ErrVolumeInUse) || !strings.Contains(err.Error(), "from 20MiB to 30MiB") {
		t.Fatalf("expanding a claimed volume = %v; want ErrVolumeInUse", err)
	}
	shrink.CapacityMin, shrink.CapacityMax = 30<<20, 10<<20
	if _, err := p.ExpandVolume(ctx, &shrink); err == nil || !strings.Contains(err.Error(), "capacity_max 10MiB is below capacity_min 30MiB") {
		t.Fatalf("a maximum under the minimum = %v", err)
	}
	if err := sim.DeregisterJob(ctx, "default", "web-0", false); err != nil {
		t.Fatal(err)
	}
	sim.Settle()
	if v, err := p.ExpandVolume(ctx, &grow); err != nil || v.CapacityBytes != 30<<20 {
		t.Fatalf("expanding after the pod stopped = %+v, %v", v, err)
	}

	// Its class is its own.
	other := grow
	other.Class, other.CapacityMin = "slow", 40<<20
	if _, err := p.ExpandVolume(ctx, &other); err == nil || !strings.Contains(err.Error(), `made by class "fast", not "slow"`) {
		t.Fatalf("expanding with another class = %v", err)
	}
	missing := grow
	missing.Name = "data-web-9"
	if _, err := p.ExpandVolume(ctx, &missing); err == nil || !strings.Contains(err.Error(), "does not exist") {
		t.Fatalf("expanding a missing volume = %v", err)
	}
	none := grow
	none.CapacityMin = 0
	if _, err := p.ExpandVolume(ctx, &none); err == nil || !strings.Contains(err.Error(), "no capacity") {
		t.Fatalf("expanding to nothing = %v", err)
	}

	// mkdir volumes are plain directories.
	dir := request("data-web-1")
	if _, err := p.CreateVolume(ctx, dir); err != nil {
		t.Fatal(err)
	}
	dir.CapacityMin = 1 << 30
	if _, err := p.ExpandVolume(ctx, dir); !errors.Is(err, plugin.ErrExpandUnsupported) {
		t.Fatalf("expanding a mkdir volume = %v; want ErrExpandUnsupported", err)
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
		{"1K", 1000, true}, {"3B", 3, true}, {"1.5G", 1.5e9, true}, {" 2Gi ", 2 << 30, true},
		{"-1", 0, false}, {"lots", 0, false}, {"9999999999TiB", 0, false},
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

// TestCapabilities: a class can expand unless its plugin_id, from the
// call's config over SetConfig's, is mkdir (the default); Nomad is not
// asked.
func TestCapabilities(t *testing.T) {
	ctx := context.Background()
	for _, tc := range []struct {
		name       string
		base, call map[string]string
		expand     bool
	}{
		{"default plugin", nil, nil, false},
		{"mkdir named", nil, map[string]string{"plugin_id": "mkdir"}, false},
		{"class plugin", nil, map[string]string{"plugin_id": "lvm"}, true},
		{"block plugin", map[string]string{"plugin_id": "lvm"}, nil, true},
		{"class over block", map[string]string{"plugin_id": "lvm"}, map[string]string{"plugin_id": "mkdir"}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rec := &recorder{}
			p := New(rec, nil)
			if err := p.SetConfig(ctx, tc.base); err != nil {
				t.Fatal(err)
			}
			caps, err := p.Capabilities(ctx, &plugin.VolumeRequest{Namespace: "default", Set: "web", Class: "c", Config: tc.call})
			if err != nil || caps.Expand != tc.expand {
				t.Fatalf("Capabilities = %+v, %v; want expand %v", caps, err, tc.expand)
			}
			if !tc.expand && !strings.Contains(caps.Reason, "mkdir") {
				t.Errorf("reason %q does not name mkdir", caps.Reason)
			}
			if len(rec.created) != 0 {
				t.Errorf("Capabilities wrote to Nomad: %v", rec.created)
			}
		})
	}
	p := New(&recorder{}, nil)
	if _, err := p.Capabilities(ctx, &plugin.VolumeRequest{Config: map[string]string{"plugin_idd": "lvm"}}); err == nil || !strings.Contains(err.Error(), "plugin_idd") {
		t.Errorf("Capabilities with a bad key = %v; want it named", err)
	}
}
