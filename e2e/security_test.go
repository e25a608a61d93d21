package e2e

import (
	"crypto/tls"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	nomadapi "github.com/hashicorp/nomad/api"

	"github.com/nomad-statefulset/nomad-statefulset/client"
	"github.com/nomad-statefulset/nomad-statefulset/internal/testagent"
	"github.com/nomad-statefulset/nomad-statefulset/internal/testtls"
)

// secretMarker stands for what people put in a task's env or template
// data: it is in the set's template, and must show only for ?revision=N.
const secretMarker = "e2e-hunter2-secret"

// TestAPIGuardedAsNomads (DESIGN §4, issue 47 part 3): with Nomad's ACLs
// on and TLS on the daemon's listener, the daemon's HTTP API lets in only
// what Nomad lets in. No token: 403. A token that may read-job in another
// namespace only: 403 on the set and an empty list. A read-job token of
// the set's namespace: 200, without any revision's template unless it asks
// for ?revision=N. Plain HTTP to the TLS listener gets no answer of the
// API, and /v1/metrics wants a token. The CLI, given NOMAD_TOKEN and
// NOMAD_STATEFULSET_CACERT, reads the set and a revision's template, and
// says what to set when either is missing.
func TestAPIGuardedAsNomads(t *testing.T) {
	c := NewCluster(t, testagent.WithACL())
	nc := c.Nomad.Client
	if _, err := nc.Namespaces().Register(&nomadapi.Namespace{Name: "other"}, nil); err != nil {
		t.Fatalf("creating namespace other: %v", err)
	}
	reader := createToken(t, c, "nss-reader", `namespace "default" { capabilities = ["read-job"] }`)
	stranger := createToken(t, c, "nss-stranger", `namespace "other" { capabilities = ["read-job"] }`)

	certs := testtls.Write(t, t.TempDir())
	d := NewDaemon(t, c.Nomad, c.Consul)
	// A second config file: later files override the first attribute by
	// attribute, so the harness's http block keeps its address.
	tlsHCL := filepath.Join(d.Proc.Dir(), "tls.hcl")
	if err := os.WriteFile(tlsHCL, []byte(fmt.Sprintf("http {\n  tls {\n    cert_file = %q\n    key_file = %q\n  }\n}\n",
		certs.ServerCert, certs.ServerKey)), 0o600); err != nil {
		t.Fatal(err)
	}
	d.Proc.SetArgs("agent", "-config", d.ConfigPath, "-config", tlsHCL)
	plainAddr := d.Addr
	d.Addr = strings.Replace(d.Addr, "http://", "https://", 1)
	d.HTTP = &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: certs.Pool, MinVersion: tls.VersionTLS12}}}
	d.Start()

	RegisterHCL(t, nc, setSpec{name: "guarded", noVolume: true, meta: map[string]string{"statefulset_replicas": "1"},
		script: "SECRET=" + secretMarker + "; while true; do sleep 1; done"}.hcl())
	// The harness reads with the management token.
	waitConverged(t, c, d, "guarded", 1, nil)

	get := func(path, token string) (int, string) {
		t.Helper()
		req, err := http.NewRequest(http.MethodGet, d.Addr+path, nil)
		if err != nil {
			t.Fatal(err)
		}
		if token != "" {
			req.Header.Set(client.TokenHeader, token)
		}
		resp, err := d.HTTP.Do(req)
		if err != nil {
			t.Fatalf("GET %s: %v", path, err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	const detail = "/v1/statefulset/default/guarded"
	for _, tc := range []struct {
		name, path, token string
		code              int
		has, hasNot       []string
	}{
		{"health needs no token", "/v1/health", "", 200, []string{`"status"`}, nil},
		{"detail without a token", detail, "", 403, []string{"X-Nomad-Token"}, []string{secretMarker}},
		{"detail with a token Nomad does not know", detail, "00000000-0000-0000-0000-000000000000", 403, []string{"read-job"}, []string{secretMarker, "00000000-0000"}},
		{"detail with a token of another namespace", detail, stranger, 403, []string{`needs read-job in namespace \"default\"`}, []string{secretMarker, stranger}},
		{"a revision with a token of another namespace", detail + "?revision=1", stranger, 403, nil, []string{secretMarker}},
		{"list with a token of another namespace", "/v1/statefulsets", stranger, 200, []string{`"sets": []`}, []string{"guarded"}},
		{"list without a token", "/v1/statefulsets", "", 403, nil, []string{"guarded"}},
		// Nomad checks read-job before it looks the job up: a token that
		// may not read the namespace cannot tell a missing set.
		{"a missing set with a token of another namespace", "/v1/statefulset/default/nope", stranger, 403, nil, nil},
		{"a missing set with read-job", "/v1/statefulset/default/nope", reader, 404, nil, nil},
		{"detail with read-job", detail, reader, 200, []string{`"guarded-`, `"number": 1`}, []string{secretMarker, `"template"`}},
		{"list with read-job", "/v1/statefulsets", reader, 200, []string{`"guarded"`}, nil},
		{"metrics without a token", "/v1/metrics", "", 403, []string{"prometheus_anonymous"}, []string{"nomad_statefulset_leader"}},
		{"metrics with a token", "/v1/metrics", reader, 200, []string{"nomad_statefulset_leader 1"}, nil},
	} {
		code, body := get(tc.path, tc.token)
		if code != tc.code {
			t.Errorf("%s: GET %s: %d, want %d: %s", tc.name, tc.path, code, tc.code, body)
		}
		for _, s := range tc.has {
			if !strings.Contains(body, s) {
				t.Errorf("%s: the answer lacks %q: %s", tc.name, s, body)
			}
		}
		for _, s := range tc.hasNot {
			if strings.Contains(body, s) {
				t.Errorf("%s: the answer holds %q: %s", tc.name, s, body)
			}
		}
	}

	// ?revision=N with a read-job token has that revision's template.
	code, body := get(detail+"?revision=1", reader)
	var set client.SetDetail
	if err := json.Unmarshal([]byte(body), &set); code != 200 || err != nil || len(set.Revisions) == 0 {
		t.Fatalf("GET ?revision=1 with read-job: %d %v %s", code, err, body)
	}
	if r := set.Revisions[0]; r.Number != 1 || !strings.Contains(r.Template, secretMarker) {
		t.Errorf("revision 1 with ?revision=1: number %d, template has the job's env: %v", r.Number, strings.Contains(r.Template, secretMarker))
	}

	// Plain HTTP to the TLS listener is refused by the TLS layer, with no
	// answer of the API.
	resp, err := http.Get(plainAddr + detail)
	if err == nil {
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusBadRequest || !strings.Contains(string(b), "HTTPS server") || strings.Contains(string(b), "guarded") {
			t.Errorf("plain HTTP to the TLS listener: %d %s", resp.StatusCode, b)
		}
	}

	// The CLI, as a user runs it.
	cli := func(env map[string]string, args ...string) (int, string) {
		t.Helper()
		cmd := exec.Command(d.Bin, args...)
		cmd.Env = append(c.Nomad.Env(), "NOMAD_STATEFULSET_ADDR="+d.Addr)
		for k, v := range env {
			cmd.Env = append(cmd.Env, k+"="+v)
		}
		out, err := cmd.CombinedOutput()
		code := 0
		if ee, ok := err.(*exec.ExitError); ok {
			code = ee.ExitCode()
		} else if err != nil {
			t.Fatalf("running %v: %v", args, err)
		}
		return code, string(out)
	}
	withCA := map[string]string{client.CACertEnv: certs.CACert, "NOMAD_TOKEN": reader}
	if code, out := cli(withCA, "status", "guarded"); code != 0 || !strings.Contains(out, "guarded") {
		t.Errorf("status with NOMAD_TOKEN and the CA: exit %d\n%s", code, out)
	}
	if code, out := cli(withCA, "rollout", "history", "-revision", "1", "guarded"); code != 0 || !strings.Contains(out, secretMarker) {
		t.Errorf("rollout history -revision 1 with a read-job token: exit %d\n%s", code, out)
	}
	if code, out := cli(withCA, "rollout", "history", "guarded"); code != 0 || strings.Contains(out, secretMarker) {
		t.Errorf("rollout history (no -revision): exit %d, shows the template: %v\n%s", code, strings.Contains(out, secretMarker), out)
	}
	if code, out := cli(map[string]string{client.CACertEnv: certs.CACert, "NOMAD_TOKEN": stranger}, "status", "guarded"); code != 1 ||
		!strings.Contains(out, `read-job in namespace "default"`) || !strings.Contains(out, "NOMAD_TOKEN") || strings.Contains(out, stranger) {
		t.Errorf("status with a token of another namespace: exit %d\n%s", code, out)
	}
	if code, out := cli(map[string]string{"NOMAD_TOKEN": reader}, "status", "guarded"); code != 5 || !strings.Contains(out, client.CACertEnv) {
		t.Errorf("status without the CA: exit %d, want 5 naming %s\n%s", code, client.CACertEnv, out)
	}

	// No token reached the daemon's log.
	logs := d.Proc.LogTail(5000)
	for _, tok := range []string{reader, stranger, c.Nomad.Token} {
		if strings.Contains(logs, tok) {
			t.Errorf("the daemon's log holds a token")
		}
	}
	if v := c.Watchdog.Violations(); len(v) != 0 {
		t.Fatalf("watchdog: %v", v)
	}
}

// TestAPIWithoutNomadACLs: with Nomad's ACLs off (as Nomad 1.10 reports
// it: 400 "ACL support disabled" on its ACL list endpoints) the API needs
// no token, as before, and still returns a revision's template only for
// ?revision=N.
func TestAPIWithoutNomadACLs(t *testing.T) {
	c := NewCluster(t)
	d := c.StartDaemon()
	RegisterHCL(t, c.Nomad.Client, setSpec{name: "open", noVolume: true, meta: map[string]string{"statefulset_replicas": "1"},
		script: "SECRET=" + secretMarker + "; while true; do sleep 1; done"}.hcl())
	waitConverged(t, c, d, "open", 1, nil)
	for _, tc := range []struct {
		path        string
		has, hasNot string
	}{
		{"/v1/statefulsets", `"open"`, secretMarker},
		{"/v1/statefulset/default/open", `"number": 1`, secretMarker},
		{"/v1/statefulset/default/open?revision=1", secretMarker, "X-Nomad-Token"},
		{"/v1/metrics", "nomad_statefulset_leader 1", "X-Nomad-Token"},
	} {
		resp, err := http.Get(d.Addr + tc.path)
		if err != nil {
			t.Fatalf("GET %s: %v", tc.path, err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK || !strings.Contains(string(b), tc.has) || strings.Contains(string(b), tc.hasNot) {
			t.Errorf("GET %s without a token: %d, want 200 with %q and without %q: %s", tc.path, resp.StatusCode, tc.has, tc.hasNot, b)
		}
	}
	if !strings.Contains(d.Proc.LogTail(5000), "acls_enabled=false") {
		t.Errorf("the daemon's log does not say it found Nomad's ACLs off:\n%s", d.Proc.LogTail(40))
	}
}
