package manager

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/hashicorp/go-hclog"
	goplugin "github.com/hashicorp/go-plugin"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/nomad-statefulset/nomad-statefulset/plugin"
)

// spec is what a plugin instance is launched from. Two equal specs run the
// same code, so a reload keeps the process and only sends the new config.
type spec struct {
	name   string
	driver string
	args   []string
	path   string // the binary; "" for a built-in
	typ    plugin.Type
	config map[string]string
	decl   *PluginConfig
	// checks are the configs of the storage classes a shared provisioner
	// serves, each sent by SetConfig at launch to check it before the final
	// config (see classesOf).
	checks []classCheck
}

// classCheck is one storage class's config for a launch check.
type classCheck struct {
	what, where string
	config      map[string]string
}

// same reports whether o runs the same code as s. Changed class checks
// count as a change: a plugin serving several classes checks their configs
// only at launch, so it is launched again to check new ones.
func (s *spec) same(o *spec) bool {
	return s.driver == o.driver && s.path == o.path && s.typ == o.typ && slices.Equal(s.args, o.args) &&
		slices.EqualFunc(s.checks, o.checks, func(a, b classCheck) bool { return a.what == b.what && maps.Equal(a.config, b.config) })
}

// prefix starts every launch error: where the block is and what it names.
func (s *spec) prefix() string {
	return fmt.Sprintf("%splugin %q (driver %q)", where(s.decl), s.name, s.driver)
}

// resolve finds a plugin block's implementation: an executable named after
// the driver in plugin_dir, else a built-in of that name. The binary wins so
// that a built-in can be replaced by a development build without a rebuild
// of the agent, as in the nomad-autoscaler.
func (m *Manager) resolve(pc *PluginConfig, dir string, typ plugin.Type) (*spec, error) {
	s := &spec{
		name: pc.Name, driver: pc.Driver, args: slices.Clone(pc.Args), typ: typ,
		config: map[string]string{}, decl: pc,
	}
	maps.Copy(s.config, pc.Config)
	if s.driver == "" {
		s.driver = pc.Name
	}
	if dir != "" {
		p := filepath.Join(dir, s.driver)
		fi, err := os.Stat(p)
		switch {
		case err == nil && fi.Mode().IsRegular() && fi.Mode().Perm()&0o111 != 0:
			s.path = p
			return s, nil
		case err == nil && fi.Mode().IsRegular():
			return nil, fmt.Errorf("%s: %s is not executable (chmod +x it)", s.prefix(), p)
		case err == nil:
			return nil, fmt.Errorf("%s: %s is not a regular file", s.prefix(), p)
		case !errors.Is(err, os.ErrNotExist):
			return nil, fmt.Errorf("%s: looking for its binary: %w", s.prefix(), err)
		}
	}
	if _, ok := m.opts.Builtins[s.driver]; ok {
		return s, nil
	}
	builtins := slices.Sorted(maps.Keys(m.opts.Builtins))
	return nil, fmt.Errorf("%s: unknown driver: there is no executable %q in plugin_dir %q and no built-in of that name (built-ins: %s)",
		s.prefix(), s.driver, dir, strings.Join(builtins, ", "))
}

// instance is one running plugin block. For an external plugin it owns the
// process and a watcher goroutine that restarts it when it exits.
type instance struct {
	m    *Manager
	spec *spec
	log  hclog.Logger

	mu       sync.Mutex
	client   *goplugin.Client // nil for a built-in
	raw      plugin.Base
	info     plugin.Info
	down     error // wraps plugin.ErrPluginUnavailable while down
	restarts int
	poke     chan struct{} // asks the watcher to check now
	quit     chan struct{}
	done     chan struct{}
	stopped  bool
}

func newInstance(m *Manager, s *spec) *instance {
	return &instance{
		m: m, spec: s,
		log:  m.log.Named(s.name).With("driver", s.driver),
		poke: make(chan struct{}, 1),
		quit: make(chan struct{}),
		done: make(chan struct{}),
	}
}

// start launches the plugin and, for an external one, its watcher.
func (i *instance) start(ctx context.Context) error {
	client, raw, info, err := i.launch(ctx)
	if err != nil {
		close(i.done)
		return err
	}
	i.client, i.raw, i.info = client, raw, *info
	if client == nil {
		close(i.done)
		i.log.Info("built-in plugin loaded", "type", info.Type)
		return nil
	}
	i.log.Info("external plugin launched", "type", info.Type, "path", i.spec.path)
	go i.watch()
	return nil
}

// launch starts the implementation, dispenses it, runs the launch check and
// sends the config. On error nothing is left running.
func (i *instance) launch(ctx context.Context) (_ *goplugin.Client, _ plugin.Base, _ *plugin.Info, err error) {
	ctx, cancel := context.WithTimeout(ctx, i.m.opts.LaunchTimeout)
	defer cancel()
	var client *goplugin.Client
	defer func() {
		if err != nil && client != nil {
			client.Kill()
		}
	}()
	var dispense func(string) (any, error)
	if i.spec.path == "" {
		impl := i.m.opts.Builtins[i.spec.driver](i.log)
		dispense = func(string) (any, error) { return impl, nil }
	} else {
		client = goplugin.NewClient(&goplugin.ClientConfig{
			HandshakeConfig:  plugin.Handshake,
			Plugins:          plugin.ClientPlugins(),
			Cmd:              exec.Command(i.spec.path, i.spec.args...),
			AllowedProtocols: []goplugin.Protocol{goplugin.ProtocolGRPC},
			AutoMTLS:         true,
			Logger:           i.log,
			StartTimeout:     i.m.opts.LaunchTimeout,
		})
		rpc, err := client.Client()
		if err != nil {
			return nil, nil, nil, fmt.Errorf("%s: starting %s: %w", i.spec.prefix(), i.spec.path, err)
		}
		dispense = rpc.Dispense
	}

	// Ask the plugin who it is through Base first: every plugin serves it,
	// so a plugin of the wrong type is reported as such instead of failing
	// later with an unknown gRPC service.
	raw, err := dispense("base")
	if err != nil {
		return client, nil, nil, fmt.Errorf("%s: dispensing: %w", i.spec.prefix(), err)
	}
	base, ok := raw.(plugin.Base)
	if !ok {
		// Checked rather than asserted, so that a broken plugin cannot
		// panic the agent.
		return client, nil, nil, fmt.Errorf("%s: %T does not implement the plugin base interface", i.spec.prefix(), raw)
	}
	info, err := base.PluginInfo(ctx)
	if err != nil {
		return client, nil, nil, fmt.Errorf("%s: asking for its plugin info: %w", i.spec.prefix(), err)
	}
	if info.Name != i.spec.driver {
		return client, nil, nil, fmt.Errorf("%s: the plugin says its name is %q, not %q: the binary or built-in is not the plugin the config expects",
			i.spec.prefix(), info.Name, i.spec.driver)
	}
	if info.Type != plugin.TypeVolumeProvisioner && info.Type != plugin.TypeLifecycleHook {
		return client, nil, nil, fmt.Errorf("%s: the plugin says its type is %q, which is neither %q nor %q",
			i.spec.prefix(), info.Type, plugin.TypeVolumeProvisioner, plugin.TypeLifecycleHook)
	}
	if i.spec.typ != "" && info.Type != i.spec.typ {
		return client, nil, nil, fmt.Errorf("%s: wrong plugin type: the config uses it as a %s, but it is a %s",
			i.spec.prefix(), i.spec.typ, info.Type)
	}
	raw, err = dispense(string(info.Type))
	if err != nil {
		return client, nil, nil, fmt.Errorf("%s: dispensing its %s: %w", i.spec.prefix(), info.Type, err)
	}
	var impl plugin.Base
	switch info.Type {
	case plugin.TypeVolumeProvisioner:
		impl, ok = raw.(plugin.VolumeProvisioner)
	case plugin.TypeLifecycleHook:
		impl, ok = raw.(plugin.LifecycleHook)
	}
	if !ok {
		return client, nil, nil, fmt.Errorf("%s: it says it is a %s, but %T does not implement that interface", i.spec.prefix(), info.Type, raw)
	}
	for _, c := range i.spec.checks {
		if err := impl.SetConfig(ctx, c.config); err != nil {
			where := ""
			if c.where != "" {
				where = c.where + ": "
			}
			return client, nil, nil, fmt.Errorf("%s%s: %s: setting the class's config: %w", where, c.what, i.spec.prefix(), err)
		}
	}
	if err := impl.SetConfig(ctx, i.spec.config); err != nil {
		return client, nil, nil, fmt.Errorf("%s: setting its config: %w", i.spec.prefix(), err)
	}
	return client, impl, info, nil
}

// setConfig sends a reloaded config to a kept plugin. While the plugin is
// down the config is only stored: the restart sends it.
func (i *instance) setConfig(ctx context.Context, conf map[string]string) error {
	i.mu.Lock()
	i.spec.config = maps.Clone(conf)
	raw, down := i.raw, i.down
	i.mu.Unlock()
	if down != nil {
		return nil
	}
	ctx, cancel := context.WithTimeout(ctx, i.m.opts.LaunchTimeout)
	defer cancel()
	if err := raw.SetConfig(ctx, conf); err != nil {
		return fmt.Errorf("%s: setting its reloaded config: %w", i.spec.prefix(), i.classify(err))
	}
	return nil
}

// get returns the running implementation, or why there is none.
func (i *instance) get() (plugin.Base, error) {
	i.mu.Lock()
	defer i.mu.Unlock()
	if i.stopped {
		return nil, fmt.Errorf("%w: plugin %q was stopped", plugin.ErrPluginUnavailable, i.spec.name)
	}
	if i.down != nil {
		return nil, i.down
	}
	return i.raw, nil
}

// classify turns a call error that means "the process is gone" into
// plugin.ErrPluginUnavailable, and asks the watcher to look now rather than at its
// next tick. Errors the plugin itself returned pass through.
func (i *instance) classify(err error) error {
	if err == nil || errors.Is(err, plugin.ErrPluginUnavailable) {
		return err
	}
	i.mu.Lock()
	client := i.client
	i.mu.Unlock()
	if client == nil {
		return err
	}
	st, ok := status.FromError(err)
	if client.Exited() || (ok && st.Code() == codes.Unavailable) {
		select {
		case i.poke <- struct{}{}:
		default:
		}
		return fmt.Errorf("%w: plugin %q: its process is gone: %w", plugin.ErrPluginUnavailable, i.spec.name, err)
	}
	return err
}

// watch notices that the plugin process exited and restarts it, with
// exponential backoff, until it is running again or the instance stops.
func (i *instance) watch() {
	defer close(i.done)
	t := time.NewTicker(i.m.opts.CheckInterval)
	defer t.Stop()
	for {
		select {
		case <-i.quit:
			return
		case <-t.C:
		case <-i.poke:
		}
		i.mu.Lock()
		exited := i.client.Exited()
		i.mu.Unlock()
		if exited && !i.restart() {
			return
		}
	}
}

// restart relaunches an exited plugin. It returns false if the instance was
// stopped meanwhile.
func (i *instance) restart() bool {
	i.mu.Lock()
	i.down = fmt.Errorf("%w: plugin %q (driver %q) exited; restarting it", plugin.ErrPluginUnavailable, i.spec.name, i.spec.driver)
	dead := i.client
	i.mu.Unlock()
	dead.Kill() // closes the connection and cleans up; outside the lock, as it may wait
	i.log.Error("plugin exited; restarting it", "restarts", i.restarts)
	for attempt := 0; ; attempt++ {
		wait := backoff(i.m.opts.RestartMin, i.m.opts.RestartMax, attempt)
		select {
		case <-i.quit:
			return false
		case <-time.After(wait):
		}
		ctx, cancel := context.WithCancel(context.Background())
		go func() {
			select {
			case <-i.quit:
				cancel()
			case <-ctx.Done():
			}
		}()
		i.mu.Lock()
		conf := i.spec.config
		i.mu.Unlock()
		s := *i.spec
		s.config = conf
		client, raw, info, err := (&instance{m: i.m, spec: &s, log: i.log}).launch(ctx)
		cancel()
		if err != nil {
			i.mu.Lock()
			i.down = fmt.Errorf("%w: plugin %q (driver %q) exited and restart attempt %d failed (next in %s): %w",
				plugin.ErrPluginUnavailable, i.spec.name, i.spec.driver, attempt+1, backoff(i.m.opts.RestartMin, i.m.opts.RestartMax, attempt+1), err)
			i.mu.Unlock()
			i.log.Error("restarting plugin failed", "attempt", attempt+1, "error", err)
			continue
		}
		i.mu.Lock()
		if i.stopped {
			i.mu.Unlock()
			client.Kill()
			return false
		}
		i.client, i.raw, i.info, i.down = client, raw, *info, nil
		i.restarts++
		i.mu.Unlock()
		i.log.Info("plugin restarted", "attempt", attempt+1, "restarts", i.restarts)
		return true
	}
}

// backoff is min × 2^attempt, capped at max.
func backoff(lo, hi time.Duration, attempt int) time.Duration {
	d := lo
	for range attempt {
		d *= 2
		if d >= hi || d <= 0 {
			return hi
		}
	}
	return min(d, hi)
}

// stop kills the plugin and waits for its watcher. Idempotent.
func (i *instance) stop() {
	i.mu.Lock()
	if i.stopped {
		i.mu.Unlock()
		return
	}
	i.stopped = true
	close(i.quit)
	i.mu.Unlock()
	<-i.done
	i.mu.Lock()
	client := i.client
	i.mu.Unlock()
	if client != nil {
		// Outside the lock: Kill asks the plugin to exit and waits a
		// moment for it, and calls must not wait behind that.
		client.Kill()
	}
}

func (i *instance) status() Status {
	i.mu.Lock()
	defer i.mu.Unlock()
	s := Status{
		Name: i.spec.name, Driver: i.spec.driver, Type: i.info.Type,
		External: i.spec.path != "", Available: i.down == nil && !i.stopped, Restarts: i.restarts,
	}
	if i.down != nil {
		s.Reason = i.down.Error()
	}
	return s
}
