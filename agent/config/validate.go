package config

import (
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"net"
	"net/url"
	"os"
	"strconv"
	"strings"

	"github.com/hashicorp/hcl/v2"

	"github.com/nomad-statefulset/nomad-statefulset/backend/consul"
	"github.com/nomad-statefulset/nomad-statefulset/plugin"
)

// logLevels are the hclog levels, in the order the docs list them.
var logLevels = []string{"trace", "debug", "info", "warn", "error", "off"}

// Validate checks the configuration's meaning: enums, ranges, references
// between blocks and the leader-election timing. It reports every problem
// at once in an *Error. For a Config from Load, each problem carries the
// file, line and column of the value at fault (Load already validated it);
// for one built in Go, the attribute path is named instead.
func (c *Config) Validate() error {
	if diags := c.validate(); diags.HasErrors() {
		return &Error{Diagnostics: diags}
	}
	return nil
}

// validator collects diagnostics for one Config.
type validator struct {
	c     *Config
	diags hcl.Diagnostics
}

// fail records a problem. The subject is the position of the first path
// that has one, so a rule over several attributes points at whichever the
// user actually wrote. The detail always starts with the attribute path, so a
// problem with no position (a Go-built Config, a value from a derived
// default) still says what is wrong.
func (v *validator) fail(summary, detail string, paths ...string) {
	d := &hcl.Diagnostic{
		Severity: hcl.DiagError,
		Summary:  summary,
		Detail:   paths[0] + ": " + detail,
	}
	for _, p := range paths {
		o, ok := v.c.origins[p]
		if !ok {
			continue
		}
		if o.rng != nil {
			d.Subject = o.rng.Ptr()
		} else if o.env != "" {
			d.Detail += fmt.Sprintf(" (The value comes from the environment variable %s.)", o.env)
		}
		break
	}
	v.diags = append(v.diags, d)
}

func (c *Config) validate() hcl.Diagnostics {
	v := &validator{c: c}

	if !contains(logLevels, strings.ToLower(c.LogLevel)) {
		v.fail("Invalid log_level", fmt.Sprintf("%q is not a log level; use one of %s.%s",
			c.LogLevel, strings.Join(logLevels, ", "), suggest(strings.ToLower(c.LogLevel), logLevels)), "log_level")
	}
	if c.DataDir == "" {
		v.fail("Invalid data_dir", "must not be empty.", "data_dir")
	}
	if c.Workers < 1 {
		v.fail("Invalid workers", fmt.Sprintf("%d reconcile workers cannot make progress; use 1 or more (default %d).", c.Workers, DefaultWorkers), "workers")
	}
	if c.ResyncInterval < MinResyncInterval {
		v.fail("Invalid resync_interval", fmt.Sprintf("%s is too short: the resync is a safety net under the event stream, and a shorter period is polling. Use at least %s (default %s).",
			c.ResyncInterval, MinResyncInterval, DefaultResyncInterval), "resync_interval")
	}
	if c.PluginDir == "" {
		v.fail("Invalid plugin_dir", "must not be empty.", "plugin_dir", "data_dir")
	}

	v.validateNomad()
	v.validateConsul()
	v.validateHA()
	v.validateHTTP()
	v.validateState()
	v.validatePlugins()
	return v.diags
}

func (v *validator) validateNomad() {
	n := &v.c.Nomad
	if msg := checkURL(n.Address, false); msg != "" {
		v.fail("Invalid nomad address", msg, "nomad.address")
	}
	v.pair(n.ClientCert, n.ClientKey, "nomad.client_cert", "nomad.client_key")
	if n.EventBufferSize < 2 {
		v.fail("Invalid nomad event_buffer_size", fmt.Sprintf("%d: set the servers' event_buffer_size (Nomad's default is %d); the daemon's writes wait while its event stream trails them by a quarter of it.",
			n.EventBufferSize, DefaultEventBufferSize), "nomad.event_buffer_size")
	}
}

func (v *validator) validateConsul() {
	cc := &v.c.Consul
	if msg := checkURL(cc.Address, true); msg != "" {
		v.fail("Invalid consul address", msg, "consul.address")
	}
	v.pair(cc.CertFile, cc.KeyFile, "consul.cert_file", "consul.key_file")
	if cc.Token != "" && cc.TokenFile != "" {
		v.fail("Conflicting consul token settings", "set only one of token and token_file.", "consul.token_file", "consul.token")
	}
	if msg := checkKVPath(cc.KVPrefix); msg != "" {
		v.fail("Invalid consul kv_prefix", msg, "consul.kv_prefix")
	}
}

// pair checks that a client certificate and its key come together: one
// without the other fails only at the first TLS handshake, far from here.
func (v *validator) pair(cert, key, certPath, keyPath string) {
	switch {
	case cert != "" && key == "":
		v.fail("Incomplete TLS client certificate", fmt.Sprintf("is set but %s is not; give both or neither.", keyPath), certPath)
	case cert == "" && key != "":
		v.fail("Incomplete TLS client certificate", fmt.Sprintf("is set but %s is not; give both or neither.", certPath), keyPath)
	}
}

func (v *validator) validateHA() {
	ha := &v.c.HighAvailability
	if msg := checkKVPath(ha.LockKey); msg != "" {
		v.fail("Invalid high_availability lock_key", msg, "high_availability.lock_key", "consul.kv_prefix")
	}
	ttlOK := true
	if ha.SessionTTL < MinSessionTTL || ha.SessionTTL > MaxSessionTTL {
		ttlOK = false
		v.fail("Invalid high_availability session_ttl", fmt.Sprintf("%s is out of range: Consul accepts session TTLs from %s to %s.",
			ha.SessionTTL, MinSessionTTL, MaxSessionTTL), "high_availability.session_ttl")
	}
	if ha.LockDelay < 0 || ha.LockDelay > MaxLockDelay {
		v.fail("Invalid high_availability lock_delay", fmt.Sprintf("%s is out of range: Consul accepts a lock-delay from 0s to %s.",
			ha.LockDelay, MaxLockDelay), "high_availability.lock_delay")
	}
	retriesOK := true
	if ha.MonitorRetries < 0 {
		retriesOK = false
		v.fail("Invalid high_availability monitor_retries", fmt.Sprintf("%d is negative; use 0 or more.", ha.MonitorRetries), "high_availability.monitor_retries")
	}
	if ha.MonitorRetryTime <= 0 {
		retriesOK = false
		v.fail("Invalid high_availability monitor_retry_time", fmt.Sprintf("%s must be positive.", ha.MonitorRetryTime), "high_availability.monitor_retry_time")
	}
	// The elector's timing rule, checked here so that a violation names the
	// file and line instead of failing at start-up.
	if ttlOK && retriesOK {
		ecfg := consul.ElectorConfig{SessionTTL: ha.SessionTTL, LockDelay: ha.LockDelay,
			MonitorRetries: ha.MonitorRetries, MonitorRetryTime: ha.MonitorRetryTime, StopTimeout: LeaderStopTimeout}
		if err := ecfg.CheckTiming(); err != nil {
			paths := []string{"high_availability.monitor_retries", "high_availability.monitor_retry_time", "high_availability.session_ttl", "high_availability.lock_delay"}
			if strings.HasPrefix(err.Error(), "lock_delay") {
				paths = []string{"high_availability.lock_delay", "high_availability.session_ttl"}
			}
			v.fail("Unsafe leader-election timing", err.Error()+".", paths...)
		}
	}
	if ha.Enabled && v.c.State.Backend == StateEmbedded {
		v.fail("Leader election needs the consul state backend",
			"the embedded store belongs to one agent, so several agents could not share its history; use state { backend = \"consul\" } or high_availability { enabled = false }.",
			"high_availability.enabled", "state.backend")
	}
}

func (v *validator) validateHTTP() {
	h := &v.c.HTTP
	host, port, err := net.SplitHostPort(h.Address)
	if err != nil {
		v.fail("Invalid http address", fmt.Sprintf("%q is not host:port (e.g. %q).", h.Address, DefaultHTTPAddress), "http.address")
		return
	}
	if p, err := strconv.Atoi(port); err != nil || p < 0 || p > 65535 {
		v.fail("Invalid http address", fmt.Sprintf("port %q in %q is not a number from 0 to 65535.", port, h.Address), "http.address")
	}
	if strings.ContainsAny(host, " /") {
		v.fail("Invalid http address", fmt.Sprintf("host %q in %q is not a host name or IP address.", host, h.Address), "http.address")
	}
	v.validateHTTPTLS()
}

// validateHTTPTLS checks the http { tls {} } block, and reads its files, so
// that a missing or broken certificate names its line at load time rather
// than failing the listener at start-up.
func (v *validator) validateHTTPTLS() {
	t := &v.c.HTTP.TLS
	v.pair(t.CertFile, t.KeyFile, "http.tls.cert_file", "http.tls.key_file")
	if !t.Enabled() {
		switch {
		case t.CAFile != "":
			v.fail("TLS settings without a certificate", "ca_file verifies client certificates, which only a TLS listener asks for; set cert_file and key_file too.", "http.tls.ca_file")
		case t.VerifyHTTPSClient:
			v.fail("TLS settings without a certificate", "verify_https_client needs a TLS listener; set cert_file and key_file too.", "http.tls.verify_https_client")
		}
		return
	}
	if t.VerifyHTTPSClient && t.CAFile == "" {
		v.fail("Client verification without a CA", "verify_https_client = true needs ca_file, the CA that signs the clients' certificates.", "http.tls.verify_https_client")
	}
	if t.KeyFile == "" {
		return
	}
	if _, err := tls.LoadX509KeyPair(t.CertFile, t.KeyFile); err != nil {
		v.fail("Unusable TLS certificate", fmt.Sprintf("loading the certificate %s with the key %s: %v.", t.CertFile, t.KeyFile, err), "http.tls.cert_file", "http.tls.key_file")
	}
	if t.CAFile != "" {
		if _, err := LoadCAPool(t.CAFile); err != nil {
			v.fail("Unusable TLS CA", err.Error()+".", "http.tls.ca_file")
		}
	}
}

// LoadCAPool reads a PEM CA bundle into a certificate pool. Its errors name
// the file, never its content.
func LoadCAPool(path string) (*x509.CertPool, error) {
	pem, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("reading the CA file: %w", err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(pem) {
		return nil, fmt.Errorf("the CA file %s holds no PEM certificate", path)
	}
	return pool, nil
}

func (v *validator) validateState() {
	s := &v.c.State
	backends := []string{string(StateConsul), string(StateEmbedded)}
	if !contains(backends, string(s.Backend)) {
		v.fail("Invalid state backend", fmt.Sprintf("%q is not a state backend; use %q or %q.%s",
			s.Backend, StateConsul, StateEmbedded, suggest(string(s.Backend), backends)), "state.backend")
	}
	if s.Backend == StateEmbedded && s.Path == "" {
		v.fail("Invalid state path", "the embedded store needs a file path.", "state.path", "data_dir")
	}
}

// newBlockName checks the label of a plugin or hook block (kind) in a
// Config built in Go: the decoder checks those it reads. It reports whether
// the name is valid and not seen before, adding it to seen, so that the
// block's settings are worth checking.
func (v *validator) newBlockName(kind, name, path string, seen map[string]bool) bool {
	if !validName(name) {
		v.fail("Invalid "+kind+" name", fmt.Sprintf("%q: use letters, digits, '-', '_' and '.', starting with a letter or digit.", name), path)
		return false
	}
	if seen[name] {
		v.fail("Duplicate "+kind, fmt.Sprintf("%s %q is declared twice.", kind, name), path)
		return false
	}
	seen[name] = true
	return true
}

// validatePlugins checks the plugin blocks, then the volume_provisioner
// and hook blocks that name them.
func (v *validator) validatePlugins() {
	c := v.c
	var names []string
	seen := map[string]bool{}
	for _, p := range c.Plugins {
		path := "plugin." + p.Name
		if !v.newBlockName("plugin", p.Name, path, seen) {
			continue
		}
		names = append(names, p.Name)
		if !validName(p.Driver) {
			v.fail("Invalid plugin driver", fmt.Sprintf("%q is not a driver name: it is a built-in name or a file name in plugin_dir, so use letters, digits, '-', '_' and '.', with no path separators.",
				p.Driver), path+".driver", path)
		}
	}
	v.volumeProvisioner(&c.VolumeProvisioner, "volume_provisioner", seen, names)
	v.volumeClasses(seen, names)
	hookSeen := map[string]bool{}
	for _, h := range c.Hooks {
		path := "hook." + h.Name
		if v.newBlockName("hook", h.Name, path, hookSeen) {
			v.hook(h, path, seen, names)
		}
	}
}

// volumeClasses checks the named volume_provisioner blocks: each names a
// storage class once, and its plugin is one of names (seen).
func (v *validator) volumeClasses(seen map[string]bool, names []string) {
	classSeen := map[string]bool{}
	for _, vc := range v.c.VolumeClasses {
		path := "volume_provisioner." + vc.Name
		switch {
		case !validClass(vc.Name):
			// A Config built in Go: the decoder checks the labels it reads.
			v.fail("Invalid volume_provisioner name", fmt.Sprintf("%q cannot name a storage class: %s.", vc.Name, classRule), path)
			continue
		case classSeen[vc.Name]:
			v.fail("Duplicate volume_provisioner", fmt.Sprintf("volume_provisioner %q is declared twice.", vc.Name), path)
			continue
		}
		classSeen[vc.Name] = true
		v.volumeProvisioner(vc, path, seen, names)
	}
}

// hook checks one hook block at path: its plugin is one of names (seen),
// and its events, timeout and failure policy are valid.
func (v *validator) hook(h *HookConfig, path string, seen map[string]bool, names []string) {
	events := []string{string(plugin.EventPreDelete), string(plugin.EventPostReady), string(plugin.EventPreUpdate)}
	policies := []string{string(plugin.FailureBlock), string(plugin.FailureIgnore)}
	switch {
	case h.Plugin == "":
		v.fail("Missing hook plugin", "name the plugin block that implements the hook: plugin = \"…\".", path+".plugin", path)
	case !seen[h.Plugin]:
		v.fail("Unknown hook plugin", fmt.Sprintf("%q is not declared; declare it with a plugin block.%s", h.Plugin, suggest(h.Plugin, names)), path+".plugin", path)
	}
	if len(h.Events) == 0 {
		v.fail("Missing hook events", fmt.Sprintf("give at least one event: %s.", strings.Join(events, ", ")), path+".events", path)
	}
	evSeen := map[plugin.Event]bool{}
	for _, e := range h.Events {
		if !contains(events, string(e)) {
			v.fail("Invalid hook event", fmt.Sprintf("%q is not a hook event; use %s.%s", e, strings.Join(events, ", "), suggest(string(e), events)), path+".events", path)
		} else if evSeen[e] {
			v.fail("Duplicate hook event", fmt.Sprintf("%q is listed twice.", e), path+".events", path)
		}
		evSeen[e] = true
	}
	if h.Timeout <= 0 {
		v.fail("Invalid hook timeout", fmt.Sprintf("%s must be positive (default %s).", h.Timeout, DefaultHookTimeout), path+".timeout", path)
	}
	if !contains(policies, string(h.FailurePolicy)) {
		v.fail("Invalid hook failure_policy", fmt.Sprintf("%q is not a failure policy; use %q or %q.%s", h.FailurePolicy, plugin.FailureBlock, plugin.FailureIgnore, suggest(string(h.FailurePolicy), policies)),
			path+".failure_policy", path)
	}
}

// volumeProvisioner checks one volume_provisioner block at path: its
// plugin is declared, and a named class can record itself on its volumes.
func (v *validator) volumeProvisioner(vp *VolumeProvisionerConfig, path string, declared map[string]bool, names []string) {
	if !declared[vp.Plugin] {
		v.fail("Unknown volume provisioner plugin", fmt.Sprintf("%q is not declared; declare it with a plugin block, or use the built-in %q.%s",
			vp.Plugin, BuiltinHostVolume, suggest(vp.Plugin, names)), path+".plugin", path)
		return
	}
	pc := v.c.Plugin(vp.Plugin)
	if vp.Name == "" || pc.Driver != BuiltinHostVolume {
		return
	}
	id := vp.Config["plugin_id"]
	if id == "" {
		id = pc.Config["plugin_id"]
	}
	if id == "" || id == DefaultHostVolumePluginID {
		v.fail("Storage class on the mkdir plugin", fmt.Sprintf("class %q would make its volumes with Nomad's %s plugin, which refuses parameters it does not know, so the volumes could not record their class; give the class another host volume plugin (config = { plugin_id = \"…\" }), or make it the unnamed volume_provisioner block.",
			vp.Name, DefaultHostVolumePluginID), path+".config", path)
	}
}

// checkURL validates a Nomad address (a URL with a scheme) or, when bare is
// true, a Consul address (which may also be a bare host:port). It returns
// a message, or "" when the address is fine.
func checkURL(addr string, bare bool) string {
	if addr == "" {
		return "must not be empty."
	}
	if bare && !strings.Contains(addr, "://") {
		if _, _, err := net.SplitHostPort(addr); err != nil {
			return fmt.Sprintf("%q is neither host:port nor a URL.", addr)
		}
		return ""
	}
	u, err := url.Parse(addr)
	if err != nil || u.Scheme == "" {
		hint := ""
		if !strings.Contains(addr, "://") {
			hint = fmt.Sprintf(" Did you mean %q?", "http://"+addr)
		}
		return fmt.Sprintf("%q is not a URL with a scheme.%s", addr, hint)
	}
	switch u.Scheme {
	case "http", "https":
		if u.Host == "" {
			return fmt.Sprintf("%q has no host.", addr)
		}
	case "unix":
		if u.Path == "" {
			return fmt.Sprintf("%q has no socket path.", addr)
		}
	default:
		return fmt.Sprintf("%q: the scheme must be http, https or unix.", addr)
	}
	return ""
}

// checkKVPath validates a Consul KV key or prefix. Consul rejects a leading
// slash, and a trailing one or an empty segment would make keys that other
// tools (consul kv get -recurse) show in surprising places.
func checkKVPath(p string) string {
	switch {
	case p == "":
		return "must not be empty."
	case strings.HasPrefix(p, "/"):
		return fmt.Sprintf("%q must not start with '/'.", p)
	case strings.HasSuffix(p, "/"):
		return fmt.Sprintf("%q must not end with '/'.", p)
	case strings.Contains(p, "//"):
		return fmt.Sprintf("%q must not contain an empty segment ('//').", p)
	}
	return ""
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

// suggest returns ` Did you mean "x"?` for the closest candidate within a
// small edit distance, as hcl does for attribute names, or "".
func suggest(got string, candidates []string) string {
	best, bestDist := "", 3
	for _, c := range candidates {
		d := levenshtein(got, c)
		// "warning" is three edits from "warn", but plainly meant it.
		if len(got) >= 3 && (strings.HasPrefix(got, c) || strings.HasPrefix(c, got)) {
			d = 1
		}
		if d < bestDist {
			best, bestDist = c, d
		}
	}
	if best == "" || got == "" {
		return ""
	}
	return fmt.Sprintf(" Did you mean %q?", best)
}

// levenshtein is the edit distance between two short strings.
func levenshtein(a, b string) int {
	ra, rb := []rune(a), []rune(b)
	prev := make([]int, len(rb)+1)
	cur := make([]int, len(rb)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(ra); i++ {
		cur[0] = i
		for j := 1; j <= len(rb); j++ {
			cost := 1
			if ra[i-1] == rb[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
		}
		prev, cur = cur, prev
	}
	return prev[len(rb)]
}
