//go:build realagents

package consul

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/consul/api"

	"github.com/nomad-statefulset/nomad-statefulset/backend"
	"github.com/nomad-statefulset/nomad-statefulset/backend/storetest"
	"github.com/nomad-statefulset/nomad-statefulset/internal/testagent"
	"github.com/nomad-statefulset/nomad-statefulset/reconciler"
)

// testPolicyRules is the smallest Consul ACL policy the agent needs, for a
// kv_prefix of "t" (the tests' prefix): write on the prefix (the sets and
// the lock key under it) and session write.
const testPolicyRules = `
key_prefix "t/" {
  policy = "write"
}
session_prefix "" {
  policy = "write"
}
`

const readOnlyRules = `
key_prefix "t/" {
  policy = "read"
}
`

// tokenClient creates a policy with rules and a token for it, and returns a
// client using that token.
func tokenClient(t *testing.T, mgmt *api.Client, addr, name, rules string) *api.Client {
	t.Helper()
	pol, _, err := mgmt.ACL().PolicyCreate(&api.ACLPolicy{Name: name, Rules: rules}, nil)
	if err != nil {
		t.Fatalf("creating policy %s: %v", name, err)
	}
	tok, _, err := mgmt.ACL().TokenCreate(&api.ACLToken{Description: name, Policies: []*api.ACLTokenPolicyLink{{ID: pol.ID}}}, nil)
	if err != nil {
		t.Fatalf("creating token for %s: %v", name, err)
	}
	return newTokenClient(t, addr, tok.SecretID)
}

func newTokenClient(t *testing.T, addr, token string) *api.Client {
	t.Helper()
	c, err := api.NewClient(&api.Config{Address: addr, Scheme: "http", Token: token})
	if err != nil {
		t.Fatalf("consul client: %v", err)
	}
	return c
}

// TestACLs: with ACLs on, a token limited to the key prefix and session
// write is enough for election and every store operation; a token without
// those rights gets a clear error.
func TestACLs(t *testing.T) {
	agent := testagent.Consul(t, testagent.WithConsulACL())
	mgmt, addr := agent.Client, agent.HostPort
	good := tokenClient(t, mgmt, addr, "nomad-statefulset", testPolicyRules)
	readOnly := tokenClient(t, mgmt, addr, "read-only", readOnlyRules)
	anonymous := newTokenClient(t, addr, "")

	t.Run("LimitedTokenWorks", func(t *testing.T) {
		ctx := ctxFor(t, 5*time.Minute)
		prefix := testPrefix(t)
		log := newLeadLog()
		e := startElector(t, good, testElectorConfig(DefaultLockKey(prefix)), "limited", log)
		waitFor(t, 60*time.Second, "the elector with the limited token to lead", e.e.IsLeader)
		if e.e.Err() != nil || e.e.LeaderSince().IsZero() {
			t.Fatalf("leading: Err() = %v, LeaderSince() = %v; want nil and the start of the term", e.e.Err(), e.e.LeaderSince())
		}
		s := NewStore(good, prefix, e.e.Fence(), testLogger(t))
		set := backend.SetKey{Namespace: "default", Name: "web"}
		if err := s.PutRevision(ctx, set, reconciler.Revision{Name: "web-1", Number: 1}); err != nil {
			t.Fatalf("PutRevision: %v", err)
		}
		if err := s.PutStatus(ctx, set, reconciler.Status{Replicas: 1}); err != nil {
			t.Fatalf("PutStatus: %v", err)
		}
		if sets, err := s.ListSets(ctx); err != nil || len(sets) != 1 {
			t.Fatalf("ListSets = %v, %v", sets, err)
		}
		if err := s.DeleteRevision(ctx, set, "web-1"); err != nil {
			t.Fatalf("DeleteRevision: %v", err)
		}
		if err := s.DeleteSet(ctx, set); err != nil {
			t.Fatalf("DeleteSet: %v", err)
		}
		log.check(t)
	})
	t.Run("LimitedTokenContract", func(t *testing.T) {
		storetest.Run(t, func(t *testing.T) backend.Store {
			return NewStore(good, testPrefix(t), nil, testLogger(t))
		})
	})
	// Each token lacking a right gets an error naming that right, from Err
	// (the agent shows it in /v1/health); Run keeps retrying rather than
	// exiting, so a supervisor does not restart the agent into a crash loop.
	noSession := tokenClient(t, mgmt, addr, "no-session", strings.Replace(testPolicyRules, `session_prefix "" {
  policy = "write"
}`, "", 1))
	sessionOnly := tokenClient(t, mgmt, addr, "session-only", readOnlyRules+`
session_prefix "" {
  policy = "write"
}
`)
	for _, tc := range []struct {
		name    string
		c       *api.Client
		missing string
	}{
		{"ReadOnlyToken", readOnly, "session:write"},
		{"NoToken", anonymous, "session:write"},
		{"NoSessionRight", noSession, "session:write"},
		{"NoKeyWrite", sessionOnly, "key:write on the lock key"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx, cancel := context.WithCancel(ctxFor(t, 2*time.Minute))
			defer cancel()
			prefix := testPrefix(t)
			e := NewElector(tc.c, testElectorConfig(DefaultLockKey(prefix)), testLogger(t))
			runErr := make(chan error, 1)
			go func() {
				runErr <- e.Run(ctx, func(ctx context.Context) error {
					t.Error("led without the rights to")
					<-ctx.Done()
					return nil
				})
			}()
			waitFor(t, 60*time.Second, "Err to report the denial", func() bool { return e.Err() != nil })
			err := e.Err()
			if !strings.Contains(err.Error(), "Consul denied") || !strings.Contains(err.Error(), tc.missing) {
				t.Fatalf("Err() = %v; want a clear permission error naming %s", err, tc.missing)
			}
			t.Logf("election with %s: %v", tc.name, err)
			// Still retrying after a few backoffs, not exited.
			time.Sleep(3 * time.Second)
			select {
			case err := <-runErr:
				t.Fatalf("Run returned %v; it must keep retrying a denied token", err)
			default:
			}
			if e.IsLeader() {
				t.Fatal("leads without the rights to")
			}
			cancel()
			if err := <-runErr; err != nil {
				t.Fatalf("Run after cancel: %v", err)
			}
			s := NewStore(tc.c, prefix, nil, testLogger(t))
			err = s.PutStatus(ctxFor(t, time.Minute), backend.SetKey{Namespace: "default", Name: "web"}, reconciler.Status{})
			if tc.name == "NoSessionRight" {
				if err != nil {
					t.Fatalf("store write with key write: %v", err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), "Consul denied") && !strings.Contains(err.Error(), "403") {
				t.Fatalf("store write error = %v; want a clear permission error", err)
			}
			t.Logf("store write with %s: %v", tc.name, err)
		})
	}
}
