package command

import (
	"crypto/tls"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

	"github.com/nomad-statefulset/nomad-statefulset/client"
	"github.com/nomad-statefulset/nomad-statefulset/internal/testtls"
)

// TestAgentClientTLSAndToken: the CLI sends NOMAD_TOKEN (or -token) as
// X-Nomad-Token, takes the agent's TLS settings from
// NOMAD_STATEFULSET_CACERT, _CLIENT_CERT, _CLIENT_KEY and _SKIP_VERIFY and
// an https:// address, and when that goes wrong says what to set.
func TestAgentClientTLSAndToken(t *testing.T) {
	f := testtls.Write(t, t.TempDir())
	mtls := f.ServerTLS(t)
	mtls.ClientCAs, mtls.ClientAuth = f.Pool, tls.RequireAndVerifyClientCert
	cases := []struct {
		name      string
		server    *tls.Config
		scheme    string
		env       map[string]string
		args      []string
		code      int
		errHas    []string
		wantToken string
	}{
		{"https with the CA and NOMAD_TOKEN", f.ServerTLS(t), "https", map[string]string{client.CACertEnv: f.CACert, "NOMAD_TOKEN": "good"}, nil, ExitOK, nil, "good"},
		{"-token wins over NOMAD_TOKEN", f.ServerTLS(t), "https", map[string]string{client.CACertEnv: f.CACert, "NOMAD_TOKEN": "bad"}, []string{"-token", "good"}, ExitOK, nil, "good"},
		{"skip verify", f.ServerTLS(t), "https", map[string]string{client.SkipVerifyEnv: "true", "NOMAD_TOKEN": "good"}, nil, ExitOK, nil, "good"},
		{"mTLS with the client certificate", mtls, "https", map[string]string{client.CACertEnv: f.CACert, client.ClientCertEnv: f.ClientCert,
			client.ClientKeyEnv: f.ClientKey, "NOMAD_TOKEN": "good"}, nil, ExitOK, nil, "good"},
		{"no token", f.ServerTLS(t), "https", map[string]string{client.CACertEnv: f.CACert}, nil, ExitError,
			[]string{"read-job in namespace", "set NOMAD_TOKEN (or -token)"}, ""},
		{"a CA the CLI does not have", f.ServerTLS(t), "https", map[string]string{"NOMAD_TOKEN": "good"}, nil, ExitUnreachable,
			[]string{"set " + client.CACertEnv}, ""},
		{"http:// to a TLS agent", f.ServerTLS(t), "http", map[string]string{"NOMAD_TOKEN": "good"}, nil, ExitUnreachable,
			[]string{"use an https:// address"}, ""},
		{"https:// to a plain agent", nil, "https", map[string]string{"NOMAD_TOKEN": "good"}, nil, ExitUnreachable,
			[]string{"does not speak TLS"}, ""},
		{"mTLS without the client certificate", mtls, "https", map[string]string{client.CACertEnv: f.CACert, "NOMAD_TOKEN": "good"}, nil, ExitUnreachable,
			[]string{client.ClientCertEnv}, ""},
		{"a skip verify that is no boolean", f.ServerTLS(t), "https", map[string]string{client.SkipVerifyEnv: "yes please"}, nil, ExitError,
			[]string{client.SkipVerifyEnv}, ""},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			for _, k := range []string{"NOMAD_TOKEN", client.CACertEnv, client.ClientCertEnv, client.ClientKeyEnv, client.SkipVerifyEnv} {
				t.Setenv(k, tc.env[k])
			}
			var mu sync.Mutex
			var tokens []string
			srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				mu.Lock()
				tokens = append(tokens, r.Header.Get(client.TokenHeader))
				mu.Unlock()
				if r.Header.Get(client.TokenHeader) != "good" {
					writeTestJSON(w, http.StatusForbidden, map[string]string{"error": `the token needs read-job in namespace "default": refused by Nomad, which answered 403 "Permission denied"`})
					return
				}
				writeTestJSON(w, http.StatusOK, client.SetList{Sets: []client.SetSummary{}})
			}))
			if tc.server != nil {
				srv.TLS = tc.server
				srv.StartTLS()
			} else {
				srv.Start()
			}
			t.Cleanup(srv.Close)
			addr := tc.scheme + "://" + srv.Listener.Addr().String()
			m, ui := newTestMeta()
			st := &StatusCommand{Meta: m}
			code := st.Run(append([]string{"-address", addr}, tc.args...))
			errOut := ui.ErrorWriter.String()
			if code != tc.code {
				t.Fatalf("exit %d, want %d; stderr:\n%s", code, tc.code, errOut)
			}
			for _, s := range tc.errHas {
				if !strings.Contains(errOut, s) {
					t.Errorf("stderr lacks %q:\n%s", s, errOut)
				}
			}
			if strings.Contains(errOut, "good") || strings.Contains(errOut, "bad") {
				t.Errorf("stderr holds a token:\n%s", errOut)
			}
			if tc.wantToken != "" && (len(tokens) == 0 || tokens[0] != tc.wantToken) {
				t.Errorf("the agent saw tokens %q, want %q", tokens, tc.wantToken)
			}
		})
	}
}
