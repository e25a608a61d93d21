// Command testplugin is an external plugin for the manager's tests. One
// binary plays every part: -type chooses the plugin type, and the name it
// reports is its file name (so a copy named "x" is plugin "x") unless -name
// says otherwise, which lets the tests build one binary and lay out a
// plugin_dir of differently named copies.
//
// Config keys: result (done|wait|fail, default done), message, retry_after,
// sleep (a duration each hook call sleeps, honouring its deadline),
// pid_file (the process writes its PID there on every SetConfig, so a test
// can kill it), reject (SetConfig fails with this message), expand
// ("unsupported": ExpandVolume says it cannot).
//
// As a provisioner it keeps volumes in memory: a volume gets the request's
// CapacityMin as its capacity and its Class as its plugin ID when it has
// one (so a test sees which class made it); ExpandVolume grows one, never
// shrinks one, and refuses the volume named "in-use" as Nomad refuses a
// claimed host volume.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/nomad-statefulset/nomad-statefulset/plugin"
)

func main() {
	typ := flag.String("type", "hook", "hook or provisioner")
	name := flag.String("name", filepath.Base(os.Args[0]), "the name to report")
	flag.Parse()
	plugin.Serve(func(log hclog.Logger) plugin.Base {
		b := &base{name: *name, log: log}
		if *typ == "provisioner" {
			b.typ = plugin.TypeVolumeProvisioner
			return &provisioner{base: b, vols: map[string]*plugin.Volume{}}
		}
		b.typ = plugin.TypeLifecycleHook
		return &hook{base: b}
	})
}

type base struct {
	name string
	typ  plugin.Type
	log  hclog.Logger
	mu   sync.Mutex
	conf map[string]string
}

func (b *base) PluginInfo(context.Context) (*plugin.Info, error) {
	return &plugin.Info{Name: b.name, Type: b.typ}, nil
}

func (b *base) SetConfig(_ context.Context, conf map[string]string) error {
	if msg := conf["reject"]; msg != "" {
		return errors.New(msg)
	}
	if f := conf["pid_file"]; f != "" {
		if err := os.WriteFile(f, []byte(strconv.Itoa(os.Getpid())), 0o600); err != nil {
			return fmt.Errorf("writing pid_file: %w", err)
		}
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	b.conf = conf
	return nil
}

func (b *base) get(k string) string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.conf[k]
}

type hook struct{ *base }

func (h *hook) answer(ctx context.Context, event string, pod plugin.Pod) (*plugin.HookResponse, error) {
	h.log.Info("hook called", "event", event, "pod", pod.Name)
	if d, _ := time.ParseDuration(h.get("sleep")); d > 0 {
		select {
		case <-time.After(d):
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
	retry, _ := time.ParseDuration(h.get("retry_after"))
	msg := h.get("message")
	switch h.get("result") {
	case "wait":
		return plugin.Wait(retry, "%s", msg), nil
	case "fail":
		return plugin.Fail("%s", msg), nil
	case "error":
		return nil, errors.New(msg)
	}
	return plugin.Done(), nil
}

func (h *hook) PreDelete(ctx context.Context, pod plugin.Pod) (*plugin.HookResponse, error) {
	return h.answer(ctx, "pre_delete", pod)
}

func (h *hook) PostReady(ctx context.Context, pod plugin.Pod) (*plugin.HookResponse, error) {
	return h.answer(ctx, "post_ready", pod)
}

func (h *hook) PreUpdate(ctx context.Context, pod plugin.Pod) (*plugin.HookResponse, error) {
	return h.answer(ctx, "pre_update", pod)
}

type provisioner struct {
	*base
	vmu  sync.Mutex
	vols map[string]*plugin.Volume
}

func (p *provisioner) CreateVolume(_ context.Context, req *plugin.VolumeRequest) (*plugin.Volume, error) {
	p.vmu.Lock()
	defer p.vmu.Unlock()
	if v, ok := p.vols[req.Name]; ok {
		return v, nil
	}
	v := &plugin.Volume{ID: "vol-" + req.Name, Name: req.Name, Namespace: req.Namespace, PluginID: req.Config["plugin_id"],
		NodePool: req.NodePool, CapacityBytes: req.CapacityMin}
	if req.Class != "" {
		v.PluginID = req.Class
	}
	p.vols[req.Name] = v
	return v, nil
}

func (p *provisioner) ExpandVolume(_ context.Context, req *plugin.VolumeRequest) (*plugin.Volume, error) {
	if p.get("expand") == "unsupported" {
		return nil, fmt.Errorf("%s: %w", p.name, plugin.ErrExpandUnsupported)
	}
	p.vmu.Lock()
	defer p.vmu.Unlock()
	v, ok := p.vols[req.Name]
	switch {
	case !ok:
		return nil, fmt.Errorf("volume %s does not exist", req.Name)
	case req.CapacityMax > 0 && req.CapacityMax < v.CapacityBytes:
		return nil, fmt.Errorf("volume %s has %d bytes, more than %d: %w", req.Name, v.CapacityBytes, req.CapacityMax, plugin.ErrVolumeShrink)
	case req.Name == "in-use":
		return nil, fmt.Errorf("volume %s: %w", req.Name, plugin.ErrVolumeInUse)
	}
	c := *v
	c.CapacityBytes = max(c.CapacityBytes, req.CapacityMin)
	p.vols[req.Name] = &c
	return &c, nil
}

func (p *provisioner) Capabilities(context.Context, *plugin.VolumeRequest) (*plugin.Capabilities, error) {
	if p.get("expand") == "unsupported" {
		return &plugin.Capabilities{Reason: p.name + " cannot expand"}, nil
	}
	return &plugin.Capabilities{Expand: true}, nil
}

func (p *provisioner) GetVolume(_ context.Context, req *plugin.VolumeRequest) (*plugin.Volume, error) {
	p.vmu.Lock()
	defer p.vmu.Unlock()
	return p.vols[req.Name], nil
}

func (p *provisioner) DeleteVolume(_ context.Context, req *plugin.VolumeRequest) error {
	p.vmu.Lock()
	defer p.vmu.Unlock()
	if req.Name == "in-use" {
		return errors.New("volume in-use is in use")
	}
	delete(p.vols, req.Name)
	return nil
}
