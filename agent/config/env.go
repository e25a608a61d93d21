package config

import (
	"fmt"
	"strconv"

	"github.com/hashicorp/hcl/v2"
)

// envBinding ties one environment variable to one attribute.
type envBinding struct {
	name string
	path string
	set  func(c *Config, v string) error
}

// envBindings are the NOMAD_* and CONSUL_* variables the agent honours, with
// the meaning the Nomad and Consul clients give them. They form the layer
// between the defaults and the files. An empty variable counts as unset, as
// in both clients.
var envBindings = []envBinding{
	{"NOMAD_ADDR", "nomad.address", func(c *Config, v string) error { c.Nomad.Address = v; return nil }},
	{"NOMAD_TOKEN", "nomad.token", func(c *Config, v string) error { c.Nomad.Token = Secret(v); return nil }},
	{"NOMAD_REGION", "nomad.region", func(c *Config, v string) error { c.Nomad.Region = v; return nil }},
	{"NOMAD_NAMESPACE", "nomad.namespace", func(c *Config, v string) error { c.Nomad.Namespace = v; return nil }},
	{"NOMAD_CACERT", "nomad.ca_cert", func(c *Config, v string) error { c.Nomad.CACert = v; return nil }},
	{"NOMAD_CAPATH", "nomad.ca_path", func(c *Config, v string) error { c.Nomad.CAPath = v; return nil }},
	{"NOMAD_CLIENT_CERT", "nomad.client_cert", func(c *Config, v string) error { c.Nomad.ClientCert = v; return nil }},
	{"NOMAD_CLIENT_KEY", "nomad.client_key", func(c *Config, v string) error { c.Nomad.ClientKey = v; return nil }},
	{"NOMAD_TLS_SERVER_NAME", "nomad.tls_server_name", func(c *Config, v string) error { c.Nomad.TLSServerName = v; return nil }},
	{"NOMAD_SKIP_VERIFY", "nomad.skip_verify", func(c *Config, v string) error { return parseBool(v, &c.Nomad.SkipVerify) }},

	{"CONSUL_HTTP_ADDR", "consul.address", func(c *Config, v string) error { c.Consul.Address = v; return nil }},
	{"CONSUL_HTTP_TOKEN", "consul.token", func(c *Config, v string) error { c.Consul.Token = Secret(v); return nil }},
	{"CONSUL_HTTP_TOKEN_FILE", "consul.token_file", func(c *Config, v string) error { c.Consul.TokenFile = v; return nil }},
	{"CONSUL_HTTP_SSL", "consul.ssl", func(c *Config, v string) error { return parseBool(v, &c.Consul.SSL) }},
	{"CONSUL_CACERT", "consul.ca_file", func(c *Config, v string) error { c.Consul.CAFile = v; return nil }},
	{"CONSUL_CAPATH", "consul.ca_path", func(c *Config, v string) error { c.Consul.CAPath = v; return nil }},
	{"CONSUL_CLIENT_CERT", "consul.cert_file", func(c *Config, v string) error { c.Consul.CertFile = v; return nil }},
	{"CONSUL_CLIENT_KEY", "consul.key_file", func(c *Config, v string) error { c.Consul.KeyFile = v; return nil }},
	{"CONSUL_TLS_SERVER_NAME", "consul.tls_server_name", func(c *Config, v string) error { c.Consul.TLSServerName = v; return nil }},
	// CONSUL_HTTP_SSL_VERIFY says whether to verify; the attribute says
	// whether to skip, hence the negation.
	{"CONSUL_HTTP_SSL_VERIFY", "consul.insecure_skip_verify", func(c *Config, v string) error {
		var verify bool
		if err := parseBool(v, &verify); err != nil {
			return err
		}
		c.Consul.InsecureSkipVerify = !verify
		return nil
	}},
}

// envVars lists the environment variables Load honours; the tests check
// each has a precedence case.
func envVars() []string {
	out := make([]string, len(envBindings))
	for i, b := range envBindings {
		out[i] = b.name
	}
	return out
}

// parseBool accepts what strconv.ParseBool accepts, as both clients do.
func parseBool(v string, dst *bool) error {
	b, err := strconv.ParseBool(v)
	if err != nil {
		return fmt.Errorf("%q is not a boolean; use true or false", v)
	}
	*dst = b
	return nil
}

// applyEnv applies the environment layer and records each value's origin.
// A malformed value is an error, not silently ignored as the Nomad and
// Consul clients do: an operator who exported NOMAD_SKIP_VERIFY=yes-please
// should hear about it.
func applyEnv(c *Config, lookup lookupEnvFunc) hcl.Diagnostics {
	var diags hcl.Diagnostics
	for _, b := range envBindings {
		v, ok := lookup(b.name)
		if !ok || v == "" {
			continue
		}
		if err := b.set(c, v); err != nil {
			diags = append(diags, &hcl.Diagnostic{
				Severity: hcl.DiagError,
				Summary:  fmt.Sprintf("Invalid environment variable %s", b.name),
				Detail:   fmt.Sprintf("%s (it sets %s): %v.", b.name, b.path, err),
			})
			continue
		}
		c.origins[b.path] = origin{env: b.name}
	}
	return diags
}
