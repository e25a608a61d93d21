package consul

import (
	"context"
	"crypto/rand"
	"fmt"
	"os"
	"path/filepath"
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

func uuid(t *testing.T) string {
	b := make([]byte, 16)
	if _, err := rand.Read(b); err != nil {
		t.Fatal(err)
	}
	return fmt.Sprintf("%x-%x-%x-%x-%x", b[0:4], b[4:6], b[6:8], b[8:10], b[10:])
}

// consulBinary finds the consul binary as testagent does; a missing one
// fails the test.
func consulBinary(t *testing.T) string {
	t.Helper()
	if p := os.Getenv("CONSUL_BIN"); p != "" {
		return p
	}
	root, err := testagent.ModuleRoot()
	if err != nil {
		t.Fatalf("finding the consul binary: %v; run `make tools` or set CONSUL_BIN", err)
	}
	p := filepath.Join(root, ".cache", "bin", "consul")
	if _, err := os.Stat(p); err != nil {
		t.Fatalf("no consul binary at %s: run `make tools` (or set CONSUL_BIN)", p)
	}
	return p
}

// startACLConsul starts a single Consul server on 127.0.0.1 with ACLs on,
// default deny, and returns a client holding the management token. It
// uses testagent's process handling (own process group, teardown at
// cleanup), since testagent.Consul has no ACL option.
func startACLConsul(t *testing.T) (client *api.Client, addr string) {
	t.Helper()
	bin := consulBinary(t)
	ports := testagent.FreePorts(t, 6)
	var env []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "CONSUL_HTTP_") && !strings.HasPrefix(kv, "CONSUL_GRPC_") {
			env = append(env, kv)
		}
	}
	proc := testagent.NewProcess(t, "consul-acl", bin, nil, env)
	dir := proc.Dir()
	mgmt := uuid(t)
	node := "acl-" + filepath.Base(dir)
	cfg := fmt.Sprintf(`
node_name            = %q
datacenter           = "dc1"
data_dir             = %q
server               = true
bootstrap_expect     = 1
bind_addr            = "127.0.0.1"
client_addr          = "127.0.0.1"
advertise_addr       = "127.0.0.1"
log_level            = "INFO"
disable_update_check = true
ui_config { enabled = false }
acl {
  enabled        = true
  default_policy = "deny"
  tokens {
    initial_management = %q
    agent              = %q
  }
}
ports {
  http     = %d
  dns      = %d
  server   = %d
  serf_lan = %d
  serf_wan = %d
  grpc     = %d
  grpc_tls = -1
  https    = -1
}
`, node, filepath.Join(dir, "data"), mgmt, mgmt, ports[0], ports[1], ports[2], ports[3], ports[4], ports[5])
	cfgPath := filepath.Join(dir, "consul.hcl")
	if err := os.WriteFile(cfgPath, []byte(cfg), 0o600); err != nil {
		t.Fatalf("writing %s: %v", cfgPath, err)
	}
	proc.SetArgs("agent", "-config-file", cfgPath)
	if err := proc.Start(); err != nil {
		t.Fatalf("starting consul with ACLs: %v", err)
	}
	addr = fmt.Sprintf("127.0.0.1:%d", ports[0])
	client, err := api.NewClient(&api.Config{Address: addr, Scheme: "http", Token: mgmt})
	if err != nil {
		t.Fatalf("consul client: %v", err)
	}
	var last error
	deadline := time.Now().Add(90 * time.Second)
	for {
		last = aclReady(client, node)
		if last == nil {
			break
		}
		if !proc.Running() {
			t.Fatalf("consul with ACLs exited: %v (last check: %v)\n%s", proc.ExitErr(), last, proc.LogTail(40))
		}
		if time.Now().After(deadline) {
			t.Fatalf("consul with ACLs not ready after 90s: %v\n%s", last, proc.LogTail(40))
		}
		time.Sleep(250 * time.Millisecond)
	}
	return client, addr
}

func aclReady(c *api.Client, node string) error {
	if leader, err := c.Status().Leader(); err != nil || leader == "" {
		return fmt.Errorf("no leader yet (%v)", err)
	}
	if _, _, err := c.ACL().TokenReadSelf(nil); err != nil {
		return fmt.Errorf("ACLs not bootstrapped yet: %w", err)
	}
	nodes, _, err := c.Catalog().Nodes(nil)
	if err != nil {
		return err
	}
	for _, n := range nodes {
		if n.Node == node {
			return nil
		}
	}
	return fmt.Errorf("node %s not in the catalog yet", node)
}

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
	mgmt, addr := startACLConsul(t)
	good := tokenClient(t, mgmt, addr, "nomad-statefulset", testPolicyRules)
	readOnly := tokenClient(t, mgmt, addr, "read-only", readOnlyRules)
	anonymous := newTokenClient(t, addr, "")

	t.Run("LimitedTokenWorks", func(t *testing.T) {
		ctx := ctxFor(t, 5*time.Minute)
		prefix := testPrefix(t)
		log := newLeadLog()
		e := startElector(t, good, testElectorConfig(DefaultLockKey(prefix)), "limited", log)
		waitFor(t, 60*time.Second, "the elector with the limited token to lead", e.e.IsLeader)
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
	for name, c := range map[string]*api.Client{"ReadOnlyToken": readOnly, "NoToken": anonymous} {
		t.Run(name, func(t *testing.T) {
			ctx := ctxFor(t, 2*time.Minute)
			prefix := testPrefix(t)
			e := NewElector(c, testElectorConfig(DefaultLockKey(prefix)), testLogger(t))
			runErr := make(chan error, 1)
			go func() {
				runErr <- e.Run(ctx, func(ctx context.Context) error {
					t.Error("led without the rights to")
					<-ctx.Done()
					return nil
				})
			}()
			select {
			case err := <-runErr:
				if err == nil || !strings.Contains(err.Error(), "Consul denied") || !strings.Contains(err.Error(), "session:write") {
					t.Fatalf("Run error = %v; want a clear permission error naming session:write", err)
				}
				t.Logf("election with %s: %v", name, err)
			case <-time.After(90 * time.Second):
				t.Fatal("Run did not give up on a token without rights within 90s")
			}
			s := NewStore(c, prefix, nil, testLogger(t))
			err := s.PutStatus(ctx, backend.SetKey{Namespace: "default", Name: "web"}, reconciler.Status{})
			if err == nil || !strings.Contains(err.Error(), "Consul denied") && !strings.Contains(err.Error(), "403") {
				t.Fatalf("store write error = %v; want a clear permission error", err)
			}
			t.Logf("store write with %s: %v", name, err)
		})
	}
}
