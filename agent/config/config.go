// Package config loads the nomad-statefulset agent configuration from HCL.
//
// A configuration is built in three layers, each overriding the one before it
// attribute by attribute:
//
//  1. Default(): sane values, so that an empty file works;
//  2. the Nomad and Consul environment variables (NOMAD_ADDR, CONSUL_HTTP_TOKEN, …);
//  3. the files, in the order given to Load; a directory stands for all of its
//     *.hcl files, sorted by name.
//
// So a file beats the environment, and the environment beats the default: the
// environment acts as the default under the file, as it does for the Nomad and
// Consul CLIs' own config files. A file that wants the environment to win
// writes `token = env("NOMAD_TOKEN")`.
//
// Files are decoded one after the other into the same tree. An attribute that
// a file does not mention keeps the value of the layer below, and one that it
// does mention replaces it, whatever its value: a bool set to true in one file
// can be set to false by a later one. There is no hand-written merge code to
// get wrong. An attribute set to null counts as not mentioned.
//
// Every problem is reported at once, as hcl.Diagnostics carrying the file,
// line and column (see Error), semantic ones included.
package config

import (
	"path/filepath"
	"time"

	"github.com/hashicorp/hcl/v2"

	"github.com/nomad-statefulset/nomad-statefulset/backend/consul"
	"github.com/nomad-statefulset/nomad-statefulset/plugin"
)

// Defaults. They are named so that the docs, the example config and the tests
// can refer to them.
const (
	// DefaultLogLevel is the hclog level used unless log_level says otherwise.
	DefaultLogLevel = "info"
	// DefaultDataDir holds the embedded store and, by default, plugin_dir.
	DefaultDataDir = "/var/lib/nomad-statefulset"
	// DefaultWorkers is the number of reconcile workers. Sets are
	// independent, and a worker spends a pass mostly waiting on Nomad's and
	// Consul's Raft writes, not on the CPU: with hundreds of sets changing
	// at once, 4 workers left pods queued for seconds that 16 do not
	// (BENCHMARKS.md, "1,000 children against Nomad alone", and its
	// history). It still bounds how many sets write to Nomad at once.
	DefaultWorkers = 16
	// DefaultEventBufferSize is Nomad's default event_buffer_size.
	DefaultEventBufferSize = 100
	// DefaultResyncInterval is the period of the safety re-list. The event
	// stream does the real work; this only repairs what a missed event left.
	DefaultResyncInterval = 5 * time.Minute
	// MinResyncInterval is the shortest resync_interval accepted. A shorter
	// one is polling in disguise, which the design forbids.
	MinResyncInterval = time.Second

	// DefaultNomadAddress is Nomad's own default HTTP address.
	DefaultNomadAddress = "http://127.0.0.1:4646"
	// DefaultConsulAddress is Consul's own default HTTP address.
	DefaultConsulAddress = "127.0.0.1:8500"
	// DefaultKVPrefix is the Consul KV prefix under which all state lives.
	DefaultKVPrefix = "nomad-statefulset"
	// DefaultHTTPAddress is where the agent's HTTP API listens. It matches
	// client.DefaultAddress, so the CLI finds a local agent with no flags.
	// 4650 sits next to Nomad's 4646–4648 and is loopback-only by default.
	DefaultHTTPAddress = "127.0.0.1:4650"

	// Leader-election timing: Consul's defaults and bounds, from the
	// elector, whose doc (consul.DefaultSessionTTL) gives the safety rule
	// that Validate enforces through consul.ElectorConfig.CheckTiming.

	// DefaultSessionTTL is the Consul session TTL of the leader lock.
	DefaultSessionTTL = consul.DefaultSessionTTL
	// DefaultLockDelay is the Consul lock-delay of the leader lock.
	DefaultLockDelay = consul.DefaultLockDelay
	// DefaultMonitorRetries is how many failed lock-monitor queries the
	// leader tolerates before it steps down.
	DefaultMonitorRetries = consul.DefaultMonitorRetries
	// DefaultMonitorRetryTime is the pause between lock-monitor retries.
	DefaultMonitorRetryTime = consul.DefaultMonitorRetryTime
	// MinSessionTTL and MaxSessionTTL are the bounds Consul itself puts on a
	// session TTL; checking them here gives a positioned error instead of a
	// runtime failure at the first election.
	MinSessionTTL = consul.MinSessionTTL
	// MaxSessionTTL: see MinSessionTTL.
	MaxSessionTTL = consul.MaxSessionTTL
	// MaxLockDelay is the largest lock-delay Consul honours.
	MaxLockDelay = consul.MaxLockDelay
	// LeaderStopTimeout is the longest the agent takes to stop acting once
	// it loses leadership: the one Nomad or store call in flight (5s at
	// most) plus slack. The timing rule is checked against it.
	LeaderStopTimeout = 6 * time.Second

	// DefaultHookTimeout bounds one lifecycle-hook call.
	DefaultHookTimeout = plugin.DefaultHookTimeout

	// BuiltinHostVolume is the built-in volume provisioner: Nomad dynamic host
	// volumes. It is always declared, as if the config said
	// `plugin "nomad-host-volume" {}`, and is the default provisioner.
	BuiltinHostVolume = "nomad-host-volume"
	// DefaultHostVolumePluginID is the dynamic host volume plugin that the
	// default provisioner config asks Nomad for; "mkdir" ships with Nomad.
	DefaultHostVolumePluginID = "mkdir"
)

// StateBackend names where revisions and status are stored.
type StateBackend string

// The state backends.
const (
	// StateConsul keeps state in Consul KV under consul.kv_prefix. Needed
	// for high availability: every agent must see the same history.
	StateConsul StateBackend = "consul"
	// StateEmbedded keeps state in a local bbolt-style file at state.path:
	// for -dev and single-instance runs without Consul.
	StateEmbedded StateBackend = "embedded"
)

// Config is the whole agent configuration. The hcl tags give the attribute
// and block names; the decoder in this package reads them (gohcl's own
// decoder cannot merge files or parse durations with positions).
//
// Blocks are values, not pointers, so a Config is never half-built: every
// block exists, holding defaults if no file mentioned it.
type Config struct {
	// LogLevel is the hclog level: trace, debug, info, warn, error or off.
	LogLevel string `hcl:"log_level"`
	// LogJSON switches the log to JSON lines.
	LogJSON bool `hcl:"log_json"`
	// DataDir is the agent's local directory. state.path and plugin_dir
	// default to places under it.
	DataDir string `hcl:"data_dir"`
	// Workers is the number of reconcile workers.
	Workers int `hcl:"workers"`
	// ResyncInterval is the period of the full safety re-list.
	ResyncInterval time.Duration `hcl:"resync_interval"`
	// PluginDir holds external plugin binaries. Default <data_dir>/plugins.
	PluginDir string `hcl:"plugin_dir"`

	// Nomad configures the Nomad API client.
	Nomad NomadConfig `hcl:"nomad,block"`
	// Consul configures the Consul API client and the KV prefix.
	Consul ConsulConfig `hcl:"consul,block"`
	// HighAvailability configures leader election.
	HighAvailability HighAvailabilityConfig `hcl:"high_availability,block"`
	// HTTP configures the agent's HTTP API.
	HTTP HTTPConfig `hcl:"http,block"`
	// Telemetry configures metrics.
	Telemetry TelemetryConfig `hcl:"telemetry,block"`
	// State chooses and configures the state store.
	State StateConfig `hcl:"state,block"`
	// VolumeProvisioner is the unnamed volume_provisioner block: the plugin
	// that makes per-ordinal volumes, and the default storage class.
	VolumeProvisioner VolumeProvisionerConfig `hcl:"volume_provisioner,block"`
	// VolumeClasses are the named `volume_provisioner "<class>" {}` blocks,
	// in order of first declaration: the storage classes a claim may name
	// with statefulset_claim_<claim>_class (DESIGN §3b).
	VolumeClasses []*VolumeProvisionerConfig `hcl:"volume_provisioner,labeled"`
	// Plugins are the declared plugin instances, in order of first
	// declaration. The built-in nomad-host-volume is always among them.
	Plugins []*PluginConfig `hcl:"plugin,block"`
	// Hooks are the lifecycle hooks, in order of first declaration.
	Hooks []*HookConfig `hcl:"hook,block"`

	// Dev is set by ApplyDev. It is not an HCL attribute: -dev is a flag.
	Dev bool

	// origins maps an attribute path ("nomad.address", "plugin.x.driver")
	// to where its value came from, so that Validate can point at it. Only
	// Load fills it; a Config built in Go validates without positions.
	origins map[string]origin
}

// NomadConfig is the `nomad {}` block. Every field defaults to the matching
// NOMAD_* environment variable, then to Nomad's own default.
type NomadConfig struct {
	// Address is the Nomad HTTP API address, with scheme (NOMAD_ADDR).
	Address string `hcl:"address"`
	// Token is the ACL token (NOMAD_TOKEN).
	Token Secret `hcl:"token"`
	// Region is the region to talk to; empty means the agent's (NOMAD_REGION).
	Region string `hcl:"region"`
	// Namespace is the client's default namespace (NOMAD_NAMESPACE).
	Namespace string `hcl:"namespace"`
	// CACert is a PEM CA file that verifies the server (NOMAD_CACERT).
	CACert string `hcl:"ca_cert"`
	// CAPath is a directory of PEM CA files (NOMAD_CAPATH).
	CAPath string `hcl:"ca_path"`
	// ClientCert is the client certificate for mTLS (NOMAD_CLIENT_CERT).
	ClientCert string `hcl:"client_cert"`
	// ClientKey is the client certificate's key (NOMAD_CLIENT_KEY).
	ClientKey string `hcl:"client_key"`
	// TLSServerName is the SNI name and the name the server certificate
	// must carry (NOMAD_TLS_SERVER_NAME), e.g. "server.global.nomad".
	TLSServerName string `hcl:"tls_server_name"`
	// SkipVerify disables server certificate checks (NOMAD_SKIP_VERIFY).
	SkipVerify bool `hcl:"skip_verify"`
	// EventBufferSize is the servers' event_buffer_size. The daemon's
	// writes wait while its event stream trails them, those in flight
	// counted, by a quarter of it, so that Nomad does not drop the
	// stream in a burst.
	EventBufferSize int `hcl:"event_buffer_size"`
}

// ConsulConfig is the `consul {}` block. Every field but KVPrefix defaults
// to the matching CONSUL_* environment variable, then to Consul's default.
type ConsulConfig struct {
	// Address is host:port, or a URL with http, https or unix scheme
	// (CONSUL_HTTP_ADDR). An https:// address turns TLS on by itself.
	Address string `hcl:"address"`
	// Token is the ACL token (CONSUL_HTTP_TOKEN).
	Token Secret `hcl:"token"`
	// TokenFile is a file holding the ACL token (CONSUL_HTTP_TOKEN_FILE).
	TokenFile string `hcl:"token_file"`
	// Datacenter is the datacenter to use; empty means the agent's.
	Datacenter string `hcl:"datacenter"`
	// SSL selects the https scheme (CONSUL_HTTP_SSL).
	SSL bool `hcl:"ssl"`
	// CAFile is a PEM CA file that verifies the server (CONSUL_CACERT).
	CAFile string `hcl:"ca_file"`
	// CAPath is a directory of PEM CA files (CONSUL_CAPATH).
	CAPath string `hcl:"ca_path"`
	// CertFile is the client certificate for mTLS (CONSUL_CLIENT_CERT).
	CertFile string `hcl:"cert_file"`
	// KeyFile is the client certificate's key (CONSUL_CLIENT_KEY).
	KeyFile string `hcl:"key_file"`
	// TLSServerName is the SNI name (CONSUL_TLS_SERVER_NAME).
	TLSServerName string `hcl:"tls_server_name"`
	// InsecureSkipVerify disables server certificate checks
	// (CONSUL_HTTP_SSL_VERIFY=false).
	InsecureSkipVerify bool `hcl:"insecure_skip_verify"`
	// KVPrefix is the KV prefix under which revisions, status and the
	// leader key live. No leading or trailing slash.
	KVPrefix string `hcl:"kv_prefix"`
}

// HighAvailabilityConfig is the `high_availability {}` block: leader
// election through a Consul lock. See the timing constants above.
type HighAvailabilityConfig struct {
	// Enabled turns leader election on. It defaults to true when
	// state.backend is "consul" and false when it is "embedded": agents
	// sharing Consul must never act at once, and an embedded store belongs to
	// one agent anyway.
	Enabled bool `hcl:"enabled"`
	// LockKey is the Consul KV key of the lock. Default <kv_prefix>/leader.
	LockKey string `hcl:"lock_key"`
	// SessionTTL is the TTL of the leader's Consul session (10s–24h).
	SessionTTL time.Duration `hcl:"session_ttl"`
	// LockDelay is Consul's lock-delay after the session is lost (0–60s).
	LockDelay time.Duration `hcl:"lock_delay"`
	// MonitorRetries is how many failed lock-monitor queries are tolerated.
	MonitorRetries int `hcl:"monitor_retries"`
	// MonitorRetryTime is the pause between lock-monitor retries.
	MonitorRetryTime time.Duration `hcl:"monitor_retry_time"`
}

// HTTPConfig is the `http {}` block: the agent's own API.
type HTTPConfig struct {
	// Address is the host:port to listen on (default loopback only).
	Address string `hcl:"address"`
	// EnableDebug registers the /debug/pprof endpoints.
	EnableDebug bool `hcl:"enable_debug"`
	// TLS serves the API over TLS, with the names of Nomad's own `tls {}`
	// block.
	TLS HTTPTLSConfig `hcl:"tls,block"`
}

// HTTPTLSConfig is the `http { tls {} }` block. TLS is on when cert_file
// is set; the listener then speaks nothing but TLS.
type HTTPTLSConfig struct {
	// CertFile is the PEM certificate the API presents.
	CertFile string `hcl:"cert_file"`
	// KeyFile is the PEM private key of CertFile.
	KeyFile string `hcl:"key_file"`
	// CAFile is a PEM CA bundle that client certificates are verified
	// against: always when VerifyHTTPSClient is set, and otherwise only
	// when a client presents one.
	CAFile string `hcl:"ca_file"`
	// VerifyHTTPSClient requires every client to present a certificate
	// signed by CAFile (Nomad's verify_https_client).
	VerifyHTTPSClient bool `hcl:"verify_https_client"`
}

// Enabled reports whether the API is served over TLS.
func (t HTTPTLSConfig) Enabled() bool { return t.CertFile != "" }

// TelemetryConfig is the `telemetry {}` block.
type TelemetryConfig struct {
	// PrometheusMetrics serves /v1/metrics in Prometheus format. (No
	// disable_hostname: no metric carries the host name.)
	PrometheusMetrics bool `hcl:"prometheus_metrics"`
	// PrometheusAnonymous serves /v1/metrics without a Nomad token when
	// Nomad's ACLs are on (Nomad's own telemetry setting of that name);
	// by default a scrape then needs a token Nomad knows.
	PrometheusAnonymous bool `hcl:"prometheus_anonymous"`
}

// StateConfig is the `state {}` block.
type StateConfig struct {
	// Backend is "consul" (default) or "embedded". -dev forces "embedded".
	Backend StateBackend `hcl:"backend"`
	// Path is the embedded store's file. Default <data_dir>/state.db.
	Path string `hcl:"path"`
}

// VolumeProvisionerConfig is a `volume_provisioner {}` block: which plugin
// creates the per-ordinal volumes, and with what settings. The unnamed
// block is the default storage class; each `volume_provisioner "<class>"
// {}` block is a class of its own, with its own plugin and settings, and
// takes nothing from the unnamed one.
type VolumeProvisionerConfig struct {
	// Name is the class, the block's label; "" for the unnamed block.
	Name string `hcl:"name,label"`
	// Plugin names a `plugin` block (the built-in nomad-host-volume is
	// always declared, and is the default).
	Plugin string `hcl:"plugin"`
	// Config is passed with every call for a volume of the class: the
	// claim settings, e.g. plugin_id, capacity_min, capacity_max for
	// nomad-host-volume. A file that sets config replaces the whole map,
	// so the unnamed block's default plugin_id goes too unless it is
	// repeated. A named class on nomad-host-volume must name a plugin_id
	// other than mkdir, which cannot record the class (see
	// plugin/builtin/hostvolume).
	Config map[string]string `hcl:"config"`
	// DeclRange is where a named block was first declared.
	DeclRange hcl.Range
}

// PluginConfig is one `plugin "<name>" {}` block: a plugin instance.
// Several instances may share a driver with different configs.
type PluginConfig struct {
	// Name is the block label, by which volume_provisioner and hooks refer
	// to the instance.
	Name string `hcl:"name,label"`
	// Driver is the implementation: a built-in name, or the name of an
	// executable in plugin_dir (which wins over a built-in of the same name).
	// It defaults to Name. No path separators.
	Driver string `hcl:"driver"`
	// Args are the command-line arguments of an external plugin binary.
	Args []string `hcl:"args"`
	// Config is handed to the plugin's SetConfig at launch and on reload.
	// Values are strings; numbers and bools are converted, nested values are
	// an error. Config.String redacts values whose key looks secret.
	Config map[string]string `hcl:"config"`
	// DeclRange is where the block was first declared, for the plugin
	// manager's own errors (missing binary, wrong type). Zero for built-ins.
	DeclRange hcl.Range
}

// HookConfig is one `hook "<name>" {}` block: a lifecycle hook.
type HookConfig struct {
	// Name is the block label, used in logs and conditions.
	Name string `hcl:"name,label"`
	// Plugin names the `plugin` block that implements the hook.
	Plugin string `hcl:"plugin"`
	// Events are the points at which the hook runs; at least one.
	Events []plugin.Event `hcl:"events"`
	// Timeout bounds one call. Default 30s.
	Timeout time.Duration `hcl:"timeout"`
	// FailurePolicy is "block" (default) or "ignore".
	FailurePolicy plugin.FailurePolicy `hcl:"failure_policy"`
	// DeclRange is where the block was first declared.
	DeclRange hcl.Range
}

// Default returns the default configuration. Each call returns a fresh tree
// that shares no map or slice with any other, so callers may change it freely
// (the nomad-autoscaler once mutated a package-level default map through a
// merge; this cannot).
func Default() *Config {
	c := &Config{
		LogLevel:       DefaultLogLevel,
		DataDir:        DefaultDataDir,
		Workers:        DefaultWorkers,
		ResyncInterval: DefaultResyncInterval,
		Nomad: NomadConfig{
			Address:         DefaultNomadAddress,
			EventBufferSize: DefaultEventBufferSize,
		},
		Consul: ConsulConfig{
			Address:  DefaultConsulAddress,
			KVPrefix: DefaultKVPrefix,
		},
		HighAvailability: HighAvailabilityConfig{
			SessionTTL:       DefaultSessionTTL,
			LockDelay:        DefaultLockDelay,
			MonitorRetries:   DefaultMonitorRetries,
			MonitorRetryTime: DefaultMonitorRetryTime,
		},
		HTTP: HTTPConfig{
			Address: DefaultHTTPAddress,
		},
		Telemetry: TelemetryConfig{
			PrometheusMetrics: true,
		},
		State: StateConfig{
			Backend: StateConsul,
		},
		VolumeProvisioner: VolumeProvisionerConfig{
			Plugin: BuiltinHostVolume,
			Config: map[string]string{"plugin_id": DefaultHostVolumePluginID},
		},
		VolumeClasses: []*VolumeProvisionerConfig{},
		Plugins:       []*PluginConfig{newPlugin(BuiltinHostVolume)},
		Hooks:         []*HookConfig{},
	}
	c.derive()
	return c
}

// newPlugin returns a plugin block with its defaults: the driver is the
// label, and the collections are empty rather than nil so that rendering and
// comparison need no special cases.
func newPlugin(name string) *PluginConfig {
	return &PluginConfig{Name: name, Driver: name, Args: []string{}, Config: map[string]string{}}
}

// newVolumeClass returns a named volume_provisioner block with its
// defaults: the built-in provisioner and no config.
func newVolumeClass(name string) *VolumeProvisionerConfig {
	return &VolumeProvisionerConfig{Name: name, Plugin: BuiltinHostVolume, Config: map[string]string{}}
}

// VolumeClass returns the volume_provisioner block of a storage class (""
// the unnamed one), or nil when no block has that name.
func (c *Config) VolumeClass(name string) *VolumeProvisionerConfig {
	if name == "" {
		return &c.VolumeProvisioner
	}
	for _, v := range c.VolumeClasses {
		if v.Name == name {
			return v
		}
	}
	return nil
}

// newHook returns a hook block with its defaults.
func newHook(name string) *HookConfig {
	return &HookConfig{Name: name, Events: []plugin.Event{}, Timeout: DefaultHookTimeout, FailurePolicy: plugin.FailureBlock}
}

// derive fills the defaults that depend on other settings, unless a file or
// the environment set them explicitly. It runs after all layers are applied,
// so `data_dir` in a later file still moves the default state.path.
func (c *Config) derive() {
	if !c.isSet("state.path") {
		c.State.Path = filepath.Join(c.DataDir, "state.db")
	}
	if !c.isSet("plugin_dir") {
		c.PluginDir = filepath.Join(c.DataDir, "plugins")
	}
	if !c.isSet("high_availability.lock_key") {
		c.HighAvailability.LockKey = c.Consul.KVPrefix + "/leader"
	}
	if !c.isSet("high_availability.enabled") {
		c.HighAvailability.Enabled = c.State.Backend == StateConsul
	}
	// The built-in provisioner is always declared, so references to it
	// resolve like any other and the plugin manager sees one uniform list.
	if c.Plugin(BuiltinHostVolume) == nil {
		c.Plugins = append([]*PluginConfig{newPlugin(BuiltinHostVolume)}, c.Plugins...)
	}
}

// ApplyDev turns the configuration into -dev mode: no Consul, the embedded
// store, no leader election. It wins over the files, because -dev is an
// explicit request on the command line. Unless data_dir was set, the data
// goes to a fixed directory under the system temp dir, so that history
// survives an agent restart but not a reboot.
func (c *Config) ApplyDev() {
	c.Dev = true
	c.State.Backend = StateEmbedded
	if !c.isSet("data_dir") {
		c.DataDir = filepath.Join(tempDir(), "nomad-statefulset-dev")
	}
	c.derive()
	c.HighAvailability.Enabled = false
}

// ConsulAddressSet reports whether a file or CONSUL_HTTP_ADDR named a
// Consul address: an agent keeping its state elsewhere still has a Consul
// to read health checks from then.
func (c *Config) ConsulAddressSet() bool { return c.isSet("consul.address") }

// Plugin returns the plugin block with the given name, or nil.
func (c *Config) Plugin(name string) *PluginConfig {
	for _, p := range c.Plugins {
		if p.Name == name {
			return p
		}
	}
	return nil
}

// isSet reports whether a file or the environment set the attribute at path.
func (c *Config) isSet(path string) bool {
	_, ok := c.origins[path]
	return ok
}
