package config

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/hashicorp/hcl/v2"

	"github.com/nomad-statefulset/nomad-statefulset/plugin"
)

// errCase is one kind of mistake and the exact position and words it must
// be reported with.
type errCase struct {
	name string
	text string
	want string // "file:line:col: Summary; detail…" prefix or substring
}

var errCases = []errCase{
	// Types.
	{"bad type: string for number", `workers = "four"`,
		`f0.hcl:1:11: Incorrect attribute value type; Inappropriate value for attribute "workers": a number is required.`},
	{"bad type: fraction for integer", `workers = 1.5`,
		`f0.hcl:1:11: Incorrect attribute value type; Inappropriate value for attribute "workers"`},
	{"bad type: string for bool", "nomad {\n  skip_verify = \"maybe\"\n}",
		`f0.hcl:2:17: Incorrect attribute value type; Inappropriate value for attribute "skip_verify": a bool is required.`},
	{"bad type: list element", "plugin \"p\" {\n  args = [\"a\", [\"b\"]]\n}",
		`f0.hcl:2:10: Incorrect attribute value type; Inappropriate value for attribute "args": element 1: string required, but have tuple.`},
	{"bad type: nested map value", "plugin \"p\" {\n  config = { url = \"x\", headers = [\"a\"] }\n}",
		`f0.hcl:2:12: Incorrect attribute value type; Inappropriate value for attribute "config": element "headers": string required, but have tuple.`},
	{"bad type: block written as attribute", `nomad = { address = "x" }`,
		`f0.hcl:1:1: Unsupported argument; An argument named "nomad" is not expected here. Did you mean to define a block of type "nomad"?`},
	{"bad type: attribute written as block", `workers { }`,
		`f0.hcl:1:1: Unsupported block type; Blocks of type "workers" are not expected here. Did you mean to define argument "workers"?`},

	// Unknown names, with suggestions.
	{"unknown attribute with suggestion", "nomad {\n  adress = \"http://x:4646\"\n}",
		`f0.hcl:2:3: Unsupported argument; An argument named "adress" is not expected here. Did you mean "address"?`},
	{"unknown top-level attribute with suggestion", `worker = 3`,
		`f0.hcl:1:1: Unsupported argument; An argument named "worker" is not expected here. Did you mean "workers"?`},
	{"unknown nested attribute with suggestion", "high_availability {\n  monitor_retrys = 2\n}",
		`f0.hcl:2:3: Unsupported argument; An argument named "monitor_retrys" is not expected here. Did you mean "monitor_retries"?`},
	{"unknown block with suggestion", `consull {}`,
		`f0.hcl:1:1: Unsupported block type; Blocks of type "consull" are not expected here. Did you mean "consul"?`},
	{"unknown attribute without suggestion", `frobnicate = true`,
		`f0.hcl:1:1: Unsupported argument; An argument named "frobnicate" is not expected here.`},
	{"unknown function with suggestion", `data_dir = evn("X")`,
		`f0.hcl:1:12: Call to unknown function; There is no function named "evn". Did you mean "env"?`},
	{"variable reference", `data_dir = nomad.address`,
		`f0.hcl:1:12: Variables not allowed; Variables may not be used here.`},

	// Durations.
	{"bad duration", "high_availability {\n  session_ttl = \"15 seconds\"\n}",
		`f0.hcl:2:17: Invalid duration; Inappropriate value for attribute "session_ttl": "15 seconds" is not a duration`},
	{"duration without unit", `resync_interval = 300`,
		`f0.hcl:1:19: Invalid duration; Inappropriate value for attribute "resync_interval": a duration string with a unit is required, like "30s" or "5m", not the bare number 300.`},
	{"duration of wrong type", "hook \"h\" {\n  timeout = [\"1s\"]\n}",
		`f0.hcl:2:13: Invalid duration; Inappropriate value for attribute "timeout": a duration string is required`},
	{"negative duration", "high_availability {\n  lock_delay = \"-1s\"\n}",
		`f0.hcl:2:16: Invalid high_availability lock_delay; high_availability.lock_delay: -1s is out of range: Consul accepts a lock-delay from 0s to 1m0s.`},
	{"resync too short", `resync_interval = "10ms"`,
		`f0.hcl:1:19: Invalid resync_interval; resync_interval: 10ms is too short`},

	// Enums.
	{"bad enum: log_level", `log_level = "verbose"`,
		`f0.hcl:1:13: Invalid log_level; log_level: "verbose" is not a log level; use one of trace, debug, info, warn, error, off.`},
	{"bad enum with suggestion: log_level", `log_level = "warning"`,
		`f0.hcl:1:13: Invalid log_level; log_level: "warning" is not a log level; use one of trace, debug, info, warn, error, off. Did you mean "warn"?`},
	{"bad enum: state backend", "state {\n  backend = \"bolt\"\n}",
		`f0.hcl:2:13: Invalid state backend; state.backend: "bolt" is not a state backend; use "consul" or "embedded".`},
	{"bad enum: failure_policy", "plugin \"p\" {}\nhook \"h\" {\n  plugin = \"p\"\n  events = [\"pre_delete\"]\n  failure_policy = \"retry\"\n}",
		`f0.hcl:5:20: Invalid hook failure_policy; hook.h.failure_policy: "retry" is not a failure policy; use "block" or "ignore".`},
	{"bad enum: hook event with suggestion", "plugin \"p\" {}\nhook \"h\" {\n  plugin = \"p\"\n  events = [\"pre-delete\"]\n}",
		`f0.hcl:4:12: Invalid hook event; hook.h.events: "pre-delete" is not a hook event; use pre_delete, post_ready, pre_update. Did you mean "pre_delete"?`},
	{"duplicate hook event", "plugin \"p\" {}\nhook \"h\" {\n  plugin = \"p\"\n  events = [\"post_ready\", \"post_ready\"]\n}",
		`f0.hcl:4:12: Duplicate hook event; hook.h.events: "post_ready" is listed twice.`},

	// Ranges and arithmetic.
	{"negative workers", `workers = -2`,
		`f0.hcl:1:11: Invalid workers; workers: -2 reconcile workers cannot make progress; use 1 or more (default 16).`},
	{"zero workers", `workers = 0`,
		`f0.hcl:1:11: Invalid workers; workers: 0 reconcile workers`},
	{"zero event_buffer_size", "nomad {\n  event_buffer_size = 0\n}",
		`f0.hcl:2:23: Invalid nomad event_buffer_size; nomad.event_buffer_size: 0: set the servers' event_buffer_size (Nomad's default is 100)`},
	{"session_ttl below Consul's minimum", "high_availability {\n  session_ttl = \"5s\"\n  monitor_retries = 0\n}",
		`f0.hcl:2:17: Invalid high_availability session_ttl; high_availability.session_ttl: 5s is out of range: Consul accepts session TTLs from 10s to 24h0m0s.`},
	{"lock timing arithmetic", "high_availability {\n  session_ttl        = \"10s\"\n  monitor_retries    = 5\n  monitor_retry_time = \"2s\"\n}",
		`f0.hcl:3:24: Unsafe leader-election timing; high_availability.monitor_retries: monitor_retries x monitor_retry_time = 5 x 2s = 10s must be less than the lease min(session_ttl 10s, lock_delay 15s - stop timeout 6s) = 9s`},
	// Issue 17: monitor_retries = 5 passed the config's own rule (10s <
	// session_ttl 15s), then the elector refused to start, with no position.
	// There is one rule now, the elector's, reported where it was set.
	{"lock timing uses the elector's lease", "high_availability {\n  monitor_retries = 5\n}",
		`f0.hcl:2:21: Unsafe leader-election timing; high_availability.monitor_retries: monitor_retries x monitor_retry_time = 5 x 2s = 10s must be less than the lease min(session_ttl 15s, lock_delay 15s - stop timeout 6s) = 9s`},
	{"lock timing arithmetic points at what was set", "high_availability {\n  monitor_retries = 8\n}",
		`f0.hcl:2:21: Unsafe leader-election timing; high_availability.monitor_retries: monitor_retries x monitor_retry_time = 8 x 2s = 16s`},
	{"lock timing arithmetic without overflow", "high_availability {\n  monitor_retries = 9000000000000\n}",
		`f0.hcl:2:21: Unsafe leader-election timing; high_availability.monitor_retries: monitor_retries x monitor_retry_time = 9000000000000 x 2s = 1.8e+13s`},
	{"lock_delay too short for the agent's stop timeout", "high_availability {\n  lock_delay = \"5s\"\n}",
		`f0.hcl:2:16: Unsafe leader-election timing; high_availability.lock_delay: lock_delay 5s must exceed the agent's stop timeout 6s by at least 1.5s`},
	{"negative monitor_retries", "high_availability {\n  monitor_retries = -1\n}",
		`f0.hcl:2:21: Invalid high_availability monitor_retries; high_availability.monitor_retries: -1 is negative; use 0 or more.`},
	{"zero monitor_retry_time", "high_availability {\n  monitor_retry_time = \"0s\"\n}",
		`f0.hcl:2:24: Invalid high_availability monitor_retry_time; high_availability.monitor_retry_time: 0s must be positive.`},
	{"HA with embedded store", "state { backend = \"embedded\" }\nhigh_availability {\n  enabled = true\n}",
		`f0.hcl:3:13: Leader election needs the consul state backend; high_availability.enabled: the embedded store belongs to one agent`},
	{"hook timeout not positive", "plugin \"p\" {}\nhook \"h\" {\n  plugin = \"p\"\n  events = [\"pre_delete\"]\n  timeout = \"0s\"\n}",
		`f0.hcl:5:13: Invalid hook timeout; hook.h.timeout: 0s must be positive (default 30s).`},

	// Addresses and paths.
	{"nomad address without scheme", `nomad { address = "127.0.0.1:4646" }`,
		`f0.hcl:1:19: Invalid nomad address; nomad.address: "127.0.0.1:4646" is not a URL with a scheme. Did you mean "http://127.0.0.1:4646"?`},
	{"nomad address with wrong scheme", `nomad { address = "ftp://n:4646" }`,
		`f0.hcl:1:19: Invalid nomad address; nomad.address: "ftp://n:4646": the scheme must be http, https or unix.`},
	{"consul address", `consul { address = "no port here" }`,
		`f0.hcl:1:20: Invalid consul address; consul.address: "no port here" is neither host:port nor a URL.`},
	{"http address", `http { address = "localhost" }`,
		`f0.hcl:1:18: Invalid http address; http.address: "localhost" is not host:port (e.g. "127.0.0.1:4650").`},
	{"http port", `http { address = "127.0.0.1:99999" }`,
		`f0.hcl:1:18: Invalid http address; http.address: port "99999" in "127.0.0.1:99999" is not a number from 0 to 65535.`},
	{"kv_prefix with leading slash", `consul { kv_prefix = "/sts" }`,
		`f0.hcl:1:22: Invalid consul kv_prefix; consul.kv_prefix: "/sts" must not start with '/'.`},
	{"kv_prefix with trailing slash", `consul { kv_prefix = "sts/" }`,
		`f0.hcl:1:22: Invalid consul kv_prefix; consul.kv_prefix: "sts/" must not end with '/'.`},
	{"empty kv_prefix", `consul { kv_prefix = "" }`,
		`f0.hcl:1:22: Invalid consul kv_prefix; consul.kv_prefix: must not be empty.`},
	{"nomad address without host", `nomad { address = "https://" }`,
		`f0.hcl:1:19: Invalid nomad address; nomad.address: "https://" has no host.`},
	{"nomad unix address without path", `nomad { address = "unix://" }`,
		`f0.hcl:1:19: Invalid nomad address; nomad.address: "unix://" has no socket path.`},
	{"embedded store without path", "state {\n  backend = \"embedded\"\n  path = \"\"\n}",
		`f0.hcl:3:10: Invalid state path; state.path: the embedded store needs a file path.`},
	{"derived lock_key points at kv_prefix", `consul { kv_prefix = "a//b" }`,
		`f0.hcl:1:22: Invalid high_availability lock_key; high_availability.lock_key: "a//b/leader" must not contain an empty segment`},
	{"client cert without key", "nomad {\n  client_cert = \"/c.pem\"\n}",
		`f0.hcl:2:17: Incomplete TLS client certificate; nomad.client_cert: is set but nomad.client_key is not; give both or neither.`},
	{"consul key without cert", "consul {\n  key_file = \"/k.pem\"\n}",
		`f0.hcl:2:14: Incomplete TLS client certificate; consul.key_file: is set but consul.cert_file is not; give both or neither.`},
	{"empty data_dir", `data_dir = ""`,
		`f0.hcl:1:12: Invalid data_dir; data_dir: must not be empty.`},

	// Blocks, labels, references.
	{"duplicate block in one file", "nomad {}\nnomad {}",
		`f0.hcl:2:1: Duplicate nomad block; A nomad block was already defined at f0.hcl:1:1.`},
	{"duplicate plugin in one file", "plugin \"p\" {}\nplugin \"p\" {}",
		`f0.hcl:2:1: Duplicate plugin "p" block; A plugin "p" block was already defined at f0.hcl:1:1.`},
	{"missing label", `plugin {}`,
		`f0.hcl:1:8: Missing name for plugin; All plugin blocks must have 1 labels (name).`},
	{"extra label", `nomad "x" {}`,
		`f0.hcl:1:7: Extraneous label for nomad; No labels are expected for nomad blocks.`},
	{"invalid plugin name", `plugin "../evil" {}`,
		`f0.hcl:1:8: Invalid plugin name; "../evil" is not a valid plugin name`},
	{"invalid plugin driver", "plugin \"p\" {\n  driver = \"/usr/bin/env\"\n}",
		`f0.hcl:2:12: Invalid plugin driver; plugin.p.driver: "/usr/bin/env" is not a driver name`},
	{"unknown hook plugin with suggestion", "plugin \"drain\" {}\nhook \"h\" {\n  plugin = \"drian\"\n  events = [\"pre_delete\"]\n}",
		`f0.hcl:3:12: Unknown hook plugin; hook.h.plugin: "drian" is not declared; declare it with a plugin block. Did you mean "drain"?`},
	{"hook without plugin", "hook \"h\" {\n  events = [\"pre_delete\"]\n}",
		`f0.hcl:1:1: Missing hook plugin; hook.h.plugin: name the plugin block`},
	{"hook without events", "plugin \"p\" {}\nhook \"h\" {\n  plugin = \"p\"\n}",
		`f0.hcl:2:1: Missing hook events; hook.h.events: give at least one event: pre_delete, post_ready, pre_update.`},
	{"unknown volume provisioner", "volume_provisioner {\n  plugin = \"nomad-host-volumes\"\n}",
		`f0.hcl:2:12: Unknown volume provisioner plugin; volume_provisioner.plugin: "nomad-host-volumes" is not declared; declare it with a plugin block, or use the built-in "nomad-host-volume". Did you mean "nomad-host-volume"?`},

	// Storage classes: named volume_provisioner blocks.
	{"duplicate class in one file", "volume_provisioner \"fast\" {\n  config = { plugin_id = \"lvm\" }\n}\nvolume_provisioner \"fast\" {}",
		`f0.hcl:4:1: Duplicate volume_provisioner "fast" block; A volume_provisioner "fast" block was already defined at f0.hcl:1:1.`},
	{"class name not an identifier", `volume_provisioner "9fast" {}`,
		`f0.hcl:1:20: Invalid volume_provisioner name; "9fast" cannot name a storage class: a class name is a letter, then letters, digits, '-' and '_', at most 63 in all`},
	{"class name with a dot", `volume_provisioner "fast.ssd" {}`,
		`f0.hcl:1:20: Invalid volume_provisioner name; "fast.ssd" cannot name a storage class`},
	{"class name that is an attribute", `volume_provisioner "config" {}`,
		`f0.hcl:1:20: Invalid volume_provisioner name; "config" cannot name a storage class: a class name is a letter, then letters, digits, '-' and '_', at most 63 in all; plugin and config are volume_provisioner's own attributes.`},
	{"class with two labels", `volume_provisioner "fast" "ssd" {}`,
		`f0.hcl:1:27: Extraneous label for volume_provisioner; A volume_provisioner block has at most one label, its name.`},
	{"class of an unknown plugin", "plugin \"lvm\" {}\nvolume_provisioner \"fast\" {\n  plugin = \"lvn\"\n}",
		`f0.hcl:3:12: Unknown volume provisioner plugin; volume_provisioner.fast.plugin: "lvn" is not declared; declare it with a plugin block, or use the built-in "nomad-host-volume". Did you mean "lvm"?`},
	{"class on mkdir by default", `volume_provisioner "fast" {}`,
		`f0.hcl:1:1: Storage class on the mkdir plugin; volume_provisioner.fast.config: class "fast" would make its volumes with Nomad's mkdir plugin, which refuses parameters it does not know`},
	{"class on mkdir by name", "volume_provisioner \"fast\" {\n  config = { plugin_id = \"mkdir\" }\n}",
		`f0.hcl:2:12: Storage class on the mkdir plugin; volume_provisioner.fast.config: class "fast"`},

	// Syntax.
	{"syntax error", "nomad {\n  address = \n}",
		`f0.hcl:2:13: Invalid expression; Expected the start of an expression`},
	{"unclosed block", "nomad {\n  address = \"x\"\n",
		`f0.hcl:1:7: Unclosed configuration block`},
	{"attribute redefined", "workers = 1\nworkers = 2",
		`f0.hcl:2:1: Attribute redefined; The argument "workers" was already set at f0.hcl:1,1-8.`},
}

// TestLoad_ErrorPositions: every kind of mistake is reported with its file,
// line and column, a summary and a detail.
func TestLoad_ErrorPositions(t *testing.T) {
	for _, tc := range errCases {
		t.Run(tc.name, func(t *testing.T) {
			ce, diags := loadErr(t, noEnv, tc.text)
			if !strings.Contains(ce.Error(), tc.want) {
				t.Errorf("error:\n%v\nwant it to contain:\n%s", ce, tc.want)
			}
			for _, d := range diags {
				if d.Subject == nil || d.Subject.Filename != "f0.hcl" || d.Subject.Start.Line < 1 || d.Subject.Start.Column < 1 {
					t.Errorf("diagnostic without a position: %s; %s", d.Summary, d.Detail)
				}
			}
		})
	}
}

// TestLoad_AllProblemsAtOnce: several mistakes of different kinds, in two
// files, come back in one error, in file and line order.
func TestLoad_AllProblemsAtOnce(t *testing.T) {
	first := `log_level = "loud"
workers   = "many"
nomad {
  adress = "x"
}
high_availability {
  session_ttl     = "1 minute"
  monitor_retries = 20
}
plugin "p" {}
hook "h" {
  plugin         = "q"
  events         = ["pre_delete"]
  failure_policy = "maybe"
}
`
	second := `resync_interval = 10
telemetryy {}
`
	_, diags := loadErr(t, noEnv, first, second)
	want := []string{
		"f0.hcl:1:13: Invalid log_level",
		"f0.hcl:2:13: Incorrect attribute value type",
		"f0.hcl:4:3: Unsupported argument",
		"f0.hcl:7:21: Invalid duration",
		// session_ttl failed to decode and kept its 15s default; the
		// arithmetic is then checked against that and points at retries.
		"f0.hcl:8:21: Unsafe leader-election timing",
		"f0.hcl:12:20: Unknown hook plugin",
		"f0.hcl:14:20: Invalid hook failure_policy",
		"f1.hcl:1:19: Invalid duration",
		"f1.hcl:2:1: Unsupported block type",
	}
	var got []string
	for _, d := range diags {
		got = append(got, rangeString(*d.Subject)+": "+d.Summary)
	}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("diagnostics:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}

// TestLoad_SyntaxErrorDoesNotHideOtherFiles: a file that does not parse is
// reported, and the other files are still decoded and checked.
func TestLoad_SyntaxErrorDoesNotHideOtherFiles(t *testing.T) {
	_, diags := loadErr(t, noEnv, "nomad {", `workers = -1`)
	if len(diags) != 2 || diags[0].Subject.Filename != "f0.hcl" || diags[1].Subject.Filename != "f1.hcl" {
		t.Errorf("want one error per file, got: %v", diags)
	}
}

func TestLoad_JSONErrorPositions(t *testing.T) {
	_, err := load(noEnv, []source{{name: "a.json", src: []byte("{\n  \"workers\": \"x\",\n  \"nomd\": {}\n}")}}, nil)
	if err == nil {
		t.Fatal("no error")
	}
	for _, want := range []string{`a.json:2:14: Incorrect attribute value type`, `a.json:3:3: Extraneous JSON object property; No argument or block type is named "nomd". Did you mean "nomad"?`} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error:\n%v\nwant it to contain %q", err, want)
		}
	}
}

func TestLoad_MissingPath(t *testing.T) {
	clearEnv(t)
	missing := filepath.Join(t.TempDir(), "nope.hcl")
	_, err := Load(missing)
	if err == nil || !strings.Contains(err.Error(), "Cannot read configuration") || !strings.Contains(err.Error(), missing) {
		t.Errorf("missing file: %v", err)
	}
}

// TestLoad_FileErrorsNameTheRealPath: errors from files on disk carry the
// path as given, line and column.
func TestLoad_FileErrorsNameTheRealPath(t *testing.T) {
	clearEnv(t)
	dir := t.TempDir()
	writeFiles(t, dir, map[string]string{"a.hcl": "workers = 1\n", "b.hcl": "\n\nlog_level = \"nope\"\n"})
	_, err := Load(dir)
	want := filepath.Join(dir, "b.hcl") + ":3:13: Invalid log_level"
	if err == nil || !strings.Contains(err.Error(), want) {
		t.Errorf("error %v, want it to contain %q", err, want)
	}
}

func TestError_WriteDiagnostics(t *testing.T) {
	clearEnv(t)
	dir := t.TempDir()
	p := filepath.Join(dir, "agent.hcl")
	if err := os.WriteFile(p, []byte("nomad {\n  adress = \"x\"\n}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	_, err := Load(p)
	var ce *Error
	if !errors.As(err, &ce) {
		t.Fatalf("error %T", err)
	}
	var buf bytes.Buffer
	if werr := ce.WriteDiagnostics(&buf, 78, false); werr != nil {
		t.Fatal(werr)
	}
	out := buf.String()
	// The snippet shows the offending source line under its position.
	for _, want := range []string{"Error: Unsupported argument", "agent.hcl line 2", `adress = "x"`, `Did you mean "address"?`} {
		if !strings.Contains(out, want) {
			t.Errorf("WriteDiagnostics output lacks %q:\n%s", want, out)
		}
	}
}

// TestValidate_GoBuiltConfig: a Config built in Go has no positions, so the
// messages name the attribute paths; every problem still comes at once.
func TestValidate_GoBuiltConfig(t *testing.T) {
	c := Default()
	c.Workers = -1
	c.LogLevel = "loud"
	c.HighAvailability.MonitorRetries = 100
	c.Hooks = append(c.Hooks, &HookConfig{Name: "h", Plugin: "nope", Events: []plugin.Event{"x"}, Timeout: 0, FailurePolicy: "y"},
		&HookConfig{Name: "h"}, &HookConfig{Name: "no/slash"})
	c.Plugins = append(c.Plugins, &PluginConfig{Name: "dup", Driver: "a/b"}, &PluginConfig{Name: "dup", Driver: "d"},
		&PluginConfig{Name: "../evil", Driver: "d"})
	err := c.Validate()
	var diags hcl.Diagnostics
	if !errors.As(err, &diags) {
		t.Fatalf("Validate() = %v, want diagnostics", err)
	}
	want := []string{
		"log_level: ", "workers: ", "high_availability.monitor_retries: ", "plugin.dup.driver: ",
		`plugin.dup: plugin "dup" is declared twice.`, `plugin.../evil: "../evil": use letters`,
		"hook.h.plugin: ", "hook.h.events: ", "hook.h.timeout: ", "hook.h.failure_policy: ",
		`hook.h: hook "h" is declared twice.`, `hook.no/slash: "no/slash": use letters`,
	}
	if len(diags) != len(want) {
		t.Fatalf("got %d diagnostics, want %d:\n%v", len(diags), len(want), err)
	}
	for i, w := range want {
		if !strings.HasPrefix(diags[i].Detail, w) || diags[i].Subject != nil {
			t.Errorf("diagnostic %d: %q (subject %v), want detail starting %q and no subject", i, diags[i].Detail, diags[i].Subject, w)
		}
	}
	if Default().Validate() != nil {
		t.Errorf("defaults do not validate")
	}
}
