package agent

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/nomad-statefulset/nomad-statefulset/agent/config"
	"github.com/nomad-statefulset/nomad-statefulset/backend"
	"github.com/nomad-statefulset/nomad-statefulset/backend/memory"
	"github.com/nomad-statefulset/nomad-statefulset/client"
	"github.com/nomad-statefulset/nomad-statefulset/internal/nomadsim"
	"github.com/nomad-statefulset/nomad-statefulset/internal/testtls"
)

// fakeAuthorizer is Nomad's ACLs in miniature: tokens by secret, each with
// the namespaces it may read-job in. It counts the questions asked.
type fakeAuthorizer struct {
	mu      sync.Mutex
	acls    bool
	aclsErr error
	// readJob maps a token to its namespaces; "mgmt" is a management
	// token, allowed everywhere.
	readJob map[string][]string
	// down makes every per-token question fail as if Nomad were away.
	down  bool
	asked []string
}

func (f *fakeAuthorizer) ACLsEnabled(context.Context) (bool, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.asked = append(f.asked, "acls")
	return f.acls, f.aclsErr
}

func (f *fakeAuthorizer) ReadJob(_ context.Context, token, namespace, jobID string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.asked = append(f.asked, "read-job "+namespace+"/"+jobID)
	if f.down {
		return errors.New("dial tcp 127.0.0.1:4646: connection refused")
	}
	nss, ok := f.readJob[token]
	if !ok {
		return fmt.Errorf("ACL token not found: %w", backend.ErrPermissionDenied)
	}
	for _, ns := range nss {
		if ns == namespace || ns == "*" {
			return nil
		}
	}
	return fmt.Errorf("Permission denied: %w", backend.ErrPermissionDenied)
}

func (f *fakeAuthorizer) Token(_ context.Context, token string) (bool, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.asked = append(f.asked, "token")
	if f.down {
		return false, errors.New("dial tcp 127.0.0.1:4646: connection refused")
	}
	if _, ok := f.readJob[token]; !ok {
		return false, fmt.Errorf("ACL token not found: %w", backend.ErrPermissionDenied)
	}
	return token == "mgmt", nil
}

func (f *fakeAuthorizer) questions() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return len(f.asked)
}

// fixedViews are two sets in "default" and one in "prod", each with two
// revisions whose templates hold a secret.
type fixedViews struct{}

const secretEnv = `{"env":{"DB_PASSWORD":"hunter2"}}`

func (fixedViews) list() client.SetList {
	return client.SetList{Sets: []client.SetSummary{
		{Namespace: "default", Name: "api"}, {Namespace: "default", Name: "web"}, {Namespace: "prod", Name: "db"},
	}}
}

func (fixedViews) get(key backend.SetKey) (client.SetDetail, bool) {
	for _, s := range (fixedViews{}).list().Sets {
		if s.Namespace == key.Namespace && s.Name == key.Name {
			return client.SetDetail{Namespace: s.Namespace, Name: s.Name, Revisions: []client.Revision{
				{Number: 1, Name: s.Name + "-aaaa", Template: secretEnv},
				{Number: 2, Name: s.Name + "-bbbb", Template: strings.Replace(secretEnv, "hunter2", "hunter3", 1)},
			}}, true
		}
	}
	return client.SetDetail{}, false
}

// newTestAPI returns the API handler over fixedViews and authz (nil: no
// Nomad ACLs), on a clock the test moves.
func newTestAPI(authz Authorizer, anonymousMetrics, debug bool, now *time.Time) http.Handler {
	h := &apiHandler{
		views: fixedViews{}, guard: newGuard(authz, hclog.NewNullLogger(), func() time.Time { return *now }),
		health:           func(w http.ResponseWriter, r *http.Request) { writeJSON(w, http.StatusOK, client.Health{Status: "ok"}) },
		metrics:          http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { _, _ = w.Write([]byte("nomad_statefulset_leader 1\n")) }),
		anonymousMetrics: anonymousMetrics, debug: debug,
	}
	return h.routes()
}

func serve(h http.Handler, path, token string) (int, string) {
	req := httptest.NewRequest(http.MethodGet, path, nil)
	if token != "" {
		req.Header.Set(tokenHeader, token)
	}
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, req)
	return rec.Code, rec.Body.String()
}

// TestAPIAuthorization: with Nomad's ACLs on, every endpoint but
// /v1/health needs a token and answers what Nomad lets that token read;
// with them off, no token is needed. Templates show only for ?revision=N,
// with ACLs on or off.
func TestAPIAuthorization(t *testing.T) {
	tokens := map[string][]string{"reader": {"default"}, "prod": {"prod"}, "mgmt": {"*"}, "none": {}}
	cases := []struct {
		name      string
		acls      bool
		anonymous bool
		path      string
		token     string
		code      int
		has       []string // in the body
		hasNot    []string
	}{
		{"health needs no token", true, false, "/v1/health", "", 200, []string{`"ok"`}, nil},
		{"detail without a token", true, false, "/v1/statefulset/default/api", "", 403, []string{"X-Nomad-Token", "NOMAD_TOKEN"}, []string{"hunter"}},
		{"detail with an unknown token", true, false, "/v1/statefulset/default/api", "forged", 403, []string{`needs read-job in namespace \"default\"`, "ACL token not found"}, []string{"forged", "hunter"}},
		{"detail with a token of another namespace", true, false, "/v1/statefulset/default/api", "prod", 403, []string{`needs read-job in namespace \"default\"`}, []string{"hunter"}},
		{"unknown set in a namespace the token may not read", true, false, "/v1/statefulset/default/nope", "prod", 403, nil, nil},
		{"unknown set in a namespace the token may read", true, false, "/v1/statefulset/default/nope", "reader", 404, nil, nil},
		{"detail with read-job", true, false, "/v1/statefulset/default/api", "reader", 200, []string{"api-aaaa", "api-bbbb"}, []string{"hunter", "template"}},
		{"one revision's template with read-job", true, false, "/v1/statefulset/default/api?revision=2", "reader", 200, []string{"hunter3", "api-aaaa"}, []string{"hunter2"}},
		{"revision without read-job", true, false, "/v1/statefulset/default/api?revision=2", "prod", 403, nil, []string{"hunter"}},
		{"revision that is no number", true, false, "/v1/statefulset/default/api?revision=x", "reader", 400, []string{"not a revision number"}, nil},
		{"revision zero", false, false, "/v1/statefulset/default/api?revision=0", "", 400, []string{"not a revision number"}, nil},
		{"list without a token", true, false, "/v1/statefulsets", "", 403, []string{"X-Nomad-Token"}, []string{"api", "db"}},
		{"list with a token of one namespace", true, false, "/v1/statefulsets", "reader", 200, []string{`"api"`, `"web"`}, []string{`"db"`}},
		{"list with a token of the other", true, false, "/v1/statefulsets", "prod", 200, []string{`"db"`}, []string{`"api"`, `"web"`}},
		{"list with a token of no namespace", true, false, "/v1/statefulsets", "none", 200, []string{`"sets": []`}, []string{`"api"`, `"db"`}},
		{"list with a management token", true, false, "/v1/statefulsets", "mgmt", 200, []string{`"api"`, `"web"`, `"db"`}, nil},
		{"metrics without a token", true, false, "/v1/metrics", "", 403, []string{"X-Nomad-Token", "prometheus_anonymous"}, []string{"nomad_statefulset_leader"}},
		{"metrics with an unknown token", true, false, "/v1/metrics", "forged", 403, []string{"the token is refused by Nomad"}, []string{"forged", "nomad_statefulset_leader"}},
		{"metrics with any known token", true, false, "/v1/metrics", "none", 200, []string{"nomad_statefulset_leader 1"}, nil},
		{"anonymous metrics", true, true, "/v1/metrics", "", 200, []string{"nomad_statefulset_leader 1"}, nil},
		{"pprof with a client token", true, false, "/debug/pprof/", "reader", 403, []string{"management token"}, nil},
		{"pprof with a management token", true, false, "/debug/pprof/", "mgmt", 200, []string{"goroutine"}, nil},
		{"ACLs off: detail needs no token", false, false, "/v1/statefulset/prod/db", "", 200, []string{"db-aaaa"}, []string{"hunter"}},
		{"ACLs off: a revision's template needs no token", false, false, "/v1/statefulset/prod/db?revision=1", "", 200, []string{"hunter2"}, []string{"hunter3"}},
		{"ACLs off: list needs no token", false, false, "/v1/statefulsets", "", 200, []string{`"api"`, `"db"`}, nil},
		{"ACLs off: metrics need no token", false, false, "/v1/metrics", "", 200, []string{"nomad_statefulset_leader"}, nil},
		{"ACLs off: pprof needs no token", false, false, "/debug/pprof/", "", 200, []string{"goroutine"}, nil},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			now := time.Unix(1e9, 0)
			fa := &fakeAuthorizer{acls: tc.acls, readJob: tokens}
			code, body := serve(newTestAPI(fa, tc.anonymous, true, &now), tc.path, tc.token)
			if code != tc.code {
				t.Errorf("GET %s with token %q: %d, want %d: %s", tc.path, tc.token, code, tc.code, body)
			}
			for _, s := range tc.has {
				if !strings.Contains(body, s) {
					t.Errorf("the answer lacks %q: %s", s, body)
				}
			}
			for _, s := range tc.hasNot {
				if strings.Contains(body, s) {
					t.Errorf("the answer holds %q: %s", s, body)
				}
			}
			if code != 200 {
				var e map[string]string
				if err := json.Unmarshal([]byte(body), &e); err != nil || e["error"] == "" {
					t.Errorf("a refusal is not a JSON error: %s", body)
				}
			}
		})
	}
	// Without an Authorizer (the simulator) the API behaves as with ACLs
	// off, templates aside.
	now := time.Unix(1e9, 0)
	h := newTestAPI(nil, false, false, &now)
	if code, body := serve(h, "/v1/statefulset/default/api", ""); code != 200 || strings.Contains(body, "hunter") {
		t.Errorf("no Authorizer: %d %s", code, body)
	}
}

// TestAPIAuthorizationCache: Nomad is asked once per token and namespace
// within authzTTL, again after it; a refusal is cached as an answer, an
// error asking is not; when Nomad cannot be asked the request fails
// closed with 503, and the token is in no answer.
func TestAPIAuthorizationCache(t *testing.T) {
	now := time.Unix(1e9, 0)
	fa := &fakeAuthorizer{acls: true, readJob: map[string][]string{"reader": {"default"}}}
	h := newTestAPI(fa, false, false, &now)
	for i := 0; i < 3; i++ {
		if code, _ := serve(h, "/v1/statefulset/default/api", "reader"); code != 200 {
			t.Fatalf("read %d: %d", i, code)
		}
		if code, _ := serve(h, "/v1/statefulset/default/web", "reader"); code != 200 {
			t.Fatalf("read %d: %d", i, code)
		}
	}
	if got := fa.questions(); got != 2 {
		t.Errorf("6 reads of one namespace asked Nomad %d times (%v), want 2: one ACLs question, one read-job", got, fa.asked)
	}
	for i := 0; i < 2; i++ {
		if code, _ := serve(h, "/v1/statefulset/prod/db", "reader"); code != 403 {
			t.Fatalf("a refused read: %d", code)
		}
	}
	if got := fa.questions(); got != 3 {
		t.Errorf("a refusal was asked %d times, want once (it is cached): %v", got-2, fa.asked)
	}
	now = now.Add(authzTTL)
	if code, _ := serve(h, "/v1/statefulset/default/api", "reader"); code != 200 {
		t.Fatalf("read after the TTL: %d", code)
	}
	if got := fa.questions(); got != 5 {
		t.Errorf("after the TTL Nomad was asked %d more times, want 2 (ACLs, read-job): %v", got-3, fa.asked)
	}

	// Nomad away: an uncached question fails closed, and is asked again.
	fa.mu.Lock()
	fa.down, fa.aclsErr = true, errors.New("connection refused")
	fa.mu.Unlock()
	for i := 0; i < 2; i++ {
		code, body := serve(h, "/v1/statefulset/default/api", "other-token")
		if code != http.StatusServiceUnavailable || !strings.Contains(body, "asking Nomad") || strings.Contains(body, "other-token") {
			t.Errorf("Nomad away: %d %s, want 503 naming the question", code, body)
		}
	}
	if got := fa.questions(); got != 7 {
		t.Errorf("an error asking was cached: %d questions, want 7: %v", got, fa.asked)
	}
	// The last answer about ACLs holds while Nomad cannot be asked.
	now = now.Add(authzTTL)
	if code, _ := serve(h, "/v1/statefulsets", ""); code != 403 {
		t.Errorf("Nomad away after ACLs were seen on: a request without a token got %d, want 403", code)
	}
	// With no answer ever, the API fails closed.
	fresh := newTestAPI(&fakeAuthorizer{aclsErr: errors.New("connection refused")}, false, false, &now)
	if code, body := serve(fresh, "/v1/statefulsets", ""); code != http.StatusServiceUnavailable || !strings.Contains(body, "whether its ACLs are on") {
		t.Errorf("ACLs never known: %d %s, want 503", code, body)
	}
}

// TestAuthzCacheBounded: tokens that are all different cannot grow the
// cache past authzCacheMax.
func TestAuthzCacheBounded(t *testing.T) {
	now := time.Unix(1e9, 0)
	g := newGuard(&fakeAuthorizer{acls: true}, hclog.NewNullLogger(), func() time.Time { return now })
	for i := 0; i < authzCacheMax+10; i++ {
		if err := g.readJob(context.Background(), fmt.Sprint("token-", i), "default", "api"); !errors.Is(err, backend.ErrPermissionDenied) {
			t.Fatalf("an unknown token: %v", err)
		}
	}
	if n := len(g.answers); n > authzCacheMax {
		t.Fatalf("the cache holds %d answers, over %d", n, authzCacheMax)
	}
	for k := range g.answers {
		if strings.Contains(k, "token-") {
			t.Fatalf("a cache key holds the token: %q", k)
		}
	}
}

// TestHTTPTLSListener: with http { tls {} } the listener speaks only TLS:
// a client trusting the CA is answered, a plain HTTP request is refused,
// and with verify_https_client a client without a certificate of the CA
// cannot connect.
func TestHTTPTLSListener(t *testing.T) {
	f := testtls.Write(t, t.TempDir())
	trusting := func(cert *tls.Certificate) *http.Client {
		conf := &tls.Config{RootCAs: f.Pool, MinVersion: tls.VersionTLS12}
		if cert != nil {
			conf.Certificates = []tls.Certificate{*cert}
		}
		return &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{TLSClientConfig: conf}}
	}
	clientCert, err := tls.LoadX509KeyPair(f.ClientCert, f.ClientKey)
	if err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		name   string
		tls    config.HTTPTLSConfig
		client *http.Client
		scheme string
		ok     bool
		errHas string
	}{
		{"TLS client", config.HTTPTLSConfig{CertFile: f.ServerCert, KeyFile: f.ServerKey}, trusting(nil), "https", true, ""},
		{"plain HTTP to the TLS listener", config.HTTPTLSConfig{CertFile: f.ServerCert, KeyFile: f.ServerKey}, &http.Client{Timeout: 5 * time.Second}, "http", false, "400"},
		{"client that does not trust the CA", config.HTTPTLSConfig{CertFile: f.ServerCert, KeyFile: f.ServerKey}, &http.Client{Timeout: 5 * time.Second}, "https", false, "certificate"},
		{"mTLS without a client certificate", config.HTTPTLSConfig{CertFile: f.ServerCert, KeyFile: f.ServerKey, CAFile: f.CACert, VerifyHTTPSClient: true}, trusting(nil), "https", false, "certificate"},
		{"mTLS with a client certificate", config.HTTPTLSConfig{CertFile: f.ServerCert, KeyFile: f.ServerKey, CAFile: f.CACert, VerifyHTTPSClient: true}, trusting(&clientCert), "https", true, ""},
		{"CA without verify: no client certificate is fine", config.HTTPTLSConfig{CertFile: f.ServerCert, KeyFile: f.ServerKey, CAFile: f.CACert}, trusting(nil), "https", true, ""},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			sim := nomadsim.NewNomad(fastSim())
			t.Cleanup(sim.Close)
			opts := testOptions(t, sim, memory.NewStore())
			opts.HTTPTLS = tc.tls
			a, stop := runAgent(t, opts)
			t.Cleanup(stop)
			resp, err := tc.client.Get(tc.scheme + "://" + a.HTTPAddr() + "/v1/health")
			var got string
			if err == nil {
				body, _ := io.ReadAll(resp.Body)
				resp.Body.Close()
				got = fmt.Sprintf("%d %s", resp.StatusCode, body)
				if resp.StatusCode == http.StatusOK && !tc.ok {
					t.Fatalf("answered: %s", got)
				}
			} else {
				got = err.Error()
			}
			if tc.ok && (err != nil || resp.StatusCode != http.StatusOK) {
				t.Fatalf("not answered: %s", got)
			}
			if !strings.Contains(got, tc.errHas) {
				t.Fatalf("the failure %q does not name %q", got, tc.errHas)
			}
		})
	}
	// A certificate that cannot be loaded stops New, naming the setting.
	sim := nomadsim.NewNomad(fastSim())
	t.Cleanup(sim.Close)
	opts := testOptions(t, sim, memory.NewStore())
	opts.HTTPTLS = config.HTTPTLSConfig{CertFile: f.ServerCert, KeyFile: f.ClientKey}
	if _, err := New(opts); err == nil || !strings.Contains(err.Error(), "http.tls.cert_file") {
		t.Fatalf("New with a mismatched key: %v", err)
	}
}
