package nomad

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/hashicorp/nomad/api"

	"github.com/nomad-statefulset/nomad-statefulset/backend"
)

// fakeNomadACL answers the routes the Authorizer reads as Nomad 1.10 does
// (seen on a real one): with ACLs off, 400 "ACL support disabled" on
// /v1/acl/policies, a placeholder on /v1/acl/token/self, and everything
// allowed; with them on, by the request's X-Nomad-Token, a secret that is
// no UUID failing to parse as a JWT on /v1/acl/token/self.
func fakeNomadACL(t *testing.T, aclsOn bool, seen *[]string) *api.Client {
	t.Helper()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		tok := r.Header.Get("X-Nomad-Token")
		*seen = append(*seen, r.URL.Path+" ns="+r.URL.Query().Get("namespace")+" token="+tok)
		switch {
		case r.URL.Path == "/v1/acl/policies" && !aclsOn:
			http.Error(w, "ACL support disabled", http.StatusBadRequest)
		case r.URL.Path == "/v1/acl/policies" && tok == "daemon":
			_, _ = w.Write([]byte(`[]`))
		case r.URL.Path == "/v1/acl/policies" && tok == "workload.identity.jwt":
			http.Error(w, "acl token lookup failed: index error: UUID must be 36 characters", http.StatusInternalServerError)
		case r.URL.Path == "/v1/acl/policies" && tok == "leaderless":
			http.Error(w, "rpc error: No cluster leader", http.StatusInternalServerError)
		case r.URL.Path == "/v1/acl/policies":
			http.Error(w, "Permission denied", http.StatusForbidden)
		case r.URL.Path == "/v1/acl/token/self" && !aclsOn:
			_, _ = w.Write([]byte(`{"AccessorID":"acls-disabled","Name":"ACLs disabled token","Type":"client"}`))
		case r.URL.Path == "/v1/acl/token/self" && tok == "not-a-uuid":
			http.Error(w, "failed to parse signed token: go-jose/go-jose: compact JWS format must have three parts", http.StatusInternalServerError)
		case r.URL.Path == "/v1/acl/token/self" && tok == "mgmt":
			_, _ = w.Write([]byte(`{"Type":"management"}`))
		case r.URL.Path == "/v1/acl/token/self" && (tok == "reader" || tok == "daemon"):
			_, _ = w.Write([]byte(`{"Type":"client"}`))
		case r.URL.Path == "/v1/acl/token/self":
			http.Error(w, "Permission denied", http.StatusForbidden)
		case r.URL.Path == "/v1/job/broken/summary":
			http.Error(w, "rpc error: No cluster leader", http.StatusInternalServerError)
		case strings.HasSuffix(r.URL.Path, "/summary") && (!aclsOn || tok == "mgmt" || (tok == "reader" && r.URL.Query().Get("namespace") == "default")):
			if r.URL.Path == "/v1/job/gone/summary" {
				http.Error(w, "job not found", http.StatusNotFound)
				return
			}
			_, _ = w.Write([]byte(`{"JobID":"api"}`))
		case strings.HasSuffix(r.URL.Path, "/summary"):
			http.Error(w, "Permission denied", http.StatusForbidden)
		default:
			http.NotFound(w, r)
		}
	}))
	t.Cleanup(srv.Close)
	c, err := api.NewClient(&api.Config{Address: srv.URL, SecretID: "daemon"})
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// TestAuthorizer: each question is asked of Nomad with the caller's token
// and Nomad's answer decides: a refusal wraps backend.ErrPermissionDenied
// with Nomad's words, a missing job is no refusal, and a failure to ask is
// neither.
func TestAuthorizer(t *testing.T) {
	ctx := context.Background()
	for _, tc := range []struct {
		name   string
		aclsOn bool
		ask    func(a *Authorizer) error
		denied bool
		errHas string
	}{
		{"ACLs off are seen", false, func(a *Authorizer) error { return want(a.ACLsEnabled(ctx))(false) }, false, ""},
		{"ACLs on are seen", true, func(a *Authorizer) error { return want(a.ACLsEnabled(ctx))(true) }, false, ""},
		{"read-job allowed", true, func(a *Authorizer) error { return a.ReadJob(ctx, "reader", "default", "api") }, false, ""},
		{"read-job of a missing job is allowed", true, func(a *Authorizer) error { return a.ReadJob(ctx, "reader", "default", "gone") }, false, ""},
		{"read-job in another namespace", true, func(a *Authorizer) error { return a.ReadJob(ctx, "reader", "prod", "api") }, true, `403 "Permission denied"`},
		{"read-job with an unknown token", true, func(a *Authorizer) error { return a.ReadJob(ctx, "forged", "default", "api") }, true, `403 "Permission denied"`},
		{"read-job when Nomad fails", true, func(a *Authorizer) error { return a.ReadJob(ctx, "reader", "default", "broken") }, false, "No cluster leader"},
		{"read-job with ACLs off", false, func(a *Authorizer) error { return a.ReadJob(ctx, "any", "prod", "api") }, false, ""},
		{"a management token", true, func(a *Authorizer) error { return want(a.Token(ctx, "mgmt"))(true) }, false, ""},
		{"a client token", true, func(a *Authorizer) error { return want(a.Token(ctx, "reader"))(false) }, false, ""},
		{"an unknown token", true, func(a *Authorizer) error { _, err := a.Token(ctx, "forged"); return err }, true, "Permission denied"},
		{"a token that is no UUID", true, func(a *Authorizer) error { _, err := a.Token(ctx, "not-a-uuid"); return err }, true, "failed to parse signed token"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var seen []string
			a := NewAuthorizer(fakeNomadACL(t, tc.aclsOn, &seen))
			err := tc.ask(a)
			if got := errors.Is(err, backend.ErrPermissionDenied); got != tc.denied {
				t.Fatalf("denied = %v (%v), want %v", got, err, tc.denied)
			}
			if tc.errHas == "" && err != nil {
				t.Fatalf("error: %v", err)
			}
			if tc.errHas != "" && (err == nil || !strings.Contains(err.Error(), tc.errHas)) {
				t.Fatalf("error %v does not name %q", err, tc.errHas)
			}
			if err != nil && strings.Contains(err.Error(), "forged") {
				t.Fatalf("the error holds the token: %v", err)
			}
			if len(seen) != 1 {
				t.Fatalf("Nomad was asked %d times, want once: %v", len(seen), seen)
			}
			// The caller's token, not the daemon's, except for the question
			// about ACLs, which has no caller.
			if strings.HasSuffix(tc.name, "are seen") != strings.HasSuffix(seen[0], "token=daemon") {
				t.Fatalf("asked %s", seen[0])
			}
		})
	}
}

// TestAuthorizerACLsWithTheDaemonsToken: ACLs are on whether Nomad lists
// the daemon's policies, refuses its token, or fails to resolve it (a
// workload identity, as the Task API socket passes it); a Nomad that
// cannot answer decides nothing.
func TestAuthorizerACLsWithTheDaemonsToken(t *testing.T) {
	for _, tc := range []struct {
		daemon string
		on     bool
		errHas string
	}{
		{"daemon", true, ""},
		{"revoked", true, ""},
		{"workload.identity.jwt", true, ""},
		{"leaderless", false, "No cluster leader"},
	} {
		t.Run(tc.daemon, func(t *testing.T) {
			var seen []string
			c := fakeNomadACL(t, true, &seen)
			c.SetSecretID(tc.daemon)
			on, err := NewAuthorizer(c).ACLsEnabled(context.Background())
			if on != tc.on || (err == nil) != (tc.errHas == "") || (err != nil && !strings.Contains(err.Error(), tc.errHas)) {
				t.Fatalf("ACLsEnabled = %v, %v; want %v, error with %q", on, err, tc.on, tc.errHas)
			}
		})
	}
}

// TestAuthorizerNeverAsksWithTheDaemonsToken: without a caller's token
// nothing is asked (the api client would send the daemon's token in its
// place) and the answer is a refusal.
func TestAuthorizerNeverAsksWithTheDaemonsToken(t *testing.T) {
	var seen []string
	a := NewAuthorizer(fakeNomadACL(t, true, &seen))
	if err := a.ReadJob(context.Background(), "", "default", "api"); !errors.Is(err, backend.ErrPermissionDenied) {
		t.Errorf("ReadJob without a token: %v, want a refusal", err)
	}
	if _, err := a.Token(context.Background(), ""); !errors.Is(err, backend.ErrPermissionDenied) {
		t.Errorf("Token without a token: %v, want a refusal", err)
	}
	if len(seen) != 0 {
		t.Errorf("Nomad was asked: %v", seen)
	}
}

// want turns a (value, error) answer into an error when it is not v.
func want[T comparable](got T, err error) func(T) error {
	return func(v T) error {
		if err != nil {
			return err
		}
		if got != v {
			return errors.New("unexpected answer")
		}
		return nil
	}
}
