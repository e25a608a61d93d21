package command

import (
	"crypto/tls"
	"fmt"
	"net/http"
	"net/url"
	"time"

	consulapi "github.com/hashicorp/consul/api"
	"github.com/hashicorp/go-cleanhttp"
	nomadapi "github.com/hashicorp/nomad/api"

	"github.com/nomad-statefulset/nomad-statefulset/agent/config"
)

// The API client configs are built here, where the agent is wired
// (DESIGN §5), and not in agent/config: the configuration package stays
// free of the Nomad and Consul API packages, so the agent's own layer does
// not import github.com/hashicorp/nomad/api.

// nomadAPIConfig returns a Nomad client config built from the nomad block
// alone, TLS included. It starts from a zero api.Config rather than
// api.DefaultConfig, which would read NOMAD_* a second time: Load has
// already applied the environment with the documented precedence, and the
// result must not change with the process environment at call time.
func nomadAPIConfig(c *config.Config) *nomadapi.Config {
	n := &c.Nomad
	return &nomadapi.Config{
		Address:   n.Address,
		Region:    n.Region,
		Namespace: n.Namespace,
		SecretID:  n.Token.Reveal(),
		TLSConfig: &nomadapi.TLSConfig{
			CACert:        n.CACert,
			CAPath:        n.CAPath,
			ClientCert:    n.ClientCert,
			ClientKey:     n.ClientKey,
			TLSServerName: n.TLSServerName,
			Insecure:      n.SkipVerify,
		},
	}
}

// idleConnections is how many idle connections to each of Nomad and
// Consul the daemon keeps for reuse: one per reconcile worker, which call
// at once, and some for the event stream, the watches and the HTTP API's
// reads. The api packages' default (go-cleanhttp's) keeps GOMAXPROCS + 1:
// on a 2-core host, 13 of 16 workers writing at once each closed its
// connection after the answer and dialed a new one for the next call, so
// Nomad and Consul accepted a connection for most of the daemon's writes.
func idleConnections(c *config.Config) int {
	return max(c.Workers, 1) + 8
}

// pooledTransport is go-cleanhttp's pooled transport, as both api packages
// build theirs, keeping idleConnections of them.
func pooledTransport(c *config.Config) *http.Transport {
	t := cleanhttp.DefaultPooledTransport()
	t.MaxIdleConnsPerHost = idleConnections(c)
	t.MaxIdleConns = max(t.MaxIdleConns, t.MaxIdleConnsPerHost)
	return t
}

// newNomadClient is the daemon's Nomad client: nomadAPIConfig over a
// transport that keeps idleConnections. Nomad's api package applies
// TLSConfig only to a client it builds itself, so this sets up the rest
// of what it would (its defaultClient: TLS 1.2 at least, HTTP/1 for exec)
// and then applies TLSConfig with the package's own ConfigureTLS. A
// unix:// address keeps the package's own client.
func newNomadClient(c *config.Config) (*nomadapi.Client, error) {
	cfg := nomadAPIConfig(c)
	if u, err := url.Parse(cfg.Address); err == nil && u.Scheme != "unix" {
		t := pooledTransport(c)
		t.TLSHandshakeTimeout = 10 * time.Second
		t.TLSClientConfig = &tls.Config{MinVersion: tls.VersionTLS12}
		t.ForceAttemptHTTP2 = false
		hc := &http.Client{Transport: t}
		if err := nomadapi.ConfigureTLS(hc, cfg.TLSConfig); err != nil {
			return nil, fmt.Errorf("configuring TLS for Nomad at %s: %w", cfg.Address, err)
		}
		cfg.HttpClient = hc
	}
	return nomadapi.NewClient(cfg)
}

// consulAPIConfig returns a Consul client config built from the consul
// block, TLS included. Like nomadAPIConfig it does not start from
// api.DefaultConfig. Note that consulapi.NewClient itself still fills
// fields left empty here from CONSUL_* (that is not ours to change), which
// agrees with Load's precedence except when a file explicitly sets a value
// to "".
func consulAPIConfig(c *config.Config) *consulapi.Config {
	cc := &c.Consul
	scheme := "http"
	if cc.SSL {
		scheme = "https"
	}
	return &consulapi.Config{
		// The api package applies TLSConfig to this transport.
		Transport: pooledTransport(c),
		// An https:// or unix:// address keeps its scheme; NewClient reads it
		// and overrides Scheme.
		Address:    cc.Address,
		Scheme:     scheme,
		Datacenter: cc.Datacenter,
		Token:      cc.Token.Reveal(),
		TokenFile:  cc.TokenFile,
		TLSConfig: consulapi.TLSConfig{
			Address:            cc.TLSServerName,
			CAFile:             cc.CAFile,
			CAPath:             cc.CAPath,
			CertFile:           cc.CertFile,
			KeyFile:            cc.KeyFile,
			InsecureSkipVerify: cc.InsecureSkipVerify,
		},
	}
}
