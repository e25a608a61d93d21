package manager

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nomad-statefulset/nomad-statefulset/agent/config"
	"github.com/nomad-statefulset/nomad-statefulset/internal/nomadsim"
	"github.com/nomad-statefulset/nomad-statefulset/plugin"
	"github.com/nomad-statefulset/nomad-statefulset/plugin/builtin/hostvolume"
)

// TestExternal_provisionerAndHook runs a provisioner and a hook as real
// binaries from plugin_dir, through go-plugin with AutoMTLS, and checks
// every call crosses the wire with its data.
func TestExternal_provisionerAndHook(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	install(t, dir, "testplugin", "prov")
	install(t, dir, "testplugin", "hook-a")
	cfg, _ := loadConfig(t, fmt.Sprintf(`
plugin_dir = %q
plugin "prov" {
  args = ["-type", "provisioner"]
}
volume_provisioner {
  plugin = "prov"
  config = { plugin_id = "from-vp-config" }
}
plugin "h" {
  driver = "hook-a"
  config = { result = "done" }
}
hook "h" {
  plugin = "h"
  events = ["pre_delete"]
}
`, dir))
	m := newManager(t, Options{})
	start(t, m, cfg)

	vp := m.Provisioner()
	req := &plugin.VolumeRequest{Namespace: "default", Set: "web", Claim: "data", Ordinal: 0, Name: "data-web-0", NodePool: "pool-a"}
	v, err := vp.CreateVolume(ctx, req)
	if err != nil {
		t.Fatalf("CreateVolume: %v", err)
	}
	if v.ID != "vol-data-web-0" || v.PluginID != "from-vp-config" || v.NodePool != "pool-a" {
		t.Fatalf("volume = %+v; want the request and the volume_provisioner config to reach the plugin", v)
	}
	if got, err := vp.GetVolume(ctx, req); err != nil || got == nil || got.ID != v.ID {
		t.Fatalf("GetVolume = %+v, %v; want %s", got, err, v.ID)
	}
	if err := vp.DeleteVolume(ctx, req); err != nil {
		t.Fatalf("DeleteVolume: %v", err)
	}
	if got, err := vp.GetVolume(ctx, req); err != nil || got != nil {
		t.Fatalf("GetVolume after delete = %+v, %v; want nil, nil", got, err)
	}
	// An error of the plugin's own is passed on as such, not as an outage.
	err = vp.DeleteVolume(ctx, &plugin.VolumeRequest{Name: "in-use"})
	if err == nil || errors.Is(err, plugin.ErrPluginUnavailable) || !strings.Contains(err.Error(), "volume in-use is in use") {
		t.Fatalf("DeleteVolume(in-use) = %v; want the plugin's error, not plugin.ErrPluginUnavailable", err)
	}

	if r := m.RunHooks(ctx, plugin.EventPreDelete, testPod); !r.Proceed {
		t.Fatalf("RunHooks(pre_delete) = %+v; want proceed", r)
	}
	for _, s := range m.Status() {
		if s.Name == "prov" || s.Name == "h" {
			if !s.External || !s.Available {
				t.Fatalf("status %+v; want an available external plugin", s)
			}
		}
	}
	if s := statusOf(t, m, "h"); s.Type != plugin.TypeLifecycleHook {
		t.Fatalf("status of h = %+v; want type %s", s, plugin.TypeLifecycleHook)
	}
}

// TestStart_configErrors: every mistake in a plugin block is reported at
// start-up, with the block's file and line and what is wrong, and nothing is
// left running.
func TestStart_configErrors(t *testing.T) {
	dir := t.TempDir()
	install(t, dir, "testplugin", "hook-a")
	install(t, dir, "testplugin", "other-name")
	if err := os.WriteFile(filepath.Join(dir, "not-exec"), []byte("#!/bin/sh\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "not-a-plugin"), []byte("#!/bin/sh\necho hello\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		// body is the config after plugin_dir; the faulty plugin block is
		// always on line 3 of the file.
		body string
		want []string
	}{{
		name: "unknown driver",
		body: `plugin "x" { driver = "nope" }
hook "h" {
  plugin = "x"
  events = ["pre_delete"]
}`,
		want: []string{`:3: plugin "x" (driver "nope"): unknown driver: there is no executable "nope"`, "built-ins: nomad-host-volume"},
	}, {
		name: "binary not executable",
		body: `plugin "x" { driver = "not-exec" }`,
		want: []string{`:3: plugin "x" (driver "not-exec")`, "is not executable"},
	}, {
		name: "not a plugin",
		body: `plugin "x" { driver = "not-a-plugin" }`,
		want: []string{`:3: plugin "x" (driver "not-a-plugin"): starting`},
	}, {
		name: "wrong type",
		body: `plugin "x" { driver = "hook-a" }
volume_provisioner { plugin = "x" }`,
		want: []string{`:3: plugin "x" (driver "hook-a"): wrong plugin type: the config uses it as a volume_provisioner, but it is a lifecycle_hook`},
	}, {
		name: "wrong name",
		body: `plugin "x" {
  driver = "other-name"
  args   = ["-name", "somebody-else"]
}`,
		want: []string{`:3: plugin "x" (driver "other-name"): the plugin says its name is "somebody-else", not "other-name"`},
	}, {
		name: "config rejected",
		body: `plugin "x" {
  driver = "hook-a"
  config = { reject = "bad key zap" }
}`,
		want: []string{`:3: plugin "x" (driver "hook-a"): setting its config:`, "bad key zap"},
	}, {
		name: "two roles",
		body: `plugin "x" {
  driver = "hook-a"
}
volume_provisioner { plugin = "x" }
hook "h" {
  plugin = "x"
  events = ["pre_delete"]
}`,
		want: []string{`:3: plugin "x" is used both as a volume_provisioner and as a lifecycle_hook`},
	}, {
		name: "every error at once",
		body: `plugin "x" { driver = "nope" }
plugin "y" { driver = "not-exec" }`,
		want: []string{`:3: plugin "x"`, `:4: plugin "y"`},
	}} {
		t.Run(tc.name, func(t *testing.T) {
			cfg, path := loadConfig(t, fmt.Sprintf("plugin_dir = %q\n\n%s\n", dir, tc.body))
			m := newManager(t, Options{Builtins: map[string]plugin.Factory{
				config.BuiltinHostVolume: hostvolume.Factory(nil),
			}})
			err := m.Start(context.Background(), ConfigOf(cfg))
			if err == nil {
				t.Fatal("Start succeeded; want an error")
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), path+w) && !strings.Contains(err.Error(), w) {
					t.Errorf("error %q\ndoes not contain %q", err, w)
				}
				if strings.HasPrefix(w, ":") && !strings.Contains(err.Error(), path+w) {
					t.Errorf("error %q\ndoes not name the block's position %s%s", err, path, w)
				}
			}
			if st := m.Status(); len(st) != 0 {
				t.Errorf("after a failed start, plugins are running: %+v", st)
			}
		})
	}
}

// TestCrashAndRestart kills the plugin processes: calls fail with
// plugin.ErrPluginUnavailable and a reason, restarts back off and are reported while
// the binaries are missing, and the plugins come back, with their config,
// once the binaries are there again.
func TestCrashAndRestart(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	state := t.TempDir()
	provBin := install(t, dir, "testplugin", "prov")
	hookBin := install(t, dir, "testplugin", "hook-a")
	provPID, hookPID := filepath.Join(state, "prov.pid"), filepath.Join(state, "hook.pid")
	cfg, _ := loadConfig(t, fmt.Sprintf(`
plugin_dir = %q
plugin "prov" {
  args   = ["-type", "provisioner"]
  config = { pid_file = %q }
}
volume_provisioner { plugin = "prov" }
plugin "h" {
  driver = "hook-a"
  config = { pid_file = %q }
}
hook "h" {
  plugin = "h"
  events = ["pre_delete"]
}
`, dir, provPID, hookPID))
	m := newManager(t, Options{RestartMin: 100 * time.Millisecond, RestartMax: time.Second, CheckInterval: 50 * time.Millisecond})
	start(t, m, cfg)
	req := &plugin.VolumeRequest{Namespace: "default", Name: "data-web-0"}
	if _, err := m.Provisioner().GetVolume(ctx, req); err != nil {
		t.Fatalf("GetVolume before the crash: %v", err)
	}
	oldProv, oldHook := readPID(t, provPID), readPID(t, hookPID)

	// Hide the binaries so that the restarts fail until the test is done
	// looking at the outage: nothing here depends on how fast it polls.
	for _, bin := range []string{provBin, hookBin} {
		if err := os.Rename(bin, bin+".hidden"); err != nil {
			t.Fatal(err)
		}
	}
	kill(t, oldProv)
	kill(t, oldHook)

	var lastErr error
	eventually(t, "the provisioner to be unavailable", func() bool {
		_, lastErr = m.Provisioner().GetVolume(ctx, req)
		return errors.Is(lastErr, plugin.ErrPluginUnavailable)
	})
	if !strings.Contains(lastErr.Error(), `plugin "prov"`) {
		t.Fatalf("error %q does not name the plugin", lastErr)
	}
	var held plugin.HookResult
	eventually(t, "the hook to hold the step while its plugin is down", func() bool {
		held = m.RunHooks(ctx, plugin.EventPreDelete, testPod)
		return !held.Proceed && strings.Contains(held.Reason, plugin.ErrPluginUnavailable.Error())
	})
	if !held.Failed || held.Hook != "h" || held.RetryAfter <= 0 || !strings.Contains(held.Reason, "web-2") {
		t.Fatalf("RunHooks while down = %+v; want a failure of hook h on web-2 with a retry", held)
	}
	eventually(t, "a failed restart of prov to be reported", func() bool {
		s := statusOf(t, m, "prov")
		return !s.Available && strings.Contains(s.Reason, "restart attempt")
	})

	for _, bin := range []string{provBin, hookBin} {
		if err := os.Rename(bin+".hidden", bin); err != nil {
			t.Fatal(err)
		}
	}
	eventually(t, "the provisioner to come back", func() bool {
		_, err := m.Provisioner().GetVolume(ctx, req)
		return err == nil
	})
	eventually(t, "the hook to come back", func() bool {
		return m.RunHooks(ctx, plugin.EventPreDelete, testPod).Proceed
	})
	if p := readPID(t, provPID); p == oldProv {
		t.Fatalf("the provisioner still reports pid %d; want a new process that got its config again", p)
	}
	if p := readPID(t, hookPID); p == oldHook {
		t.Fatalf("the hook still reports pid %d; want a new process", p)
	}
	for _, name := range []string{"prov", "h"} {
		if s := statusOf(t, m, name); !s.Available || s.Restarts != 1 || s.Reason != "" {
			t.Fatalf("status %+v; want available after one restart", s)
		}
	}
}

// TestBuiltinHostVolume runs the default config's provisioner, the built-in
// nomad-host-volume, against the simulated Nomad.
func TestBuiltinHostVolume(t *testing.T) {
	ctx := context.Background()
	sim := nomadsim.NewNomad(nomadsim.NomadConfig{})
	t.Cleanup(sim.Close)
	cfg, _ := loadConfig(t, fmt.Sprintf("plugin_dir = %q\n", t.TempDir()))
	m := newManager(t, Options{Builtins: map[string]plugin.Factory{config.BuiltinHostVolume: hostvolume.Factory(sim)}})
	start(t, m, cfg)
	req := &plugin.VolumeRequest{Namespace: "default", Set: "web", Claim: "data", Ordinal: 1, Name: "data-web-1"}
	v, err := m.Provisioner().CreateVolume(ctx, req)
	if err != nil {
		t.Fatalf("CreateVolume: %v", err)
	}
	if v.PluginID != config.DefaultHostVolumePluginID || v.NodeID == "" {
		t.Fatalf("volume = %+v; want the default plugin_id and a node", v)
	}
	stubs, err := sim.ListHostVolumes(ctx, "default", "data-web-1")
	if err != nil || len(stubs) != 1 || stubs[0].ID != v.ID {
		t.Fatalf("Nomad has %+v, %v; want exactly volume %s", stubs, err, v.ID)
	}
	if err := m.Provisioner().DeleteVolume(ctx, req); err != nil {
		t.Fatalf("DeleteVolume: %v", err)
	}
	if stubs, _ := sim.ListHostVolumes(ctx, "default", "data-web-1"); len(stubs) != 0 {
		t.Fatalf("Nomad still has %+v after delete", stubs)
	}
	if s := statusOf(t, m, config.BuiltinHostVolume); s.External || !s.Available || s.Type != plugin.TypeVolumeProvisioner {
		t.Fatalf("status = %+v; want an available built-in provisioner", s)
	}

	// A typo in volume_provisioner's config is caught at start-up.
	bad, _ := loadConfig(t, fmt.Sprintf(`
plugin_dir = %q
volume_provisioner {
  config = { plugin_id = "mkdir", capacity_mn = "1G" }
}
`, t.TempDir()))
	err = newManager(t, Options{Builtins: map[string]plugin.Factory{config.BuiltinHostVolume: hostvolume.Factory(sim)}}).Start(ctx, ConfigOf(bad))
	if err == nil || !strings.Contains(err.Error(), `unknown config key "capacity_mn"`) {
		t.Fatalf("Start with a bad volume_provisioner config = %v; want the unknown key", err)
	}
}

// TestExternalOverridesBuiltin: a binary in plugin_dir named like a
// built-in replaces it.
func TestExternalOverridesBuiltin(t *testing.T) {
	dir := t.TempDir()
	install(t, dir, "testplugin", config.BuiltinHostVolume)
	cfg, _ := loadConfig(t, fmt.Sprintf(`
plugin_dir = %q
plugin "nomad-host-volume" { args = ["-type", "provisioner"] }
`, dir))
	m := newManager(t, Options{Builtins: map[string]plugin.Factory{config.BuiltinHostVolume: hostvolume.Factory(nil)}})
	start(t, m, cfg)
	if s := statusOf(t, m, config.BuiltinHostVolume); !s.External {
		t.Fatalf("status = %+v; want the external binary", s)
	}
	v, err := m.Provisioner().CreateVolume(context.Background(), &plugin.VolumeRequest{Name: "v"})
	if err != nil || v.ID != "vol-v" {
		t.Fatalf("CreateVolume = %+v, %v; want the test plugin's volume", v, err)
	}
}

// TestBuiltinAsBinary: the built-in nomad-host-volume, served from its own
// binary, passes the launch check and checks its config over gRPC.
func TestBuiltinAsBinary(t *testing.T) {
	dir := t.TempDir()
	install(t, dir, "nomad-host-volume", config.BuiltinHostVolume)
	cfg, _ := loadConfig(t, fmt.Sprintf(`
plugin_dir = %q
plugin "nomad-host-volume" {
  config = { capacity_min = "1GiB" }
}
`, dir))
	m := newManager(t, Options{})
	start(t, m, cfg)
	if s := statusOf(t, m, config.BuiltinHostVolume); !s.External || !s.Available || s.Type != plugin.TypeVolumeProvisioner {
		t.Fatalf("status = %+v; want the external binary, up, as a provisioner", s)
	}

	bad, path := loadConfig(t, fmt.Sprintf(`
plugin_dir = %q
plugin "nomad-host-volume" {
  config = { capacity = "1GiB" }
}
`, dir))
	err := newManager(t, Options{}).Start(context.Background(), ConfigOf(bad))
	if err == nil || !strings.Contains(err.Error(), path+":3:") || !strings.Contains(err.Error(), `unknown config key "capacity"`) {
		t.Fatalf("Start = %v; want the binary's config error at %s:3", err, path)
	}
}

// TestReload: an unchanged plugin keeps its process and gets the new
// config; a bad reload changes nothing; a removed plugin is stopped; a
// changed one is relaunched.
func TestReload(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	install(t, dir, "testplugin", "hook-a")
	pidFile := filepath.Join(t.TempDir(), "hook.pid")
	cfgText := func(result, args, driver string) string {
		return fmt.Sprintf(`
plugin_dir = %q
plugin "h" {
  driver = %q
  args   = [%s]
  config = { pid_file = %q, result = %q, message = "not yet" }
}
hook "h" {
  plugin = "h"
  events = ["pre_delete"]
}
`, dir, driver, args, pidFile, result)
	}
	cfg, _ := loadConfig(t, cfgText("wait", "", "hook-a"))
	m := newManager(t, Options{})
	start(t, m, cfg)
	if r := m.RunHooks(ctx, plugin.EventPreDelete, testPod); r.Proceed || r.Failed || !strings.Contains(r.Reason, "not yet") {
		t.Fatalf("RunHooks = %+v; want a wait", r)
	}
	pid := readPID(t, pidFile)

	cfg, _ = loadConfig(t, cfgText("done", "", "hook-a"))
	if err := m.Reload(ctx, ConfigOf(cfg)); err != nil {
		t.Fatalf("Reload: %v", err)
	}
	if r := m.RunHooks(ctx, plugin.EventPreDelete, testPod); !r.Proceed {
		t.Fatalf("RunHooks after reload = %+v; want proceed", r)
	}
	if p := readPID(t, pidFile); p != pid {
		t.Fatalf("reload restarted the plugin (pid %d, was %d); want SetConfig on the same process", p, pid)
	}

	bad, _ := loadConfig(t, cfgText("wait", "", "nope"))
	if err := m.Reload(ctx, ConfigOf(bad)); err == nil || !strings.Contains(err.Error(), "unknown driver") {
		t.Fatalf("Reload with an unknown driver = %v; want an error", err)
	}
	if r := m.RunHooks(ctx, plugin.EventPreDelete, testPod); !r.Proceed {
		t.Fatalf("after a failed reload RunHooks = %+v; want the old config still in force", r)
	}

	cfg, _ = loadConfig(t, cfgText("done", `"-name", "hook-a"`, "hook-a"))
	if err := m.Reload(ctx, ConfigOf(cfg)); err != nil {
		t.Fatalf("Reload with new args: %v", err)
	}
	if p := readPID(t, pidFile); p == pid {
		t.Fatal("new args did not relaunch the plugin")
	}

	cfg, _ = loadConfig(t, fmt.Sprintf("plugin_dir = %q\n", dir))
	if err := m.Reload(ctx, ConfigOf(cfg)); err != nil {
		t.Fatalf("Reload without the hook: %v", err)
	}
	for _, s := range m.Status() {
		if s.Name == "h" {
			t.Fatalf("plugin h still loaded after its block was removed: %+v", s)
		}
	}
	if r := m.RunHooks(ctx, plugin.EventPreDelete, testPod); !r.Proceed {
		t.Fatalf("RunHooks with no hooks = %+v; want proceed", r)
	}
}

// TestClose: after Close, calls fail with plugin.ErrPluginUnavailable instead of
// reaching a dead plugin.
func TestClose(t *testing.T) {
	dir := t.TempDir()
	install(t, dir, "testplugin", "prov")
	cfg, _ := loadConfig(t, fmt.Sprintf(`
plugin_dir = %q
plugin "prov" { args = ["-type", "provisioner"] }
volume_provisioner { plugin = "prov" }
`, dir))
	m := newManager(t, Options{})
	start(t, m, cfg)
	m.Close()
	_, err := m.Provisioner().GetVolume(context.Background(), &plugin.VolumeRequest{Name: "v"})
	if !errors.Is(err, plugin.ErrPluginUnavailable) {
		t.Fatalf("GetVolume after Close = %v; want plugin.ErrPluginUnavailable", err)
	}
	if err := m.Reload(context.Background(), ConfigOf(cfg)); err == nil {
		t.Fatal("Reload after Close succeeded")
	}
}

func TestBackoff(t *testing.T) {
	for _, tc := range []struct {
		attempt int
		want    time.Duration
	}{{0, time.Second}, {1, 2 * time.Second}, {3, 8 * time.Second}, {6, time.Minute}, {100, time.Minute}} {
		if got := backoff(time.Second, time.Minute, tc.attempt); got != tc.want {
			t.Errorf("backoff(attempt %d) = %s, want %s", tc.attempt, got, tc.want)
		}
	}
}

// TestClasses_routeByRequest: each volume_provisioner block is a storage
// class with its plugin and config; a request goes to its class's plugin
// with that class's config, across the wire, capacities and expansions
// included; an unknown class is an error naming it, and no plugin is
// called.
func TestClasses_routeByRequest(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	install(t, dir, "testplugin", "prov")
	cfg, _ := loadConfig(t, fmt.Sprintf(`
plugin_dir = %q
plugin "prov" {
  args = ["-type", "provisioner"]
}
plugin "fixed" {
  driver = "prov"
  args   = ["-type", "provisioner"]
  config = { expand = "unsupported" }
}
volume_provisioner {
  plugin = "prov"
  config = { plugin_id = "default-id" }
}
volume_provisioner "fast" {
  plugin = "prov"
  config = { plugin_id = "fast-id" }
}
volume_provisioner "archive" {
  plugin = "fixed"
}
`, dir))
	m := newManager(t, Options{})
	if _, err := m.Provisioner().CreateVolume(ctx, &plugin.VolumeRequest{Name: "v"}); !errors.Is(err, plugin.ErrPluginUnavailable) {
		t.Fatalf("CreateVolume before Start = %v; want plugin.ErrPluginUnavailable", err)
	}
	start(t, m, cfg)
	if got := m.Classes(); fmt.Sprint(got) != "[archive fast]" {
		t.Fatalf("Classes() = %v", got)
	}
	vp := m.Provisioner()
	req := func(name, class string, min int64) *plugin.VolumeRequest {
		return &plugin.VolumeRequest{Namespace: "default", Set: "web", Claim: "data", Name: name, Class: class, CapacityMin: min}
	}
	// The test plugin names a volume's plugin after its class, or after
	// its config's plugin_id when it has none.
	for _, tc := range []struct{ name, class, wantPlugin string }{
		{"data-web-0", "", "default-id"},
		{"data-web-1", "fast", "fast"},
		{"data-web-2", "archive", "archive"},
	} {
		v, err := vp.CreateVolume(ctx, req(tc.name, tc.class, 10<<20))
		if err != nil || v.PluginID != tc.wantPlugin || v.CapacityBytes != 10<<20 {
			t.Fatalf("CreateVolume(class %q) = %+v, %v; want plugin %q at 10MiB", tc.class, v, err, tc.wantPlugin)
		}
	}
	if v, err := vp.ExpandVolume(ctx, req("data-web-1", "fast", 20<<20)); err != nil || v.CapacityBytes != 20<<20 {
		t.Fatalf("ExpandVolume = %+v, %v", v, err)
	}
	if _, err := vp.ExpandVolume(ctx, &plugin.VolumeRequest{Name: "data-web-1", Class: "fast", CapacityMin: 1, CapacityMax: 1}); !errors.Is(err, plugin.ErrVolumeShrink) {
		t.Fatalf("a shrink = %v; want plugin.ErrVolumeShrink across the wire", err)
	}
	if _, err := vp.ExpandVolume(ctx, req("data-web-2", "archive", 20<<20)); !errors.Is(err, plugin.ErrExpandUnsupported) ||
		!strings.Contains(err.Error(), `with plugin "fixed"`) {
		t.Fatalf("expanding with a plugin that cannot = %v; want plugin.ErrExpandUnsupported naming the plugin", err)
	}
	// Each class's capabilities come from its own plugin, across the wire,
	// before any volume is touched.
	for _, tc := range []struct {
		class  string
		expand bool
	}{{"", true}, {"fast", true}, {"archive", false}} {
		caps, err := vp.Capabilities(ctx, &plugin.VolumeRequest{Namespace: "default", Set: "web", Class: tc.class})
		if err != nil || caps.Expand != tc.expand {
			t.Fatalf("Capabilities(class %q) = %+v, %v; want expand %v", tc.class, caps, err, tc.expand)
		}
	}
	if _, err := vp.Capabilities(ctx, &plugin.VolumeRequest{Class: "fsat"}); !errors.Is(err, plugin.ErrUnknownClass) {
		t.Fatalf("Capabilities of an unknown class = %v; want plugin.ErrUnknownClass", err)
	}
	_, err := vp.CreateVolume(ctx, req("data-web-3", "fsat", 0))
	if !errors.Is(err, plugin.ErrUnknownClass) || errors.Is(err, plugin.ErrPluginUnavailable) ||
		!strings.Contains(err.Error(), `unknown storage class "fsat": the agent config has no volume_provisioner "fsat" block (its classes: "archive", "fast"); did you mean "fast"?`) {
		t.Fatalf("an unknown class = %v", err)
	}
	if v, err := vp.GetVolume(ctx, req("data-web-3", "fast", 0)); err != nil || v != nil {
		t.Fatalf("the unknown class's volume exists: %+v, %v", v, err)
	}
}

// TestClasses_sharedPluginChecksEachConfig: a plugin that serves several
// classes gets its own block's config, and each class's config is checked
// at start-up, the error naming the class's block; a plugin serving one
// class gets that class's config, as before classes.
func TestClasses_sharedPluginChecksEachConfig(t *testing.T) {
	ctx := context.Background()
	sim := nomadsim.NewNomad(nomadsim.NomadConfig{})
	t.Cleanup(sim.Close)
	builtins := map[string]plugin.Factory{config.BuiltinHostVolume: hostvolume.Factory(sim)}
	cfg, path := loadConfig(t, fmt.Sprintf(`
plugin_dir = %q
volume_provisioner "fast" {
  config = { plugin_id = "lvm", capacity_mn = "1G" }
}
`, t.TempDir()))
	err := newManager(t, Options{Builtins: builtins}).Start(ctx, ConfigOf(cfg))
	if err == nil || !strings.Contains(err.Error(), path+`:3: volume_provisioner "fast": plugin "nomad-host-volume"`) ||
		!strings.Contains(err.Error(), `unknown config key "capacity_mn"`) {
		t.Fatalf("Start with a bad class config = %v; want the class's block and the key", err)
	}

	cfg, _ = loadConfig(t, fmt.Sprintf(`
plugin_dir = %q
volume_provisioner {
  config = { plugin_id = "mkdir", "parameters.mode" = "0755" }
}
volume_provisioner "fast" {
  config = { plugin_id = "lvm" }
}
`, t.TempDir()))
	m := newManager(t, Options{Builtins: builtins})
	start(t, m, cfg)
	// The default class's parameters do not reach the fast class's volumes.
	v, err := m.Provisioner().CreateVolume(ctx, &plugin.VolumeRequest{Namespace: "default", Name: "data-web-0", Class: "fast"})
	if err != nil || v.PluginID != "lvm" {
		t.Fatalf("CreateVolume = %+v, %v", v, err)
	}
	full, err := sim.GetHostVolume(ctx, "default", v.ID)
	if err != nil || full.Parameters["mode"] != "" || full.Parameters["nomad_statefulset_class"] != "fast" {
		t.Fatalf("the fast volume's parameters: %v, %v", full.Parameters, err)
	}

	// A reload that breaks one class's config is refused, and the classes
	// keep working as they were.
	bad, _ := loadConfig(t, fmt.Sprintf(`
plugin_dir = %q
volume_provisioner "fast" {
  config = { plugin_id = "lvm", "parameters.nomad_statefulset_class" = "x" }
}
`, t.TempDir()))
	if err := m.Reload(ctx, ConfigOf(bad)); err == nil || !strings.Contains(err.Error(), "records the storage class") {
		t.Fatalf("Reload with a bad class config = %v", err)
	}
	if _, err := m.Provisioner().CreateVolume(ctx, &plugin.VolumeRequest{Namespace: "default", Name: "data-web-1", Class: "fast"}); err != nil {
		t.Fatalf("CreateVolume after a refused reload: %v", err)
	}
}
