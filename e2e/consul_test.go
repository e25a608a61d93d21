package e2e

import (
	"fmt"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	consulapi "github.com/hashicorp/consul/api"

	"github.com/nomad-statefulset/nomad-statefulset/client"
	"github.com/nomad-statefulset/nomad-statefulset/internal/testagent"
)

// The agent's state in Consul, as the agent-level tests below read it with
// the management client: the default kv_prefix and the layout of
// backend/consul.
const defaultKVPrefix = "nomad-statefulset"

// kvRevisions returns a set's revision keys and raw values.
func kvRevisions(t *testing.T, c *consulapi.Client, prefix, set string) map[string]string {
	t.Helper()
	pairs, _, err := c.KV().List(prefix+"/default/"+set+"/revisions/", &consulapi.QueryOptions{RequireConsistent: true})
	if err != nil {
		t.Fatalf("listing the revisions of %s in Consul: %v", set, err)
	}
	out := map[string]string{}
	for _, p := range pairs {
		out[p.Key] = string(p.Value)
	}
	return out
}

// nomadWrites is the daemons' Nomad write count, from /v1/metrics. A
// follower that never led has made no Nomad call and has no such metric,
// but at least one of ds must have it.
func nomadWrites(t *testing.T, ds ...*Daemon) float64 {
	t.Helper()
	const name = "nomad_statefulset_nomad_api_calls_total"
	total, seen := 0.0, false
	for _, d := range ds {
		v, found := readMetric(t, d.Addr, name, `write="true"`)
		total, seen = total+v, seen || found
	}
	if !seen {
		t.Fatalf("no metric %s in the /v1/metrics of any of %d agents", name, len(ds))
	}
	return total
}

// oneLeader waits until exactly one of ds leads and returns it; two leaders
// at once fail the test.
func oneLeader(t *testing.T, timeout time.Duration, ds ...*Daemon) *Daemon {
	t.Helper()
	var leader *Daemon
	Eventually(t, timeout, "one agent to lead", func() error {
		leader = nil
		for _, d := range ds {
			if health(t, d).Leader {
				if leader != nil {
					t.Fatalf("two agents lead at once: %s and %s", leader.Addr, d.Addr)
				}
				leader = d
			}
		}
		if leader == nil {
			return fmt.Errorf("no leader yet")
		}
		return nil
	})
	return leader
}

// leaderAndFollower waits until one of a and b leads, and returns it first.
func leaderAndFollower(t *testing.T, a, b *Daemon) (leader, follower *Daemon) {
	t.Helper()
	if oneLeader(t, time.Minute, a, b) == a {
		return a, b
	}
	return b, a
}

// noLeader waits until none of ds leads.
func noLeader(t *testing.T, timeout time.Duration, ds ...*Daemon) {
	t.Helper()
	Eventually(t, timeout, "every agent to stop leading", func() error {
		for _, d := range ds {
			if h := health(t, d); h.Leader {
				return fmt.Errorf("%s still leads: %+v", d.Addr, h)
			}
		}
		return nil
	})
}

// consulOutage stops Consul, checks that the agents stop leading and make
// no Nomad write from the moment Consul is gone until it is back, and
// starts it again with its data (testagent keeps the data dir and ports).
func consulOutage(t *testing.T, c *Cluster, ds ...*Daemon) {
	t.Helper()
	c.Consul.Stop()
	writes := nomadWrites(t, ds...)
	down := time.Now()
	noLeader(t, time.Minute, ds...)
	t.Logf("every agent stopped leading %v after Consul stopped", time.Since(down).Round(100*time.Millisecond))
	for _, d := range ds {
		if h := health(t, d); h.Status != "degraded" || h.Checks["store"] == "ok" {
			t.Fatalf("with Consul gone, %s reports %+v; want degraded with the store failing", d.Addr, h)
		}
	}
	// Stay down past a session TTL, so the agents' retries are exercised.
	time.Sleep(10 * time.Second)
	if w := nomadWrites(t, ds...); w != writes {
		t.Fatalf("the agents made %v Nomad writes while Consul was down", w-writes)
	}
	t.Logf("no Nomad write during the %v outage", time.Since(down).Round(100*time.Millisecond))
	c.Consul.Start()
}

// Restart Consul under two HA agents, first while a set is converged, then
// mid-rollout: the agents stop acting while it is gone (no Nomad write),
// then recover by themselves and finish the rollout; the revisions in
// Consul are the same before and after (none lost, none duplicated), and
// the watchdog sees no ordinal with two allocations.
func TestConsulRestart(t *testing.T) {
	c := NewCluster(t)
	a := c.StartDaemon(haConfig)
	b := c.StartDaemon(haConfig)
	leader := oneLeader(t, time.Minute, a, b)
	follower := a
	if leader == a {
		follower = b
	}
	if out, err := leader.CLI("status"); err != nil || !strings.Contains(out, "Agent: leader (lock held since ") {
		t.Fatalf("status on the leader: %v\n%s", err, out)
	}
	if out, err := follower.CLI("status"); err != nil || !strings.Contains(out, "Agent: follower") {
		t.Fatalf("status on the follower: %v\n%s", err, out)
	}

	RegisterHCL(t, c.Nomad.Client, setSpec{name: "cr", noVolume: true, meta: map[string]string{"statefulset_replicas": "3"}}.hcl())
	old := waitConverged(t, c, leader, "cr", 3, nil)[0]
	before := kvRevisions(t, c.Consul.Client, defaultKVPrefix, "cr")
	if len(before) != 1 {
		t.Fatalf("want one revision in Consul, got %v", before)
	}

	t.Log("restarting Consul while the set is converged")
	consulOutage(t, c, a, b)
	leader = oneLeader(t, 2*time.Minute, a, b)
	writes := nomadWrites(t, a, b)
	waitConverged(t, c, leader, "cr", 3, func(o int, r string) error {
		if r != old {
			return fmt.Errorf("cr-%d moved to %s", o, r)
		}
		return nil
	})
	if after := kvRevisions(t, c.Consul.Client, defaultKVPrefix, "cr"); !reflect.DeepEqual(after, before) {
		t.Fatalf("revisions changed across the Consul restart:\nbefore %v\nafter  %v", before, after)
	}
	if w := nomadWrites(t, a, b); w != writes {
		t.Fatalf("recovering a converged set made %v Nomad writes", w-writes)
	}

	t.Log("restarting Consul mid-rollout")
	updateParent(t, c, "cr", changeTemplate("v2"))
	Eventually(t, time.Minute, "the rollout to start and its revision to be stored", func() error {
		if revs, _ := healthyRevisions(t, c, "cr"); revs[2] == old {
			return fmt.Errorf("cr-2 still at %s", old)
		}
		if n := len(kvRevisions(t, c.Consul.Client, defaultKVPrefix, "cr")); n != 2 {
			return fmt.Errorf("%d revisions in Consul", n)
		}
		return nil
	})
	before = kvRevisions(t, c.Consul.Client, defaultKVPrefix, "cr")
	consulOutage(t, c, a, b)
	leader = oneLeader(t, 2*time.Minute, a, b)
	waitConverged(t, c, leader, "cr", 3, func(o int, r string) error {
		if r == old {
			return fmt.Errorf("cr-%d still at the old revision", o)
		}
		return nil
	})
	if after := kvRevisions(t, c.Consul.Client, defaultKVPrefix, "cr"); !reflect.DeepEqual(after, before) {
		t.Fatalf("revisions changed across the Consul restart:\nbefore %v\nafter  %v", before, after)
	}
	st, err := setStatus(leader, "cr")
	if err != nil {
		t.Fatal(err)
	}
	if len(st.Revisions) != 2 || st.Error != "" {
		t.Fatalf("want exactly 2 revisions and no error after the restarts, got %+v (error %q)", st.Revisions, st.Error)
	}
}

// consulPolicy is the minimal Consul ACL policy docs/operations.md documents, for the
// kv_prefix the ACL test uses.
const consulPolicy = `
key_prefix "nss-acl/" {
  policy = "write"
}
session_prefix "" {
  policy = "write"
}
service_prefix "" {
  policy = "read"
}
node_prefix "" {
  policy = "read"
}
`

// consulToken creates a Consul ACL policy with rules and a token for it.
func consulToken(t *testing.T, c *testagent.ConsulAgent, name, rules string) string {
	t.Helper()
	pol, _, err := c.Client.ACL().PolicyCreate(&consulapi.ACLPolicy{Name: name, Rules: rules}, nil)
	if err != nil {
		t.Fatalf("creating Consul policy %s: %v", name, err)
	}
	tok, _, err := c.Client.ACL().TokenCreate(&consulapi.ACLToken{Description: name, Policies: []*consulapi.ACLTokenPolicyLink{{ID: pol.ID}}}, nil)
	if err != nil {
		t.Fatalf("creating Consul token %s: %v", name, err)
	}
	return tok.SecretID
}

// consulBlock is the agent's consul block with a token and kv_prefix.
func consulBlock(c *testagent.ConsulAgent, token, prefix string) string {
	return fmt.Sprintf("consul {\n  address = %q\n  token = %q\n  kv_prefix = %q\n}", c.HostPort, token, prefix)
}

// startDegradedDaemon starts a daemon without the harness's consul block
// (extraHCL brings one) and waits only until /v1/health answers at all: an
// agent whose election is denied answers 503.
func startDegradedDaemon(t *testing.T, nomad *testagent.NomadAgent, extraHCL ...string) *Daemon {
	t.Helper()
	d := NewDaemon(t, nomad, nil, extraHCL...)
	d.StartDegraded()
	return d
}

// With Consul ACLs on, an HA agent whose token holds exactly the documented
// policy (key_prefix write on kv_prefix, which holds the lock key, and
// session write) runs a set end to end. Tokens lacking a right get an error
// naming it, in the log, /v1/health and `status`, and the agent keeps
// running (no crash loop) without ever leading.
func TestConsulACLPolicy(t *testing.T) {
	consul := testagent.Consul(t, testagent.WithConsulACL())
	// Nomad registers services with the management token, so that the
	// agent's health watches have checks to read.
	nomad := testagent.Nomad(t, testagent.WithConsul(consul), testagent.WithConfig(fmt.Sprintf("consul {\n  token = %q\n}", consul.Token)))
	c := &Cluster{Consul: consul, Nomad: nomad, Watchdog: StartWatchdog(t, nomad.Client), t: t}

	t.Run("documented policy works", func(t *testing.T) {
		d := startDegradedDaemon(t, c.Nomad, consulBlock(consul, consulToken(t, consul, "nomad-statefulset", consulPolicy), "nss-acl"), haConfig)
		oneLeader(t, time.Minute, d)
		if h := health(t, d); h.Status != "ok" || h.Checks["leader_election"] != "ok" || h.LeaderSince == nil {
			t.Fatalf("health of the leader: %+v", h)
		}
		RegisterHCL(t, c.Nomad.Client, setSpec{name: "aclc", noVolume: true, meta: map[string]string{"statefulset_replicas": "2"}}.hcl())
		waitConverged(t, c, d, "aclc", 2, nil)
		if revs := kvRevisions(t, consul.Client, "nss-acl", "aclc"); len(revs) != 1 {
			t.Fatalf("want one revision under the kv_prefix, got %v", revs)
		}
		Eventually(t, 30*time.Second, "the status to be stored under the kv_prefix", func() error {
			p, _, err := consul.Client.KV().Get("nss-acl/default/aclc/status", nil)
			if err != nil || p == nil || !strings.Contains(string(p.Value), `"ready_replicas":2`) {
				return fmt.Errorf("status key: %v %v", p, err)
			}
			return nil
		})
		if p, _, err := consul.Client.KV().Get("nss-acl/leader", nil); err != nil || p == nil || p.Session == "" {
			t.Fatalf("the lock key nss-acl/leader is not held: %+v %v", p, err)
		}
		if out, err := d.CLI("status"); err != nil || !strings.Contains(out, "Agent: leader (lock held since ") || !strings.Contains(out, "aclc") {
			t.Fatalf("status: %v\n%s", err, out)
		}

		// The health watches work under the policy: service_prefix and
		// node_prefix read let the blocking health query see the checks,
		// so a failing check makes its pod not Ready.
		RegisterHCL(t, c.Nomad.Client, setSpec{name: "aclr", noVolume: true, meta: map[string]string{"statefulset_replicas": "1"},
			script: `touch /tmp/healthy; while true; do sleep 1; done`,
			group:  strings.ReplaceAll(fmt.Sprintf(checkedService, "aclr-web"), "/data/", "/tmp/")}.hcl())
		waitConverged(t, c, d, "aclr", 1, nil)
		// The app task's /tmp, seen from the host.
		remove(t, filepath.Join(c.Nomad.DataDir, "alloc", podAlloc(t, c, "aclr-0"), "app", "tmp", "healthy"))
		Eventually(t, time.Minute, "aclr-0 to be not Ready because of its check", func() error {
			p, _, err := podByOrdinal(d, "aclr", 0)
			if err != nil || !strings.Contains(p.NotReady, `check "healthy-file" of service "aclr-web" is critical`) {
				return fmt.Errorf("aclr-0: %+v %v", p, err)
			}
			return nil
		})
		if log := d.Proc.LogTail(400); strings.Contains(log, "filtered out") || strings.Contains(log, "cannot read Consul health checks") {
			t.Fatalf("the health watch failed under the documented policy:\n%s", log)
		}
		// One leader at a time acts on the cluster's sets.
		d.Stop()
	})

	// Without service and node read the blocking health query answers,
	// but Consul's ACLs filter the entries out: the agent says which rights
	// are missing.
	t.Run("no service or node read", func(t *testing.T) {
		rules := `key_prefix "nss-acl2/" { policy = "write" }
session_prefix "" { policy = "write" }`
		d := startDegradedDaemon(t, c.Nomad, consulBlock(consul, consulToken(t, consul, "no-health-read", rules), "nss-acl2"), haConfig)
		oneLeader(t, time.Minute, d)
		Eventually(t, time.Minute, "the agent to name the missing health rights", func() error {
			if log := d.Proc.LogTail(400); !strings.Contains(log, `service_prefix \"\" and node_prefix \"\" read`) {
				return fmt.Errorf("not in the log yet")
			}
			return nil
		})
		d.Stop()
	})

	for _, tc := range []struct {
		name, rules, missing string
	}{
		{"no session write", `key_prefix "nss-acl/" { policy = "write" }`, "session:write"},
		{"read-only keys", `key_prefix "nss-acl/" { policy = "read" }
session_prefix "" { policy = "write" }`, `key:write on the lock key`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			policy := strings.ReplaceAll(tc.name, " ", "-")
			d := startDegradedDaemon(t, c.Nomad, consulBlock(consul, consulToken(t, consul, policy, tc.rules), "nss-acl"), haConfig)
			var h client.Health
			Eventually(t, time.Minute, "/v1/health to name the missing right", func() error {
				h = health(t, d)
				if h.Status != "degraded" || !strings.Contains(h.Checks["leader_election"], tc.missing) || !strings.Contains(h.Checks["leader_election"], "nss-acl/leader") {
					return fmt.Errorf("health: %+v", h)
				}
				return nil
			})
			t.Logf("leader_election check: %s", h.Checks["leader_election"])
			if log := d.Proc.LogTail(200); !strings.Contains(log, "Consul denied leader election") || !strings.Contains(log, tc.missing) {
				t.Fatalf("the log does not name the missing right %s:\n%s", tc.missing, d.Proc.LogTail(40))
			}
			// Past a few retries: still running, never leading.
			time.Sleep(5 * time.Second)
			if !d.Proc.Running() {
				t.Fatalf("the agent exited instead of retrying: %v\n%s", d.Proc.ExitErr(), d.Proc.LogTail(40))
			}
			if health(t, d).Leader {
				t.Fatal("the agent leads without the rights to")
			}
			out, err := d.CLI("status")
			if err != nil || !strings.Contains(out, "Agent: not leading (leader election is failing)") || !strings.Contains(out, tc.missing) {
				t.Fatalf("status does not show the failing election: %v\n%s", err, out)
			}
			// Fixing the policy in Consul is enough: the agent's retries
			// succeed without a restart.
			pol, _, err := consul.Client.ACL().PolicyReadByName(policy, nil)
			if err != nil || pol == nil {
				t.Fatalf("reading policy %s: %v", policy, err)
			}
			pol.Rules = consulPolicy
			if _, _, err := consul.Client.ACL().PolicyUpdate(pol, nil); err != nil {
				t.Fatalf("fixing policy %s: %v", policy, err)
			}
			Eventually(t, time.Minute, "the agent to take part in the election once its policy is fixed", func() error {
				if h := health(t, d); h.Status != "ok" || h.Checks["leader_election"] != "ok" {
					return fmt.Errorf("health: %+v", h)
				}
				return nil
			})
			d.Stop()
		})
	}
}

// Garbage written by hand into one set's revision key and another set's
// status key: each of those sets reports it (its error in
// /v1/statefulset/<ns>/<name> and `status <set>`) and is left untouched,
// while a third set keeps working (it is scaled and converges).
func TestConsulCorruptValue(t *testing.T) {
	c := NewCluster(t)
	// A short resync makes the agent re-read every set soon after the hand
	// edit, which no Nomad event announces.
	d := c.StartDaemon(`resync_interval = "3s"`)
	for _, name := range []string{"badrev", "badstatus", "good"} {
		RegisterHCL(t, c.Nomad.Client, setSpec{name: name, noVolume: true, meta: map[string]string{"statefulset_replicas": "1"}}.hcl())
	}
	for _, name := range []string{"badrev", "badstatus", "good"} {
		waitConverged(t, c, d, name, 1, nil)
	}
	Eventually(t, 30*time.Second, "the status of badstatus to be stored", func() error {
		p, _, err := c.Consul.Client.KV().Get(defaultKVPrefix+"/default/badstatus/status", nil)
		if err != nil || p == nil {
			return fmt.Errorf("status key: %v %v", p, err)
		}
		return nil
	})
	revKeys := kvRevisions(t, c.Consul.Client, defaultKVPrefix, "badrev")
	if len(revKeys) != 1 {
		t.Fatalf("want one revision of badrev, got %v", revKeys)
	}
	var corrupt []string
	for k := range revKeys {
		corrupt = append(corrupt, k)
	}
	corrupt = append(corrupt, defaultKVPrefix+"/default/badstatus/status")
	indexes := map[string]uint64{}
	for _, name := range []string{"badrev", "badstatus"} {
		for _, j := range ChildJobs(t, c.Nomad.Client, "default", name) {
			indexes[j.ID] = j.JobModifyIndex
		}
	}
	for _, k := range corrupt {
		if _, err := c.Consul.Client.KV().Put(&consulapi.KVPair{Key: k, Value: []byte("garbage{")}, nil); err != nil {
			t.Fatalf("writing garbage into %s: %v", k, err)
		}
	}

	for i, name := range []string{"badrev", "badstatus"} {
		Eventually(t, time.Minute, name+" to report its corrupt value", func() error {
			st, err := setStatus(d, name)
			if err != nil {
				return err
			}
			if !strings.Contains(st.Error, "corrupt") || !strings.Contains(st.Error, corrupt[i]) {
				return fmt.Errorf("error %q", st.Error)
			}
			return nil
		})
		out, err := d.CLI("status", name)
		if err != nil || !strings.Contains(out, "Error") || !strings.Contains(out, "is corrupt") || !strings.Contains(out, corrupt[i]) {
			t.Fatalf("status %s does not report the corrupt value: %v\n%s", name, err, out)
		}
	}

	out, err := d.CLI("status")
	if err != nil || !strings.Contains(out, "\nErrors\n") || strings.Count(out, "is corrupt") != 2 {
		t.Fatalf("status does not list the two corrupt sets under Errors: %v\n%s", err, out)
	}
	if out, err := d.CLI("scale", "good", "2"); err != nil {
		t.Fatalf("scale good 2: %v\n%s", err, out)
	}
	waitConverged(t, c, d, "good", 2, nil)
	if !d.Proc.Running() {
		t.Fatalf("the agent exited: %v", d.Proc.ExitErr())
	}
	// The corrupt sets were left alone, and still report it.
	for _, name := range []string{"badrev", "badstatus"} {
		for _, j := range ChildJobs(t, c.Nomad.Client, "default", name) {
			if j.JobModifyIndex != indexes[j.ID] {
				t.Errorf("%s's child %s was written while its state is corrupt", name, j.ID)
			}
		}
		if st, err := setStatus(d, name); err != nil || !strings.Contains(st.Error, "corrupt") {
			t.Errorf("%s no longer reports its corrupt value: %v %q", name, err, st.Error)
		}
	}
	for _, k := range corrupt {
		if p, _, err := c.Consul.Client.KV().Get(k, nil); err != nil || p == nil || string(p.Value) != "garbage{" {
			t.Errorf("the agent overwrote the corrupt value at %s: %+v %v", k, p, err)
		}
	}
}
