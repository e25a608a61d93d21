package e2e

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"math/big"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/nomad-statefulset/nomad-statefulset/internal/testagent"
)

// TestAgentExamples starts the nomad-statefulset binary with every agent
// config under examples/agent/, the file itself as it is shipped, as its
// comments say to run it, against real Nomad and Consul agents. Only what
// must differ on a test machine is set by a second -config file, which the
// agent merges over the example attribute by attribute: the data
// directory, the HTTP port (the examples' 4650 would collide with other
// tests), and, for ha-tls.hcl, the servers' addresses and the paths of the
// certificates the test makes. Each agent must answer /v1/health, stay up,
// and converge a set with a per-ordinal volume through the example's
// volume_provisioner. A file in examples/agent/ that this test does not
// start fails it.
func TestAgentExamples(t *testing.T) {
	root, err := testagent.ModuleRoot()
	if err != nil {
		t.Fatal(err)
	}
	dir := filepath.Join(root, "examples", "agent")
	type exampleCase struct {
		file string
		run  func(t *testing.T, example string)
	}
	cases := []exampleCase{
		{"agent.hcl", runAgentExample},
		{"dev.hcl", runDevExample},
		{"ha-tls.hcl", runHATLSExample},
	}
	files, err := filepath.Glob(filepath.Join(dir, "*.hcl"))
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range files {
		if !slices.ContainsFunc(cases, func(c exampleCase) bool { return c.file == filepath.Base(f) }) {
			t.Errorf("%s is not started by TestAgentExamples: every agent example must be", f)
		}
	}
	for _, c := range cases {
		t.Run(c.file, func(t *testing.T) {
			example := filepath.Join(dir, c.file)
			if _, err := os.Stat(example); err != nil {
				t.Fatalf("the example is gone: %v", err)
			}
			c.run(t, example)
		})
	}
}

// runAgentExample: agent.hcl, docs/agent-config.md's `agent -config
// examples/agent/agent.hcl`, with the Nomad and Consul addresses from the
// environment (NOMAD_ADDR, CONSUL_HTTP_ADDR), which the example leaves to
// it. It leads through its Consul lock.
func runAgentExample(t *testing.T, example string) {
	c := NewCluster(t)
	env := append(exampleEnv(c.Nomad.Env()), "CONSUL_HTTP_ADDR="+c.Consul.HostPort)
	d := startExampleDaemon(t, c.Nomad, env, []string{"agent", "-config", example}, func(dir, addr string) string {
		return fmt.Sprintf("data_dir = %q\nplugin_dir = %q\nstate {\n  path = %q\n}\nhttp {\n  address = %q\n}\n",
			filepath.Join(dir, "data"), filepath.Join(dir, "data", "plugins"), filepath.Join(dir, "data", "state.db"), addr)
	})
	exampleConverges(t, c, d, "agentex")
	if p, _, err := c.Consul.Client.KV().Get("nomad-statefulset/leader", nil); err != nil || p == nil || p.Session == "" {
		t.Fatalf("agent.hcl's lock_key nomad-statefulset/leader is not held: %+v %v", p, err)
	}
}

// runDevExample: dev.hcl as its comment runs it, `agent -dev -config
// examples/agent/dev.hcl`, against a Nomad with no Consul at all. Its data
// goes to $TMPDIR/nomad-statefulset-dev, as the comment says.
func runDevExample(t *testing.T, example string) {
	n := testagent.Nomad(t)
	c := &Cluster{Nomad: n, Watchdog: StartWatchdog(t, n.Client), t: t}
	tmp := t.TempDir()
	env := append(exampleEnv(n.Env()), "TMPDIR="+tmp)
	d := startExampleDaemon(t, n, env, []string{"agent", "-dev", "-config", example}, func(_, addr string) string {
		return fmt.Sprintf("http {\n  address = %q\n}\n", addr)
	})
	exampleConverges(t, c, d, "devex")
	if _, err := os.Stat(filepath.Join(tmp, "nomad-statefulset-dev", "state.db")); err != nil {
		t.Fatalf("dev.hcl says -dev keeps its data in $TMPDIR/nomad-statefulset-dev: %v", err)
	}
}

// runHATLSExample: ha-tls.hcl, the production shape, on a Consul with ACLs
// on (default deny) that the agents reach only over HTTPS with client
// certificates (verify_incoming), and a Nomad with ACLs on. The example's
// tls_server_name for Consul is kept: the test's server certificate is
// made for server.dc1.consul, so the agent verifies it under that name.
// The tokens come from where its comment says (NOMAD_TOKEN,
// CONSUL_HTTP_TOKEN_FILE), holding the policies of docs/operations.md. Two agents run;
// exactly one leads, on the lock key that follows kv_prefix, and the set
// converges through it. Nomad itself is plain HTTP here (the harness's
// Nomad has no TLS), so the example's Nomad certificates are only loaded.
func runHATLSExample(t *testing.T, example string) {
	pki := newExamplePKI(t)
	httpsPort := testagent.FreePorts(t, 1)[0]
	consul := testagent.Consul(t, testagent.WithConsulACL(), testagent.WithConsulConfig(fmt.Sprintf(`
ports {
  https = %d
}
tls {
  https {
    ca_file         = %q
    cert_file       = %q
    key_file        = %q
    verify_incoming = true
  }
}
`, httpsPort, pki.path("consul-ca.pem"), pki.path("consul-server.pem"), pki.path("consul-server-key.pem"))))
	nomad := testagent.Nomad(t, testagent.WithConsul(consul), testagent.WithACL(),
		testagent.WithConfig(fmt.Sprintf("consul {\n  token = %q\n}", consul.Token)))
	c := &Cluster{Consul: consul, Nomad: nomad, Watchdog: StartWatchdog(t, nomad.Client), t: t}

	consulTok := consulToken(t, consul, "nomad-statefulset", strings.ReplaceAll(consulPolicy, "nss-acl/", "nomad-statefulset/prod/"))
	tokenFile := filepath.Join(t.TempDir(), "consul.token")
	if err := os.WriteFile(tokenFile, []byte(consulTok+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	n := *nomad
	n.Token = createToken(t, c, "nomad-statefulset", agentPolicy)
	env := append(exampleEnv(n.Env()), "CONSUL_HTTP_TOKEN_FILE="+tokenFile)

	override := func(dir, addr string) string {
		return fmt.Sprintf(`data_dir = %q
nomad {
  address     = %q
  ca_cert     = %q
  client_cert = %q
  client_key  = %q
}
consul {
  address   = "https://127.0.0.1:%d"
  ca_file   = %q
  cert_file = %q
  key_file  = %q
}
http {
  address = %q
}
`, filepath.Join(dir, "data"), nomad.Addr, pki.path("nomad-ca.pem"), pki.path("nomad-cli.pem"), pki.path("nomad-cli-key.pem"),
			httpsPort, pki.path("consul-ca.pem"), pki.path("consul-cli.pem"), pki.path("consul-cli-key.pem"), addr)
	}
	var agents []*Daemon
	for range 2 {
		agents = append(agents, startExampleDaemon(t, &n, env, []string{"agent", "-config", example}, override))
	}
	var leader *Daemon
	Eventually(t, time.Minute, "one of the two ha-tls.hcl agents to lead", func() error {
		var leaders []*Daemon
		for _, d := range agents {
			h, err := daemonHealth(d)
			if err != nil {
				return err
			}
			if h.Leader {
				leaders = append(leaders, d)
			}
		}
		if len(leaders) != 1 {
			return fmt.Errorf("%d leaders", len(leaders))
		}
		leader = leaders[0]
		return nil
	})
	if p, _, err := consul.Client.KV().Get("nomad-statefulset/prod/leader", nil); err != nil || p == nil || p.Session == "" {
		t.Fatalf("ha-tls.hcl says lock_key follows kv_prefix, but nomad-statefulset/prod/leader is not held: %+v %v", p, err)
	}
	exampleConverges(t, c, leader, "tlsex")
	for _, d := range agents {
		staysUp(t, d, time.Second)
		// log_json = true: every line the agent logs is a JSON object
		// (the "==> testagent:" lines are the harness's own).
		for _, line := range strings.Split(strings.TrimSpace(d.Proc.LogTail(20)), "\n") {
			if !strings.HasPrefix(line, "==> ") && !json.Valid([]byte(line)) {
				t.Fatalf("ha-tls.hcl sets log_json, but the agent logged %q", line)
			}
		}
	}
}

// exampleEnv is env without the Consul variables of the test's own
// environment, so that only what a case sets reaches the agent.
func exampleEnv(env []string) []string {
	return slices.DeleteFunc(slices.Clone(env), func(kv string) bool { return strings.HasPrefix(kv, "CONSUL_") })
}

// startExampleDaemon starts the binary with args (the example's -config
// among them) and a last -config file holding override(dir, addr), dir
// being the process's own directory and addr the free loopback address
// its HTTP API is to listen on, and waits until /v1/health answers 200.
// It then checks that the agent stays up for a few seconds.
func startExampleDaemon(t *testing.T, nomad *testagent.NomadAgent, env, args []string, override func(dir, addr string) string) *Daemon {
	t.Helper()
	bin := DaemonBinary(t)
	addr := fmt.Sprintf("127.0.0.1:%d", testagent.FreePorts(t, 1)[0])
	d := &Daemon{Addr: "http://" + addr, Bin: bin, nomad: nomad, t: t}
	d.Proc = testagent.NewProcess(t, "nomad-statefulset", bin, nil, append(env, "NOMAD_STATEFULSET_ADDR="+d.Addr))
	d.ConfigPath = filepath.Join(d.Proc.Dir(), "zz-test-override.hcl")
	if err := os.WriteFile(d.ConfigPath, []byte(override(d.Proc.Dir(), addr)), 0o644); err != nil {
		t.Fatal(err)
	}
	d.Proc.SetArgs(append(slices.Clone(args), "-config", d.ConfigPath)...)
	d.Start()
	staysUp(t, d, 5*time.Second)
	return d
}

// staysUp fails the test unless the agent keeps running and answering 200
// on /v1/health for the whole of window.
func staysUp(t *testing.T, d *Daemon, window time.Duration) {
	t.Helper()
	for end := time.Now().Add(window); time.Now().Before(end); time.Sleep(250 * time.Millisecond) {
		if !d.Proc.Running() {
			t.Fatalf("the agent exited: %v\n%s", d.Proc.ExitErr(), d.Proc.LogTail(40))
		}
		resp, err := http.Get(d.Addr + "/v1/health")
		if err != nil {
			t.Fatalf("GET /v1/health: %v", err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("GET /v1/health: %s\n%s", resp.Status, d.Proc.LogTail(40))
		}
	}
}

// exampleConverges registers a set of two pods with a per-ordinal volume,
// waits until it converges through d, and checks that d is still up.
func exampleConverges(t *testing.T, c *Cluster, d *Daemon, set string) {
	t.Helper()
	RegisterHCL(t, c.Nomad.Client, setSpec{name: set, meta: map[string]string{"statefulset_replicas": "2"}}.hcl())
	waitConverged(t, c, d, set, 2, nil)
	if vols := HostVolumes(t, c.Nomad.Client, "default", "data-"+set+"-"); len(vols) != 2 {
		t.Fatalf("want the volumes data-%[1]s-0 and data-%[1]s-1, got %d", set, len(vols))
	}
	staysUp(t, d, time.Second)
}

// examplePKI is a throwaway CA and the certificates ha-tls.hcl names,
// under the names it gives them, in one directory.
type examplePKI struct{ dir string }

func (p examplePKI) path(name string) string { return filepath.Join(p.dir, name) }

// newExamplePKI makes a CA (written as consul-ca.pem and nomad-ca.pem),
// a Consul server certificate for server.dc1.consul, localhost and
// 127.0.0.1 (consul-server.pem), and client certificates for the agent
// (consul-cli.pem, nomad-cli.pem), each with its -key.pem.
func newExamplePKI(t *testing.T) examplePKI {
	t.Helper()
	p := examplePKI{dir: t.TempDir()}
	caKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	caTmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "nomad-statefulset e2e CA"},
		NotBefore: now.Add(-time.Hour), NotAfter: now.Add(24 * time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature,
	}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	ca, err := x509.ParseCertificate(caDER)
	if err != nil {
		t.Fatal(err)
	}
	p.writePEM(t, "consul-ca.pem", "CERTIFICATE", caDER)
	p.writePEM(t, "nomad-ca.pem", "CERTIFICATE", caDER)
	issue := func(name string, serial int64, usage x509.ExtKeyUsage, dns []string, ips []net.IP) {
		key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
		if err != nil {
			t.Fatal(err)
		}
		tmpl := &x509.Certificate{
			SerialNumber: big.NewInt(serial), Subject: pkix.Name{CommonName: name},
			DNSNames: dns, IPAddresses: ips, NotBefore: now.Add(-time.Hour), NotAfter: now.Add(24 * time.Hour),
			KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{usage},
		}
		der, err := x509.CreateCertificate(rand.Reader, tmpl, ca, &key.PublicKey, caKey)
		if err != nil {
			t.Fatal(err)
		}
		keyDER, err := x509.MarshalECPrivateKey(key)
		if err != nil {
			t.Fatal(err)
		}
		p.writePEM(t, name+".pem", "CERTIFICATE", der)
		p.writePEM(t, name+"-key.pem", "EC PRIVATE KEY", keyDER)
	}
	issue("consul-server", 2, x509.ExtKeyUsageServerAuth, []string{"server.dc1.consul", "localhost"}, []net.IP{net.IPv4(127, 0, 0, 1)})
	issue("consul-cli", 3, x509.ExtKeyUsageClientAuth, []string{"cli.client.dc1.consul"}, nil)
	issue("nomad-cli", 4, x509.ExtKeyUsageClientAuth, []string{"cli.global.nomad"}, nil)
	return p
}

func (p examplePKI) writePEM(t *testing.T, name, typ string, der []byte) {
	t.Helper()
	if err := os.WriteFile(p.path(name), pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der}), 0o600); err != nil {
		t.Fatal(err)
	}
}
