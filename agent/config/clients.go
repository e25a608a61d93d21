package config

import (
	consulapi "github.com/hashicorp/consul/api"
	nomadapi "github.com/hashicorp/nomad/api"
)

// NomadAPIConfig returns a Nomad client config built from the nomad block
// alone, TLS included. It starts from a zero api.Config rather than
// api.DefaultConfig, which would read NOMAD_* a second time: Load has
// already applied the environment with the documented precedence, and the
// result must not change with the process environment at call time.
func (c *Config) NomadAPIConfig() *nomadapi.Config {
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

// ConsulAPIConfig returns a Consul client config built from the consul
// block, TLS included. Like NomadAPIConfig it does not start from
// api.DefaultConfig. Note that consulapi.NewClient itself still fills
// fields left empty here from CONSUL_* (that is not ours to change), which
// agrees with Load's precedence except when a file explicitly sets a value
// to "".
func (c *Config) ConsulAPIConfig() *consulapi.Config {
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
