package config

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/nomad-statefulset/nomad-statefulset/internal/testtls"
)

// tlsAttrCases are the attrCases of http { tls {} }, whose files must exist
// and parse: they are generated into dir, so they cannot sit in the static
// table.
func tlsAttrCases(f testtls.Files) []attrCase {
	pair := fmt.Sprintf("cert_file = %q\n    key_file = %q", f.ServerCert, f.ServerKey)
	return []attrCase{
		{"http.tls.cert_file", fmt.Sprintf("http {\n  tls {\n    %s\n  }\n}", pair), func(c *Config) any { return c.HTTP.TLS.CertFile }, f.ServerCert},
		{"http.tls.key_file", fmt.Sprintf("http {\n  tls {\n    %s\n  }\n}", pair), func(c *Config) any { return c.HTTP.TLS.KeyFile }, f.ServerKey},
		{"http.tls.ca_file", fmt.Sprintf("http {\n  tls {\n    %s\n    ca_file = %q\n  }\n}", pair, f.CACert), func(c *Config) any { return c.HTTP.TLS.CAFile }, f.CACert},
		{"http.tls.verify_https_client", fmt.Sprintf("http {\n  tls {\n    %s\n    ca_file = %q\n    verify_https_client = true\n  }\n}", pair, f.CACert),
			func(c *Config) any { return c.HTTP.TLS.VerifyHTTPSClient }, true},
	}
}

// TestLoad_HTTPTLS: the tls block takes Nomad's names, TLS is on exactly
// when cert_file is set, and it is off by default.
func TestLoad_HTTPTLS(t *testing.T) {
	f := testtls.Write(t, t.TempDir())
	if Default().HTTP.TLS.Enabled() {
		t.Fatal("TLS is on by default")
	}
	for _, tc := range tlsAttrCases(f) {
		t.Run(tc.path, func(t *testing.T) {
			c := mustLoad(t, tc.hcl)
			if !c.HTTP.TLS.Enabled() {
				t.Errorf("TLS is off with cert_file %q", c.HTTP.TLS.CertFile)
			}
			if got := tc.get(c); got != tc.want {
				t.Errorf("got %#v, want %#v", got, tc.want)
			}
			if tc.get(Default()) == tc.want {
				t.Errorf("test value %#v equals the default; pick another", tc.want)
			}
		})
	}
}

// TestLoad_HTTPTLSErrors: every mistake in http { tls {} } is reported at
// the file, line and column of the attribute at fault, and a broken file
// is named without its content.
func TestLoad_HTTPTLSErrors(t *testing.T) {
	dir := t.TempDir()
	f := testtls.Write(t, dir)
	garbage := filepath.Join(dir, "garbage.pem")
	if err := os.WriteFile(garbage, []byte("not a PEM block\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	missing := filepath.Join(dir, "missing.pem")
	cases := []struct {
		name, text, want string
	}{
		{"cert without key", fmt.Sprintf("http {\n  tls {\n    cert_file = %q\n  }\n}", f.ServerCert),
			`f0.hcl:3:17: Incomplete TLS client certificate; http.tls.cert_file: is set but http.tls.key_file is not; give both or neither.`},
		{"key without cert", fmt.Sprintf("http {\n  tls {\n    key_file = %q\n  }\n}", f.ServerKey),
			`f0.hcl:3:16: Incomplete TLS client certificate; http.tls.key_file: is set but http.tls.cert_file is not`},
		{"ca without a certificate", fmt.Sprintf("http {\n  tls {\n    ca_file = %q\n  }\n}", f.CACert),
			`f0.hcl:3:15: TLS settings without a certificate; http.tls.ca_file: ca_file verifies client certificates`},
		{"verify without a certificate", "http {\n  tls {\n    verify_https_client = true\n  }\n}",
			`f0.hcl:3:27: TLS settings without a certificate; http.tls.verify_https_client: verify_https_client needs a TLS listener`},
		{"verify without a CA", fmt.Sprintf("http {\n  tls {\n    cert_file = %q\n    key_file = %q\n    verify_https_client = true\n  }\n}", f.ServerCert, f.ServerKey),
			`f0.hcl:5:27: Client verification without a CA; http.tls.verify_https_client: verify_https_client = true needs ca_file`},
		{"missing certificate file", fmt.Sprintf("http {\n  tls {\n    cert_file = %q\n    key_file = %q\n  }\n}", missing, f.ServerKey),
			`f0.hcl:3:17: Unusable TLS certificate; http.tls.cert_file: loading the certificate ` + missing},
		{"key of another certificate", fmt.Sprintf("http {\n  tls {\n    cert_file = %q\n    key_file = %q\n  }\n}", f.ServerCert, f.ClientKey),
			`f0.hcl:3:17: Unusable TLS certificate; http.tls.cert_file: loading the certificate ` + f.ServerCert + ` with the key ` + f.ClientKey + `: tls: private key does not match public key.`},
		{"key that is no PEM", fmt.Sprintf("http {\n  tls {\n    cert_file = %q\n    key_file = %q\n  }\n}", f.ServerCert, garbage),
			`f0.hcl:3:17: Unusable TLS certificate; http.tls.cert_file: loading the certificate`},
		{"CA that is no PEM", fmt.Sprintf("http {\n  tls {\n    cert_file = %q\n    key_file = %q\n    ca_file = %q\n  }\n}", f.ServerCert, f.ServerKey, garbage),
			`f0.hcl:5:15: Unusable TLS CA; http.tls.ca_file: the CA file ` + garbage + ` holds no PEM certificate.`},
		{"missing CA", fmt.Sprintf("http {\n  tls {\n    cert_file = %q\n    key_file = %q\n    ca_file = %q\n  }\n}", f.ServerCert, f.ServerKey, missing),
			`f0.hcl:5:15: Unusable TLS CA; http.tls.ca_file: reading the CA file: open ` + missing + `: no such file or directory.`},
		{"misspelt attribute", "http {\n  tls {\n    verify_http_client = true\n  }\n}",
			`f0.hcl:3:5: Unsupported argument; An argument named "verify_http_client" is not expected here. Did you mean "verify_https_client"?`},
		{"tls as an attribute", "http {\n  tls = true\n}",
			`f0.hcl:2:3: Unsupported argument; An argument named "tls" is not expected here. Did you mean to define a block of type "tls"?`},
	}
	key, err := os.ReadFile(f.ClientKey)
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			_, diags := loadErr(t, noEnv, tc.text)
			var got []string
			for _, d := range diags {
				line := d.Summary + "; " + d.Detail
				if d.Subject != nil {
					line = rangeString(*d.Subject) + ": " + line
				}
				got = append(got, line)
				if strings.Contains(d.Detail, strings.TrimSpace(string(key))[40:80]) {
					t.Errorf("a diagnostic carries key material: %s", d.Detail)
				}
			}
			if len(got) != 1 || !strings.HasPrefix(got[0], tc.want) {
				t.Errorf("diagnostics:\n%s\nwant one starting with:\n%s", strings.Join(got, "\n"), tc.want)
			}
		})
	}
}
