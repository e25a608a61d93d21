package command

import (
	consulapi "github.com/hashicorp/consul/api"
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
