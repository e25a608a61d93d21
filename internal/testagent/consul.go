package testagent

import (
	"crypto/rand"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	consulapi "github.com/hashicorp/consul/api"
)

// ConsulAgent is a real single-server Consul agent on 127.0.0.1. Unlike
// `consul agent -dev` it keeps its state on disk, so Restart keeps the KV
// store, sessions and catalog.
type ConsulAgent struct {
	// Addr is the HTTP address, "http://127.0.0.1:<port>".
	Addr string
	// HostPort is the HTTP address without the scheme, "127.0.0.1:<port>",
	// the form Consul's own clients and CONSUL_HTTP_ADDR take.
	HostPort string
	// HTTPPort, DNSPort, ServerPort, SerfLANPort, SerfWANPort and GRPCPort
	// are the agent's ports.
	HTTPPort, DNSPort, ServerPort, SerfLANPort, SerfWANPort, GRPCPort int
	// Dir is the agent's directory: config, data and log.
	Dir string
	// DataDir is Consul's data_dir, kept across Restart.
	DataDir string
	// LogPath is the agent's log file.
	LogPath string
	// NodeName is the agent's node name.
	NodeName string
	// Client is an API client for the agent, carrying Token.
	Client *consulapi.Client
	// Token is the management token when ACLs are on (WithConsulACL), or "".
	Token string

	t    testing.TB
	proc *process
	// join is the server a client agent joins (ConsulClient), nil for a server.
	join *ConsulAgent
	// extraConfig is a config file of its own, read after the agent's
	// (WithConsulConfig).
	extraConfig string
}

// ConsulOption configures Consul.
type ConsulOption func(*ConsulAgent)

// WithConsulACL turns ACLs on with default deny. The agent is bootstrapped
// with a management token of the test's making, kept in Token (and in
// Client), which is also its agent token so the node registers itself.
func WithConsulACL() ConsulOption {
	return func(a *ConsulAgent) { a.Token = newUUID() }
}

// WithConsulDataDir keeps the agent's data (its Raft log and snapshots)
// in dir instead of under the agent's directory: a benchmark's diagnostic
// puts it on another file system than the Nomad agents' to tell what
// their shared disk costs.
func WithConsulDataDir(dir string) ConsulOption {
	return func(a *ConsulAgent) { a.DataDir = dir }
}

// WithConsulConfig adds a config file holding hcl, which Consul reads
// after the agent's own and merges over it (a later file's ports or tls
// block wins attribute by attribute): an HTTPS listener, say, with
// `ports { https = <port> }` and a `tls { https { … } }` block. The plain
// HTTP port stays, so Addr, HostPort and Client keep working.
func WithConsulConfig(hcl string) ConsulOption {
	return func(a *ConsulAgent) { a.extraConfig = hcl }
}

// newUUID returns a random UUID, the form Consul requires of a token.
func newUUID() string {
	var b [16]byte
	if _, err := rand.Read(b[:]); err != nil {
		panic(fmt.Sprintf("testagent: reading random bytes: %v", err))
	}
	return fmt.Sprintf("%x-%x-%x-%x-%x", b[0:4], b[4:6], b[6:8], b[8:10], b[10:16])
}

// Consul starts a Consul server agent on 127.0.0.1 with free ports and a
// fresh data directory, waits until a leader is elected and the node is in
// the catalog, and registers its teardown with t.Cleanup.
func Consul(t testing.TB, opts ...ConsulOption) *ConsulAgent {
	t.Helper()
	return startConsul(t, nil, opts...)
}

// ConsulClient starts a Consul client agent (no server) on 127.0.0.1 that
// joins server's LAN gossip, and waits until it knows the leader and its
// node is in the catalog. Give each Nomad client its own (WithConsul): Nomad
// clients sharing one Consul agent deregister each other's services, as
// each removes the Nomad services it does not run.
func ConsulClient(t testing.TB, server *ConsulAgent) *ConsulAgent {
	t.Helper()
	return startConsul(t, server)
}

func startConsul(t testing.TB, join *ConsulAgent, opts ...ConsulOption) *ConsulAgent {
	t.Helper()
	bin := findBinary(t, "consul", "CONSUL_BIN")
	dir := newAgentDir(t, "consul")
	ports := FreePorts(t, 6)
	a := &ConsulAgent{
		HTTPPort: ports[0], DNSPort: ports[1], ServerPort: ports[2],
		SerfLANPort: ports[3], SerfWANPort: ports[4], GRPCPort: ports[5],
		Dir:      dir,
		DataDir:  filepath.Join(dir, "data"),
		LogPath:  filepath.Join(dir, "consul.log"),
		NodeName: "testagent-" + filepath.Base(dir),
		t:        t,
		join:     join,
	}
	for _, o := range opts {
		o(a)
	}
	if join != nil {
		a.Token = join.Token
	}
	acl := ""
	if a.Token != "" && join != nil {
		acl = fmt.Sprintf(`acl {
  enabled        = true
  default_policy = "deny"
  tokens {
    agent = %q
  }
}`, a.Token)
	} else if a.Token != "" {
		acl = fmt.Sprintf(`acl {
  enabled        = true
  default_policy = "deny"
  tokens {
    initial_management = %q
    agent              = %q
  }
}`, a.Token, a.Token)
	}
	role := "server               = true\nbootstrap_expect     = 1\nconnect { enabled = true }"
	if join != nil {
		role = fmt.Sprintf("server               = false\nretry_join           = [\"127.0.0.1:%d\"]", join.SerfLANPort)
	}
	a.HostPort = fmt.Sprintf("127.0.0.1:%d", a.HTTPPort)
	a.Addr = "http://" + a.HostPort
	cfg := fmt.Sprintf(`
node_name            = %q
datacenter           = "dc1"
data_dir             = %q
%s
bind_addr            = "127.0.0.1"
client_addr          = "127.0.0.1"
advertise_addr       = "127.0.0.1"
log_level            = "INFO"
disable_update_check = true
enable_script_checks = false
leave_on_terminate   = false
ui_config { enabled = false }
performance { raft_multiplier = 1 }
ports {
  http     = %d
  dns      = %d
  server   = %d
  serf_lan = %d
  serf_wan = %d
  grpc     = %d
  grpc_tls = -1
  https    = -1
}
%s
`, a.NodeName, a.DataDir, role, a.HTTPPort, a.DNSPort, a.ServerPort, a.SerfLANPort, a.SerfWANPort, a.GRPCPort, acl)
	cfgPath := filepath.Join(dir, "consul.hcl")
	if err := os.MkdirAll(a.DataDir, 0o755); err != nil {
		t.Fatalf("testagent: %v", err)
	}
	if err := os.WriteFile(cfgPath, []byte(cfg), 0o644); err != nil {
		t.Fatalf("testagent: %v", err)
	}
	args := []string{"agent", "-config-file", cfgPath}
	if a.extraConfig != "" {
		extraPath := filepath.Join(dir, "consul-extra.hcl")
		if err := os.WriteFile(extraPath, []byte(a.extraConfig), 0o644); err != nil {
			t.Fatalf("testagent: %v", err)
		}
		args = append(args, "-config-file", extraPath)
	}
	a.proc = &process{
		name:    "consul",
		bin:     bin,
		args:    args,
		env:     envWithout("CONSUL_HTTP_ADDR", "CONSUL_HTTP_TOKEN", "CONSUL_GRPC_ADDR"),
		dir:     dir,
		logPath: a.LogPath,
	}
	client, err := consulapi.NewClient(&consulapi.Config{Address: a.HostPort, Scheme: "http", Token: a.Token})
	if err != nil {
		t.Fatalf("testagent: consul client: %v", err)
	}
	a.Client = client
	register(a.proc)
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("testagent: last %d lines of the consul log %s:\n%s", TailLines, a.LogPath, a.proc.tail(TailLines))
		}
		teardown(a.proc)
	})
	a.start()
	return a
}

func (a *ConsulAgent) start() {
	a.t.Helper()
	start := time.Now()
	if err := a.proc.start(); err != nil {
		a.t.Fatalf("testagent: %v", err)
	}
	if err := waitFor(a.proc, 60*time.Second, "a Consul leader and the node in the catalog", a.ready); err != nil {
		a.t.Fatalf("testagent: consul at %s: %v\nlast lines of %s:\n%s", a.Addr, err, a.LogPath, a.proc.tail(TailLines))
	}
	a.t.Logf("testagent: consul ready at %s in %s (dir %s)", a.Addr, time.Since(start).Round(time.Millisecond), a.Dir)
}

// ready checks that a leader is elected and that this node is registered,
// which means the leader has done its first reconcile and KV writes work.
func (a *ConsulAgent) ready() error {
	leader, err := a.Client.Status().Leader()
	if err != nil {
		return err
	}
	if leader == "" {
		return fmt.Errorf("no leader yet")
	}
	if a.Token != "" {
		if _, _, err := a.Client.ACL().TokenReadSelf(nil); err != nil {
			return fmt.Errorf("ACLs not bootstrapped yet: %w", err)
		}
	}
	nodes, _, err := a.Client.Catalog().Nodes(nil)
	if err != nil {
		return err
	}
	for _, n := range nodes {
		if n.Node == a.NodeName {
			return nil
		}
	}
	return fmt.Errorf("node %s not in the catalog yet", a.NodeName)
}

// Stop stops the agent gracefully (SIGINT, then SIGKILL after 30s). The data
// directory is kept for Restart.
func (a *ConsulAgent) Stop() { a.proc.stop(30 * time.Second) }

// Kill kills the agent with SIGKILL. The data directory is kept for Restart.
func (a *ConsulAgent) Kill() { a.proc.kill() }

// Start starts a stopped or killed agent again with the same ports and data
// directory, and waits until it is ready.
func (a *ConsulAgent) Start() {
	a.t.Helper()
	a.start()
}

// Restart stops the agent gracefully and starts it again with the same ports
// and data directory, and waits until it is ready.
func (a *ConsulAgent) Restart() {
	a.t.Helper()
	a.Stop()
	a.start()
}

// Running reports whether the agent process is alive.
func (a *ConsulAgent) Running() bool { return a.proc.running() }

// CPUTime is the CPU time the agent's process has used (see Process.CPUTime).
func (a *ConsulAgent) CPUTime() (time.Duration, error) { return a.proc.cpuTime() }

// LogTail returns the last n lines of the agent's log.
func (a *ConsulAgent) LogTail(n int) string { return a.proc.tail(n) }

// HoldLock makes a session with a 60s TTL and acquires key with it, as a
// leader's elector does, and returns the session ID; the session is
// destroyed when the test ends.
func (a *ConsulAgent) HoldLock(t testing.TB, key string) string {
	t.Helper()
	id, _, err := a.Client.Session().Create(&consulapi.SessionEntry{TTL: "60s", LockDelay: time.Second}, nil)
	if err != nil {
		t.Fatalf("testagent: creating a session: %v", err)
	}
	t.Cleanup(func() { _, _ = a.Client.Session().Destroy(id, nil) })
	ok, _, err := a.Client.KV().Acquire(&consulapi.KVPair{Key: key, Session: id}, nil)
	if err != nil || !ok {
		t.Fatalf("testagent: acquiring %s: ok=%v err=%v", key, ok, err)
	}
	return id
}
