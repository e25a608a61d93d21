package testagent

import (
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"syscall"
	"testing"
	"time"

	nomadapi "github.com/hashicorp/nomad/api"
)

// NomadAgent is a real Nomad agent on 127.0.0.1, server and client in one
// process, with its state on disk so that Restart keeps jobs, allocations
// and host volumes.
type NomadAgent struct {
	// Addr is the HTTP address, "http://127.0.0.1:<port>" (NOMAD_ADDR).
	Addr string
	// HTTPPort, RPCPort and SerfPort are the agent's ports.
	HTTPPort, RPCPort, SerfPort int
	// Dir is the agent's directory: config, data and log.
	Dir string
	// DataDir is Nomad's data_dir, kept across Restart.
	DataDir string
	// HostVolumesDir is where the "mkdir" plugin creates dynamic host volumes.
	HostVolumesDir string
	// HostVolumePluginDir is the client's host_volume_plugin_dir.
	HostVolumePluginDir string
	// LogPath is the agent's log file.
	LogPath string
	// PluginSocketDir is where the agent's plugin processes (executors,
	// logmon) put their unix sockets, or "" when they keep go-plugin's
	// default (see pluginSocketEnv).
	PluginSocketDir string
	// NodeID is the client node's ID, known once the agent is ready.
	NodeID string
	// Token is the management token's secret ID when ACLs are enabled, or "".
	Token string
	// Client is an API client for the agent, carrying Token.
	Client *nomadapi.Client

	// Name is the agent's (and its client node's) name.
	Name string

	t       testing.TB
	proc    *process
	cfg     nomadConfig
	drivers []string
}

// NomadOption configures Nomad.
type NomadOption func(*nomadConfig)

type nomadConfig struct {
	// noClient runs a server only; server, when set, makes a client only
	// that joins it, with node meta.
	noClient   bool
	server     *NomadAgent
	meta       map[string]string
	acl        bool
	consulAddr string
	consulGRPC string
	extra      []string
	logLevel   string
	drivers    []string
	timeout    time.Duration
	chroot     map[string]string
	// hostVolumePlugins are scripts by plugin ID (WithHostVolumePlugin).
	hostVolumePlugins map[string]string
}

// WithoutClient runs a server only (no client node): the server of a
// multi-node cluster, whose clients are NomadClient agents.
func WithoutClient() NomadOption { return func(c *nomadConfig) { c.noClient = true } }

// NomadClient starts a client-only Nomad agent that joins server's RPC
// port, with its own name, ports, data_dir, host volumes dirs and node meta
// (for example {"rack": "r1"}), and waits until its node is ready with
// healthy drivers. Several on one machine give a multi-node cluster.
func NomadClient(t testing.TB, server *NomadAgent, meta map[string]string, opts ...NomadOption) *NomadAgent {
	t.Helper()
	return Nomad(t, append([]NomadOption{func(c *nomadConfig) {
		c.server, c.meta, c.acl = server, meta, server.cfg.acl
		c.consulAddr, c.consulGRPC = server.cfg.consulAddr, server.cfg.consulGRPC
	}}, opts...)...)
}

// Drain starts draining the agent's node with the given deadline.
func (a *NomadAgent) Drain(deadline time.Duration) error {
	_, err := a.Client.Nodes().UpdateDrain(a.NodeID, &nomadapi.DrainSpec{Deadline: deadline}, false, nil)
	return err
}

// Undrain stops draining the agent's node and makes it eligible again.
func (a *NomadAgent) Undrain() error {
	if _, err := a.Client.Nodes().UpdateDrain(a.NodeID, nil, true, nil); err != nil {
		return err
	}
	_, err := a.Client.Nodes().ToggleEligibility(a.NodeID, true, nil)
	return err
}

// KillHard kills the agent with SIGKILL, then the task processes it leaves
// running (a killed client does not stop its executors): a machine that
// died. The data directory is kept for Start.
func (a *NomadAgent) KillHard() {
	a.proc.kill()
	killAllocCgroups(a.proc.dir)
	killReferrers(a.proc.dir)
}

// Purge removes the agent's node from the cluster for good (it must be
// down); see PurgeNode in Nomad's API.
func (a *NomadAgent) Purge(server *NomadAgent) error {
	_, _, err := server.Client.Nodes().Purge(a.NodeID, nil)
	return err
}

// WithACL enables ACLs. The agent bootstraps them when it starts and keeps the
// management token in NomadAgent.Token (and in its Client).
func WithACL() NomadOption { return func(c *nomadConfig) { c.acl = true } }

// WithConsul makes Nomad register services with this Consul agent. Without
// it Nomad is pointed at a closed port, never at a Consul on 8500.
func WithConsul(c *ConsulAgent) NomadOption {
	return func(n *nomadConfig) {
		n.consulAddr = c.HostPort
		n.consulGRPC = fmt.Sprintf("127.0.0.1:%d", c.GRPCPort)
	}
}

// WithConsulAddr is WithConsul for a Consul given as "host:port".
func WithConsulAddr(hostPort string) NomadOption {
	return func(n *nomadConfig) { n.consulAddr = hostPort }
}

// WithConfig appends raw HCL to the agent configuration (Nomad merges
// repeated blocks).
func WithConfig(hcl string) NomadOption {
	return func(n *nomadConfig) { n.extra = append(n.extra, hcl) }
}

// WithChrootEnv adds host paths (files or directories, host path -> path
// inside) to the exec driver's minimal chroot, for tasks that run more than
// the shell and coreutils it holds (a database, say).
func WithChrootEnv(paths map[string]string) NomadOption {
	return func(n *nomadConfig) {
		if n.chroot == nil {
			n.chroot = map[string]string{}
		}
		for k, v := range paths {
			n.chroot[k] = v
		}
	}
}

// WithLogLevel sets the agent's log_level (default INFO, or $TESTAGENT_LOG_LEVEL).
func WithLogLevel(level string) NomadOption {
	return func(n *nomadConfig) { n.logLevel = level }
}

// WithDrivers sets the task drivers that must be healthy before the agent
// counts as ready. The default is exec and mock_driver; raw_exec is enabled
// too but not waited for unless named.
func WithDrivers(drivers ...string) NomadOption {
	return func(n *nomadConfig) { n.drivers = drivers }
}

// WithReadyTimeout sets how long to wait for the agent (default 90s).
func WithReadyTimeout(d time.Duration) NomadOption {
	return func(n *nomadConfig) { n.timeout = d }
}

// Nomad starts a Nomad agent (server and client) on 127.0.0.1 with free ports
// and a fresh data directory, waits until a leader is elected, the node is
// ready and its drivers (exec and mock_driver by default) are healthy, and
// registers its teardown with t.Cleanup. AWS_CA_BUNDLE and the NOMAD_*
// client variables are removed from the agent's environment, and the cloud
// fingerprinters are disabled so that nothing leaves the machine.
func Nomad(t testing.TB, opts ...NomadOption) *NomadAgent {
	t.Helper()
	cfg := nomadConfig{logLevel: os.Getenv("TESTAGENT_LOG_LEVEL"), timeout: 90 * time.Second}
	for _, o := range opts {
		o(&cfg)
	}
	if cfg.logLevel == "" {
		cfg.logLevel = "INFO"
	}
	if cfg.drivers == nil {
		cfg.drivers = []string{"exec", "mock_driver"}
	}
	bin := findBinary(t, "nomad", "NOMAD_BIN")
	dir := newAgentDir(t, "nomad")
	n := 3
	if cfg.consulAddr == "" {
		n++
	}
	ports := FreePorts(t, n)
	a := &NomadAgent{
		HTTPPort: ports[0], RPCPort: ports[1], SerfPort: ports[2],
		Dir:                 dir,
		DataDir:             filepath.Join(dir, "data"),
		HostVolumesDir:      filepath.Join(dir, "host_volumes"),
		HostVolumePluginDir: filepath.Join(dir, "host_volume_plugins"),
		LogPath:             filepath.Join(dir, "nomad.log"),
		t:                   t,
		cfg:                 cfg,
		drivers:             cfg.drivers,
	}
	if cfg.consulAddr == "" {
		// Nothing listens there: Nomad must not find some other Consul.
		cfg.consulAddr = fmt.Sprintf("127.0.0.1:%d", ports[3])
	}
	a.Addr = fmt.Sprintf("http://127.0.0.1:%d", a.HTTPPort)
	for _, d := range []string{a.DataDir, a.HostVolumesDir, a.HostVolumePluginDir} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatalf("testagent: %v", err)
		}
	}
	if err := a.installHostVolumePlugins(); err != nil {
		t.Fatalf("testagent: %v", err)
	}
	a.Name = "testagent-" + filepath.Base(dir)
	p := NomadConfigParams{
		Name: a.Name, DataDir: a.DataDir, LogLevel: cfg.logLevel,
		HTTPPort: a.HTTPPort, RPCPort: a.RPCPort, SerfPort: a.SerfPort,
		HostVolumesDir: a.HostVolumesDir, HostVolumePluginDir: a.HostVolumePluginDir,
		Client: !cfg.noClient, Server: cfg.server == nil, Meta: cfg.meta,
		ConsulAddr: cfg.consulAddr, ConsulGRPC: cfg.consulGRPC, ACL: cfg.acl,
		ChrootExtra: cfg.chroot,
	}
	if cfg.server != nil {
		p.Servers = []string{fmt.Sprintf("127.0.0.1:%d", cfg.server.RPCPort)}
		if cfg.server.Token != "" {
			a.Token = cfg.server.Token
		}
	}
	conf, err := NomadConfigHCL(p)
	if err != nil {
		t.Fatalf("testagent: %v", err)
	}
	conf += strings.Join(cfg.extra, "\n")
	cfgPath := filepath.Join(dir, "nomad.hcl")
	if err := os.WriteFile(cfgPath, []byte(conf), 0o644); err != nil {
		t.Fatalf("testagent: %v", err)
	}
	// Nomad hands its environment to every plugin it starts.
	env, sockets, err := pluginSocketEnv(envWithout("AWS_CA_BUNDLE", "NOMAD_ADDR", "NOMAD_TOKEN", "NOMAD_REGION",
		"NOMAD_NAMESPACE", "NOMAD_CACERT", "NOMAD_CLIENT_CERT", "NOMAD_CLIENT_KEY"), dir)
	if err != nil {
		t.Fatalf("testagent: %v", err)
	}
	a.PluginSocketDir = sockets
	a.proc = &process{
		name:    "nomad",
		bin:     bin,
		args:    []string{"agent", "-config", cfgPath},
		env:     env,
		dir:     dir,
		logPath: a.LogPath,
	}
	client, err := nomadapi.NewClient(&nomadapi.Config{Address: a.Addr, SecretID: a.Token})
	if err != nil {
		t.Fatalf("testagent: nomad client: %v", err)
	}
	a.Client = client
	register(a.proc)
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("testagent: last %d lines of the nomad log %s:\n%s", TailLines, a.LogPath, a.proc.tail(TailLines))
		}
		teardown(a.proc)
	})
	a.start()
	return a
}

func (a *NomadAgent) start() {
	a.t.Helper()
	start := time.Now()
	if err := a.proc.start(); err != nil {
		a.t.Fatalf("testagent: %v", err)
	}
	fail := func(err error) {
		a.t.Helper()
		a.t.Fatalf("testagent: nomad at %s: %v\nlast lines of %s:\n%s", a.Addr, err, a.LogPath, a.proc.tail(TailLines))
	}
	if err := waitFor(a.proc, a.cfg.timeout, "a Nomad leader", func() error {
		leader, err := a.Client.Status().Leader()
		if err != nil {
			return err
		}
		if leader == "" {
			return fmt.Errorf("no leader yet")
		}
		return nil
	}); err != nil {
		fail(err)
	}
	if a.cfg.acl && a.Token == "" && a.cfg.server == nil {
		if err := waitFor(a.proc, 30*time.Second, "the ACL bootstrap", func() error {
			tok, _, err := a.Client.ACLTokens().Bootstrap(nil)
			if err != nil {
				return err
			}
			a.Token = tok.SecretID
			return nil
		}); err != nil {
			fail(err)
		}
		a.Client.SetSecretID(a.Token)
	}
	if !a.cfg.noClient {
		if err := waitFor(a.proc, a.cfg.timeout, "the client node to be ready with healthy drivers "+strings.Join(a.drivers, ", "), a.nodeReady); err != nil {
			fail(err)
		}
	}
	a.t.Logf("testagent: nomad ready at %s in %s (node %s, dir %s)", a.Addr, time.Since(start).Round(time.Millisecond), a.NodeID, a.Dir)
}

// nodeReady checks that the one client node is ready, eligible and has the
// wanted drivers detected and healthy.
func (a *NomadAgent) nodeReady() error {
	stubs, _, err := a.Client.Nodes().List(nil)
	if err != nil {
		return err
	}
	id := ""
	for _, s := range stubs {
		if s.Name == a.Name {
			id = s.ID
		}
	}
	if id == "" {
		return fmt.Errorf("client node %s not registered yet", a.Name)
	}
	node, _, err := a.Client.Nodes().Info(id, nil)
	if err != nil {
		return err
	}
	if node.Status != "ready" {
		return fmt.Errorf("node %s is %s", node.ID, node.Status)
	}
	if node.SchedulingEligibility != "eligible" {
		return fmt.Errorf("node %s is %s", node.ID, node.SchedulingEligibility)
	}
	var bad []string
	for _, d := range a.drivers {
		info := node.Drivers[d]
		switch {
		case info == nil:
			bad = append(bad, d+": not fingerprinted yet")
		case !info.Detected || !info.Healthy:
			bad = append(bad, fmt.Sprintf("%s: detected=%t healthy=%t %s", d, info.Detected, info.Healthy, info.HealthDescription))
		}
	}
	if len(bad) > 0 {
		sort.Strings(bad)
		return fmt.Errorf("drivers not ready: %s", strings.Join(bad, "; "))
	}
	a.NodeID = node.ID
	return nil
}

// Stop stops the agent gracefully (SIGINT, then SIGKILL after 30s). Its
// allocations keep running, as with a real agent, and the data directory is
// kept for Restart.
func (a *NomadAgent) Stop() { a.proc.stop(30 * time.Second) }

// Signal sends sig to the agent's process, if it runs: SIGSTOP and SIGCONT
// freeze a client between two of its node updates.
func (a *NomadAgent) Signal(sig syscall.Signal) { a.proc.signal(sig) }

// CPUTime is the CPU time the agent's process has used (see Process.CPUTime).
func (a *NomadAgent) CPUTime() (time.Duration, error) { return a.proc.cpuTime() }

// Kill kills the agent process group with SIGKILL. Tasks that run outside the
// group keep running until Start or teardown.
func (a *NomadAgent) Kill() { a.proc.kill() }

// Start starts a stopped or killed agent again with the same ports and data
// directory, and waits until it is ready.
func (a *NomadAgent) Start() {
	a.t.Helper()
	a.start()
}

// Restart stops the agent gracefully and starts it again with the same ports
// and data directory, and waits until it is ready.
func (a *NomadAgent) Restart() {
	a.t.Helper()
	a.Stop()
	a.start()
}

// Running reports whether the agent process is alive.
func (a *NomadAgent) Running() bool { return a.proc.running() }

// LogTail returns the last n lines of the agent's log.
func (a *NomadAgent) LogTail(n int) string { return a.proc.tail(n) }

// Env returns NOMAD_ADDR (and NOMAD_TOKEN with ACLs) for a child process
// such as the nomad CLI or nomad-statefulset, on top of os.Environ() without
// AWS_CA_BUNDLE and other NOMAD_ variables.
func (a *NomadAgent) Env() []string {
	env := envWithout("AWS_CA_BUNDLE", "NOMAD_ADDR", "NOMAD_TOKEN", "NOMAD_REGION", "NOMAD_NAMESPACE")
	env = append(env, "NOMAD_ADDR="+a.Addr)
	if a.Token != "" {
		env = append(env, "NOMAD_TOKEN="+a.Token)
	}
	return env
}
