package client

import (
	"context"
	"crypto/tls"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

	"github.com/nomad-statefulset/nomad-statefulset/internal/testtls"
)

// agentServer is an httptest agent over TLS conf (plain HTTP when nil)
// that records the X-Nomad-Token of each request and answers 403 without
// "good".
func agentServer(t *testing.T, conf *tls.Config, tokens *[]string) *httptest.Server {
	t.Helper()
	var mu sync.Mutex
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		*tokens = append(*tokens, r.Header.Get(TokenHeader))
		mu.Unlock()
		if r.Header.Get(TokenHeader) != "good" {
			w.WriteHeader(http.StatusForbidden)
			_, _ = w.Write([]byte(`{"error": "the token needs read-job in namespace \"default\""}`))
			return
		}
		_, _ = w.Write([]byte(`{"sets": [{"namespace": "default", "name": "web"}]}`))
	}))
	if conf != nil {
		srv.TLS = conf
		srv.StartTLS()
	} else {
		srv.Start()
	}
	t.Cleanup(srv.Close)
	return srv
}

// TestClientTLSAndToken: the client sends the token as X-Nomad-Token,
// verifies the agent's certificate against CACert (or skips it when told),
// presents a client certificate to an agent that requires one, and fails
// with an error that names the problem and never the token.
func TestClientTLSAndToken(t *testing.T) {
	f := testtls.Write(t, t.TempDir())
	server := f.ServerTLS(t)
	mtls := f.ServerTLS(t)
	mtls.ClientCAs, mtls.ClientAuth = f.Pool, tls.RequireAndVerifyClientCert
	cases := []struct {
		name      string
		server    *tls.Config
		scheme    string // the scheme the client is given
		cfg       Config
		ok        bool
		forbidden bool
		errHas    string
	}{
		{"https with the CA and a token", server, "https", Config{Token: "good", CACert: f.CACert}, true, false, ""},
		{"http with a token", nil, "http", Config{Token: "good"}, true, false, ""},
		{"no token is a 403", server, "https", Config{CACert: f.CACert}, false, true, "read-job"},
		{"a wrong token is a 403, not echoed", server, "https", Config{Token: "s3cr3t-wrong", CACert: f.CACert}, false, true, "read-job"},
		{"https without the CA", server, "https", Config{Token: "good"}, false, false, "certificate"},
		{"https with another CA", server, "https", Config{Token: "good", CACert: f.OtherCACert}, false, false, "certificate"},
		{"https skipping verification", server, "https", Config{Token: "good", SkipVerify: true}, true, false, ""},
		{"plain http to a TLS agent", server, "http", Config{Token: "good"}, false, false, "HTTPS server"},
		{"https to a plain agent", nil, "https", Config{Token: "good", CACert: f.CACert}, false, false, "HTTP response to HTTPS client"},
		{"mTLS with a client certificate", mtls, "https", Config{Token: "good", CACert: f.CACert, ClientCert: f.ClientCert, ClientKey: f.ClientKey}, true, false, ""},
		{"mTLS without a client certificate", mtls, "https", Config{Token: "good", CACert: f.CACert}, false, false, "certificate"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			var tokens []string
			srv := agentServer(t, tc.server, &tokens)
			cfg := tc.cfg
			cfg.Address = tc.scheme + "://" + strings.TrimPrefix(strings.TrimPrefix(srv.URL, "https://"), "http://")
			c, err := NewWithConfig(cfg)
			if err != nil {
				t.Fatal(err)
			}
			list, err := c.ListSets(context.Background(), "")
			if tc.ok {
				if err != nil || len(list.Sets) != 1 {
					t.Fatalf("ListSets: %v %+v", err, list)
				}
				if len(tokens) != 1 || tokens[0] != cfg.Token {
					t.Fatalf("the agent saw tokens %q, want %q", tokens, cfg.Token)
				}
				return
			}
			if err == nil {
				t.Fatal("ListSets succeeded")
			}
			if got := errors.Is(err, ErrForbidden); got != tc.forbidden {
				t.Errorf("errors.Is(ErrForbidden) = %v: %v", got, err)
			}
			if !strings.Contains(err.Error(), tc.errHas) {
				t.Errorf("the error %q does not name %q", err, tc.errHas)
			}
			if cfg.Token != "" && strings.Contains(err.Error(), cfg.Token) {
				t.Errorf("the error holds the token: %v", err)
			}
		})
	}
}

// TestConfigFromEnv: the CLI's environment variables, and the mistakes in
// them that are refused before any request.
func TestConfigFromEnv(t *testing.T) {
	f := testtls.Write(t, t.TempDir())
	cases := []struct {
		name   string
		env    map[string]string
		want   Config
		errHas string // from ConfigFromEnv or NewWithConfig
	}{
		{"empty", map[string]string{}, Config{}, ""},
		{"everything", map[string]string{AddressEnv: "https://nss.example:4650", TokenEnv: "tok", CACertEnv: f.CACert,
			ClientCertEnv: f.ClientCert, ClientKeyEnv: f.ClientKey, SkipVerifyEnv: "true"},
			Config{Address: "https://nss.example:4650", Token: "tok", CACert: f.CACert, ClientCert: f.ClientCert, ClientKey: f.ClientKey, SkipVerify: true}, ""},
		{"skip verify false", map[string]string{SkipVerifyEnv: "0"}, Config{}, ""},
		{"skip verify not a boolean", map[string]string{SkipVerifyEnv: "sometimes"}, Config{}, SkipVerifyEnv},
		{"client cert without key", map[string]string{ClientCertEnv: f.ClientCert}, Config{ClientCert: f.ClientCert}, ClientKeyEnv},
		{"CA that is missing", map[string]string{CACertEnv: "/nonexistent/ca.pem"}, Config{CACert: "/nonexistent/ca.pem"}, CACertEnv},
		{"CA that is a key", map[string]string{CACertEnv: f.ClientKey}, Config{CACert: f.ClientKey}, "holds no PEM certificate"},
		{"key of another certificate", map[string]string{ClientCertEnv: f.ClientCert, ClientKeyEnv: f.ServerKey},
			Config{ClientCert: f.ClientCert, ClientKey: f.ServerKey}, "private key does not match"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			cfg, err := ConfigFromEnv(func(k string) (string, bool) { v, ok := tc.env[k]; return v, ok })
			if err == nil {
				_, err = NewWithConfig(cfg)
			}
			if tc.errHas == "" && err != nil {
				t.Fatalf("error: %v", err)
			}
			if tc.errHas != "" && (err == nil || !strings.Contains(err.Error(), tc.errHas)) {
				t.Fatalf("error %v does not name %q", err, tc.errHas)
			}
			if tc.errHas == "" && cfg != tc.want {
				t.Fatalf("config %+v, want %+v", cfg, tc.want)
			}
		})
	}
}
