package command

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"math/big"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	consulapi "github.com/hashicorp/consul/api"
	nomadapi "github.com/hashicorp/nomad/api"

	"github.com/nomad-statefulset/nomad-statefulset/agent/config"
)

// clientEnv are the variables config.Load reads, cleared by mustLoad so
// that the tests do not depend on the environment they run in.
var clientEnv = []string{"NOMAD_ADDR", "NOMAD_TOKEN", "NOMAD_REGION", "NOMAD_NAMESPACE", "NOMAD_CACERT", "NOMAD_CAPATH",
	"NOMAD_CLIENT_CERT", "NOMAD_CLIENT_KEY", "NOMAD_TLS_SERVER_NAME", "NOMAD_SKIP_VERIFY", "CONSUL_HTTP_ADDR",
	"CONSUL_HTTP_TOKEN", "CONSUL_HTTP_TOKEN_FILE", "CONSUL_HTTP_SSL", "CONSUL_CACERT", "CONSUL_CAPATH",
	"CONSUL_CLIENT_CERT", "CONSUL_CLIENT_KEY", "CONSUL_TLS_SERVER_NAME", "CONSUL_HTTP_SSL_VERIFY"}

// mustLoad loads text as the agent's one config file, with the client
// variables unset (an empty variable counts as unset), and fails the test
// on error.
func mustLoad(t *testing.T, text string) *config.Config {
	t.Helper()
	for _, name := range clientEnv {
		t.Setenv(name, "")
	}
	path := filepath.Join(t.TempDir(), "agent.hcl")
	if err := os.WriteFile(path, []byte(text), 0o600); err != nil {
		t.Fatal(err)
	}
	c, err := config.Load(path)
	if err != nil {
		t.Fatalf("load failed:\n%v", err)
	}
	return c
}

func TestNomadAPIConfig_Fields(t *testing.T) {
	c := mustLoad(t, `nomad {
  address         = "https://nomad.example:4646"
  token           = "tok"
  region          = "eu"
  namespace       = "apps"
  ca_cert         = "/ca.pem"
  ca_path         = "/ca.d"
  client_cert     = "/c.pem"
  client_key      = "/k.pem"
  tls_server_name = "server.eu.nomad"
  skip_verify     = true
}`)
	// Whatever the process environment says at call time must not matter:
	// Load already applied it.
	t.Setenv("NOMAD_ADDR", "http://process-env:1")
	t.Setenv("NOMAD_TOKEN", "process-env-token")
	got := nomadAPIConfig(c)
	want := &nomadapi.Config{
		Address: "https://nomad.example:4646", SecretID: "tok", Region: "eu", Namespace: "apps",
		TLSConfig: &nomadapi.TLSConfig{
			CACert: "/ca.pem", CAPath: "/ca.d", ClientCert: "/c.pem", ClientKey: "/k.pem",
			TLSServerName: "server.eu.nomad", Insecure: true,
		},
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("NomadAPIConfig() =\n%+v %+v\nwant\n%+v %+v", got, got.TLSConfig, want, want.TLSConfig)
	}
	// Each call builds a new value; a client that mutates it (NewClient
	// does) cannot change the next one.
	if nomadAPIConfig(c) == got || nomadAPIConfig(c).TLSConfig == got.TLSConfig {
		t.Errorf("NomadAPIConfig returns shared values")
	}
}

func TestConsulAPIConfig_Fields(t *testing.T) {
	c := mustLoad(t, `consul {
  address              = "consul.example:8501"
  token                = "tok"
  datacenter           = "dc2"
  ssl                  = true
  ca_file              = "/ca.pem"
  ca_path              = "/ca.d"
  cert_file            = "/c.pem"
  key_file             = "/k.pem"
  tls_server_name      = "server.dc2.consul"
  insecure_skip_verify = true
}`)
	got := consulAPIConfig(c)
	if got.Transport == nil || got.Transport.MaxIdleConnsPerHost != idleConnections(c) {
		t.Errorf("consul transport keeps %v idle connections, want %d", got.Transport, idleConnections(c))
	}
	got.Transport = nil // compared on its own above
	want := &consulapi.Config{
		Address: "consul.example:8501", Scheme: "https", Datacenter: "dc2", Token: "tok",
		TLSConfig: consulapi.TLSConfig{
			Address: "server.dc2.consul", CAFile: "/ca.pem", CAPath: "/ca.d", CertFile: "/c.pem", KeyFile: "/k.pem",
			InsecureSkipVerify: true,
		},
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("ConsulAPIConfig() =\n%+v\nwant\n%+v", got, want)
	}
	if d := consulAPIConfig(config.Default()); d.Scheme != "http" || d.Address != config.DefaultConsulAddress {
		t.Errorf("default consul config: scheme=%q address=%q", d.Scheme, d.Address)
	}
	tf := consulAPIConfig(mustLoad(t, `consul { token_file = "/run/consul.token" }`))
	if tf.TokenFile != "/run/consul.token" || tf.Token != "" {
		t.Errorf("token_file not passed: %+v", tf)
	}
}

// pki is a throwaway CA with a server and a client certificate on disk.
type pki struct {
	dir                         string
	caFile, certFile, keyFile   string
	serverCert                  tls.Certificate
	pool                        *x509.CertPool
	otherCertFile, otherKeyFile string // signed by an unrelated CA
}

func newPKI(t *testing.T, serverName string) *pki {
	t.Helper()
	dir := t.TempDir()
	caKey, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	caTmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "test CA"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign,
	}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	ca, _ := x509.ParseCertificate(caDER)
	p := &pki{dir: dir, pool: x509.NewCertPool()}
	p.pool.AddCert(ca)
	p.caFile = writePEM(t, dir, "ca.pem", "CERTIFICATE", caDER)

	issue := func(name string, serial int64, usage x509.ExtKeyUsage, signer *x509.Certificate, signerKey *ecdsa.PrivateKey) ([]byte, *ecdsa.PrivateKey) {
		key, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
		tmpl := &x509.Certificate{
			SerialNumber: big.NewInt(serial), Subject: pkix.Name{CommonName: name},
			DNSNames: []string{name}, NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
			KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{usage},
		}
		der, err := x509.CreateCertificate(rand.Reader, tmpl, signer, &key.PublicKey, signerKey)
		if err != nil {
			t.Fatal(err)
		}
		return der, key
	}
	// The server certificate names only serverName, not 127.0.0.1: the
	// connection succeeds only if tls_server_name reaches the TLS config.
	sDER, sKey := issue(serverName, 2, x509.ExtKeyUsageServerAuth, ca, caKey)
	p.serverCert = tls.Certificate{Certificate: [][]byte{sDER}, PrivateKey: sKey}
	cDER, cKey := issue("client", 3, x509.ExtKeyUsageClientAuth, ca, caKey)
	p.certFile = writePEM(t, dir, "client.pem", "CERTIFICATE", cDER)
	p.keyFile = writeKey(t, dir, "client-key.pem", cKey)

	otherKey, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	otherCA := &x509.Certificate{SerialNumber: big.NewInt(9), Subject: pkix.Name{CommonName: "other CA"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour), IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign}
	oDER, oKey := issue("intruder", 4, x509.ExtKeyUsageClientAuth, otherCA, otherKey)
	p.otherCertFile = writePEM(t, dir, "other.pem", "CERTIFICATE", oDER)
	p.otherKeyFile = writeKey(t, dir, "other-key.pem", oKey)
	return p
}

func writePEM(t *testing.T, dir, name, typ string, der []byte) string {
	t.Helper()
	p := filepath.Join(dir, name)
	if err := os.WriteFile(p, pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der}), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

func writeKey(t *testing.T, dir, name string, key *ecdsa.PrivateKey) string {
	t.Helper()
	der, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	return writePEM(t, dir, name, "EC PRIVATE KEY", der)
}

// mTLSServer answers /v1/status/leader (the same path on Nomad and Consul)
// only to clients with a certificate from the CA, and records the token.
func mTLSServer(t *testing.T, p *pki, tokenHeader string, gotToken *string) *httptest.Server {
	t.Helper()
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/v1/status/leader" {
			http.NotFound(w, r)
			return
		}
		*gotToken = r.Header.Get(tokenHeader)
		fmt.Fprint(w, `"10.0.0.1:4647"`)
	}))
	srv.TLS = &tls.Config{
		Certificates: []tls.Certificate{p.serverCert},
		ClientAuth:   tls.RequireAndVerifyClientCert,
		ClientCAs:    p.pool,
		MinVersion:   tls.VersionTLS12,
	}
	srv.StartTLS()
	t.Cleanup(srv.Close)
	return srv
}

// TestNomadAPIConfig_MutualTLS: a config file with the TLS settings gives a
// Nomad client that completes an mTLS handshake, checks the server name,
// and sends the token; and fails with a certificate from another CA.
func TestNomadAPIConfig_MutualTLS(t *testing.T) {
	p := newPKI(t, "server.global.nomad")
	var token string
	srv := mTLSServer(t, p, "X-Nomad-Token", &token)

	cfgText := func(cert, key, serverName string) string {
		return fmt.Sprintf(`nomad {
  address         = %q
  token           = "nomad-acl-token"
  ca_cert         = %q
  client_cert     = %q
  client_key      = %q
  tls_server_name = %q
}`, srv.URL, p.caFile, cert, key, serverName)
	}
	leader := func(text string) (string, error) {
		c := mustLoad(t, text)
		client, err := newNomadClient(c)
		if err != nil {
			return "", err
		}
		return client.Status().Leader()
	}

	got, err := leader(cfgText(p.certFile, p.keyFile, "server.global.nomad"))
	if err != nil || got != "10.0.0.1:4647" {
		t.Fatalf("mTLS call failed: %q, %v", got, err)
	}
	if token != "nomad-acl-token" {
		t.Errorf("server saw token %q", token)
	}
	if _, err := leader(cfgText(p.otherCertFile, p.otherKeyFile, "server.global.nomad")); err == nil {
		t.Errorf("a client certificate from another CA was accepted")
	}
	if _, err := leader(cfgText(p.certFile, p.keyFile, "server.other.nomad")); err == nil || !strings.Contains(err.Error(), "certificate") {
		t.Errorf("a wrong tls_server_name was accepted: %v", err)
	}
}

// TestConsulAPIConfig_MutualTLS: the same for Consul, through both ways of
// asking for TLS (ssl = true, and an https:// address).
func TestConsulAPIConfig_MutualTLS(t *testing.T) {
	p := newPKI(t, "server.dc1.consul")
	var token string
	srv := mTLSServer(t, p, "X-Consul-Token", &token)
	hostPort := strings.TrimPrefix(srv.URL, "https://")
	if _, _, err := net.SplitHostPort(hostPort); err != nil {
		t.Fatal(err)
	}
	for name, addr := range map[string]string{
		"ssl":   fmt.Sprintf("address = %q\n  ssl = true", hostPort),
		"https": fmt.Sprintf("address = %q", srv.URL),
	} {
		t.Run(name, func(t *testing.T) {
			c := mustLoad(t, fmt.Sprintf(`consul {
  %s
  token           = "consul-acl-token"
  ca_file         = %q
  cert_file       = %q
  key_file        = %q
  tls_server_name = "server.dc1.consul"
}`, addr, p.caFile, p.certFile, p.keyFile))
			client, err := consulapi.NewClient(consulAPIConfig(c))
			if err != nil {
				t.Fatal(err)
			}
			got, err := client.Status().Leader()
			if err != nil || got != "10.0.0.1:4647" {
				t.Fatalf("mTLS call failed: %q, %v", got, err)
			}
			if token != "consul-acl-token" {
				t.Errorf("server saw token %q", token)
			}
		})
	}
}

// TestClientsReuseConnectionsAcrossWorkers: the daemon's Nomad and Consul
// clients keep a connection per worker between calls. With the api
// packages' default pool (GOMAXPROCS + 1 idle connections), workers that
// call at once close most of their connections after each answer and dial
// new ones: Nomad and Consul then accept a connection per write.
func TestClientsReuseConnectionsAcrossWorkers(t *testing.T) {
	const workers, rounds = 16, 10
	var dialed atomic.Int64
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprint(w, `"10.0.0.1:4647"`)
	}))
	srv.Config.ConnState = func(_ net.Conn, s http.ConnState) {
		if s == http.StateNew {
			dialed.Add(1)
		}
	}
	srv.Start()
	t.Cleanup(srv.Close)
	c := mustLoad(t, fmt.Sprintf("workers = %d\nnomad { address = %q }\nconsul { address = %q }", workers, srv.URL, strings.TrimPrefix(srv.URL, "http://")))

	nc, err := newNomadClient(c)
	if err != nil {
		t.Fatal(err)
	}
	cc, err := consulapi.NewClient(consulAPIConfig(c))
	if err != nil {
		t.Fatal(err)
	}
	for name, call := range map[string]func() (string, error){
		"nomad":  func() (string, error) { return nc.Status().Leader() },
		"consul": func() (string, error) { return cc.Status().Leader() },
	} {
		t.Run(name, func(t *testing.T) {
			before := dialed.Load()
			for range rounds {
				var wg sync.WaitGroup
				for range workers {
					wg.Add(1)
					go func() {
						defer wg.Done()
						if _, err := call(); err != nil {
							t.Error(err)
						}
					}()
				}
				wg.Wait()
			}
			// The first round dials one connection per worker; later
			// rounds find them idle. Twice that leaves room for a
			// connection not yet back in the pool when the next round
			// starts; the default pool dials about 13 a round here.
			if n := dialed.Load() - before; n > 2*workers {
				t.Fatalf("%d calls by %d workers dialed %d connections; want at most %d", rounds*workers, workers, n, 2*workers)
			}
		})
	}
}
