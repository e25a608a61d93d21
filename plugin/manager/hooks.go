package manager

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/agext/levenshtein"

	"github.com/nomad-statefulset/nomad-statefulset/plugin"
)

// RunHooks runs the hooks configured for event on pod, in the order of their
// hook blocks, and says whether the pod's step may proceed. It never blocks
// for longer than the sum of those hooks' timeouts: each call runs under its
// hook's timeout, and a built-in that ignores its context is abandoned at the
// deadline. A held step holds only this pod: the caller should requeue the
// pod's set after RetryAfter and carry on with other work.
//
// A wait answer always holds the step. A fail answer, an error, a timeout or
// a plugin that is down (plugin.ErrPluginUnavailable) holds it under
// failure_policy "block", and is logged and skipped under "ignore".
// HasHooks reports whether any configured hook runs on event: without one,
// the event has nothing to ask, and post_ready gates no pod's readiness.
func (m *Manager) HasHooks(event plugin.Event) bool {
	m.mu.RLock()
	defer m.mu.RUnlock()
	return slices.ContainsFunc(m.hooks, func(h *HookConfig) bool { return slices.Contains(h.Events, event) })
}

func (m *Manager) RunHooks(ctx context.Context, event plugin.Event, pod plugin.Pod) plugin.HookResult {
	m.mu.RLock()
	hooks := m.hooks
	m.mu.RUnlock()
	for _, h := range hooks {
		if !slices.Contains(h.Events, event) {
			continue
		}
		log := m.log.With("hook", h.Name, "event", event, "namespace", pod.Namespace, "set", pod.Set, "pod", pod.Name)
		resp, err := m.callHook(ctx, h, event, pod)
		if err == nil {
			err = resp.Validate()
		}
		switch {
		case err == nil && resp.Status == plugin.HookDone:
			log.Debug("hook done")
			continue
		case err == nil && resp.Status == plugin.HookWait:
			retry := clampRetry(resp.RetryAfter, DefaultWaitRetry)
			reason := fmt.Sprintf("hook %q (%s) on pod %s is waiting: %s", h.Name, event, pod.Name, resp.Message)
			log.Debug("hook is waiting", "message", resp.Message, "retry_after", retry)
			return plugin.HookResult{RetryAfter: retry, Hook: h.Name, Reason: reason}
		}
		var reason string
		retry := DefaultFailRetry
		if err != nil {
			reason = fmt.Sprintf("hook %q (%s) on pod %s failed: %v", h.Name, event, pod.Name, err)
		} else {
			retry = clampRetry(resp.RetryAfter, DefaultFailRetry)
			reason = fmt.Sprintf("hook %q (%s) on pod %s failed: %s", h.Name, event, pod.Name, resp.Message)
		}
		if h.FailurePolicy == plugin.FailureIgnore {
			log.Warn("hook failed; going ahead as its failure_policy is ignore", "reason", reason)
			continue
		}
		log.Warn("hook failed; holding the pod's step", "reason", reason, "retry_after", retry)
		return plugin.HookResult{RetryAfter: retry, Hook: h.Name, Failed: true, Reason: reason}
	}
	return plugin.HookResult{Proceed: true}
}

func clampRetry(d, def time.Duration) time.Duration {
	if d <= 0 {
		return def
	}
	return min(d, MaxRetryAfter)
}

// callHook makes one hook call under the hook's timeout. The call runs in a
// goroutine so that the deadline holds even for a built-in that ignores its
// context; the gRPC stub of an external plugin honours it anyway.
func (m *Manager) callHook(ctx context.Context, h *HookConfig, event plugin.Event, pod plugin.Pod) (*plugin.HookResponse, error) {
	inst, err := m.instance(h.Plugin)
	if err != nil {
		return nil, err
	}
	raw, err := inst.get()
	if err != nil {
		return nil, err
	}
	hook, ok := raw.(plugin.LifecycleHook)
	if !ok {
		return nil, fmt.Errorf("plugin %q is not a lifecycle hook", h.Plugin)
	}
	timeout := h.Timeout
	if timeout <= 0 {
		timeout = plugin.DefaultHookTimeout
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	type answer struct {
		resp *plugin.HookResponse
		err  error
	}
	ch := make(chan answer, 1) // buffered: an abandoned call must not leak blocked
	go func() {
		resp, err := plugin.Call(ctx, hook, plugin.Event(event), pod)
		ch <- answer{resp, err}
	}()
	deadline, _ := ctx.Deadline()
	var a answer
	select {
	case a = <-ch:
		// gRPC runs its own timer on the deadline and can fail the call a
		// moment before ctx.Err() turns non-nil, so the clock decides.
		if a.err == nil || (ctx.Err() == nil && time.Now().Before(deadline)) {
			return a.resp, inst.classify(a.err)
		}
	case <-ctx.Done():
		a.err = ctx.Err()
	}
	if errors.Is(ctx.Err(), context.DeadlineExceeded) || !time.Now().Before(deadline) {
		return nil, fmt.Errorf("timed out after %s: %w", timeout, a.err)
	}
	return nil, fmt.Errorf("calling the hook: %w", a.err)
}

// Provisioner returns the configured volume provisioner. The value stays
// valid across reloads and restarts: each call goes to the plugin that the
// volume_provisioner block of the request's storage class (req.Class; ""
// the unnamed block) names at that moment, with the block's config merged
// under the request's. A class that no block declares fails with an error
// wrapping plugin.ErrUnknownClass and naming the class, before any plugin
// is called. While the plugin is down, calls fail with
// plugin.ErrPluginUnavailable. Calls are bounded only by ctx.
func (m *Manager) Provisioner() plugin.VolumeProvisioner { return provisioner{m: m} }

type provisioner struct{ m *Manager }

// current returns the provisioner plugin of req's class and req with the
// class's config filled in.
func (p provisioner) current(req *plugin.VolumeRequest) (*instance, plugin.VolumeProvisioner, *plugin.VolumeRequest, error) {
	p.m.mu.RLock()
	vc, ok := p.m.classes[req.Class]
	loaded := p.m.classes != nil
	conf := maps.Clone(vc.Config)
	p.m.mu.RUnlock()
	switch {
	case !loaded:
		// Before Start, no class is known, the default one included.
		return nil, nil, nil, fmt.Errorf("%w: the plugin manager has not loaded its plugins", plugin.ErrPluginUnavailable)
	case !ok:
		return nil, nil, nil, p.unknown(req.Class)
	}
	name := vc.Plugin
	inst, err := p.m.instance(name)
	if err != nil {
		return nil, nil, nil, err
	}
	raw, err := inst.get()
	if err != nil {
		return nil, nil, nil, err
	}
	vp, ok := raw.(plugin.VolumeProvisioner)
	if !ok {
		return nil, nil, nil, fmt.Errorf("plugin %q is not a volume provisioner", name)
	}
	r := *req
	if conf == nil {
		conf = map[string]string{}
	}
	maps.Copy(conf, req.Config)
	r.Config = conf
	return inst, vp, &r, nil
}

// unknown is the error of a request for a class no block declares. It
// lists the classes there are, for the condition the set shows.
func (p provisioner) unknown(class string) error {
	classes := p.m.Classes()
	known := "it declares none"
	if len(classes) > 0 {
		known = "its classes: " + quoted(classes)
	}
	hint := ""
	if best := closest(class, classes); best != "" {
		hint = fmt.Sprintf("; did you mean %q?", best)
	}
	return fmt.Errorf("%w %q: the agent config has no volume_provisioner %q block (%s)%s", plugin.ErrUnknownClass, class, class, known, hint)
}

// PluginInfo implements plugin.Base.
func (p provisioner) PluginInfo(ctx context.Context) (*plugin.Info, error) {
	inst, vp, _, err := p.current(&plugin.VolumeRequest{})
	if err != nil {
		return nil, err
	}
	info, err := vp.PluginInfo(ctx)
	return info, inst.classify(err)
}

// SetConfig implements plugin.Base. The manager owns the plugin's config,
// so it is refused here.
func (p provisioner) SetConfig(context.Context, map[string]string) error {
	return errors.New("the volume provisioner's config is set by the plugin manager from the agent config")
}

// CreateVolume implements plugin.VolumeProvisioner.
func (p provisioner) CreateVolume(ctx context.Context, req *plugin.VolumeRequest) (*plugin.Volume, error) {
	inst, vp, r, err := p.current(req)
	if err != nil {
		return nil, fmt.Errorf("creating volume %s/%s: %w", req.Namespace, req.Name, err)
	}
	v, err := vp.CreateVolume(ctx, r)
	if err != nil {
		return nil, fmt.Errorf("creating volume %s/%s with plugin %q: %w", req.Namespace, req.Name, inst.spec.name, inst.classify(err))
	}
	return v, nil
}

// GetVolume implements plugin.VolumeProvisioner.
func (p provisioner) GetVolume(ctx context.Context, req *plugin.VolumeRequest) (*plugin.Volume, error) {
	inst, vp, r, err := p.current(req)
	if err != nil {
		return nil, fmt.Errorf("getting volume %s/%s: %w", req.Namespace, req.Name, err)
	}
	v, err := vp.GetVolume(ctx, r)
	if err != nil {
		return nil, fmt.Errorf("getting volume %s/%s with plugin %q: %w", req.Namespace, req.Name, inst.spec.name, inst.classify(err))
	}
	return v, nil
}

// DeleteVolume implements plugin.VolumeProvisioner.
func (p provisioner) DeleteVolume(ctx context.Context, req *plugin.VolumeRequest) error {
	inst, vp, r, err := p.current(req)
	if err != nil {
		return fmt.Errorf("deleting volume %s/%s: %w", req.Namespace, req.Name, err)
	}
	if err := vp.DeleteVolume(ctx, r); err != nil {
		return fmt.Errorf("deleting volume %s/%s with plugin %q: %w", req.Namespace, req.Name, inst.spec.name, inst.classify(err))
	}
	return nil
}

// ExpandVolume implements plugin.VolumeProvisioner.
func (p provisioner) ExpandVolume(ctx context.Context, req *plugin.VolumeRequest) (*plugin.Volume, error) {
	inst, vp, r, err := p.current(req)
	if err != nil {
		return nil, fmt.Errorf("expanding volume %s/%s: %w", req.Namespace, req.Name, err)
	}
	v, err := vp.ExpandVolume(ctx, r)
	if err != nil {
		return nil, fmt.Errorf("expanding volume %s/%s with plugin %q: %w", req.Namespace, req.Name, inst.spec.name, inst.classify(err))
	}
	return v, nil
}

// Capabilities implements plugin.VolumeProvisioner: it asks the plugin of
// req's class, with the class's config.
func (p provisioner) Capabilities(ctx context.Context, req *plugin.VolumeRequest) (*plugin.Capabilities, error) {
	inst, vp, r, err := p.current(req)
	if err != nil {
		return nil, fmt.Errorf("asking the capabilities of class %q: %w", req.Class, err)
	}
	caps, err := vp.Capabilities(ctx, r)
	if err != nil {
		return nil, fmt.Errorf("asking the capabilities of class %q of plugin %q: %w", req.Class, inst.spec.name, inst.classify(err))
	}
	if caps == nil {
		return nil, fmt.Errorf("asking the capabilities of class %q of plugin %q: the plugin answered nothing", req.Class, inst.spec.name)
	}
	return caps, nil
}

// quoted renders names as "a", "b".
func quoted(names []string) string {
	q := make([]string, len(names))
	for i, n := range names {
		q[i] = strconv.Quote(n)
	}
	return strings.Join(q, ", ")
}

// closest is the name within two edits of s, for a "did you mean", or "".
func closest(s string, names []string) string {
	best, bestDist := "", 3
	for _, n := range names {
		if d := levenshtein.Distance(s, n, nil); d < bestDist {
			best, bestDist = n, d
		}
	}
	return best
}
