// Package manager runs the agent's plugins: it launches the built-in and
// external plugins named by the config's plugin blocks, checks that each is
// what the config says, hands it its config, restarts an external plugin
// that crashed, and gives the agent two narrow entry points, Provisioner and
// RunHooks.
//
// It follows the nomad-autoscaler's plugin manager (one code path for
// built-in and external plugins, a launch check after dispense, an external
// binary in plugin_dir overriding a built-in of the same name), with these
// differences:
//
//   - the type of a plugin block is not written in the config but follows
//     from its use (volume_provisioner or hook), and is checked against what
//     the plugin reports;
//   - every launch error names the plugin block's file and line;
//   - a reload that fails leaves the running plugins as they were, instead
//     of exiting the agent;
//   - a crashed plugin is restarted with exponential backoff, and calls made
//     while it is down fail at once with plugin.ErrPluginUnavailable.
package manager

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"sync"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/nomad-statefulset/nomad-statefulset/plugin"
)

// Defaults of Options.
const (
	// DefaultRestartMin is the first pause before restarting a crashed
	// plugin. It doubles with each failed attempt, up to DefaultRestartMax.
	DefaultRestartMin = time.Second
	// DefaultRestartMax caps the restart backoff: a plugin whose binary is
	// broken is retried once a minute, cheap enough to run forever.
	DefaultRestartMax = time.Minute
	// DefaultLaunchTimeout bounds the launch check and SetConfig of one
	// plugin; a plugin that cannot say who it is in that time is broken.
	DefaultLaunchTimeout = 30 * time.Second
	// DefaultCheckInterval is how often a plugin process is checked for an
	// exit. It is a local check of a child process, not a network call.
	DefaultCheckInterval = time.Second

	// DefaultWaitRetry is the retry delay of a hook that says wait without
	// suggesting one.
	DefaultWaitRetry = 10 * time.Second
	// DefaultFailRetry is the retry delay of a blocking hook that failed,
	// timed out or whose plugin is down.
	DefaultFailRetry = 15 * time.Second
	// MaxRetryAfter caps a hook's suggested delay, so that a plugin cannot
	// park a pod's step for longer than this between two calls.
	MaxRetryAfter = 10 * time.Minute
)

// Options configure a Manager. The zero value of each field means its
// default.
type Options struct {
	// Logger is the parent logger; the manager logs as "plugin_manager".
	Logger hclog.Logger
	// Builtins are the compiled-in plugins by driver name, e.g.
	// {hostvolume.Name: hostvolume.Factory(api)}.
	Builtins map[string]plugin.Factory
	// RestartMin and RestartMax bound the restart backoff of a crashed
	// external plugin.
	RestartMin time.Duration
	// RestartMax: see RestartMin.
	RestartMax time.Duration
	// LaunchTimeout bounds the launch check and SetConfig of one plugin.
	LaunchTimeout time.Duration
	// CheckInterval is how often external plugin processes are checked for
	// an exit.
	CheckInterval time.Duration
}

// Manager runs the plugins of one agent. It is safe for concurrent use.
type Manager struct {
	log  hclog.Logger
	opts Options

	// reloadMu serializes Start, Reload and Close's stop of the plugins.
	// It is held while plugins launch, which may take LaunchTimeout, so mu
	// is not: calls (RunHooks, Provisioner) only ever wait for mu, and mu
	// is only held to read or swap the maps below.
	reloadMu sync.Mutex

	mu        sync.RWMutex
	instances map[string]*instance // by plugin block name
	hooks     []*HookConfig
	// classes are the volume_provisioner blocks by storage class, the
	// unnamed one under "".
	classes map[string]VolumeProvisionerConfig
	closed  bool
}

// New returns a manager with no plugins running; Start launches them.
func New(opts Options) *Manager {
	if opts.Logger == nil {
		opts.Logger = hclog.NewNullLogger()
	}
	if opts.RestartMin <= 0 {
		opts.RestartMin = DefaultRestartMin
	}
	if opts.RestartMax < opts.RestartMin {
		opts.RestartMax = max(DefaultRestartMax, opts.RestartMin)
	}
	if opts.LaunchTimeout <= 0 {
		opts.LaunchTimeout = DefaultLaunchTimeout
	}
	if opts.CheckInterval <= 0 {
		opts.CheckInterval = DefaultCheckInterval
	}
	return &Manager{
		log:       opts.Logger.Named("plugin_manager"),
		opts:      opts,
		instances: map[string]*instance{},
	}
}

// Start launches every plugin block of cfg and checks each. It returns every
// problem at once, each naming its plugin block's file and line; on error
// nothing is left running.
func (m *Manager) Start(ctx context.Context, cfg Config) error {
	if err := m.Reload(ctx, cfg); err != nil {
		return fmt.Errorf("starting plugins: %w", err)
	}
	return nil
}

// Reload applies a new configuration (SIGHUP). A plugin block whose driver,
// args and type are unchanged keeps its process and gets the new config
// through SetConfig; a new or changed one is launched and checked; a removed
// one is stopped. If any launch or SetConfig fails, the new plugins are
// stopped and the old set keeps running, so a bad edit never takes the
// agent's plugins away. (A SetConfig already applied to a kept plugin is not
// undone: its plugin accepted it.)
func (m *Manager) Reload(ctx context.Context, cfg Config) error {
	m.reloadMu.Lock()
	defer m.reloadMu.Unlock()
	m.mu.RLock()
	closed, current := m.closed, maps.Clone(m.instances)
	m.mu.RUnlock()
	if closed {
		return errors.New("reloading plugins: the manager is closed")
	}
	types, err := pluginTypes(&cfg)
	if err != nil {
		return err
	}
	next := make(map[string]*instance, len(cfg.Plugins))
	var launched []*instance
	var errs []error
	for _, pc := range cfg.Plugins {
		spec, err := m.resolve(pc, cfg.PluginDir, types[pc.Name])
		if err != nil {
			errs = append(errs, err)
			continue
		}
		classesOf(spec, &cfg)
		if old := current[pc.Name]; old != nil && old.spec.same(spec) {
			if err := old.setConfig(ctx, spec.config); err != nil {
				errs = append(errs, err)
				continue
			}
			next[pc.Name] = old
			continue
		}
		inst := newInstance(m, spec)
		if err := inst.start(ctx); err != nil {
			errs = append(errs, err)
			continue
		}
		launched = append(launched, inst)
		next[pc.Name] = inst
	}
	if len(errs) > 0 {
		for _, inst := range launched {
			inst.stop()
		}
		return errors.Join(errs...)
	}
	hooks := make([]*HookConfig, 0, len(cfg.Hooks))
	for _, h := range cfg.Hooks {
		c := *h
		c.Events = slices.Clone(h.Events)
		hooks = append(hooks, &c)
	}
	m.mu.Lock()
	if m.closed {
		// Close ran while the plugins were launching.
		m.mu.Unlock()
		for _, inst := range launched {
			inst.stop()
		}
		return errors.New("reloading plugins: the manager is closed")
	}
	m.instances = next
	m.hooks = hooks
	m.classes = map[string]VolumeProvisionerConfig{}
	for _, v := range cfg.classes() {
		v.Config = maps.Clone(v.Config)
		m.classes[v.Name] = v
	}
	m.mu.Unlock()
	for name, old := range current {
		if next[name] != old {
			m.log.Info("stopping plugin", "plugin", name, "driver", old.spec.driver)
			old.stop()
		}
	}
	m.log.Info("plugins loaded", "plugins", len(next), "hooks", len(hooks), "volume_provisioner", cfg.VolumeProvisioner.Plugin,
		"storage_classes", len(cfg.VolumeClasses))
	return nil
}

// classesOf adds to a provisioner plugin's launch config what the storage
// classes it serves need. Every call carries its class's config, so this
// is only for reporting a bad key at start-up rather than at the first
// volume. A plugin that serves one class gets that class's config over its
// own block's, as SetConfig's config. A plugin that serves several keeps
// its own block's config alone, so that one class's settings can never
// reach another's volumes through it; each class's config is checked by a
// SetConfig at launch, before the plugin serves any call (spec.checks).
func classesOf(s *spec, cfg *Config) {
	var mine []VolumeProvisionerConfig
	for _, v := range cfg.classes() {
		if v.Plugin == s.name {
			mine = append(mine, v)
		}
	}
	switch {
	case len(mine) == 1:
		maps.Copy(s.config, mine[0].Config)
	case len(mine) > 1:
		for _, v := range mine {
			conf := maps.Clone(s.config)
			maps.Copy(conf, v.Config)
			s.checks = append(s.checks, classCheck{what: v.what(), where: v.Where, config: conf})
		}
	}
}

// Classes returns the storage classes, the named volume_provisioner blocks,
// sorted; the unnamed block, the default class, is not among them.
func (m *Manager) Classes() []string {
	m.mu.RLock()
	defer m.mu.RUnlock()
	var out []string
	for name := range m.classes {
		if name != "" {
			out = append(out, name)
		}
	}
	slices.Sort(out)
	return out
}

// pluginTypes derives each plugin block's type from its uses. A block that
// is used as both is an error; an unused block gets no type and is checked
// only for being a known type.
func pluginTypes(cfg *Config) (map[string]plugin.Type, error) {
	types := map[string]plugin.Type{}
	var errs []error
	use := func(name string, t plugin.Type, by string) {
		if old, ok := types[name]; ok && old != t {
			pos := ""
			if pc := cfg.plugin(name); pc != nil {
				pos = where(pc)
			}
			errs = append(errs, fmt.Errorf("%splugin %q is used both as a %s and as a %s (%s); declare two plugin blocks",
				pos, name, old, t, by))
			return
		}
		types[name] = t
	}
	for _, v := range cfg.classes() {
		use(v.Plugin, plugin.TypeVolumeProvisioner, v.what())
	}
	for _, h := range cfg.Hooks {
		use(h.Plugin, plugin.TypeLifecycleHook, fmt.Sprintf("hook %q", h.Name))
	}
	var unknown []error
	for name := range types {
		if cfg.plugin(name) == nil {
			unknown = append(unknown, fmt.Errorf("plugin %q is used but not declared by any plugin block", name))
		}
	}
	slices.SortFunc(unknown, func(a, b error) int { return cmpString(a.Error(), b.Error()) })
	errs = append(errs, unknown...)
	return types, errors.Join(errs...)
}

func cmpString(a, b string) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

// where is the "file:line: " prefix of a plugin block's errors, or "" for a
// block that no file declared (the implicit built-in).
func where(pc *PluginConfig) string {
	if pc.Where == "" {
		return ""
	}
	return pc.Where + ": "
}

// Close stops every plugin. Calls made afterwards return
// plugin.ErrPluginUnavailable.
func (m *Manager) Close() {
	m.mu.Lock()
	m.closed = true
	instances := m.instances
	m.instances = map[string]*instance{}
	m.hooks = nil
	m.mu.Unlock()
	for name, inst := range instances {
		m.log.Debug("stopping plugin", "plugin", name)
		inst.stop()
	}
}

// Status is the state of one plugin, for the agent's log, metrics and
// conditions.
type Status struct {
	// Name is the plugin block's name.
	Name string `json:"name"`
	// Driver is the driver it runs.
	Driver string `json:"driver"`
	// Type is the type the plugin reported at its last launch.
	Type plugin.Type `json:"type"`
	// External is set for a binary from plugin_dir.
	External bool `json:"external"`
	// Available is false while the plugin is down.
	Available bool `json:"available"`
	// Reason says why it is down.
	Reason string `json:"reason,omitempty"`
	// Restarts counts the restarts since it was launched.
	Restarts int `json:"restarts"`
}

// Status returns the state of every plugin, sorted by name.
func (m *Manager) Status() []Status {
	m.mu.RLock()
	defer m.mu.RUnlock()
	out := make([]Status, 0, len(m.instances))
	for _, inst := range m.instances {
		out = append(out, inst.status())
	}
	slices.SortFunc(out, func(a, b Status) int { return cmpString(a.Name, b.Name) })
	return out
}

// instance returns the running plugin block name, or an error wrapping
// plugin.ErrPluginUnavailable.
func (m *Manager) instance(name string) (*instance, error) {
	m.mu.RLock()
	defer m.mu.RUnlock()
	if m.closed {
		return nil, fmt.Errorf("%w: plugin %q: the plugin manager is closed", plugin.ErrPluginUnavailable, name)
	}
	inst := m.instances[name]
	if inst == nil {
		return nil, fmt.Errorf("%w: plugin %q is not loaded", plugin.ErrPluginUnavailable, name)
	}
	return inst, nil
}
