// Package plugin defines the plugin interfaces of nomad-statefulset and
// carries them over gRPC through hashicorp/go-plugin, in the way the
// nomad-autoscaler does.
//
// There are two plugin types, both embedding Base:
//
//   - VolumeProvisioner makes the per-ordinal volume of a claim;
//   - LifecycleHook runs around a pod's life (pre-delete, post-ready,
//     pre-update) and answers done, wait or fail.
//
// A plugin is either compiled into the agent (a built-in, see
// plugin/builtin) or an executable in plugin_dir that calls Serve from its
// main function. The agent does not talk to plugins directly: the manager in
// plugin/manager launches, checks, configures and restarts them.
//
// # Wire format
//
// There is no protoc in this project's toolchain, and generated code for a
// handful of small messages would be the largest part of the package. The
// gRPC services are therefore written by hand (see grpc.go): each method
// carries one of the plain Go structs below, encoded as JSON by a codec that
// this package registers with gRPC under the content subtype "nssjson".
// Everything else is ordinary gRPC through go-plugin: the handshake, AutoMTLS,
// deadlines and cancellation, status codes. go-plugin's own services (health,
// stdio, broker) keep using protobuf, because gRPC picks the codec per call
// from its content subtype. The cost is that plugins must be written in Go
// against this package, which is what the nomad-autoscaler requires too.
package plugin

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/hashicorp/go-hclog"
	goplugin "github.com/hashicorp/go-plugin"
)

// Handshake is the go-plugin handshake shared by the agent and every plugin.
// A binary that does not carry the cookie refuses to run as a plugin, and a
// plugin built against another protocol version is rejected at launch.
// Change ProtocolVersion only with an incompatible change to the wire types.
var Handshake = goplugin.HandshakeConfig{
	ProtocolVersion:  1,
	MagicCookieKey:   "NOMAD_STATEFULSET_PLUGIN_MAGIC_COOKIE",
	MagicCookieValue: "6f1c2b7e0a3d4c59b8e2f7a1d0c3e5b94a7f2e6d1c8b3a5f0e9d4c7b2a6f1e3d",
}

// Type is the kind of a plugin.
type Type string

// The plugin types.
const (
	// TypeVolumeProvisioner is a VolumeProvisioner.
	TypeVolumeProvisioner Type = "volume_provisioner"
	// TypeLifecycleHook is a LifecycleHook.
	TypeLifecycleHook Type = "lifecycle_hook"
	// typeBase is the go-plugin map key of the Base service, which every
	// plugin serves so that the launch check can ask any binary who it is
	// before trusting it to be of the expected type.
	typeBase = "base"
)

// Info is what a plugin says about itself. The manager's launch check
// compares it with the configuration before the plugin is used.
type Info struct {
	// Name is the plugin's driver name: the built-in name or the file name
	// of the binary in plugin_dir.
	Name string `json:"name"`
	// Type is the plugin's type.
	Type Type `json:"type"`
}

// Base is implemented by every plugin.
type Base interface {
	// PluginInfo returns the plugin's name and type.
	PluginInfo(ctx context.Context) (*Info, error)
	// SetConfig hands the plugin block's config to the plugin, at launch,
	// after every restart and on every reload. The volume provisioner gets
	// the volume_provisioner block's config merged over it, the same keys
	// that every VolumeRequest carries. A plugin should check it here and
	// return an error naming the bad key, which the manager reports with the
	// plugin block's position.
	SetConfig(ctx context.Context, config map[string]string) error
}

// Constraint is a Nomad placement constraint, as in a job's constraint block.
type Constraint struct {
	// LTarget is the attribute, e.g. "${attr.kernel.name}".
	LTarget string `json:"ltarget,omitempty"`
	// RTarget is the value to compare with.
	RTarget string `json:"rtarget,omitempty"`
	// Operand is the comparison, e.g. "=" or "regexp".
	Operand string `json:"operand,omitempty"`
}

// VolumeRequest names the volume of one claim of one ordinal, with the
// claim's settings. Every call of a VolumeProvisioner carries the whole
// request, so that a provisioner can be stateless and find its volume again
// after an agent restart from the request alone.
type VolumeRequest struct {
	// Namespace is the set's Nomad namespace.
	Namespace string `json:"namespace"`
	// Set is the set's name.
	Set string `json:"set"`
	// Claim is the volume claim template's name.
	Claim string `json:"claim"`
	// Ordinal is the pod's ordinal.
	Ordinal int `json:"ordinal"`
	// Name is the volume's name, which the pod's job refers to. It is
	// unique per (namespace, set, claim, ordinal).
	Name string `json:"name"`
	// AccessMode is the claim's access mode, e.g. "single-node-writer".
	AccessMode string `json:"access_mode,omitempty"`
	// AttachmentMode is the claim's attachment mode, e.g. "file-system".
	AttachmentMode string `json:"attachment_mode,omitempty"`
	// NodePool is the set's node pool: the volume pins the ordinal to a
	// node, so it must be placed where the set's jobs may run.
	NodePool string `json:"node_pool,omitempty"`
	// Constraints are the set's placement constraints, for the same reason.
	Constraints []Constraint `json:"constraints,omitempty"`
	// Config is the volume_provisioner block's config (plugin_id, capacity,
	// …). The manager fills it in, from the block of the request's Class.
	Config map[string]string `json:"config,omitempty"`
	// CapacityMin and CapacityMax are the claim's size in bytes
	// (statefulset_claim_<claim>_capacity); zero leaves them to the
	// provisioner's config. For ExpandVolume, CapacityMin is the size to
	// grow to.
	CapacityMin int64 `json:"capacity_min,omitempty"`
	// CapacityMax: see CapacityMin.
	CapacityMax int64 `json:"capacity_max,omitempty"`
	// Class is the claim's storage class (statefulset_claim_<claim>_class):
	// the name of the volume_provisioner block that makes its volumes, ""
	// for the unnamed one. The manager routes the call by it; a provisioner
	// that can should record it on the volume, so that the class of an
	// existing volume can be read back (see the built-in's doc).
	Class string `json:"class,omitempty"`
}

// Volume is a provisioned volume.
type Volume struct {
	// ID is the provisioner's ID of the volume (Nomad's volume ID for host
	// volumes).
	ID string `json:"id"`
	// Name is the volume's name.
	Name string `json:"name"`
	// Namespace is the volume's namespace.
	Namespace string `json:"namespace"`
	// PluginID is the backend plugin that made it, e.g. "mkdir".
	PluginID string `json:"plugin_id,omitempty"`
	// NodePool and NodeID are where the volume lives, if it is node-local.
	NodePool string `json:"node_pool,omitempty"`
	// NodeID: see NodePool.
	NodeID string `json:"node_id,omitempty"`
	// State is the provisioner's state of the volume, e.g. "ready".
	State string `json:"state,omitempty"`
	// CapacityBytes is the provisioned size, 0 if unknown.
	CapacityBytes int64 `json:"capacity_bytes,omitempty"`
	// CreateIndex and ModifyIndex are Nomad's raft indexes, when the volume
	// is a Nomad object; the agent's cache orders updates by them.
	CreateIndex uint64 `json:"create_index,omitempty"`
	// ModifyIndex: see CreateIndex.
	ModifyIndex uint64 `json:"modify_index,omitempty"`
}

// VolumeProvisioner makes the volumes of volume claims. Every method must be
// idempotent: the agent retries after timeouts and restarts, and a retried
// create must find the volume of the first attempt rather than make another.
type VolumeProvisioner interface {
	Base
	// CreateVolume returns the request's volume, creating it if it does not
	// exist.
	CreateVolume(ctx context.Context, req *VolumeRequest) (*Volume, error)
	// GetVolume returns the request's volume, or nil and no error if it does
	// not exist.
	GetVolume(ctx context.Context, req *VolumeRequest) (*Volume, error)
	// DeleteVolume deletes the request's volume. A volume that does not
	// exist is not an error.
	DeleteVolume(ctx context.Context, req *VolumeRequest) error
	// ExpandVolume grows the request's existing volume, keeping its data,
	// to at least req.CapacityMin bytes (and at most req.CapacityMax, when
	// set), and returns it. A volume that already has req.CapacityMin is
	// returned as it is, so that a retried expansion does nothing twice.
	// It never shrinks a volume: a CapacityMax below the volume's capacity
	// is refused with an error wrapping ErrVolumeShrink. A volume that
	// cannot be changed while a pod uses it is refused with ErrVolumeInUse
	// (Nomad's host volumes are); a provisioner that cannot expand at all
	// returns ErrExpandUnsupported, as does a plugin built before this
	// method existed.
	ExpandVolume(ctx context.Context, req *VolumeRequest) (*Volume, error)
	// Capabilities says what the provisioner can do with the volumes of
	// req's storage class. req names the class and carries its config
	// (Class, Config), and the set that asks (Namespace, Set), but no
	// volume. The agent asks it before it takes any pod down to grow its
	// volume: ExpandVolume can only be called once the pod is gone, so a
	// provisioner that cannot expand must say so here, or a pod would be
	// stopped for nothing. A plugin built before this method existed is
	// taken to expand nothing.
	Capabilities(ctx context.Context, req *VolumeRequest) (*Capabilities, error)
}

// Capabilities is what a provisioner can do with the volumes of one storage
// class.
type Capabilities struct {
	// Expand says that ExpandVolume can grow the class's volumes. False
	// leaves them at their size: the agent stops no pod to grow them, and
	// the set says so.
	Expand bool `json:"expand"`
	// Reason says why a capability is missing, for the agent's event.
	Reason string `json:"reason,omitempty"`
}

// The errors of the volume calls. Plugins wrap them with their own words;
// they keep their identity across the plugin protocol (errors.Is works on
// the agent's side).
var (
	// ErrExpandUnsupported: the provisioner cannot grow volumes. Nothing
	// was changed; asking again will not help.
	ErrExpandUnsupported = errors.New("the volume provisioner cannot expand volumes")
	// ErrVolumeInUse: the volume cannot be changed while a pod uses it.
	// Nothing was changed; it can be done once the pod is stopped.
	ErrVolumeInUse = errors.New("the volume is in use")
	// ErrVolumeShrink: the request would make a volume smaller than it
	// is, which no provisioner is asked to do. Nothing was changed.
	ErrVolumeShrink = errors.New("a volume cannot shrink")
	// ErrUnknownClass: the request names a storage class that no
	// volume_provisioner block of the agent declares. The manager wraps it
	// with the class's name; the set that asked should say so.
	ErrUnknownClass = errors.New("unknown storage class")
)

// Pod identifies one pod (child job) of a set to a lifecycle hook.
type Pod struct {
	// Namespace is the set's Nomad namespace.
	Namespace string `json:"namespace"`
	// Set is the set's name.
	Set string `json:"set"`
	// Ordinal is the pod's ordinal.
	Ordinal int `json:"ordinal"`
	// Name is the pod's name, <set>-<ordinal>: the child job's ID.
	Name string `json:"name"`
	// Revision is the set revision the pod runs.
	Revision string `json:"revision,omitempty"`
	// AllocID is the pod's current allocation, if it has one.
	AllocID string `json:"alloc_id,omitempty"`
	// NodeID is the node of that allocation.
	NodeID string `json:"node_id,omitempty"`
}

// HookStatus is a lifecycle hook's answer.
type HookStatus string

// The hook answers.
const (
	// HookDone lets the pod's step go ahead.
	HookDone HookStatus = "done"
	// HookWait holds the pod's step; the agent asks again after RetryAfter.
	// Waiting is not a failure: the failure policy does not apply.
	HookWait HookStatus = "wait"
	// HookFail is a failure: the hook's failure policy decides whether the
	// step is held (block) or goes ahead (ignore).
	HookFail HookStatus = "fail"
)

// HookResponse is a lifecycle hook's answer for one pod.
type HookResponse struct {
	// Status is done, wait or fail.
	Status HookStatus `json:"status"`
	// RetryAfter suggests when to ask again after wait or fail; zero lets
	// the manager choose.
	RetryAfter time.Duration `json:"retry_after,omitempty"`
	// Message says why, for the log and the set's conditions.
	Message string `json:"message,omitempty"`
}

// Done, Wait and Fail build hook responses.
func Done() *HookResponse { return &HookResponse{Status: HookDone} }

// Wait returns a wait response; see Done.
func Wait(after time.Duration, format string, args ...any) *HookResponse {
	return &HookResponse{Status: HookWait, RetryAfter: after, Message: fmt.Sprintf(format, args...)}
}

// Fail returns a fail response; see Done.
func Fail(format string, args ...any) *HookResponse {
	return &HookResponse{Status: HookFail, Message: fmt.Sprintf(format, args...)}
}

// Validate reports a response that a plugin should not have sent.
func (r *HookResponse) Validate() error {
	if r == nil {
		return errors.New("the hook returned no response")
	}
	switch r.Status {
	case HookDone, HookWait, HookFail:
	default:
		return fmt.Errorf("the hook returned the unknown status %q (want %q, %q or %q)", r.Status, HookDone, HookWait, HookFail)
	}
	if r.RetryAfter < 0 {
		return fmt.Errorf("the hook returned a negative retry_after %s", r.RetryAfter)
	}
	return nil
}

// LifecycleHook runs around a pod's life. Each method is called with a
// deadline (the hook block's timeout) and must return by then; a long job
// such as decommissioning a replica should be started by the first call and
// reported as wait until it has finished, so that the agent is never held.
// Calls must be idempotent: the agent repeats them until it sees done.
type LifecycleHook interface {
	Base
	// PreDelete runs before a pod is deleted (scale-down, or a delete of the
	// set).
	PreDelete(ctx context.Context, pod Pod) (*HookResponse, error)
	// PostReady runs after a pod has become ready, before the next ordinal
	// is started or updated.
	PostReady(ctx context.Context, pod Pod) (*HookResponse, error)
	// PreUpdate runs before a pod is replaced by a new revision.
	PreUpdate(ctx context.Context, pod Pod) (*HookResponse, error)
}

// Factory makes a plugin instance. Built-ins export one, so that the same
// code can be compiled into the agent or served from a binary with Serve.
type Factory func(log hclog.Logger) Base

// Serve serves the plugin that factory makes, as an external plugin binary:
// call it from main. It returns when the agent kills the plugin. It refuses
// a plugin that is neither a VolumeProvisioner nor a LifecycleHook.
func Serve(factory Factory) {
	log := hclog.New(&hclog.LoggerOptions{
		// go-plugin forwards the plugin's stderr to the agent's log, where
		// JSON lines keep their level and fields.
		JSONFormat: true,
		Level:      hclog.Trace,
	})
	impl := factory(log)
	plugins, err := pluginSet(impl)
	if err != nil {
		log.Error("cannot serve the plugin", "error", err)
		panic(err)
	}
	goplugin.Serve(&goplugin.ServeConfig{
		HandshakeConfig: Handshake,
		Plugins:         plugins,
		GRPCServer:      goplugin.DefaultGRPCServer,
		Logger:          log,
	})
}

// pluginSet is the go-plugin map a binary serves: Base, plus its own type.
// The type comes from the Go interfaces the value implements, not from what
// PluginInfo says, so that the launch check in the agent catches a plugin
// that claims to be something it is not.
func pluginSet(impl Base) (goplugin.PluginSet, error) {
	set := goplugin.PluginSet{typeBase: &grpcPlugin{typ: typeBase, impl: impl}}
	switch impl.(type) {
	case VolumeProvisioner:
		set[string(TypeVolumeProvisioner)] = &grpcPlugin{typ: string(TypeVolumeProvisioner), impl: impl}
	case LifecycleHook:
		set[string(TypeLifecycleHook)] = &grpcPlugin{typ: string(TypeLifecycleHook), impl: impl}
	default:
		return nil, fmt.Errorf("%T implements neither VolumeProvisioner nor LifecycleHook", impl)
	}
	return set, nil
}

// ClientPlugins is the go-plugin map on the agent's side: every type, each
// dispensing a client stub of that type.
func ClientPlugins() goplugin.PluginSet {
	return goplugin.PluginSet{
		typeBase:                      &grpcPlugin{typ: typeBase},
		string(TypeVolumeProvisioner): &grpcPlugin{typ: string(TypeVolumeProvisioner)},
		string(TypeLifecycleHook):     &grpcPlugin{typ: string(TypeLifecycleHook)},
	}
}
