package config

import (
	"strings"
	"testing"
	"time"
)

// envCase is one honoured variable: the value to export, the HCL that
// overrides it, and how to read the attribute.
type envCase struct {
	env, value string
	file       string
	get        func(c *Config) any
	want       any // from the environment
	fileWant   any // from the file
}

var envCases = []envCase{
	{"NOMAD_ADDR", "https://env:4646", `nomad { address = "https://file:4646" }`, func(c *Config) any { return c.Nomad.Address }, "https://env:4646", "https://file:4646"},
	{"NOMAD_TOKEN", "env-token", `nomad { token = "file-token" }`, func(c *Config) any { return c.Nomad.Token.Reveal() }, "env-token", "file-token"},
	{"NOMAD_REGION", "env-r", `nomad { region = "file-r" }`, func(c *Config) any { return c.Nomad.Region }, "env-r", "file-r"},
	{"NOMAD_NAMESPACE", "env-ns", `nomad { namespace = "file-ns" }`, func(c *Config) any { return c.Nomad.Namespace }, "env-ns", "file-ns"},
	{"NOMAD_CACERT", "/env/ca", `nomad { ca_cert = "/file/ca" }`, func(c *Config) any { return c.Nomad.CACert }, "/env/ca", "/file/ca"},
	{"NOMAD_CAPATH", "/env/ca.d", `nomad { ca_path = "/file/ca.d" }`, func(c *Config) any { return c.Nomad.CAPath }, "/env/ca.d", "/file/ca.d"},
	{"NOMAD_CLIENT_CERT", "/env/c", "nomad {\n client_cert = \"/file/c\"\n client_key = \"/k\"\n}", func(c *Config) any { return c.Nomad.ClientCert }, "/env/c", "/file/c"},
	{"NOMAD_CLIENT_KEY", "/env/k", "nomad {\n client_key = \"/file/k\"\n client_cert = \"/c\"\n}", func(c *Config) any { return c.Nomad.ClientKey }, "/env/k", "/file/k"},
	{"NOMAD_TLS_SERVER_NAME", "env.nomad", `nomad { tls_server_name = "file.nomad" }`, func(c *Config) any { return c.Nomad.TLSServerName }, "env.nomad", "file.nomad"},
	{"NOMAD_SKIP_VERIFY", "true", `nomad { skip_verify = false }`, func(c *Config) any { return c.Nomad.SkipVerify }, true, false},

	{"CONSUL_HTTP_ADDR", "env:8500", `consul { address = "file:8500" }`, func(c *Config) any { return c.Consul.Address }, "env:8500", "file:8500"},
	{"CONSUL_HTTP_TOKEN", "env-ct", `consul { token = "file-ct" }`, func(c *Config) any { return c.Consul.Token.Reveal() }, "env-ct", "file-ct"},
	{"CONSUL_HTTP_TOKEN_FILE", "/env/tf", `consul { token_file = "/file/tf" }`, func(c *Config) any { return c.Consul.TokenFile }, "/env/tf", "/file/tf"},
	{"CONSUL_HTTP_SSL", "1", `consul { ssl = false }`, func(c *Config) any { return c.Consul.SSL }, true, false},
	{"CONSUL_CACERT", "/env/ca", `consul { ca_file = "/file/ca" }`, func(c *Config) any { return c.Consul.CAFile }, "/env/ca", "/file/ca"},
	{"CONSUL_CAPATH", "/env/ca.d", `consul { ca_path = "/file/ca.d" }`, func(c *Config) any { return c.Consul.CAPath }, "/env/ca.d", "/file/ca.d"},
	{"CONSUL_CLIENT_CERT", "/env/c", "consul {\n cert_file = \"/file/c\"\n key_file = \"/k\"\n}", func(c *Config) any { return c.Consul.CertFile }, "/env/c", "/file/c"},
	{"CONSUL_CLIENT_KEY", "/env/k", "consul {\n key_file = \"/file/k\"\n cert_file = \"/c\"\n}", func(c *Config) any { return c.Consul.KeyFile }, "/env/k", "/file/k"},
	{"CONSUL_TLS_SERVER_NAME", "env.consul", `consul { tls_server_name = "file.consul" }`, func(c *Config) any { return c.Consul.TLSServerName }, "env.consul", "file.consul"},
	// SSL_VERIFY=false means skip verification.
	{"CONSUL_HTTP_SSL_VERIFY", "false", `consul { insecure_skip_verify = false }`, func(c *Config) any { return c.Consul.InsecureSkipVerify }, true, false},
}

// TestEnv_Precedence: default < environment < file, for every variable.
func TestEnv_Precedence(t *testing.T) {
	covered := map[string]bool{}
	for _, tc := range envCases {
		covered[tc.env] = true
		t.Run(tc.env, func(t *testing.T) {
			env := envOf(map[string]string{tc.env: tc.value})
			// For the pairs (cert/key), the partner must be present too.
			partner := map[string]string{
				"NOMAD_CLIENT_CERT": "NOMAD_CLIENT_KEY", "NOMAD_CLIENT_KEY": "NOMAD_CLIENT_CERT",
				"CONSUL_CLIENT_CERT": "CONSUL_CLIENT_KEY", "CONSUL_CLIENT_KEY": "CONSUL_CLIENT_CERT",
			}
			if p, ok := partner[tc.env]; ok {
				env = envOf(map[string]string{tc.env: tc.value, p: "/partner"})
			}

			def := tc.get(Default())
			if def == tc.want {
				t.Fatalf("test value equals the default %v; pick another", def)
			}
			// Environment alone beats the default.
			c, err := loadText(env, "")
			if err != nil {
				t.Fatal(err)
			}
			if got := tc.get(c); got != tc.want {
				t.Errorf("env only: got %#v, want %#v", got, tc.want)
			}
			// A file beats the environment, even when it sets the default.
			c, err = loadText(env, tc.file)
			if err != nil {
				t.Fatal(err)
			}
			if got := tc.get(c); got != tc.fileWant {
				t.Errorf("env and file: got %#v, want the file's %#v", got, tc.fileWant)
			}
			// An empty variable counts as unset.
			c, err = loadText(envOf(map[string]string{tc.env: ""}), "")
			if err != nil {
				t.Fatal(err)
			}
			if got := tc.get(c); got != def {
				t.Errorf("empty env: got %#v, want the default %#v", got, def)
			}
		})
	}
	for _, name := range envVars() {
		if !covered[name] {
			t.Errorf("%s is honoured but has no precedence case", name)
		}
	}
	if len(envVars()) != 20 {
		t.Errorf("envVars() = %d names, want the 10 NOMAD_* and 10 CONSUL_* of the contract", len(envVars()))
	}
}

// TestEnv_ProcessEnvironment: the exported Load reads the real environment.
func TestEnv_ProcessEnvironment(t *testing.T) {
	clearEnv(t)
	t.Setenv("NOMAD_ADDR", "https://from-process-env:4646")
	t.Setenv("CONSUL_HTTP_TOKEN", "process-token")
	c, err := Load()
	if err != nil {
		t.Fatal(err)
	}
	if c.Nomad.Address != "https://from-process-env:4646" || c.Consul.Token.Reveal() != "process-token" {
		t.Errorf("Load ignored the environment: address=%q", c.Nomad.Address)
	}
}

func TestEnv_BadBooleanNamesVariable(t *testing.T) {
	_, diags := loadErr(t, envOf(map[string]string{"NOMAD_SKIP_VERIFY": "yes-please", "CONSUL_HTTP_SSL_VERIFY": "nah"}), "")
	if len(diags) != 2 {
		t.Fatalf("want 2 diagnostics, got %d: %v", len(diags), diags)
	}
	want := []struct{ name, value string }{{"NOMAD_SKIP_VERIFY", "yes-please"}, {"CONSUL_HTTP_SSL_VERIFY", "nah"}}
	for i, w := range want {
		if !strings.Contains(diags[i].Summary, w.name) || !strings.Contains(diags[i].Detail, w.value) {
			t.Errorf("diagnostic %d does not name %s=%s: %s; %s", i, w.name, w.value, diags[i].Summary, diags[i].Detail)
		}
	}
}

// TestEnv_ValidationNamesVariable: a bad value from the environment has no
// file position, so the message names the variable instead.
func TestEnv_ValidationNamesVariable(t *testing.T) {
	ce, _ := loadErr(t, envOf(map[string]string{"NOMAD_ADDR": "127.0.0.1:4646"}), "")
	msg := ce.Error()
	for _, want := range []string{"nomad.address", "NOMAD_ADDR", `Did you mean "http://127.0.0.1:4646"`} {
		if !strings.Contains(msg, want) {
			t.Errorf("error %q does not contain %q", msg, want)
		}
	}
}

// TestEnv_ConsulTokenPrecedence: token and token_file are one setting; the
// higher layer's wins, and in one layer of env the file wins as in Consul.
func TestEnv_ConsulTokenPrecedence(t *testing.T) {
	cases := []struct {
		name              string
		env               map[string]string
		file              string
		wantToken, wantTF string
	}{
		{"env token only", map[string]string{"CONSUL_HTTP_TOKEN": "e"}, "", "e", ""},
		{"env both: token file wins, as in consul/api", map[string]string{"CONSUL_HTTP_TOKEN": "e", "CONSUL_HTTP_TOKEN_FILE": "/e"}, "", "", "/e"},
		{"file token beats env token file", map[string]string{"CONSUL_HTTP_TOKEN_FILE": "/e"}, `consul { token = "f" }`, "f", ""},
		{"file token file beats env token", map[string]string{"CONSUL_HTTP_TOKEN": "e"}, `consul { token_file = "/f" }`, "", "/f"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			c, err := loadText(envOf(tc.env), tc.file)
			if err != nil {
				t.Fatal(err)
			}
			if c.Consul.Token.Reveal() != tc.wantToken || c.Consul.TokenFile != tc.wantTF {
				t.Errorf("token=%q token_file=%q, want %q %q", c.Consul.Token.Reveal(), c.Consul.TokenFile, tc.wantToken, tc.wantTF)
			}
		})
	}
	ce, _ := loadErr(t, noEnv, "consul {\n  token = \"a\"\n  token_file = \"/b\"\n}\n")
	if !strings.Contains(ce.Error(), "f0.hcl:3:16: Conflicting consul token settings") {
		t.Errorf("both in a file: %v", ce)
	}
}

func TestEnvFunction(t *testing.T) {
	env := envOf(map[string]string{"SET": "value", "EMPTY": "", "TTL": "45s"})
	cases := []struct {
		name string
		text string
		get  func(c *Config) any
		want any
	}{
		{"set", `nomad { region = env("SET") }`, func(c *Config) any { return c.Nomad.Region }, "value"},
		{"set but empty is empty, not unset", `nomad { region = env("EMPTY", "fallback") }`, func(c *Config) any { return c.Nomad.Region }, ""},
		{"unset takes the default", `nomad { region = env("UNSET", "fallback") }`, func(c *Config) any { return c.Nomad.Region }, "fallback"},
		{"null default keeps the layer below", `nomad { token = env("UNSET", null) }`, func(c *Config) any { return c.Nomad.Token.Reveal() }, ""},
		{"in templates", `data_dir = "/srv/${env("SET")}/data"`, func(c *Config) any { return c.DataDir }, "/srv/value/data"},
		{"into a duration", `high_availability { session_ttl = env("TTL") }`, func(c *Config) any { return c.HighAvailability.SessionTTL }, 45 * time.Second},
		{"in a map", `plugin "p" { config = { k = env("SET") } }`, func(c *Config) any { return c.Plugin("p").Config["k"] }, "value"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			c, err := loadText(env, tc.text)
			if err != nil {
				t.Fatal(err)
			}
			if got := tc.get(c); got != tc.want {
				t.Errorf("got %#v, want %#v", got, tc.want)
			}
		})
	}

	// null default over a value from NOMAD_TOKEN keeps NOMAD_TOKEN.
	c, err := loadText(envOf(map[string]string{"NOMAD_TOKEN": "from-env"}), `nomad { token = env("UNSET", null) }`)
	if err != nil || c.Nomad.Token.Reveal() != "from-env" {
		t.Errorf("env(x, null) did not fall back to NOMAD_TOKEN: %v", err)
	}

	errCases := []struct {
		name, text, want string
	}{
		{"unset without default", `nomad { token = env("MISSING_TOKEN") }`, `f0.hcl:1:17: Error in function call; Call to function "env" failed: environment variable MISSING_TOKEN is not set`},
		{"too many arguments", `nomad { region = env("A", "b", "c") }`, `f0.hcl:1:33: Invalid function argument; Invalid value for "default" parameter: env takes a name and at most one default, got 3 arguments`},
		{"no arguments", `nomad { region = env() }`, `f0.hcl:1:22: Not enough function arguments`},
		{"empty name", `nomad { region = env("") }`, `f0.hcl:1:24: Invalid function argument; Invalid value for "name" parameter: the variable name must not be empty`},
		{"unknown function", `nomad { region = envv("A") }`, `f0.hcl:1:18: Call to unknown function; There is no function named "envv". Did you mean "env"?`},
	}
	for _, tc := range errCases {
		t.Run(tc.name, func(t *testing.T) {
			ce, _ := loadErr(t, env, tc.text)
			if !strings.Contains(ce.Error(), tc.want) {
				t.Errorf("error:\n%v\nwant it to contain:\n%s", ce, tc.want)
			}
		})
	}
}
