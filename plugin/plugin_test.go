package plugin

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	goplugin "github.com/hashicorp/go-plugin"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// recorder is an in-process plugin of both types that records what arrives.
type recorder struct {
	config map[string]string
	req    *VolumeRequest
	pod    Pod
	event  Event
}

func (r *recorder) PluginInfo(context.Context) (*Info, error) {
	return &Info{Name: "rec", Type: TypeLifecycleHook}, nil
}
func (r *recorder) SetConfig(_ context.Context, c map[string]string) error {
	if c["bad"] != "" {
		return errors.New("bad key " + c["bad"])
	}
	r.config = c
	return nil
}
func (r *recorder) CreateVolume(_ context.Context, req *VolumeRequest) (*Volume, error) {
	r.req = req
	return &Volume{ID: "id-1", Name: req.Name, CapacityBytes: 1 << 40, ModifyIndex: 9}, nil
}
func (r *recorder) GetVolume(context.Context, *VolumeRequest) (*Volume, error) { return nil, nil }
func (r *recorder) DeleteVolume(context.Context, *VolumeRequest) error {
	return errors.New("volume is in use")
}

// ExpandVolume answers by the volume's name: "in-use", "small" and
// "fixed" get the three refusals, anything else grows to the request.
func (r *recorder) ExpandVolume(_ context.Context, req *VolumeRequest) (*Volume, error) {
	r.req = req
	switch req.Name {
	case "in-use":
		return nil, fmt.Errorf("volume %s: %w: claimed by alloc a1", req.Name, ErrVolumeInUse)
	case "small":
		return nil, fmt.Errorf("volume %s: capacity_max 1 is below 2: %w", req.Name, ErrVolumeShrink)
	case "fixed":
		return nil, fmt.Errorf("plugin mkdir: %w", ErrExpandUnsupported)
	case "both":
		return nil, errors.Join(ErrVolumeInUse, ErrVolumeShrink)
	}
	return &Volume{ID: "id-1", Name: req.Name, CapacityBytes: req.CapacityMin}, nil
}

// Capabilities answers by the class: "slow" cannot expand, "broken"
// fails, any other can.
func (r *recorder) Capabilities(_ context.Context, req *VolumeRequest) (*Capabilities, error) {
	r.req = req
	switch req.Class {
	case "slow":
		return &Capabilities{Reason: "plain directories have no size"}, nil
	case "broken":
		return nil, errors.New("cannot read the class's config")
	}
	return &Capabilities{Expand: true}, nil
}
func (r *recorder) hook(e Event, pod Pod) (*HookResponse, error) {
	r.event, r.pod = e, pod
	return Wait(90*time.Second, "pod %s syncing", pod.Name), nil
}
func (r *recorder) PreDelete(_ context.Context, p Pod) (*HookResponse, error) {
	return r.hook(EventPreDelete, p)
}
func (r *recorder) PostReady(_ context.Context, p Pod) (*HookResponse, error) {
	return r.hook(EventPostReady, p)
}
func (r *recorder) PreUpdate(_ context.Context, p Pod) (*HookResponse, error) {
	return r.hook(EventPreUpdate, p)
}

// connect serves rec over a real gRPC connection with go-plugin's test
// helper and returns the agent-side stubs.
func connect(t *testing.T, rec *recorder) (VolumeProvisioner, LifecycleHook) {
	t.Helper()
	server := goplugin.PluginSet{
		typeBase:                      &grpcPlugin{typ: typeBase, impl: rec},
		string(TypeVolumeProvisioner): &grpcPlugin{typ: string(TypeVolumeProvisioner), impl: rec},
		string(TypeLifecycleHook):     &grpcPlugin{typ: string(TypeLifecycleHook), impl: rec},
	}
	client, _ := goplugin.TestPluginGRPCConn(t, false, server)
	// Closing the client asks the server to shut down (go-plugin's
	// controller Shutdown stops it); stopping it here as well raced with
	// that stop inside go-plugin (GRPCServer.Stop is not safe to call twice
	// at once), a data race -race reported now and then.
	t.Cleanup(func() { client.Close() })
	// The client side uses the agent's own plugin map.
	client.Plugins = ClientPlugins()
	vp, err := client.Dispense(string(TypeVolumeProvisioner))
	if err != nil {
		t.Fatalf("dispensing the provisioner: %v", err)
	}
	h, err := client.Dispense(string(TypeLifecycleHook))
	if err != nil {
		t.Fatalf("dispensing the hook: %v", err)
	}
	return vp.(VolumeProvisioner), h.(LifecycleHook)
}

// TestWire: every method crosses a real gRPC connection with its data, and
// a plugin's error comes back with its message.
func TestWire(t *testing.T) {
	ctx := context.Background()
	rec := &recorder{}
	vp, hook := connect(t, rec)

	info, err := vp.PluginInfo(ctx)
	if err != nil || info.Name != "rec" || info.Type != TypeLifecycleHook {
		t.Fatalf("PluginInfo = %+v, %v", info, err)
	}
	if err := vp.SetConfig(ctx, map[string]string{"a": "b"}); err != nil || rec.config["a"] != "b" {
		t.Fatalf("SetConfig = %v, config %v", err, rec.config)
	}
	err = vp.SetConfig(ctx, map[string]string{"bad": "zap"})
	if err == nil || !strings.Contains(err.Error(), "bad key zap") {
		t.Fatalf("SetConfig(bad) = %v; want the plugin's message", err)
	}
	req := &VolumeRequest{Namespace: "ns", Set: "web", Claim: "data", Ordinal: 3, Name: "data-web-3",
		AccessMode: "single-node-writer", NodePool: "p", Constraints: []Constraint{{LTarget: "a", RTarget: "b", Operand: "="}},
		Config: map[string]string{"plugin_id": "mkdir"}}
	v, err := vp.CreateVolume(ctx, req)
	if err != nil || v.ID != "id-1" || v.CapacityBytes != 1<<40 || v.ModifyIndex != 9 {
		t.Fatalf("CreateVolume = %+v, %v", v, err)
	}
	if rec.req.Ordinal != 3 || rec.req.Constraints[0].RTarget != "b" || rec.req.Config["plugin_id"] != "mkdir" || rec.req.NodePool != "p" {
		t.Fatalf("the plugin got %+v", rec.req)
	}
	if v, err := vp.GetVolume(ctx, req); err != nil || v != nil {
		t.Fatalf("GetVolume = %+v, %v; want nil, nil for a missing volume", v, err)
	}
	err = vp.DeleteVolume(ctx, req)
	if st, ok := status.FromError(err); !ok || st.Code() != codes.Unknown || !strings.Contains(err.Error(), "volume is in use") {
		t.Fatalf("DeleteVolume = %v; want the plugin's error as a gRPC status", err)
	}

	pod := Pod{Namespace: "ns", Set: "web", Ordinal: 1, Name: "web-1", Revision: "r1", AllocID: "a1", NodeID: "n1"}
	for _, tc := range []struct {
		event Event
		call  func(context.Context, Pod) (*HookResponse, error)
	}{{EventPreDelete, hook.PreDelete}, {EventPostReady, hook.PostReady}, {EventPreUpdate, hook.PreUpdate}} {
		resp, err := tc.call(ctx, pod)
		if err != nil || resp.Status != HookWait || resp.RetryAfter != 90*time.Second || resp.Message != "pod web-1 syncing" {
			t.Fatalf("%s = %+v, %v", tc.event, resp, err)
		}
		if rec.event != tc.event || rec.pod != pod {
			t.Fatalf("%s: the plugin got event %s and pod %+v", tc.event, rec.event, rec.pod)
		}
	}
}

// TestWireExpand: an expansion carries the claim's size and class, and the
// volume errors keep their identity and their message across the wire.
func TestWireExpand(t *testing.T) {
	ctx := context.Background()
	rec := &recorder{}
	vp, _ := connect(t, rec)
	req := &VolumeRequest{Namespace: "ns", Set: "web", Claim: "data", Ordinal: 0, Name: "data-web-0",
		CapacityMin: 20 << 20, CapacityMax: 30 << 20, Class: "fast"}
	v, err := vp.ExpandVolume(ctx, req)
	if err != nil || v.CapacityBytes != 20<<20 {
		t.Fatalf("ExpandVolume = %+v, %v", v, err)
	}
	if rec.req.CapacityMin != 20<<20 || rec.req.CapacityMax != 30<<20 || rec.req.Class != "fast" {
		t.Fatalf("the plugin got %+v", rec.req)
	}
	for _, tc := range []struct {
		name    string
		is, not error
		msg     string
	}{
		{"in-use", ErrVolumeInUse, ErrVolumeShrink, "volume in-use: the volume is in use: claimed by alloc a1"},
		{"small", ErrVolumeShrink, ErrVolumeInUse, "capacity_max 1 is below 2: a volume cannot shrink"},
		{"fixed", ErrExpandUnsupported, ErrVolumeInUse, "plugin mkdir: the volume provisioner cannot expand volumes"},
		{"both", ErrVolumeShrink, ErrExpandUnsupported, "the volume is in use\na volume cannot shrink"},
	} {
		r := *req
		r.Name = tc.name
		_, err := vp.ExpandVolume(ctx, &r)
		if !errors.Is(err, tc.is) || errors.Is(err, tc.not) || !strings.Contains(err.Error(), tc.msg) {
			t.Errorf("ExpandVolume(%s) = %v; want %v with %q", tc.name, err, tc.is, tc.msg)
		}
	}
	// Other calls keep plain errors plain.
	if err := vp.DeleteVolume(ctx, req); errors.Is(err, ErrVolumeInUse) {
		t.Errorf("DeleteVolume's plain error became a sentinel: %v", err)
	}
}

// TestWireCapabilities: a class's capabilities cross the wire with the
// class and its config, and a plugin's error stays an error (not an
// answer that the class cannot expand).
func TestWireCapabilities(t *testing.T) {
	ctx := context.Background()
	rec := &recorder{}
	vp, _ := connect(t, rec)
	for _, tc := range []struct {
		class  string
		expand bool
		reason string
	}{{"fast", true, ""}, {"slow", false, "plain directories have no size"}} {
		caps, err := vp.Capabilities(ctx, &VolumeRequest{Namespace: "ns", Set: "web", Class: tc.class, Config: map[string]string{"plugin_id": "lvm"}})
		if err != nil || caps.Expand != tc.expand || caps.Reason != tc.reason {
			t.Errorf("Capabilities(%s) = %+v, %v; want expand %v, reason %q", tc.class, caps, err, tc.expand, tc.reason)
		}
		if rec.req.Class != tc.class || rec.req.Set != "web" || rec.req.Config["plugin_id"] != "lvm" {
			t.Errorf("Capabilities(%s): the plugin got %+v", tc.class, rec.req)
		}
	}
	if caps, err := vp.Capabilities(ctx, &VolumeRequest{Class: "broken"}); err == nil || !strings.Contains(err.Error(), "cannot read the class's config") {
		t.Errorf("Capabilities(broken) = %+v, %v; want the plugin's error", caps, err)
	}
}

// TestWireExpandOldPlugin: a plugin built before ExpandVolume existed
// serves no such method, and the agent reads that as ErrExpandUnsupported;
// one built before Capabilities existed (with or without ExpandVolume) is
// taken to expand nothing, so that no pod is stopped to grow its volumes.
func TestWireExpandOldPlugin(t *testing.T) {
	for _, tc := range []struct {
		name    string
		missing []string
	}{
		{"no ExpandVolume", []string{"ExpandVolume", "Capabilities"}},
		{"no Capabilities", []string{"Capabilities"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			old := volumeDesc
			old.Methods = nil
			for _, m := range volumeDesc.Methods {
				if !slices.Contains(tc.missing, m.MethodName) {
					old.Methods = append(old.Methods, m)
				}
			}
			rec := &recorder{}
			server := goplugin.PluginSet{string(TypeVolumeProvisioner): &oldPlugin{desc: &old, impl: rec}}
			client, _ := goplugin.TestPluginGRPCConn(t, false, server)
			t.Cleanup(func() { client.Close() })
			client.Plugins = ClientPlugins()
			raw, err := client.Dispense(string(TypeVolumeProvisioner))
			if err != nil {
				t.Fatal(err)
			}
			vp := raw.(VolumeProvisioner)
			caps, err := vp.Capabilities(context.Background(), &VolumeRequest{Class: "fast"})
			if err != nil || caps.Expand || !strings.Contains(caps.Reason, "predates") || rec.req != nil {
				t.Fatalf("Capabilities on an old plugin = %+v, %v; want no expansion, saying why", caps, err)
			}
			if slices.Contains(tc.missing, "ExpandVolume") {
				_, err = vp.ExpandVolume(context.Background(), &VolumeRequest{Name: "data-web-0", CapacityMin: 1})
				if !errors.Is(err, ErrExpandUnsupported) || rec.req != nil {
					t.Fatalf("ExpandVolume on an old plugin = %v; want ErrExpandUnsupported", err)
				}
			}
			if _, err := vp.CreateVolume(context.Background(), &VolumeRequest{Name: "data-web-0"}); err != nil {
				t.Fatalf("CreateVolume on an old plugin: %v", err)
			}
		})
	}
}

// oldPlugin serves a hand-picked service description.
type oldPlugin struct {
	goplugin.NetRPCUnsupportedPlugin
	desc *grpc.ServiceDesc
	impl any
}

func (p *oldPlugin) GRPCServer(_ *goplugin.GRPCBroker, s *grpc.Server) error {
	s.RegisterService(p.desc, p.impl)
	return nil
}

func (p *oldPlugin) GRPCClient(context.Context, *goplugin.GRPCBroker, *grpc.ClientConn) (any, error) {
	return nil, errors.New("server side only")
}

// TestVolumeRequestJSON: the new fields are left out when unset, so a
// plugin built before them reads the same request as before.
func TestVolumeRequestJSON(t *testing.T) {
	b, err := json.Marshal(&VolumeRequest{Namespace: "ns", Set: "web", Claim: "data", Name: "data-web-0"})
	if err != nil {
		t.Fatal(err)
	}
	if want := `{"namespace":"ns","set":"web","claim":"data","ordinal":0,"name":"data-web-0"}`; string(b) != want {
		t.Fatalf("request JSON = %s, want %s", b, want)
	}
	b, _ = json.Marshal(&VolumeRequest{Name: "x", CapacityMin: 1, CapacityMax: 2, Class: "fast"})
	if !strings.Contains(string(b), `"capacity_min":1,"capacity_max":2,"class":"fast"`) {
		t.Fatalf("request JSON = %s", b)
	}
}

func TestHookResponse_Validate(t *testing.T) {
	for _, tc := range []struct {
		resp *HookResponse
		want string
	}{
		{Done(), ""},
		{Wait(time.Second, "x"), ""},
		{Fail("x"), ""},
		{nil, "no response"},
		{&HookResponse{Status: "ok"}, `unknown status "ok"`},
		{&HookResponse{Status: HookWait, RetryAfter: -1}, "negative retry_after"},
	} {
		err := tc.resp.Validate()
		if (err == nil) != (tc.want == "") || (err != nil && !strings.Contains(err.Error(), tc.want)) {
			t.Errorf("Validate(%+v) = %v; want %q", tc.resp, err, tc.want)
		}
	}
}

// notAPlugin implements Base only.
type notAPlugin struct{}

func (notAPlugin) PluginInfo(context.Context) (*Info, error)          { return &Info{}, nil }
func (notAPlugin) SetConfig(context.Context, map[string]string) error { return nil }

func TestPluginSet(t *testing.T) {
	if _, err := pluginSet(notAPlugin{}); err == nil || !strings.Contains(err.Error(), "neither VolumeProvisioner nor LifecycleHook") {
		t.Fatalf("pluginSet(Base only) = %v; want a refusal", err)
	}
	set, err := pluginSet(&recorder{})
	if err != nil || set[typeBase] == nil || len(set) != 2 {
		t.Fatalf("pluginSet(recorder) = %v, %v; want base and one type", set, err)
	}
}
