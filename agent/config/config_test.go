package config

import (
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/nomad-statefulset/nomad-statefulset/internal/testtls"
	"github.com/nomad-statefulset/nomad-statefulset/plugin"
)

func TestDefault_EmptyFileIsDefault(t *testing.T) {
	for _, text := range []string{"", "\n", "# only a comment\n"} {
		c := mustLoad(t, text)
		assertEqualConfig(t, c, Default())
	}
	// No file at all is the same as an empty one.
	c, err := load(noEnv, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	assertEqualConfig(t, c, Default())
}

func TestDefault_Values(t *testing.T) {
	c := Default()
	checks := []struct {
		name      string
		got, want any
	}{
		{"log_level", c.LogLevel, "info"},
		{"log_json", c.LogJSON, false},
		{"data_dir", c.DataDir, "/var/lib/nomad-statefulset"},
		{"workers", c.Workers, 16},
		{"nomad.event_buffer_size", c.Nomad.EventBufferSize, 100},
		{"resync_interval", c.ResyncInterval, 5 * time.Minute},
		{"plugin_dir", c.PluginDir, "/var/lib/nomad-statefulset/plugins"},
		{"nomad.address", c.Nomad.Address, "http://127.0.0.1:4646"},
		{"consul.address", c.Consul.Address, "127.0.0.1:8500"},
		{"consul.kv_prefix", c.Consul.KVPrefix, "nomad-statefulset"},
		{"ha.enabled", c.HighAvailability.Enabled, true},
		{"ha.lock_key", c.HighAvailability.LockKey, "nomad-statefulset/leader"},
		{"ha.session_ttl", c.HighAvailability.SessionTTL, 15 * time.Second},
		{"ha.lock_delay", c.HighAvailability.LockDelay, 15 * time.Second},
		{"ha.monitor_retries", c.HighAvailability.MonitorRetries, 3},
		{"ha.monitor_retry_time", c.HighAvailability.MonitorRetryTime, 2 * time.Second},
		{"http.address", c.HTTP.Address, "127.0.0.1:4650"},
		{"http.enable_debug", c.HTTP.EnableDebug, false},
		{"http.tls", c.HTTP.TLS, HTTPTLSConfig{}},
		{"telemetry.prometheus_metrics", c.Telemetry.PrometheusMetrics, true},
		{"telemetry.prometheus_anonymous", c.Telemetry.PrometheusAnonymous, false},
		{"state.backend", c.State.Backend, StateConsul},
		{"state.path", c.State.Path, "/var/lib/nomad-statefulset/state.db"},
		{"volume_provisioner.plugin", c.VolumeProvisioner.Plugin, "nomad-host-volume"},
		{"volume_provisioner.config", c.VolumeProvisioner.Config, map[string]string{"plugin_id": "mkdir"}},
		{"plugins", len(c.Plugins), 1},
		{"builtin plugin driver", c.Plugin(BuiltinHostVolume).Driver, BuiltinHostVolume},
		{"hooks", len(c.Hooks), 0},
		{"dev", c.Dev, false},
	}
	for _, ch := range checks {
		if !reflect.DeepEqual(ch.got, ch.want) {
			t.Errorf("%s = %#v, want %#v", ch.name, ch.got, ch.want)
		}
	}
	if err := c.Validate(); err != nil {
		t.Errorf("Default() does not validate: %v", err)
	}
}

// The autoscaler's Default() handed out a package-level map that merges then
// mutated. Every call here must return an independent tree.
func TestDefault_FreshTree(t *testing.T) {
	a := Default()
	a.VolumeProvisioner.Config["plugin_id"] = "changed"
	a.VolumeProvisioner.Config["extra"] = "x"
	a.Plugins[0].Driver = "changed"
	a.Plugins[0].Config["k"] = "v"
	a.Plugins[0].Args = append(a.Plugins[0].Args, "-x")
	a.Plugins = append(a.Plugins, newPlugin("more"))
	a.Hooks = append(a.Hooks, newHook("h"))

	b := Default()
	if got := b.VolumeProvisioner.Config; !reflect.DeepEqual(got, map[string]string{"plugin_id": "mkdir"}) {
		t.Errorf("volume_provisioner.config leaked between Default() calls: %v", got)
	}
	if p := b.Plugins[0]; p.Driver != BuiltinHostVolume || len(p.Config) != 0 || len(p.Args) != 0 {
		t.Errorf("builtin plugin leaked between Default() calls: %+v", p)
	}
	if len(b.Plugins) != 1 || len(b.Hooks) != 0 {
		t.Errorf("slices leaked between Default() calls: %d plugins, %d hooks", len(b.Plugins), len(b.Hooks))
	}

	// Loading must not write through to the defaults either.
	_ = mustLoad(t, `volume_provisioner { config = { plugin_id = "other" } }`)
	if got := Default().VolumeProvisioner.Config["plugin_id"]; got != "mkdir" {
		t.Errorf("a load changed the default plugin_id to %q", got)
	}
}

// attrCase sets one attribute and reads it back.
type attrCase struct {
	path string // schema path; "plugin.*.x" for labeled blocks
	hcl  string
	get  func(c *Config) any
	want any
}

var attrCases = []attrCase{
	{"log_level", `log_level = "debug"`, func(c *Config) any { return c.LogLevel }, "debug"},
	{"log_json", `log_json = true`, func(c *Config) any { return c.LogJSON }, true},
	{"data_dir", `data_dir = "/srv/nsts"`, func(c *Config) any { return c.DataDir }, "/srv/nsts"},
	{"workers", `workers = 6`, func(c *Config) any { return c.Workers }, 6},
	{"resync_interval", `resync_interval = "90s"`, func(c *Config) any { return c.ResyncInterval }, 90 * time.Second},
	{"plugin_dir", `plugin_dir = "/opt/plugins"`, func(c *Config) any { return c.PluginDir }, "/opt/plugins"},

	{"nomad.address", `nomad { address = "https://nomad:4646" }`, func(c *Config) any { return c.Nomad.Address }, "https://nomad:4646"},
	{"nomad.token", `nomad { token = "s3cr3t" }`, func(c *Config) any { return c.Nomad.Token.Reveal() }, "s3cr3t"},
	{"nomad.region", `nomad { region = "eu" }`, func(c *Config) any { return c.Nomad.Region }, "eu"},
	{"nomad.namespace", `nomad { namespace = "apps" }`, func(c *Config) any { return c.Nomad.Namespace }, "apps"},
	{"nomad.ca_cert", `nomad { ca_cert = "/ca.pem" }`, func(c *Config) any { return c.Nomad.CACert }, "/ca.pem"},
	{"nomad.ca_path", `nomad { ca_path = "/ca.d" }`, func(c *Config) any { return c.Nomad.CAPath }, "/ca.d"},
	{"nomad.client_cert", `nomad {
  client_cert = "/c.pem"
  client_key = "/k.pem"
}`, func(c *Config) any { return c.Nomad.ClientCert }, "/c.pem"},
	{"nomad.client_key", `nomad {
  client_cert = "/c.pem"
  client_key = "/k.pem"
}`, func(c *Config) any { return c.Nomad.ClientKey }, "/k.pem"},
	{"nomad.tls_server_name", `nomad { tls_server_name = "server.global.nomad" }`, func(c *Config) any { return c.Nomad.TLSServerName }, "server.global.nomad"},
	{"nomad.skip_verify", `nomad { skip_verify = true }`, func(c *Config) any { return c.Nomad.SkipVerify }, true},
	{"nomad.event_buffer_size", `nomad { event_buffer_size = 2000 }`, func(c *Config) any { return c.Nomad.EventBufferSize }, 2000},

	{"consul.address", `consul { address = "consul:8500" }`, func(c *Config) any { return c.Consul.Address }, "consul:8500"},
	{"consul.token", `consul { token = "ct" }`, func(c *Config) any { return c.Consul.Token.Reveal() }, "ct"},
	{"consul.token_file", `consul { token_file = "/t" }`, func(c *Config) any { return c.Consul.TokenFile }, "/t"},
	{"consul.datacenter", `consul { datacenter = "dc2" }`, func(c *Config) any { return c.Consul.Datacenter }, "dc2"},
	{"consul.ssl", `consul { ssl = true }`, func(c *Config) any { return c.Consul.SSL }, true},
	{"consul.ca_file", `consul { ca_file = "/ca.pem" }`, func(c *Config) any { return c.Consul.CAFile }, "/ca.pem"},
	{"consul.ca_path", `consul { ca_path = "/ca.d" }`, func(c *Config) any { return c.Consul.CAPath }, "/ca.d"},
	{"consul.cert_file", `consul {
  cert_file = "/c.pem"
  key_file = "/k.pem"
}`, func(c *Config) any { return c.Consul.CertFile }, "/c.pem"},
	{"consul.key_file", `consul {
  cert_file = "/c.pem"
  key_file = "/k.pem"
}`, func(c *Config) any { return c.Consul.KeyFile }, "/k.pem"},
	{"consul.tls_server_name", `consul { tls_server_name = "server.dc1.consul" }`, func(c *Config) any { return c.Consul.TLSServerName }, "server.dc1.consul"},
	{"consul.insecure_skip_verify", `consul { insecure_skip_verify = true }`, func(c *Config) any { return c.Consul.InsecureSkipVerify }, true},
	{"consul.kv_prefix", `consul { kv_prefix = "a/b" }`, func(c *Config) any { return c.Consul.KVPrefix }, "a/b"},

	{"high_availability.enabled", `high_availability { enabled = false }`, func(c *Config) any { return c.HighAvailability.Enabled }, false},
	{"high_availability.lock_key", `high_availability { lock_key = "x/lock" }`, func(c *Config) any { return c.HighAvailability.LockKey }, "x/lock"},
	{"high_availability.session_ttl", `high_availability { session_ttl = "1m" }`, func(c *Config) any { return c.HighAvailability.SessionTTL }, time.Minute},
	{"high_availability.lock_delay", `high_availability { lock_delay = "20s" }`, func(c *Config) any { return c.HighAvailability.LockDelay }, 20 * time.Second},
	{"high_availability.monitor_retries", `high_availability { monitor_retries = 4 }`, func(c *Config) any { return c.HighAvailability.MonitorRetries }, 4},
	{"high_availability.monitor_retry_time", `high_availability { monitor_retry_time = "1500ms" }`, func(c *Config) any { return c.HighAvailability.MonitorRetryTime }, 1500 * time.Millisecond},

	{"http.address", `http { address = "0.0.0.0:9999" }`, func(c *Config) any { return c.HTTP.Address }, "0.0.0.0:9999"},
	{"http.enable_debug", `http { enable_debug = true }`, func(c *Config) any { return c.HTTP.EnableDebug }, true},

	{"telemetry.prometheus_metrics", `telemetry { prometheus_metrics = false }`, func(c *Config) any { return c.Telemetry.PrometheusMetrics }, false},
	{"telemetry.prometheus_anonymous", `telemetry { prometheus_anonymous = true }`, func(c *Config) any { return c.Telemetry.PrometheusAnonymous }, true},

	{"state.backend", `state { backend = "embedded" }`, func(c *Config) any { return c.State.Backend }, StateEmbedded},
	{"state.path", `state { path = "/tmp/s.db" }`, func(c *Config) any { return c.State.Path }, "/tmp/s.db"},

	{"volume_provisioner.plugin", `
plugin "csi" {}
volume_provisioner { plugin = "csi" }`, func(c *Config) any { return c.VolumeProvisioner.Plugin }, "csi"},
	{"volume_provisioner.config", `volume_provisioner {
  config = { plugin_id = "lvm", capacity_min = 1024, thin = true }
}`, func(c *Config) any { return c.VolumeProvisioner.Config }, map[string]string{"plugin_id": "lvm", "capacity_min": "1024", "thin": "true"}},

	{"volume_provisioner.*.plugin", `
plugin "lvm" {}
volume_provisioner "fast" { plugin = "lvm" }`, func(c *Config) any { return c.VolumeClass("fast").Plugin }, "lvm"},
	{"volume_provisioner.*.config", `volume_provisioner "fast" {
  config = { plugin_id = "lvm", capacity_min = "1GiB" }
}`, func(c *Config) any { return c.VolumeClass("fast").Config }, map[string]string{"plugin_id": "lvm", "capacity_min": "1GiB"}},

	{"plugin.*.name", `plugin "p1" {}`, func(c *Config) any { return c.Plugin("p1").Name }, "p1"},
	{"plugin.*.driver", `plugin "p1" { driver = "bin-x" }`, func(c *Config) any { return c.Plugin("p1").Driver }, "bin-x"},
	{"plugin.*.args", `plugin "p1" { args = ["-a", "b"] }`, func(c *Config) any { return c.Plugin("p1").Args }, []string{"-a", "b"}},
	{"plugin.*.config", `plugin "p1" { config = { url = "http://x", retries = 3 } }`, func(c *Config) any { return c.Plugin("p1").Config },
		map[string]string{"url": "http://x", "retries": "3"}},

	{"hook.*.name", `
plugin "p" {}
hook "h1" {
  plugin = "p"
  events = ["pre_delete"]
}`, func(c *Config) any { return c.Hooks[0].Name }, "h1"},
	{"hook.*.plugin", `
plugin "p" {}
hook "h1" {
  plugin = "p"
  events = ["pre_delete"]
}`, func(c *Config) any { return c.Hooks[0].Plugin }, "p"},
	{"hook.*.events", `
plugin "p" {}
hook "h1" {
  plugin = "p"
  events = ["pre_delete", "post_ready", "pre_update"]
}`, func(c *Config) any { return c.Hooks[0].Events }, []plugin.Event{plugin.EventPreDelete, plugin.EventPostReady, plugin.EventPreUpdate}},
	{"hook.*.timeout", `
plugin "p" {}
hook "h1" {
  plugin  = "p"
  events  = ["post_ready"]
  timeout = "2m"
}`, func(c *Config) any { return c.Hooks[0].Timeout }, 2 * time.Minute},
	{"hook.*.failure_policy", `
plugin "p" {}
hook "h1" {
  plugin         = "p"
  events         = ["pre_update"]
  failure_policy = "ignore"
}`, func(c *Config) any { return c.Hooks[0].FailurePolicy }, plugin.FailureIgnore},
}

// TestLoad_EveryAttribute sets each attribute on its own and reads it back,
// checks that everything else stayed at its default, and checks that the
// table covers the whole schema.
func TestLoad_EveryAttribute(t *testing.T) {
	covered := map[string]bool{}
	cases := append(slices.Clone(attrCases), tlsAttrCases(testtls.Write(t, t.TempDir()))...)
	for _, tc := range cases {
		covered[tc.path] = true
		t.Run(tc.path, func(t *testing.T) {
			c := mustLoad(t, tc.hcl)
			if got := tc.get(c); !reflect.DeepEqual(got, tc.want) {
				t.Errorf("got %#v, want %#v", got, tc.want)
			}
			// The default value differs from the test value (else the test
			// proves nothing), except for labels and names.
			if !strings.HasSuffix(tc.path, ".name") && !strings.HasPrefix(tc.path, "plugin.") && !strings.HasPrefix(tc.path, "hook.") &&
				!strings.HasPrefix(tc.path, "volume_provisioner.*.") {
				if reflect.DeepEqual(tc.get(Default()), tc.want) {
					t.Errorf("test value %#v equals the default; pick another", tc.want)
				}
			}
		})
	}
	// Labels are decoded from the block header, not an attribute.
	for _, p := range schemaPaths(reflect.TypeOf(Config{}), "") {
		if !covered[p] {
			t.Errorf("attribute %s has no case in attrCases", p)
		}
	}
}

// TestLoad_NullKeepsLowerLayer: null is "not set", so the value below stays.
func TestLoad_NullKeepsLowerLayer(t *testing.T) {
	c := mustLoad(t, `log_level = "debug"`, `log_level = null
workers = null`)
	if c.LogLevel != "debug" || c.Workers != DefaultWorkers {
		t.Errorf("null overrode lower layers: log_level=%q workers=%d", c.LogLevel, c.Workers)
	}
}

// TestLoad_VolumeClasses: the unnamed volume_provisioner block and named
// ones live side by side; a later file overrides a class attribute by
// attribute, as it does a plugin block; a class keeps where it was first
// declared; JSON writes a class as a key of the volume_provisioner object.
func TestLoad_VolumeClasses(t *testing.T) {
	c := mustLoad(t, `
plugin "lvm" {}
volume_provisioner {
  config = { plugin_id = "mkdir", capacity_min = "1GiB", capacity_max = "1GiB" }
}
volume_provisioner "fast" {
  plugin = "lvm"
  config = { vg = "ssd" }
}
volume_provisioner "big" {
  config = { plugin_id = "lvm-thin", capacity_min = "1TiB" }
}`, `
volume_provisioner "fast" {
  config = { vg = "nvme" }
}`)
	if got := c.VolumeClass("").Config["capacity_min"]; got != "1GiB" || c.VolumeClass("").Plugin != BuiltinHostVolume {
		t.Errorf("the unnamed block: %+v", c.VolumeClass(""))
	}
	fast, big := c.VolumeClass("fast"), c.VolumeClass("big")
	if fast == nil || big == nil || c.VolumeClass("slow") != nil || len(c.VolumeClasses) != 2 || c.VolumeClasses[0] != fast {
		t.Fatalf("classes %+v", c.VolumeClasses)
	}
	if fast.Plugin != "lvm" || !reflect.DeepEqual(fast.Config, map[string]string{"vg": "nvme"}) || fast.DeclRange.Filename != "f0.hcl" || fast.DeclRange.Start.Line != 6 {
		t.Errorf("fast = %+v", fast)
	}
	if big.Plugin != BuiltinHostVolume || big.Config["capacity_min"] != "1TiB" {
		t.Errorf("big = %+v", big)
	}
	back := mustLoad(t, c.render(false))
	assertEqualConfig(t, back, c)

	j, err := load(noEnv, []source{{name: "a.json", src: []byte(`{
  "plugin": {"lvm": {}},
  "volume_provisioner": [
    {"plugin": "nomad-host-volume", "config": {"plugin_id": "mkdir"}},
    {"fast": {"plugin": "lvm", "config": {"vg": "ssd"}}, "big": {"config": {"plugin_id": "lvm-thin"}}}
  ]
}`)}}, nil)
	if err != nil {
		t.Fatalf("JSON: %v", err)
	}
	if len(j.VolumeClasses) != 2 || j.VolumeClass("fast").Plugin != "lvm" || j.VolumeClass("big").Config["plugin_id"] != "lvm-thin" ||
		j.VolumeProvisioner.Config["plugin_id"] != "mkdir" {
		t.Fatalf("JSON classes %+v, unnamed %+v", j.VolumeClasses, j.VolumeProvisioner)
	}
	if d := j.VolumeClass("fast").DeclRange; d.Filename != "a.json" || d.Start.Line != 5 {
		t.Errorf("JSON class declared at %v", d)
	}
}

func TestLoad_JSONSyntax(t *testing.T) {
	c, err := load(noEnv, []source{{name: "a.json", src: []byte(`{
  "workers": 7,
  "nomad": {"address": "https://n:4646"},
  "plugin": {"p": {"driver": "d"}},
  "high_availability": {"session_ttl": "20s"}
}`)}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if c.Workers != 7 || c.Nomad.Address != "https://n:4646" || c.Plugin("p").Driver != "d" || c.HighAvailability.SessionTTL != 20*time.Second {
		t.Errorf("JSON not decoded:\n%s", c)
	}
}

// writeFiles creates files under dir (creating parents).
func writeFiles(t *testing.T, dir string, files map[string]string) {
	t.Helper()
	for name, text := range files {
		p := filepath.Join(dir, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

func TestLoad_DirectoryMergeOrder(t *testing.T) {
	clearEnv(t)
	dir := t.TempDir()
	writeFiles(t, dir, map[string]string{
		// Lexical order: 10-… before 2-…, which is the documented order.
		"10-base.hcl": `
log_json = true
telemetry { prometheus_metrics = true }
http { enable_debug = true }
nomad {
  region    = "a"
  namespace = "ns"
}
plugin "x" {
  args = ["-v"]
}
`,
		"2-override.hcl": `
log_json = false
telemetry { prometheus_metrics = false }
nomad { region = "b" }
plugin "x" {
  config = { k = "v" }
}
`,
		// Not read: wrong extension, hidden, or in a subdirectory. Each is
		// invalid, so reading it would fail the load.
		"README.md":             "not hcl {",
		"agent.hcl.bak":         "not hcl {",
		".hidden.hcl":           "not hcl {",
		"sub/nested.hcl":        "not hcl {",
		"notes.json":            "not json",
		"zz-empty-override.hcl": "",
	})
	c, err := Load(dir)
	if err != nil {
		t.Fatal(err)
	}
	if c.LogJSON {
		t.Errorf("log_json: a later false did not override an earlier true")
	}
	if c.Telemetry.PrometheusMetrics {
		t.Errorf("prometheus_metrics: a later false did not override an earlier true")
	}
	if !c.HTTP.EnableDebug {
		t.Errorf("enable_debug: set in the first file only, lost")
	}
	if c.Nomad.Region != "b" || c.Nomad.Namespace != "ns" {
		t.Errorf("nomad block not merged per attribute: region=%q namespace=%q", c.Nomad.Region, c.Nomad.Namespace)
	}
	p := c.Plugin("x")
	if p == nil || !reflect.DeepEqual(p.Args, []string{"-v"}) || p.Config["k"] != "v" {
		t.Errorf("plugin \"x\" not merged per attribute across files: %+v", p)
	}
	if p != nil && !strings.HasSuffix(p.DeclRange.Filename, "10-base.hcl") {
		t.Errorf("plugin DeclRange = %v, want the first declaration", p.DeclRange)
	}
}

func TestLoad_SeveralPathsInOrder(t *testing.T) {
	clearEnv(t)
	dir := t.TempDir()
	writeFiles(t, dir, map[string]string{
		"conf.d/a.hcl": "log_json = true\nworkers = 2\n",
		"conf.d/b.hcl": "workers = 3\n",
		"off.hcl":      "log_json = false\n",
		"on.hcl":       "log_json = true\n",
	})
	confd := filepath.Join(dir, "conf.d")
	cases := []struct {
		paths    []string
		wantJSON bool
		workers  int
	}{
		{[]string{confd}, true, 3},
		{[]string{confd, filepath.Join(dir, "off.hcl")}, false, 3},
		{[]string{filepath.Join(dir, "off.hcl"), confd}, true, 3},
		{[]string{filepath.Join(dir, "on.hcl"), filepath.Join(dir, "off.hcl")}, false, DefaultWorkers},
		{[]string{filepath.Join(dir, "off.hcl"), filepath.Join(dir, "on.hcl")}, true, DefaultWorkers},
	}
	for _, tc := range cases {
		c, err := Load(tc.paths...)
		if err != nil {
			t.Fatalf("%v: %v", tc.paths, err)
		}
		if c.LogJSON != tc.wantJSON || c.Workers != tc.workers {
			t.Errorf("%v: log_json=%v workers=%d, want %v %d", tc.paths, c.LogJSON, c.Workers, tc.wantJSON, tc.workers)
		}
	}
}

func TestLoad_EmptyDirectoryIsDefaults(t *testing.T) {
	clearEnv(t)
	c, err := Load(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	if c.Workers != DefaultWorkers || c.LogLevel != DefaultLogLevel {
		t.Errorf("empty directory did not give defaults:\n%s", c)
	}
}

func TestLoad_HooksMergeAcrossFiles(t *testing.T) {
	c := mustLoad(t, `
plugin "p" {}
hook "h" {
  plugin  = "p"
  events  = ["pre_delete"]
  timeout = "10s"
}
hook "g" {
  plugin = "p"
  events = ["post_ready"]
}`, `
hook "h" { failure_policy = "ignore" }
`)
	if len(c.Hooks) != 2 || c.Hooks[0].Name != "h" || c.Hooks[1].Name != "g" {
		t.Fatalf("hooks not kept in order of first declaration: %+v", c.Hooks)
	}
	h := c.Hooks[0]
	if h.Timeout != 10*time.Second || h.FailurePolicy != plugin.FailureIgnore || h.Plugin != "p" {
		t.Errorf("hook \"h\" not merged per attribute: %+v", h)
	}
	if g := c.Hooks[1]; g.Timeout != DefaultHookTimeout || g.FailurePolicy != plugin.FailureBlock {
		t.Errorf("hook \"g\" did not get its defaults: %+v", g)
	}
}

func TestLoad_DerivedDefaults(t *testing.T) {
	cases := []struct {
		name string
		text []string
		get  func(c *Config) any
		want any
	}{
		{"state.path follows data_dir", []string{`data_dir = "/d"`}, func(c *Config) any { return c.State.Path }, "/d/state.db"},
		{"plugin_dir follows data_dir", []string{`data_dir = "/d"`}, func(c *Config) any { return c.PluginDir }, "/d/plugins"},
		{"data_dir in a later file still moves state.path", []string{`state { backend = "embedded" }`, `data_dir = "/later"`}, func(c *Config) any { return c.State.Path }, "/later/state.db"},
		{"explicit state.path wins", []string{`state { path = "/x.db" }`, `data_dir = "/d"`}, func(c *Config) any { return c.State.Path }, "/x.db"},
		{"explicit plugin_dir wins", []string{`plugin_dir = "/p"`, `data_dir = "/d"`}, func(c *Config) any { return c.PluginDir }, "/p"},
		{"lock_key follows kv_prefix", []string{`consul { kv_prefix = "prod/sts" }`}, func(c *Config) any { return c.HighAvailability.LockKey }, "prod/sts/leader"},
		{"explicit lock_key wins", []string{`high_availability { lock_key = "locks/sts" }`, `consul { kv_prefix = "prod" }`}, func(c *Config) any { return c.HighAvailability.LockKey }, "locks/sts"},
		{"embedded turns HA off by default", []string{`state { backend = "embedded" }`}, func(c *Config) any { return c.HighAvailability.Enabled }, false},
		{"consul keeps HA on by default", []string{`state { backend = "consul" }`}, func(c *Config) any { return c.HighAvailability.Enabled }, true},
		{"HA can be turned off with consul", []string{`high_availability { enabled = false }`}, func(c *Config) any { return c.HighAvailability.Enabled }, false},
		{"builtin stays declared when others are", []string{`plugin "p" {}`}, func(c *Config) any { return c.Plugin(BuiltinHostVolume) != nil }, true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			c := mustLoad(t, tc.text...)
			if got := tc.get(c); !reflect.DeepEqual(got, tc.want) {
				t.Errorf("got %#v, want %#v", got, tc.want)
			}
		})
	}
}

func TestApplyDev(t *testing.T) {
	tmp := t.TempDir()
	defer func(f func() string) { tempDir = f }(tempDir)
	tempDir = func() string { return tmp }

	t.Run("defaults", func(t *testing.T) {
		c := Default()
		c.ApplyDev()
		if !c.Dev || c.State.Backend != StateEmbedded || c.HighAvailability.Enabled {
			t.Errorf("dev: dev=%v backend=%q ha=%v", c.Dev, c.State.Backend, c.HighAvailability.Enabled)
		}
		wantDir := filepath.Join(tmp, "nomad-statefulset-dev")
		if c.DataDir != wantDir || c.State.Path != filepath.Join(wantDir, "state.db") || c.PluginDir != filepath.Join(wantDir, "plugins") {
			t.Errorf("dev paths: data_dir=%q state.path=%q plugin_dir=%q", c.DataDir, c.State.Path, c.PluginDir)
		}
		if err := c.Validate(); err != nil {
			t.Errorf("dev config invalid: %v", err)
		}
	})
	t.Run("overrides the file's HA and backend, keeps its paths", func(t *testing.T) {
		c := mustLoad(t, `
data_dir = "/srv/dev"
state {
  backend = "consul"
  path    = "/srv/explicit.db"
}
high_availability { enabled = true }
`)
		c.ApplyDev()
		if c.State.Backend != StateEmbedded || c.HighAvailability.Enabled {
			t.Errorf("dev did not win: backend=%q ha=%v", c.State.Backend, c.HighAvailability.Enabled)
		}
		if c.DataDir != "/srv/dev" || c.State.Path != "/srv/explicit.db" || c.PluginDir != "/srv/dev/plugins" {
			t.Errorf("dev changed explicit paths: data_dir=%q state.path=%q plugin_dir=%q", c.DataDir, c.State.Path, c.PluginDir)
		}
		if err := c.Validate(); err != nil {
			t.Errorf("dev config invalid: %v", err)
		}
	})
}

// TestString_RoundTrip: the unredacted rendering loads back to the same
// config, for the defaults and for a config that sets everything.
func TestString_RoundTrip(t *testing.T) {
	rich := `
log_level = "DEBUG"
log_json = true
data_dir = "/d"
workers = 9
resync_interval = "1h2m3s"
nomad {
  address = "unix:///var/run/nomad.sock"
  token = "tok\"en $${x}"
  region = "r"
  namespace = "*"
  ca_cert = "/a b/ca.pem"
  client_cert = "c"
  client_key = "k"
  skip_verify = true
}
consul {
  address = "https://c:8501/prefix"
  token_file = "/tf"
  ssl = true
  kv_prefix = "a/b/c"
  insecure_skip_verify = true
}
high_availability {
  session_ttl = "30s"
  lock_delay = "30s"
  monitor_retries = 0
  monitor_retry_time = "100ms"
}
state { backend = "embedded" }
plugin "tab\there" {}
plugin "a" {
  driver = "b"
  args = ["x", "%%{y}", "\u00e9"]
  config = { "weird key" = "v\nw", token = "t" }
}
hook "h" {
  plugin = "a"
  events = ["pre_update", "pre_delete"]
  timeout = "1ns"
  failure_policy = "ignore"
}
volume_provisioner {
  plugin = "a"
  config = {}
}
`
	// The tab in a label is invalid, so drop that line for the rich case;
	// see TestRenderQuotes for escapes.
	rich = strings.Replace(rich, "plugin \"tab\\there\" {}\n", "", 1)
	for name, c := range map[string]*Config{"default": Default(), "rich": mustLoad(t, rich)} {
		t.Run(name, func(t *testing.T) {
			text := c.render(false)
			back, err := loadText(noEnv, text)
			if err != nil {
				t.Fatalf("rendering does not load:\n%s\n%v", text, err)
			}
			assertEqualConfig(t, back, c)
		})
	}
}

// TestRenderQuotes: strings that HCL escapes differently from Go, or reads
// as templates, come back unchanged through render and load.
func TestRenderQuotes(t *testing.T) {
	for _, s := range []string{"", "plain", `q"uote`, `back\slash`, "nl\ncr\rtab\t", "\x00\x1f\x7f", "${x}", "%{x}", "$${x}", "$$", "${", "%{", "é ☃"} {
		c := Default()
		c.Nomad.Region = s
		text := c.render(false)
		back, err := loadText(noEnv, text)
		if err != nil {
			t.Fatalf("region %q renders to HCL that does not load: %v\n%s", s, err, text)
		}
		if back.Nomad.Region != s {
			t.Errorf("region %q comes back as %q", s, back.Nomad.Region)
		}
	}
}

// TestString_Redacted: String is what gets logged; no token may show.
func TestString_Redacted(t *testing.T) {
	c := mustLoad(t, `
nomad  { token = "nomad-secret-1" }
consul { token = "consul-secret-2" }
plugin "p" {
  config = { api_token = "plugin-secret-3", password = "plugin-secret-4", url = "http://visible" }
}
volume_provisioner {
  plugin = "p"
  config = { secret_key = "prov-secret-5", plugin_id = "visible-id" }
}`)
	s := c.String()
	for _, secret := range []string{"nomad-secret-1", "consul-secret-2", "plugin-secret-3", "plugin-secret-4", "prov-secret-5"} {
		if strings.Contains(s, secret) {
			t.Errorf("String() leaks %q:\n%s", secret, s)
		}
	}
	for _, visible := range []string{"http://visible", "visible-id", `token\s+= "<redacted>"`} {
		if !regexp.MustCompile(visible).MatchString(s) {
			t.Errorf("String() lost %q:\n%s", visible, s)
		}
	}
	if regexp.MustCompile(`secret-\d`).MatchString(c.GoString()) {
		t.Errorf("GoString leaks a secret")
	}
	// The redacted form still loads: it is a valid config.
	if _, err := loadText(noEnv, s); err != nil {
		t.Errorf("redacted String() does not load: %v", err)
	}
}
