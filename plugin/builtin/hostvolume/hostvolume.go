// Package hostvolume is the built-in volume provisioner "nomad-host-volume":
// each claim of each ordinal gets a Nomad dynamic host volume.
//
// Config keys, from the volume_provisioner block (sent with every call) over
// the plugin block (sent once by SetConfig):
//
//	plugin_id      the dynamic host volume plugin (default "mkdir")
//	capacity_min   requested minimum capacity: bytes, or with a unit as
//	               Nomad reads it (e.g. "10GiB", "500MB"; see
//	               internal/bytesize)
//	capacity_max   requested maximum capacity, likewise
//	node_pool      the node pool to place volumes in; it overrides the
//	               set's own node pool, so set it only if the set's jobs run
//	               in that pool
//	parameters.<k> passed to the host volume plugin as parameter <k>
//
// An unknown key is an error, so that a typo does not silently fall back to
// a default.
//
// A claim's own size (VolumeRequest.CapacityMin and CapacityMax, from
// statefulset_claim_<claim>_capacity) wins over capacity_min and
// capacity_max: the pair is taken from the request when it sets one, else
// from the config. A pair without a maximum asks for exactly the minimum,
// because Nomad 1.10 refuses a capacity_max below capacity_min even when
// capacity_max is not set.
//
// The volume of a named class (VolumeRequest.Class) records the class in
// its parameters under nomad.ClassParameter, where the agent reads it
// back; the default class records nothing, so volumes made before classes
// existed belong to it. Nomad's mkdir plugin refuses parameters it does not
// know, so a named class needs another plugin_id.
//
// ExpandVolume grows a volume as Nomad 1.10 does: `volume create` again
// with the volume's ID and a higher capacity_min. Nomad refuses that while
// an allocation claims the volume and when capacity_max is below the
// volume's capacity; those refusals come back as plugin.ErrVolumeInUse and
// plugin.ErrVolumeShrink. A mkdir volume has no size to grow
// (plugin.ErrExpandUnsupported), which Capabilities says of a class whose
// plugin_id is mkdir before anything is stopped.
package hostvolume

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"maps"
	"net/http"
	"slices"
	"strings"
	"sync"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/nomad/api"

	"github.com/nomad-statefulset/nomad-statefulset/backend/nomad"
	"github.com/nomad-statefulset/nomad-statefulset/internal/bytesize"
	"github.com/nomad-statefulset/nomad-statefulset/plugin"
)

// Name is the built-in's driver name (config.BuiltinHostVolume).
const Name = "nomad-host-volume"

// DefaultPluginID is the host volume plugin used unless plugin_id says
// otherwise; "mkdir" ships with Nomad.
const DefaultPluginID = "mkdir"

// API is the part of the Nomad API the provisioner needs. It is a subset of
// backend/nomad.API, which *nomad.Client and internal/nomadsim.Nomad implement.
type API interface {
	// CreateHostVolume creates a dynamic host volume.
	CreateHostVolume(ctx context.Context, vol *api.HostVolume) (*api.HostVolume, error)
	// ListHostVolumes lists host volumes in a namespace whose name has prefix.
	ListHostVolumes(ctx context.Context, namespace, prefix string) ([]*api.HostVolumeStub, error)
	// GetHostVolume returns one host volume with its parameters, or
	// nomad.ErrNotFound.
	GetHostVolume(ctx context.Context, namespace, id string) (*api.HostVolume, error)
	// DeleteHostVolume deletes a host volume by ID.
	DeleteHostVolume(ctx context.Context, namespace, id string) error
}

// Factory returns the plugin factory of the built-in over client, for the
// manager's Options.Builtins.
func Factory(client API) plugin.Factory {
	return func(log hclog.Logger) plugin.Base { return New(client, log) }
}

// Provisioner is the nomad-host-volume plugin.
type Provisioner struct {
	api API
	log hclog.Logger

	mu   sync.RWMutex
	base map[string]string // from SetConfig
}

// New returns a provisioner that talks to Nomad through client.
func New(client API, log hclog.Logger) *Provisioner {
	if log == nil {
		log = hclog.NewNullLogger()
	}
	return &Provisioner{api: client, log: log, base: map[string]string{}}
}

// PluginInfo implements plugin.Base.
func (p *Provisioner) PluginInfo(context.Context) (*plugin.Info, error) {
	return &plugin.Info{Name: Name, Type: plugin.TypeVolumeProvisioner}, nil
}

// SetConfig implements plugin.Base. It checks the keys now, so that a bad
// plugin block is reported at start-up rather than at the first create.
func (p *Provisioner) SetConfig(_ context.Context, config map[string]string) error {
	if _, err := parseSettings(config); err != nil {
		return err
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	p.base = maps.Clone(config)
	return nil
}

// settings are the parsed config keys.
type settings struct {
	pluginID    string
	capacityMin int64
	capacityMax int64
	nodePool    string
	parameters  map[string]string
}

func parseSettings(config map[string]string) (*settings, error) {
	s := &settings{pluginID: DefaultPluginID}
	var errs []error
	for _, k := range slices.Sorted(maps.Keys(config)) {
		v := config[k]
		switch {
		case k == "plugin_id":
			if v != "" {
				s.pluginID = v
			}
		case k == "capacity_min" || k == "capacity_max":
			n, err := parseBytes(v)
			if err != nil {
				errs = append(errs, fmt.Errorf("config key %s: %q %s", k, v, bytesize.Rule))
				continue
			}
			if k == "capacity_min" {
				s.capacityMin = n
			} else {
				s.capacityMax = n
			}
		case k == "node_pool":
			s.nodePool = v
		case k == "parameters."+nomad.ClassParameter:
			errs = append(errs, fmt.Errorf("config key %s: the parameter %s records the storage class, which the provisioner sets itself", k, nomad.ClassParameter))
		case strings.HasPrefix(k, "parameters.") && len(k) > len("parameters."):
			if s.parameters == nil {
				s.parameters = map[string]string{}
			}
			s.parameters[strings.TrimPrefix(k, "parameters.")] = v
		default:
			errs = append(errs, fmt.Errorf("unknown config key %q (known: plugin_id, capacity_min, capacity_max, node_pool, parameters.<name>)", k))
		}
	}
	if s.capacityMax != 0 && s.capacityMin > s.capacityMax {
		errs = append(errs, fmt.Errorf("capacity_min (%d bytes) is larger than capacity_max (%d bytes)", s.capacityMin, s.capacityMax))
	}
	if err := errors.Join(errs...); err != nil {
		return nil, fmt.Errorf("%s config: %w", Name, err)
	}
	return s, nil
}

// parseBytes reads a size as Nomad reads capacity_min; empty is zero (the
// key is as good as unset).
func parseBytes(s string) (int64, error) {
	t := strings.TrimSpace(s)
	if t == "" {
		return 0, nil
	}
	return bytesize.Parse(t)
}

// settingsFor merges the call's config over SetConfig's.
func (p *Provisioner) settingsFor(req *plugin.VolumeRequest) (*settings, error) {
	p.mu.RLock()
	conf := maps.Clone(p.base)
	p.mu.RUnlock()
	if conf == nil {
		// SetConfig(nil) left no map to merge into.
		conf = map[string]string{}
	}
	maps.Copy(conf, req.Config)
	return parseSettings(conf)
}

// find returns the volumes named exactly req.Name, oldest first. Nomad
// lists by prefix, so "data-web-1" also returns "data-web-10".
func (p *Provisioner) find(ctx context.Context, req *plugin.VolumeRequest) ([]*api.HostVolumeStub, error) {
	stubs, err := p.api.ListHostVolumes(ctx, req.Namespace, req.Name)
	if err != nil {
		return nil, fmt.Errorf("looking up host volume %s/%s: %w", req.Namespace, req.Name, err)
	}
	var out []*api.HostVolumeStub
	for _, s := range stubs {
		if s != nil && s.Name == req.Name {
			out = append(out, s)
		}
	}
	slices.SortFunc(out, func(a, b *api.HostVolumeStub) int {
		if c := cmp.Compare(a.CreateIndex, b.CreateIndex); c != 0 {
			return c
		}
		return strings.Compare(a.ID, b.ID)
	})
	return out, nil
}

func checkRequest(req *plugin.VolumeRequest) error {
	if req == nil || req.Name == "" {
		return errors.New("the volume request has no name")
	}
	return nil
}

// CreateVolume implements plugin.VolumeProvisioner. It looks the name up
// before creating, because Nomad does not keep host volume names unique: a
// create that timed out but succeeded would otherwise be doubled by the
// retry. If duplicates exist anyway, the oldest one is the volume.
func (p *Provisioner) CreateVolume(ctx context.Context, req *plugin.VolumeRequest) (*plugin.Volume, error) {
	if err := checkRequest(req); err != nil {
		return nil, err
	}
	s, err := p.settingsFor(req)
	if err != nil {
		return nil, err
	}
	found, err := p.find(ctx, req)
	if err != nil {
		return nil, err
	}
	if len(found) > 0 {
		if len(found) > 1 {
			p.log.Warn("duplicate host volumes; using the oldest", "namespace", req.Namespace, "name", req.Name, "count", len(found))
		}
		return fromStub(found[0]), nil
	}
	if req.Class != "" && s.pluginID == DefaultPluginID {
		return nil, fmt.Errorf("class %q: host volume %s/%s: Nomad's %s plugin refuses parameters it does not know, so the volume could not record its class (parameter %s); give the class another plugin_id",
			req.Class, req.Namespace, req.Name, DefaultPluginID, nomad.ClassParameter)
	}
	minBytes, maxBytes := s.capacityMin, s.capacityMax
	if req.CapacityMin > 0 || req.CapacityMax > 0 {
		minBytes, maxBytes = req.CapacityMin, req.CapacityMax
	}
	if maxBytes == 0 {
		maxBytes = minBytes
	}
	params := maps.Clone(s.parameters)
	if req.Class != "" {
		if params == nil {
			params = map[string]string{}
		}
		params[nomad.ClassParameter] = req.Class
	}
	vol := &api.HostVolume{
		Namespace:                 req.Namespace,
		Name:                      req.Name,
		PluginID:                  s.pluginID,
		NodePool:                  req.NodePool,
		RequestedCapacityMinBytes: minBytes,
		RequestedCapacityMaxBytes: maxBytes,
		Parameters:                params,
		RequestedCapabilities:     []*api.HostVolumeCapability{capability(req)},
	}
	if s.nodePool != "" {
		vol.NodePool = s.nodePool
	}
	for _, c := range req.Constraints {
		vol.Constraints = append(vol.Constraints, &api.Constraint{LTarget: c.LTarget, RTarget: c.RTarget, Operand: c.Operand})
	}
	created, err := p.api.CreateHostVolume(ctx, vol)
	if err != nil {
		return nil, fmt.Errorf("creating host volume %s/%s with plugin %q: %w", req.Namespace, req.Name, s.pluginID, err)
	}
	p.log.Info("created host volume", "namespace", created.Namespace, "name", created.Name, "id", created.ID,
		"node_id", created.NodeID, "class", req.Class, "capacity", created.CapacityBytes)
	return fromVolume(created), nil
}

func fromVolume(v *api.HostVolume) *plugin.Volume {
	return &plugin.Volume{
		ID: v.ID, Name: v.Name, Namespace: v.Namespace, PluginID: v.PluginID,
		NodePool: v.NodePool, NodeID: v.NodeID, State: string(v.State),
		CapacityBytes: v.CapacityBytes, CreateIndex: v.CreateIndex, ModifyIndex: v.ModifyIndex,
	}
}

// ExpandVolume implements plugin.VolumeProvisioner: the volume is created
// again with its ID and the new capacities, as `nomad volume create` of a
// volume spec with an ID does. Everything else is sent as the volume has
// it (plugin, parameters, capabilities), because Nomad replaces them with
// what the update says and hands them to the host volume plugin again.
// A volume that already has req.CapacityMin is not touched.
func (p *Provisioner) ExpandVolume(ctx context.Context, req *plugin.VolumeRequest) (*plugin.Volume, error) {
	if err := checkRequest(req); err != nil {
		return nil, err
	}
	if req.CapacityMin <= 0 {
		return nil, fmt.Errorf("expanding host volume %s/%s: the request names no capacity to grow to", req.Namespace, req.Name)
	}
	if req.CapacityMax != 0 && req.CapacityMax < req.CapacityMin {
		return nil, fmt.Errorf("expanding host volume %s/%s: capacity_max %s is below capacity_min %s",
			req.Namespace, req.Name, bytesize.Format(req.CapacityMax), bytesize.Format(req.CapacityMin))
	}
	found, err := p.find(ctx, req)
	if err != nil {
		return nil, err
	}
	if len(found) == 0 {
		return nil, fmt.Errorf("expanding host volume %s/%s: it does not exist", req.Namespace, req.Name)
	}
	stub := found[0]
	what := fmt.Sprintf("host volume %s/%s (%s)", stub.Namespace, stub.Name, stub.ID)
	if stub.PluginID == DefaultPluginID {
		return nil, fmt.Errorf("%s: %w: Nomad's %s plugin makes plain directories, with no size to grow",
			what, plugin.ErrExpandUnsupported, DefaultPluginID)
	}
	current := stub.CapacityBytes
	if req.CapacityMin <= current && (req.CapacityMax == 0 || req.CapacityMax >= current) {
		// Already that large: a retry after a success, or a claim whose
		// plugin rounded the first size up.
		return fromStub(stub), nil
	}
	full, err := p.api.GetHostVolume(ctx, stub.Namespace, stub.ID)
	if err != nil {
		return nil, fmt.Errorf("expanding %s: reading it: %w", what, err)
	}
	if class := full.Parameters[nomad.ClassParameter]; class != req.Class {
		return nil, fmt.Errorf("expanding %s: it was made by class %q, not %q, and a volume keeps its class", what, class, req.Class)
	}
	maxBytes := req.CapacityMax
	if maxBytes == 0 {
		maxBytes = req.CapacityMin
	}
	update := &api.HostVolume{
		ID: full.ID, Namespace: full.Namespace, Name: full.Name, PluginID: full.PluginID,
		RequestedCapacityMinBytes: req.CapacityMin, RequestedCapacityMaxBytes: maxBytes,
		Parameters: full.Parameters, RequestedCapabilities: full.RequestedCapabilities,
	}
	grown, err := p.api.CreateHostVolume(ctx, update)
	if err != nil {
		return nil, fmt.Errorf("expanding %s from %s to %s: %w", what, bytesize.Format(current), bytesize.Format(req.CapacityMin), refusal(err))
	}
	p.log.Info("expanded host volume", "namespace", grown.Namespace, "name", grown.Name, "id", grown.ID,
		"from", current, "to", grown.CapacityBytes)
	return fromVolume(grown), nil
}

// Capabilities implements plugin.VolumeProvisioner: a class can expand
// unless its plugin_id is Nomad's mkdir, whose directories have no size to
// grow. It asks Nomad nothing. A volume made by mkdir under a class whose
// plugin_id was changed since is still refused by ExpandVolume.
func (p *Provisioner) Capabilities(_ context.Context, req *plugin.VolumeRequest) (*plugin.Capabilities, error) {
	s, err := p.settingsFor(req)
	if err != nil {
		return nil, err
	}
	if s.pluginID == DefaultPluginID {
		return &plugin.Capabilities{Reason: fmt.Sprintf("Nomad's %s plugin makes plain directories, with no size to grow", DefaultPluginID)}, nil
	}
	return &plugin.Capabilities{Expand: true}, nil
}

// refusal gives Nomad's refusals of a volume update their sentinels, by
// the words of HostVolume.ValidateUpdate (Nomad 1.10): an update refused
// for both reasons wraps both.
func refusal(err error) error {
	msg := err.Error()
	var kinds []error
	if strings.Contains(msg, "cannot be less than existing provisioned capacity") {
		kinds = append(kinds, plugin.ErrVolumeShrink)
	}
	if strings.Contains(msg, "cannot update a volume in use") {
		kinds = append(kinds, plugin.ErrVolumeInUse)
	}
	for i := len(kinds) - 1; i >= 0; i-- {
		err = fmt.Errorf("%w: %w", kinds[i], err)
	}
	return err
}

// capability is the access and attachment mode the claim asks for. Nomad
// places a job on a dynamic host volume only if the volume offers the
// capability the job's volume block asks for, so the defaults are Nomad's
// own defaults for a group volume.
func capability(req *plugin.VolumeRequest) *api.HostVolumeCapability {
	access, attach := req.AccessMode, req.AttachmentMode
	if access == "" {
		access = "single-node-writer"
	}
	if attach == "" {
		attach = "file-system"
	}
	return &api.HostVolumeCapability{
		AccessMode:     api.HostVolumeAccessMode(access),
		AttachmentMode: api.HostVolumeAttachmentMode(attach),
	}
}

func fromStub(s *api.HostVolumeStub) *plugin.Volume {
	return &plugin.Volume{
		ID: s.ID, Name: s.Name, Namespace: s.Namespace, PluginID: s.PluginID,
		NodePool: s.NodePool, NodeID: s.NodeID, State: string(s.State),
		CapacityBytes: s.CapacityBytes, CreateIndex: s.CreateIndex, ModifyIndex: s.ModifyIndex,
	}
}

// GetVolume implements plugin.VolumeProvisioner.
func (p *Provisioner) GetVolume(ctx context.Context, req *plugin.VolumeRequest) (*plugin.Volume, error) {
	if err := checkRequest(req); err != nil {
		return nil, err
	}
	found, err := p.find(ctx, req)
	if err != nil || len(found) == 0 {
		return nil, err
	}
	return fromStub(found[0]), nil
}

// DeleteVolume implements plugin.VolumeProvisioner. It deletes every volume
// of the name, duplicates included, and treats one that is already gone as
// deleted.
func (p *Provisioner) DeleteVolume(ctx context.Context, req *plugin.VolumeRequest) error {
	if err := checkRequest(req); err != nil {
		return err
	}
	found, err := p.find(ctx, req)
	if err != nil {
		return err
	}
	for _, v := range found {
		err := p.api.DeleteHostVolume(ctx, v.Namespace, v.ID)
		if err != nil && !gone(err) {
			return fmt.Errorf("deleting host volume %s/%s (%s): %w", v.Namespace, v.Name, v.ID, err)
		}
		p.log.Info("deleted host volume", "namespace", v.Namespace, "name", v.Name, "id", v.ID)
	}
	return nil
}

// gone reports an error that means the volume no longer exists. Nomad
// answers a delete of an unknown volume with a 500 "no such volume" rather
// than a 404.
func gone(err error) bool {
	var ue api.UnexpectedResponseError
	if errors.As(err, &ue) && ue.StatusCode() == http.StatusNotFound {
		return true
	}
	return errors.Is(err, nomad.ErrNotFound) || strings.Contains(err.Error(), "no such volume")
}
