package manager

import (
	"fmt"
	"maps"
	"slices"
	"time"

	"github.com/nomad-statefulset/nomad-statefulset/agent/config"
	"github.com/nomad-statefulset/nomad-statefulset/plugin"
)

// Config is what the manager runs: its own small view of the agent's
// plugin_dir, plugin, volume_provisioner and hook blocks. The manager reads
// nothing else of the agent's configuration.
type Config struct {
	// PluginDir holds external plugin binaries.
	PluginDir string
	// Plugins are the plugin blocks, in order.
	Plugins []*PluginConfig
	// VolumeProvisioner names the plugin that makes volumes, and the config
	// every volume request carries: the unnamed volume_provisioner block,
	// the default storage class.
	VolumeProvisioner VolumeProvisionerConfig
	// VolumeClasses are the named volume_provisioner blocks, the storage
	// classes a volume request may name (VolumeRequest.Class).
	VolumeClasses []VolumeProvisionerConfig
	// Hooks are the hook blocks, in the order they run.
	Hooks []*HookConfig
}

// PluginConfig is one plugin block.
type PluginConfig struct {
	// Name is the block label; Driver the implementation (a built-in, or an
	// executable in PluginDir), Name when empty.
	Name, Driver string
	// Args are an external binary's arguments.
	Args []string
	// Config is handed to the plugin's SetConfig.
	Config map[string]string
	// Where is the block's "file:line", or "" for a block no file declared
	// (the implicit built-in); the manager's errors start with it.
	Where string
}

// VolumeProvisionerConfig is a volume_provisioner block.
type VolumeProvisionerConfig struct {
	// Name is the storage class, "" for the unnamed block.
	Name string
	// Plugin names a plugin block.
	Plugin string
	// Config is merged into every volume request of the class.
	Config map[string]string
	// Where is a named block's "file:line", or "".
	Where string
}

// what names the block in errors.
func (v *VolumeProvisionerConfig) what() string {
	if v.Name == "" {
		return "volume_provisioner"
	}
	return fmt.Sprintf("volume_provisioner %q", v.Name)
}

// classes lists every volume_provisioner block, the unnamed one first.
func (c *Config) classes() []VolumeProvisionerConfig {
	return append([]VolumeProvisionerConfig{c.VolumeProvisioner}, c.VolumeClasses...)
}

// HookConfig is one hook block.
type HookConfig struct {
	// Name is the block label; Plugin the plugin block that implements it.
	Name, Plugin string
	// Events are the points at which it runs.
	Events []plugin.Event
	// Timeout bounds one call; zero means plugin.DefaultHookTimeout.
	Timeout time.Duration
	// FailurePolicy is what a failure does to the pod's step.
	FailurePolicy plugin.FailurePolicy
}

// plugin returns the plugin block called name, or nil.
func (c *Config) plugin(name string) *PluginConfig {
	for _, p := range c.Plugins {
		if p.Name == name {
			return p
		}
	}
	return nil
}

// ConfigOf takes the manager's part of the agent's configuration.
func ConfigOf(cfg *config.Config) Config {
	out := Config{
		PluginDir:         cfg.PluginDir,
		VolumeProvisioner: VolumeProvisionerConfig{Plugin: cfg.VolumeProvisioner.Plugin, Config: maps.Clone(cfg.VolumeProvisioner.Config)},
	}
	for _, v := range cfg.VolumeClasses {
		vc := VolumeProvisionerConfig{Name: v.Name, Plugin: v.Plugin, Config: maps.Clone(v.Config)}
		if r := v.DeclRange; r.Filename != "" {
			vc.Where = fmt.Sprintf("%s:%d", r.Filename, r.Start.Line)
		}
		out.VolumeClasses = append(out.VolumeClasses, vc)
	}
	for _, p := range cfg.Plugins {
		pc := &PluginConfig{Name: p.Name, Driver: p.Driver, Args: slices.Clone(p.Args), Config: maps.Clone(p.Config)}
		if r := p.DeclRange; r.Filename != "" {
			pc.Where = fmt.Sprintf("%s:%d", r.Filename, r.Start.Line)
		}
		out.Plugins = append(out.Plugins, pc)
	}
	for _, h := range cfg.Hooks {
		out.Hooks = append(out.Hooks, &HookConfig{Name: h.Name, Plugin: h.Plugin, Events: slices.Clone(h.Events),
			Timeout: h.Timeout, FailurePolicy: h.FailurePolicy})
	}
	return out
}
