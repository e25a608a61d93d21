// Package hostvolume is the built-in volume provisioner "nomad-host-volume":
// each claim of each ordinal gets a Nomad dynamic host volume.
//
// Config keys, from the volume_provisioner block (sent with every call) over
// the plugin block (sent once by SetConfig):
//
//	plugin_id      the dynamic host volume plugin (default "mkdir")
//	capacity_min   requested minimum capacity: bytes, or with a unit
//	               (e.g. "10GiB", "500MB")
//	capacity_max   requested maximum capacity, likewise
//	node_pool      the node pool to place volumes in; it overrides the
//	               set's own node pool, so set it only if the set's jobs run
//	               in that pool
//	parameters.<k> passed to the host volume plugin as parameter <k>
//
// An unknown key is an error, so that a typo does not silently fall back to
// a default.
package hostvolume

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"maps"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/nomad/api"

	"github.com/nomad-statefulset/nomad-statefulset/backend/nomad"
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
				errs = append(errs, fmt.Errorf("config key %s: %w", k, err))
				continue
			}
			if k == "capacity_min" {
				s.capacityMin = n
			} else {
				s.capacityMax = n
			}
		case k == "node_pool":
			s.nodePool = v
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

// units are the size suffixes parseBytes accepts, longest first so that
// "GiB" is not read as "B".
var units = []struct {
	suffix string
	mult   int64
}{
	{"KiB", 1 << 10}, {"MiB", 1 << 20}, {"GiB", 1 << 30}, {"TiB", 1 << 40},
	{"KB", 1e3}, {"MB", 1e6}, {"GB", 1e9}, {"TB", 1e12},
	{"K", 1e3}, {"M", 1e6}, {"G", 1e9}, {"T", 1e12}, {"B", 1},
}

// parseBytes reads a size: a number of bytes, or a number with a unit as
// Nomad's own capacity fields accept.
func parseBytes(s string) (int64, error) {
	t := strings.TrimSpace(s)
	if t == "" {
		return 0, nil
	}
	mult := int64(1)
	for _, u := range units {
		if strings.HasSuffix(t, u.suffix) {
			t, mult = strings.TrimSpace(strings.TrimSuffix(t, u.suffix)), u.mult
			break
		}
	}
	n, err := strconv.ParseInt(t, 10, 64)
	if err != nil || n < 0 {
		return 0, fmt.Errorf("%q is not a size (use bytes, or a number with KB, MB, GB, TB, KiB, MiB, GiB or TiB)", s)
	}
	if n > 0 && mult > (1<<62)/n {
		return 0, fmt.Errorf("%q is too large", s)
	}
	return n * mult, nil
}

// settingsFor merges the call's config over SetConfig's.
func (p *Provisioner) settingsFor(req *plugin.VolumeRequest) (*settings, error) {
	p.mu.RLock()
	conf := maps.Clone(p.base)
	p.mu.RUnlock()
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
	vol := &api.HostVolume{
		Namespace:                 req.Namespace,
		Name:                      req.Name,
		PluginID:                  s.pluginID,
		NodePool:                  req.NodePool,
		RequestedCapacityMinBytes: s.capacityMin,
		RequestedCapacityMaxBytes: s.capacityMax,
		Parameters:                s.parameters,
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
	p.log.Info("created host volume", "namespace", created.Namespace, "name", created.Name, "id", created.ID, "node_id", created.NodeID)
	return &plugin.Volume{
		ID: created.ID, Name: created.Name, Namespace: created.Namespace, PluginID: created.PluginID,
		NodePool: created.NodePool, NodeID: created.NodeID, State: string(created.State),
		CapacityBytes: created.CapacityBytes, CreateIndex: created.CreateIndex, ModifyIndex: created.ModifyIndex,
	}, nil
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
