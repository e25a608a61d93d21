package plugin

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"

	goplugin "github.com/hashicorp/go-plugin"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/encoding"
	"google.golang.org/grpc/status"
)

// codecName is the gRPC content subtype of this package's services. See the
// package doc for why the messages are JSON rather than protobuf.
const codecName = "nssjson"

// jsonCodec encodes the plain Go message structs of this package as JSON.
type jsonCodec struct{}

// Marshal implements encoding.Codec.
func (jsonCodec) Marshal(v any) ([]byte, error) { return json.Marshal(v) }

// Unmarshal implements encoding.Codec.
func (jsonCodec) Unmarshal(data []byte, v any) error { return json.Unmarshal(data, v) }

// Name implements encoding.Codec.
func (jsonCodec) Name() string { return codecName }

func init() {
	// Registered on both sides: the agent encodes with it, and a plugin's
	// gRPC server finds it by the content subtype of each call.
	encoding.RegisterCodec(jsonCodec{})
}

// The service names. The version is in the name so that an incompatible
// change can be served next to the old one.
const (
	baseService   = "nomadstatefulset.plugin.v1.Base"
	volumeService = "nomadstatefulset.plugin.v1.VolumeProvisioner"
	hookService   = "nomadstatefulset.plugin.v1.LifecycleHook"
)

// Event is a point in a pod's life at which a hook runs. The values are the
// agent config's hook events.
type Event string

// The events.
const (
	// EventPreDelete is LifecycleHook.PreDelete.
	EventPreDelete Event = "pre_delete"
	// EventPostReady is LifecycleHook.PostReady.
	EventPostReady Event = "post_ready"
	// EventPreUpdate is LifecycleHook.PreUpdate.
	EventPreUpdate Event = "pre_update"
)

// Call runs the hook method of event.
func Call(ctx context.Context, h LifecycleHook, event Event, pod Pod) (*HookResponse, error) {
	switch event {
	case EventPreDelete:
		return h.PreDelete(ctx, pod)
	case EventPostReady:
		return h.PostReady(ctx, pod)
	case EventPreUpdate:
		return h.PreUpdate(ctx, pod)
	}
	return nil, fmt.Errorf("unknown hook event %q", event)
}

// The wire messages that are not public types.
type (
	empty            struct{}
	setConfigRequest struct {
		Config map[string]string `json:"config"`
	}
	getVolumeResponse struct {
		Volume *Volume `json:"volume"`
	}
	hookRequest struct {
		Event Event `json:"event"`
		Pod   Pod   `json:"pod"`
	}
)

// grpcPlugin is the go-plugin glue of one service: on the plugin's side it
// registers impl's service for typ, on the agent's side it makes a client
// stub of typ. Only gRPC is offered.
type grpcPlugin struct {
	goplugin.NetRPCUnsupportedPlugin
	typ  string
	impl Base
}

// GRPCServer implements goplugin.GRPCPlugin.
func (p *grpcPlugin) GRPCServer(_ *goplugin.GRPCBroker, s *grpc.Server) error {
	switch p.typ {
	case typeBase:
		s.RegisterService(&baseDesc, p.impl)
	case string(TypeVolumeProvisioner):
		s.RegisterService(&volumeDesc, p.impl)
	case string(TypeLifecycleHook):
		s.RegisterService(&hookDesc, p.impl)
	default:
		return fmt.Errorf("unknown plugin type %q", p.typ)
	}
	return nil
}

// GRPCClient implements goplugin.GRPCPlugin. Dispensing never talks to the
// plugin, so a stub of the wrong type is only caught by the launch check.
func (p *grpcPlugin) GRPCClient(_ context.Context, _ *goplugin.GRPCBroker, conn *grpc.ClientConn) (any, error) {
	b := baseClient{conn: conn}
	switch p.typ {
	case typeBase:
		return &b, nil
	case string(TypeVolumeProvisioner):
		return &volumeClient{baseClient: b}, nil
	case string(TypeLifecycleHook):
		return &hookClient{baseClient: b}, nil
	}
	return nil, fmt.Errorf("unknown plugin type %q", p.typ)
}

// method builds the descriptor of a unary method whose handler decodes a Req
// and calls fn with the registered implementation.
func method[Req any](service, name string, fn func(ctx context.Context, srv any, req *Req) (any, error)) grpc.MethodDesc {
	full := "/" + service + "/" + name
	return grpc.MethodDesc{
		MethodName: name,
		Handler: func(srv any, ctx context.Context, dec func(any) error, ic grpc.UnaryServerInterceptor) (any, error) {
			req := new(Req)
			if err := dec(req); err != nil {
				return nil, err
			}
			h := func(ctx context.Context, r any) (any, error) {
				resp, err := fn(ctx, srv, r.(*Req))
				return resp, toStatus(err)
			}
			if ic == nil {
				return h(ctx, req)
			}
			return ic(ctx, req, &grpc.UnaryServerInfo{Server: srv, FullMethod: full}, h)
		},
	}
}

var baseDesc = grpc.ServiceDesc{
	ServiceName: baseService,
	HandlerType: (*Base)(nil),
	Methods: []grpc.MethodDesc{
		method(baseService, "PluginInfo", func(ctx context.Context, srv any, _ *empty) (any, error) {
			return srv.(Base).PluginInfo(ctx)
		}),
		method(baseService, "SetConfig", func(ctx context.Context, srv any, req *setConfigRequest) (any, error) {
			return &empty{}, srv.(Base).SetConfig(ctx, req.Config)
		}),
	},
}

var volumeDesc = grpc.ServiceDesc{
	ServiceName: volumeService,
	HandlerType: (*VolumeProvisioner)(nil),
	Methods: []grpc.MethodDesc{
		method(volumeService, "CreateVolume", func(ctx context.Context, srv any, req *VolumeRequest) (any, error) {
			return srv.(VolumeProvisioner).CreateVolume(ctx, req)
		}),
		method(volumeService, "GetVolume", func(ctx context.Context, srv any, req *VolumeRequest) (any, error) {
			v, err := srv.(VolumeProvisioner).GetVolume(ctx, req)
			return &getVolumeResponse{Volume: v}, err
		}),
		method(volumeService, "DeleteVolume", func(ctx context.Context, srv any, req *VolumeRequest) (any, error) {
			return &empty{}, srv.(VolumeProvisioner).DeleteVolume(ctx, req)
		}),
		method(volumeService, "ExpandVolume", func(ctx context.Context, srv any, req *VolumeRequest) (any, error) {
			return srv.(VolumeProvisioner).ExpandVolume(ctx, req)
		}),
		method(volumeService, "Capabilities", func(ctx context.Context, srv any, req *VolumeRequest) (any, error) {
			return srv.(VolumeProvisioner).Capabilities(ctx, req)
		}),
	},
}

var hookDesc = grpc.ServiceDesc{
	ServiceName: hookService,
	HandlerType: (*LifecycleHook)(nil),
	Methods: []grpc.MethodDesc{
		method(hookService, "Run", func(ctx context.Context, srv any, req *hookRequest) (any, error) {
			return Call(ctx, srv.(LifecycleHook), req.Event, req.Pod)
		}),
	},
}

// sentinels are the errors that keep their identity across the wire, each
// as a gRPC status code that nothing else in this protocol sends. The order
// matters when an error wraps several: a shrink is refused whatever else
// is wrong, so it is the one to report.
var sentinels = []struct {
	err  error
	code codes.Code
}{
	{ErrVolumeShrink, codes.OutOfRange},
	{ErrVolumeInUse, codes.FailedPrecondition},
	{ErrExpandUnsupported, codes.Unimplemented},
}

// toStatus gives an error wrapping one of the sentinels its status code,
// on the plugin's side. Other errors go as they are (gRPC sends them as
// Unknown, with their message).
func toStatus(err error) error {
	if err == nil {
		return nil
	}
	for _, s := range sentinels {
		if errors.Is(err, s.err) {
			return status.Error(s.code, err.Error())
		}
	}
	return err
}

// remoteError is a plugin's error that wraps a sentinel: its message is the
// plugin's, and errors.Is finds the sentinel.
type remoteError struct {
	msg  string
	kind error
}

func (e *remoteError) Error() string { return e.msg }
func (e *remoteError) Unwrap() error { return e.kind }

// fromStatus turns a sentinel's status code back into the sentinel, on the
// agent's side. Unimplemented is gRPC's own answer for a method the plugin
// does not serve, which is what an expansion asked of a plugin built
// before ExpandVolume means: that one code is read only for it.
func fromStatus(name string, err error) error {
	st, ok := status.FromError(err)
	if !ok {
		return err
	}
	for _, s := range sentinels {
		if st.Code() == s.code && (s.code != codes.Unimplemented || name == "ExpandVolume") {
			return &remoteError{msg: st.Message(), kind: s.err}
		}
	}
	return err
}

// baseClient is the agent's stub of Base.
type baseClient struct{ conn *grpc.ClientConn }

func (c *baseClient) invoke(ctx context.Context, service, name string, req, resp any) error {
	if err := c.conn.Invoke(ctx, "/"+service+"/"+name, req, resp, grpc.CallContentSubtype(codecName)); err != nil {
		return fmt.Errorf("calling the plugin's %s: %w", name, fromStatus(name, err))
	}
	return nil
}

// PluginInfo implements Base.
func (c *baseClient) PluginInfo(ctx context.Context) (*Info, error) {
	var info Info
	if err := c.invoke(ctx, baseService, "PluginInfo", &empty{}, &info); err != nil {
		return nil, err
	}
	return &info, nil
}

// SetConfig implements Base.
func (c *baseClient) SetConfig(ctx context.Context, config map[string]string) error {
	return c.invoke(ctx, baseService, "SetConfig", &setConfigRequest{Config: config}, &empty{})
}

// volumeClient is the agent's stub of VolumeProvisioner.
type volumeClient struct{ baseClient }

// CreateVolume implements VolumeProvisioner.
func (c *volumeClient) CreateVolume(ctx context.Context, req *VolumeRequest) (*Volume, error) {
	var v Volume
	if err := c.invoke(ctx, volumeService, "CreateVolume", req, &v); err != nil {
		return nil, err
	}
	return &v, nil
}

// GetVolume implements VolumeProvisioner.
func (c *volumeClient) GetVolume(ctx context.Context, req *VolumeRequest) (*Volume, error) {
	var resp getVolumeResponse
	if err := c.invoke(ctx, volumeService, "GetVolume", req, &resp); err != nil {
		return nil, err
	}
	return resp.Volume, nil
}

// DeleteVolume implements VolumeProvisioner.
func (c *volumeClient) DeleteVolume(ctx context.Context, req *VolumeRequest) error {
	return c.invoke(ctx, volumeService, "DeleteVolume", req, &empty{})
}

// ExpandVolume implements VolumeProvisioner.
func (c *volumeClient) ExpandVolume(ctx context.Context, req *VolumeRequest) (*Volume, error) {
	var v Volume
	if err := c.invoke(ctx, volumeService, "ExpandVolume", req, &v); err != nil {
		return nil, err
	}
	return &v, nil
}

// Capabilities implements VolumeProvisioner. A plugin built before the
// method existed does not serve it, and gRPC answers Unimplemented: such a
// plugin is taken to expand nothing, the safe answer, since an expansion
// asked of it after its pod was stopped would be refused anyway.
func (c *volumeClient) Capabilities(ctx context.Context, req *VolumeRequest) (*Capabilities, error) {
	var caps Capabilities
	err := c.conn.Invoke(ctx, "/"+volumeService+"/Capabilities", req, &caps, grpc.CallContentSubtype(codecName))
	if status.Code(err) == codes.Unimplemented {
		return &Capabilities{Reason: "the plugin predates the Capabilities call, so it is taken to expand nothing"}, nil
	}
	if err != nil {
		return nil, fmt.Errorf("calling the plugin's Capabilities: %w", fromStatus("Capabilities", err))
	}
	return &caps, nil
}

// hookClient is the agent's stub of LifecycleHook.
type hookClient struct{ baseClient }

func (c *hookClient) run(ctx context.Context, event Event, pod Pod) (*HookResponse, error) {
	var resp HookResponse
	if err := c.invoke(ctx, hookService, "Run", &hookRequest{Event: event, Pod: pod}, &resp); err != nil {
		return nil, err
	}
	return &resp, nil
}

// PreDelete implements LifecycleHook.
func (c *hookClient) PreDelete(ctx context.Context, pod Pod) (*HookResponse, error) {
	return c.run(ctx, EventPreDelete, pod)
}

// PostReady implements LifecycleHook.
func (c *hookClient) PostReady(ctx context.Context, pod Pod) (*HookResponse, error) {
	return c.run(ctx, EventPostReady, pod)
}

// PreUpdate implements LifecycleHook.
func (c *hookClient) PreUpdate(ctx context.Context, pod Pod) (*HookResponse, error) {
	return c.run(ctx, EventPreUpdate, pod)
}
