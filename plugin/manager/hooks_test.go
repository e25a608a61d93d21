package manager

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/nomad-statefulset/nomad-statefulset/agent/config"
	"github.com/nomad-statefulset/nomad-statefulset/plugin"
	"github.com/nomad-statefulset/nomad-statefulset/plugin/builtin/hostvolume"
)

// fakeHook is an in-process lifecycle hook whose answer a test scripts.
type fakeHook struct {
	name  string
	calls atomic.Int32
	fn    func(ctx context.Context, pod plugin.Pod) (*plugin.HookResponse, error)
}

func (f *fakeHook) PluginInfo(context.Context) (*plugin.Info, error) {
	return &plugin.Info{Name: f.name, Type: plugin.TypeLifecycleHook}, nil
}
func (f *fakeHook) SetConfig(context.Context, map[string]string) error { return nil }
func (f *fakeHook) call(ctx context.Context, pod plugin.Pod) (*plugin.HookResponse, error) {
	f.calls.Add(1)
	return f.fn(ctx, pod)
}
func (f *fakeHook) PreDelete(ctx context.Context, pod plugin.Pod) (*plugin.HookResponse, error) {
	return f.call(ctx, pod)
}
func (f *fakeHook) PostReady(ctx context.Context, pod plugin.Pod) (*plugin.HookResponse, error) {
	return f.call(ctx, pod)
}
func (f *fakeHook) PreUpdate(ctx context.Context, pod plugin.Pod) (*plugin.HookResponse, error) {
	return f.call(ctx, pod)
}

// hookConfig is a config with one built-in fake hook plugin per fake and a
// hook block for each, in order.
func hookConfig(policy plugin.FailurePolicy, timeout time.Duration, events []plugin.Event, fakes ...*fakeHook) (*config.Config, map[string]plugin.Factory) {
	cfg := config.Default()
	cfg.PluginDir = ""
	builtins := map[string]plugin.Factory{config.BuiltinHostVolume: hostvolume.Factory(nil)}
	for _, f := range fakes {
		builtins[f.name] = func(hclog.Logger) plugin.Base { return f }
		cfg.Plugins = append(cfg.Plugins, &config.PluginConfig{Name: f.name, Driver: f.name, Config: map[string]string{}})
		cfg.Hooks = append(cfg.Hooks, &config.HookConfig{Name: "hook-" + f.name, Plugin: f.name, Events: events, Timeout: timeout, FailurePolicy: policy})
	}
	return cfg, builtins
}

func answer(resp *plugin.HookResponse, err error) func(context.Context, plugin.Pod) (*plugin.HookResponse, error) {
	return func(context.Context, plugin.Pod) (*plugin.HookResponse, error) { return resp, err }
}

// TestRunHooks_policy covers each answer under each failure policy.
func TestRunHooks_policy(t *testing.T) {
	// hang ignores its context, as a badly written built-in might; the
	// manager must still return at the hook's timeout.
	release := make(chan struct{})
	t.Cleanup(func() { close(release) })
	hang := func(context.Context, plugin.Pod) (*plugin.HookResponse, error) {
		<-release
		return plugin.Done(), nil
	}
	for _, tc := range []struct {
		name    string
		policy  plugin.FailurePolicy
		fn      func(context.Context, plugin.Pod) (*plugin.HookResponse, error)
		proceed bool
		failed  bool
		retry   time.Duration
		reason  string
	}{
		{"done", plugin.FailureBlock, answer(plugin.Done(), nil), true, false, 0, ""},
		{"wait with delay", plugin.FailureBlock, answer(plugin.Wait(3*time.Second, "catching up"), nil), false, false, 3 * time.Second, "is waiting: catching up"},
		{"wait without delay", plugin.FailureBlock, answer(plugin.Wait(0, "later"), nil), false, false, DefaultWaitRetry, "later"},
		{"wait is never ignored", plugin.FailureIgnore, answer(plugin.Wait(0, "later"), nil), false, false, DefaultWaitRetry, "later"},
		{"wait delay is capped", plugin.FailureBlock, answer(plugin.Wait(24*time.Hour, "tomorrow"), nil), false, false, MaxRetryAfter, "tomorrow"},
		{"fail blocks", plugin.FailureBlock, answer(plugin.Fail("replica refused"), nil), false, true, DefaultFailRetry, "failed: replica refused"},
		{"fail ignored", plugin.FailureIgnore, answer(plugin.Fail("replica refused"), nil), true, false, 0, ""},
		{"error blocks", plugin.FailureBlock, answer(nil, errors.New("boom")), false, true, DefaultFailRetry, "failed: boom"},
		{"error ignored", plugin.FailureIgnore, answer(nil, errors.New("boom")), true, false, 0, ""},
		{"bad status blocks", plugin.FailureBlock, answer(&plugin.HookResponse{Status: "maybe"}, nil), false, true, DefaultFailRetry, `unknown status "maybe"`},
		{"nil response blocks", plugin.FailureBlock, answer(nil, nil), false, true, DefaultFailRetry, "no response"},
		{"timeout blocks", plugin.FailureBlock, hang, false, true, DefaultFailRetry, "timed out after 200ms"},
		{"timeout ignored", plugin.FailureIgnore, hang, true, false, 0, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := &fakeHook{name: "fake", fn: tc.fn}
			cfg, builtins := hookConfig(tc.policy, 200*time.Millisecond, []plugin.Event{plugin.EventPreDelete}, f)
			m := newManager(t, Options{Builtins: builtins})
			start(t, m, cfg)
			r := m.RunHooks(context.Background(), plugin.EventPreDelete, testPod)
			if r.Proceed != tc.proceed || r.Failed != tc.failed || r.RetryAfter != tc.retry {
				t.Fatalf("RunHooks = %+v; want proceed=%v failed=%v retry=%s", r, tc.proceed, tc.failed, tc.retry)
			}
			if !tc.proceed && (r.Hook != "hook-fake" || !strings.Contains(r.Reason, tc.reason) || !strings.Contains(r.Reason, "web-2")) {
				t.Fatalf("RunHooks = %+v; want hook-fake holding web-2 with reason containing %q", r, tc.reason)
			}
			if f.calls.Load() != 1 {
				t.Fatalf("hook called %d times, want 1", f.calls.Load())
			}
		})
	}
}

// TestRunHooks_orderAndEvents: hooks run in block order, stop at the first
// that holds the step, and only for their events.
func TestRunHooks_orderAndEvents(t *testing.T) {
	first := &fakeHook{name: "first", fn: answer(plugin.Done(), nil)}
	second := &fakeHook{name: "second", fn: answer(plugin.Wait(time.Second, "syncing"), nil)}
	third := &fakeHook{name: "third", fn: answer(plugin.Done(), nil)}
	cfg, builtins := hookConfig(plugin.FailureBlock, time.Second, []plugin.Event{plugin.EventPostReady}, first, second, third)
	other := &fakeHook{name: "other", fn: answer(plugin.Fail("must not run"), nil)}
	builtins["other"] = func(hclog.Logger) plugin.Base { return other }
	cfg.Plugins = append(cfg.Plugins, &config.PluginConfig{Name: "other", Driver: "other"})
	cfg.Hooks = append(cfg.Hooks, &config.HookConfig{Name: "hook-other", Plugin: "other", Events: []plugin.Event{plugin.EventPreUpdate}, Timeout: time.Second, FailurePolicy: plugin.FailureBlock})
	m := newManager(t, Options{Builtins: builtins})
	start(t, m, cfg)

	r := m.RunHooks(context.Background(), plugin.EventPostReady, testPod)
	if r.Proceed || r.Hook != "hook-second" || r.RetryAfter != time.Second {
		t.Fatalf("RunHooks(post_ready) = %+v; want held by hook-second", r)
	}
	if first.calls.Load() != 1 || second.calls.Load() != 1 || third.calls.Load() != 0 || other.calls.Load() != 0 {
		t.Fatalf("calls first=%d second=%d third=%d other=%d; want 1 1 0 0",
			first.calls.Load(), second.calls.Load(), third.calls.Load(), other.calls.Load())
	}
	if r := m.RunHooks(context.Background(), plugin.EventPreDelete, testPod); !r.Proceed {
		t.Fatalf("RunHooks(pre_delete) with no pre_delete hooks = %+v; want proceed", r)
	}
	if r := m.RunHooks(context.Background(), plugin.EventPreUpdate, testPod); r.Proceed || r.Hook != "hook-other" {
		t.Fatalf("RunHooks(pre_update) = %+v; want held by hook-other", r)
	}
	// HasHooks says which events have a hook at all: without a post_ready
	// hook, readiness is not gated and nothing is asked.
	for ev, want := range map[plugin.Event]bool{plugin.EventPostReady: true, plugin.EventPreUpdate: true, plugin.EventPreDelete: false} {
		if got := m.HasHooks(ev); got != want {
			t.Errorf("HasHooks(%s) = %v, want %v", ev, got, want)
		}
	}
}

// TestRunHooks_pendingHoldsOnlyItsPod: while one pod's hook call hangs until
// its timeout, calls for other pods go through at once.
func TestRunHooks_pendingHoldsOnlyItsPod(t *testing.T) {
	stuck := make(chan struct{})
	var once sync.Once
	f := &fakeHook{name: "fake", fn: func(ctx context.Context, pod plugin.Pod) (*plugin.HookResponse, error) {
		if pod.Name == "web-0" {
			once.Do(func() { close(stuck) })
			<-ctx.Done()
			return nil, ctx.Err()
		}
		return plugin.Done(), nil
	}}
	cfg, builtins := hookConfig(plugin.FailureBlock, deadline, []plugin.Event{plugin.EventPreDelete}, f)
	m := newManager(t, Options{Builtins: builtins})
	start(t, m, cfg)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan plugin.HookResult, 1)
	go func() { done <- m.RunHooks(ctx, plugin.EventPreDelete, plugin.Pod{Set: "web", Name: "web-0"}) }()
	<-stuck
	for i := 1; i <= 3; i++ {
		pod := plugin.Pod{Set: "web", Ordinal: i, Name: fmt.Sprintf("web-%d", i)}
		if r := m.RunHooks(context.Background(), plugin.EventPreDelete, pod); !r.Proceed {
			t.Fatalf("RunHooks(%s) = %+v while web-0 is pending; want proceed", pod.Name, r)
		}
	}
	// The caller's context bounds the call too, e.g. at agent shutdown.
	cancel()
	if r := <-done; r.Proceed || !r.Failed || !strings.Contains(r.Reason, "canceled") {
		t.Fatalf("RunHooks(web-0) after cancel = %+v; want held, naming the cancellation", r)
	}
}

// TestRunHooks_externalTimeout: an external hook that takes longer than its
// timeout is cut off at the deadline, across gRPC, and the plugin stays
// usable for the next call.
func TestRunHooks_externalTimeout(t *testing.T) {
	dir := t.TempDir()
	install(t, dir, "testplugin", "hook-a")
	for _, policy := range []plugin.FailurePolicy{plugin.FailureBlock, plugin.FailureIgnore} {
		t.Run(string(policy), func(t *testing.T) {
			cfg, _ := loadConfig(t, fmt.Sprintf(`
plugin_dir = %q
plugin "h" {
  driver = "hook-a"
  config = { sleep = "10m" }
}
hook "slow" {
  plugin         = "h"
  events         = ["pre_delete"]
  timeout        = "300ms"
  failure_policy = %q
}
`, dir, policy))
			m := newManager(t, Options{})
			start(t, m, cfg)
			began := time.Now()
			r := m.RunHooks(context.Background(), plugin.EventPreDelete, testPod)
			// Bounded by the deadline, not by the plugin's 10 minutes.
			if took := time.Since(began); took > deadline {
				t.Fatalf("RunHooks took %s", took)
			}
			switch policy {
			case plugin.FailureBlock:
				if r.Proceed || !r.Failed || !strings.Contains(r.Reason, "timed out after 300ms") {
					t.Fatalf("RunHooks = %+v; want held by a timeout", r)
				}
			case plugin.FailureIgnore:
				if !r.Proceed {
					t.Fatalf("RunHooks = %+v; want proceed (ignore)", r)
				}
			}
			if s := statusOf(t, m, "h"); !s.Available || s.Restarts != 0 {
				t.Fatalf("status after a timeout = %+v; want the plugin still up", s)
			}
		})
	}
}

// TestExamplePlugin loads examples/plugins/predelete-command from
// plugin_dir: the deletion waits while the command fails and proceeds once
// it succeeds; the pod reaches the command's environment. The HTTP mode
// works the same way.
func TestExamplePlugin(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	install(t, dir, "predelete-command", "predelete-command")
	marks := t.TempDir()

	var ok atomic.Bool
	var got atomic.Value
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var b strings.Builder
		_, _ = fmt.Fprint(&b, r.Method, " ")
		buf := make([]byte, 512)
		n, _ := r.Body.Read(buf)
		b.Write(buf[:n])
		got.Store(b.String())
		if !ok.Load() {
			http.Error(w, "replica still has shards", http.StatusServiceUnavailable)
		}
	}))
	t.Cleanup(srv.Close)

	cfg, _ := loadConfig(t, fmt.Sprintf(`
plugin_dir = %q
plugin "cmd" {
  driver = "predelete-command"
  config = {
    command     = "test -f %s/$NSS_SET-$NSS_ORDINAL && echo ok"
    retry_after = "7s"
  }
}
plugin "http" {
  driver = "predelete-command"
  config = { url = %q }
}
hook "by-command" {
  plugin = "cmd"
  events = ["pre_delete"]
}
hook "by-http" {
  plugin = "http"
  events = ["pre_delete"]
}
`, dir, marks, srv.URL))
	m := newManager(t, Options{})
	start(t, m, cfg)

	r := m.RunHooks(ctx, plugin.EventPreDelete, testPod)
	if r.Proceed || r.Failed || r.Hook != "by-command" || r.RetryAfter != 7*time.Second || !strings.Contains(r.Reason, "exit status 1") {
		t.Fatalf("RunHooks before the mark = %+v; want by-command waiting 7s on the failed command", r)
	}
	if err := os.WriteFile(filepath.Join(marks, "web-2"), nil, 0o600); err != nil {
		t.Fatal(err)
	}
	r = m.RunHooks(ctx, plugin.EventPreDelete, testPod)
	if r.Proceed || r.Failed || r.Hook != "by-http" || !strings.Contains(r.Reason, "503") || !strings.Contains(r.Reason, "replica still has shards") {
		t.Fatalf("RunHooks after the mark = %+v; want by-http waiting on the 503", r)
	}
	if s, _ := got.Load().(string); !strings.HasPrefix(s, "POST ") || !strings.Contains(s, `"name":"web-2"`) {
		t.Fatalf("the endpoint got %q; want the pod POSTed as JSON", s)
	}
	ok.Store(true)
	if r := m.RunHooks(ctx, plugin.EventPreDelete, testPod); !r.Proceed {
		t.Fatalf("RunHooks once both succeed = %+v; want proceed", r)
	}
	if r := m.RunHooks(ctx, plugin.EventPostReady, testPod); !r.Proceed {
		t.Fatalf("RunHooks(post_ready) = %+v; want proceed", r)
	}

	bad, _ := loadConfig(t, fmt.Sprintf(`
plugin_dir = %q
plugin "cmd" {
  driver = "predelete-command"
  config = { retry_after = "soon" }
}
`, dir))
	err := newManager(t, Options{}).Start(ctx, ConfigOf(bad))
	if err == nil || !strings.Contains(err.Error(), "set exactly one of command and url") {
		t.Fatalf("Start with a bad example config = %v; want its config error", err)
	}
}

// TestExamplePlugin_eventsAndOnFailure: the example runs its check on every
// event its hook block lists, with the event in NSS_EVENT, and with
// on_failure = "fail" a failing check is a failure that failure_policy
// decides: block holds the step, ignore lets it go ahead.
func TestExamplePlugin_eventsAndOnFailure(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	install(t, dir, "predelete-command", "predelete-command")
	marks := t.TempDir()
	cfg, _ := loadConfig(t, fmt.Sprintf(`
plugin_dir = %q
plugin "gate" {
  driver = "predelete-command"
  config = {
    command    = "test -f %s/$NSS_EVENT-$NSS_POD || { echo not caught up; exit 3; }"
    on_failure = "fail"
  }
}
hook "caught-up" {
  plugin = "gate"
  events = ["post_ready"]
}
hook "best-effort" {
  plugin         = "gate"
  events         = ["pre_update"]
  failure_policy = "ignore"
}
`, dir, marks))
	m := newManager(t, Options{})
	start(t, m, cfg)

	r := m.RunHooks(ctx, plugin.EventPostReady, testPod)
	if r.Proceed || !r.Failed || r.Hook != "caught-up" || r.RetryAfter != 10*time.Second || !strings.Contains(r.Reason, "not caught up") {
		t.Fatalf("RunHooks(post_ready) before the mark = %+v; want caught-up failed (on_failure fail, policy block) after 10s", r)
	}
	// The mark is per event: NSS_EVENT reached the command.
	if err := os.WriteFile(filepath.Join(marks, "post_ready-web-2"), nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if r := m.RunHooks(ctx, plugin.EventPostReady, testPod); !r.Proceed {
		t.Fatalf("RunHooks(post_ready) after the mark = %+v; want proceed", r)
	}
	if r := m.RunHooks(ctx, plugin.EventPreUpdate, testPod); !r.Proceed {
		t.Fatalf("RunHooks(pre_update) with no mark under ignore = %+v; want proceed", r)
	}

	bad, _ := loadConfig(t, fmt.Sprintf(`
plugin_dir = %q
plugin "gate" {
  driver = "predelete-command"
  config = { command = "true", on_failure = "explode" }
}
`, dir))
	err := newManager(t, Options{}).Start(ctx, ConfigOf(bad))
	if err == nil || !strings.Contains(err.Error(), `on_failure "explode"`) {
		t.Fatalf("Start with on_failure = explode: %v; want an error naming it", err)
	}
}
