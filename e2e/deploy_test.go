package e2e

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	nomadapi "github.com/hashicorp/nomad/api"

	"github.com/nomad-statefulset/nomad-statefulset/client"
	"github.com/nomad-statefulset/nomad-statefulset/internal/testagent"
)

// TestDeployAsANomadJob runs examples/deploy/nomad-statefulset.nomad.hcl on a
// Nomad with ACLs on, with the locally built binary in place of the release
// artifact (raw_exec, since the test node is the test's own machine) and the
// example's ACL policy bound to the job: two daemons run as Nomad
// allocations and authenticate with their workload identity through the
// Task API socket. One leads; a set converges through it; stopping the
// leader's allocation hands over to the other, and the set keeps
// converging, also after the cluster's signing key is rotated. The
// daemons' environment holds no Nomad token but their workload identity.
// Consul has ACLs on too (default deny): the daemons' Consul token, holding
// the README's Consul policy, reaches them only through the Nomad Variable
// the job's template reads, and the leader lock, the state in KV and the
// health watches all work with it.
func TestDeployAsANomadJob(t *testing.T) {
	root, err := testagent.ModuleRoot()
	if err != nil {
		t.Fatal(err)
	}
	consul := testagent.Consul(t, testagent.WithConsulACL())
	// Nomad registers the job's services with the management token.
	nomad := testagent.Nomad(t, testagent.WithConsul(consul), testagent.WithACL(),
		testagent.WithConfig(fmt.Sprintf("consul {\n  token = %q\n}", consul.Token)))
	c := &Cluster{Consul: consul, Nomad: nomad, Watchdog: StartWatchdog(t, nomad.Client), t: t}
	nc := c.Nomad.Client
	// The README's Consul policy, for the default kv_prefix the example
	// job's configuration keeps.
	consulTok := consulToken(t, consul, "nomad-statefulset", strings.ReplaceAll(consulPolicy, "nss-acl/", "nomad-statefulset/"))
	bin := DaemonBinary(t)

	rules, err := os.ReadFile(filepath.Join(root, "examples", "deploy", "nomad-statefulset.policy.hcl"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := nc.ACLPolicies().Upsert(&nomadapi.ACLPolicy{Name: "nomad-statefulset", Rules: string(rules),
		JobACL: &nomadapi.JobACL{Namespace: "default", JobID: "nomad-statefulset"}}, nil); err != nil {
		t.Fatalf("binding the example policy to the job: %v", err)
	}
	// A fresh Nomad answers "keyring has not been initialized yet" for a
	// moment after its leader is elected (CI at bbe7575 met it).
	Eventually(t, 30*time.Second, "the Consul token to be stored in a Nomad Variable", func() error {
		_, _, err := nc.Variables().Create(&nomadapi.Variable{Path: "nomad/jobs/nomad-statefulset",
			Items: nomadapi.VariableItems{"consul_token": consulTok}}, nil)
		if err != nil && !strings.Contains(err.Error(), "keyring has not been initialized") {
			return fmt.Errorf("%w: writing the Consul token variable: %w", ErrGiveUp, err)
		}
		return err
	})

	src, err := os.ReadFile(filepath.Join(root, "examples", "deploy", "nomad-statefulset.nomad.hcl"))
	if err != nil {
		t.Fatal(err)
	}
	job, err := nc.Jobs().ParseHCLOpts(&nomadapi.JobsParseRequest{JobHCL: string(src), Canonicalize: true,
		Variables: fmt.Sprintf("consul_addr = %q\n", c.Consul.HostPort)})
	if err != nil {
		t.Fatalf("parsing the example job: %v", err)
	}
	// The test node is this machine: the local binary replaces the
	// artifact, raw_exec runs it, and both agents share the one node.
	job.Constraints = nil
	job.TaskGroups[0].Constraints = nil
	task := job.TaskGroups[0].Tasks[0]
	task.Artifacts = nil
	task.Driver = "raw_exec"
	task.Config = map[string]any{"command": bin, "args": []string{"agent", "-config", "local/agent.hcl"}}
	if _, _, err := nc.Jobs().Register(job, nil); err != nil {
		t.Fatalf("registering the daemon's job: %v", err)
	}

	// The agents' HTTP addresses, from their allocations' ports.
	addrs := func() map[string]string {
		out := map[string]string{}
		stubs, _, err := nc.Jobs().Allocations("nomad-statefulset", false, nil)
		if err != nil {
			return out
		}
		for _, s := range stubs {
			if s.ClientStatus != "running" || s.DesiredStatus != "run" {
				continue
			}
			a, _, err := nc.Allocations().Info(s.ID, nil)
			if err != nil || a.AllocatedResources == nil {
				continue
			}
			for _, p := range a.AllocatedResources.Shared.Ports {
				if p.Label == "http" {
					out[s.ID] = "http://" + p.HostIP + ":" + strconv.Itoa(p.Value)
				}
			}
		}
		return out
	}
	health := func(addr string) (client.Health, error) {
		var h client.Health
		resp, err := http.Get(addr + "/v1/health")
		if err != nil {
			return h, err
		}
		defer resp.Body.Close()
		return h, json.NewDecoder(resp.Body).Decode(&h)
	}
	leader := func(exclude string) (string, string) {
		var id, addr string
		Eventually(t, 2*time.Minute, "one of two running agents to lead", func() error {
			as := addrs()
			if len(as) != 2 {
				return fmt.Errorf("%d agents running", len(as))
			}
			leaders := 0
			for alloc, a := range as {
				h, err := health(a)
				if err != nil {
					return err
				}
				if h.Leader && alloc != exclude {
					leaders++
					id, addr = alloc, a
				}
			}
			if leaders != 1 {
				return fmt.Errorf("%d leaders among %v", leaders, as)
			}
			return nil
		})
		return id, addr
	}
	leaderID, leaderAddr := leader("")
	t.Logf("agent %s leads at %s", leaderID, leaderAddr)

	RegisterHCL(t, nc, setSpec{name: "dep", noVolume: true, meta: map[string]string{"statefulset_replicas": "2"}}.hcl())
	// Nomad's ACLs are on: the daemons' API is read with the management token.
	waitConverged(t, c, &Daemon{Addr: leaderAddr, nomad: nomad}, "dep", 2, nil)

	// Only the workload identity reached the daemons: their NOMAD_TOKEN is
	// a JWT, not the management token, and NOMAD_ADDR is the socket.
	envs := daemonEnvs(t, bin, addrs())
	if len(envs) < 2 {
		t.Fatalf("found %d daemon processes, want 2", len(envs))
	}
	t.Logf("%d daemon processes, each with a workload identity token and the Task API socket", len(envs))
	for _, env := range envs {
		tok := env["NOMAD_TOKEN"]
		if strings.Count(tok, ".") != 2 || tok == c.Nomad.Token {
			t.Fatalf("a daemon's NOMAD_TOKEN is not a workload identity: %q", tok)
		}
		if !strings.HasPrefix(env["NOMAD_ADDR"], "unix://") {
			t.Fatalf("a daemon's NOMAD_ADDR is %q, want the Task API socket", env["NOMAD_ADDR"])
		}
		if env["CONSUL_HTTP_TOKEN"] != consulTok {
			t.Fatalf("a daemon's CONSUL_HTTP_TOKEN is not the one in the Nomad Variable (management token: %v)", env["CONSUL_HTTP_TOKEN"] == consul.Token)
		}
	}
	// The agents are registered in Consul with their HTTP check on
	// /v1/health passing, and serve Prometheus metrics on that port.
	Eventually(t, time.Minute, "both agents' Consul service checks to pass", func() error {
		entries, _, err := consul.Client.Health().Service("nomad-statefulset", "metrics", true, nil)
		if err != nil || len(entries) != 2 {
			return fmt.Errorf("%d passing nomad-statefulset services (%v)", len(entries), err)
		}
		return nil
	})
	resp, err := (&Daemon{Addr: leaderAddr, nomad: nomad}).Get("/v1/metrics", "")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK || !bytes.Contains(body, []byte("nomad_statefulset_leader 1")) {
		t.Fatalf("the leader's /v1/metrics: %d, no nomad_statefulset_leader 1 in %d bytes", resp.StatusCode, len(body))
	}
	if p, _, err := consul.Client.KV().Get("nomad-statefulset/leader", nil); err != nil || p == nil || p.Session == "" {
		t.Fatalf("the lock key nomad-statefulset/leader is not held under Consul ACLs: %+v %v", p, err)
	}

	// Stopping the leader's allocation hands over to the other agent.
	if _, err := nc.Allocations().Stop(&nomadapi.Allocation{ID: leaderID}, nil); err != nil {
		t.Fatalf("stopping the leader's allocation: %v", err)
	}
	stopped := time.Now()
	newID, newAddr := leader(leaderID)
	t.Logf("agent %s took over at %s, %v after the leader's allocation was stopped", newID, newAddr, time.Since(stopped).Round(100*time.Millisecond))
	updateParent(t, c, "dep", setMeta("statefulset_replicas", "3"))
	waitConverged(t, c, &Daemon{Addr: newAddr, nomad: nomad}, "dep", 3, nil)

	// The cluster's signing key is rotated (nomad operator root keyring
	// rotate -full): the daemon renews nothing by hand and keeps working
	// with the identity its task was given.
	if _, _, err := nc.Keyring().Rotate(&nomadapi.KeyringRotateOptions{Full: true}, nil); err != nil {
		t.Fatalf("rotating the keyring: %v", err)
	}
	updateParent(t, c, "dep", setMeta("statefulset_replicas", "2"))
	waitConverged(t, c, &Daemon{Addr: newAddr, nomad: nomad}, "dep", 2, nil)

	// The README's upgrade path: a new version of the daemon's own job
	// rolls the agents one at a time (update max_parallel = 1). No poll
	// ever sees two leaders, both agents end on the new job version, and
	// the set converges through whichever leads then.
	own, _, err := nc.Jobs().Info("nomad-statefulset", nil)
	if err != nil {
		t.Fatal(err)
	}
	own.TaskGroups[0].Tasks[0].Env["NSS_E2E_UPGRADE"] = "1"
	upgraded := time.Now()
	if _, _, err := nc.Jobs().Register(own, nil); err != nil {
		t.Fatalf("registering the daemon's job again: %v", err)
	}
	j, _, err := nc.Jobs().Info("nomad-statefulset", nil)
	if err != nil {
		t.Fatal(err)
	}
	version := *j.Version
	if version <= *own.Version {
		t.Fatalf("the daemon's job is at version %d after the update, was %d", version, *own.Version)
	}
	var upgradedLeader string
	Eventually(t, 3*time.Minute, "both agents on the new job version, one leading", func() error {
		stubs, _, err := nc.Jobs().Allocations("nomad-statefulset", false, nil)
		if err != nil {
			return err
		}
		current, leaders := 0, 0
		for _, a := range addrs() {
			if h, err := health(a); err == nil && h.Leader {
				leaders++
				upgradedLeader = a
			}
		}
		if leaders > 1 {
			t.Fatalf("two agents lead at once during the rolling update")
		}
		for _, st := range stubs {
			if st.ClientStatus == "running" && st.DesiredStatus == "run" && st.JobVersion == version {
				current++
			}
		}
		if current != 2 || leaders != 1 {
			return fmt.Errorf("%d agents at version %d, %d leading", current, version, leaders)
		}
		return nil
	})
	t.Logf("the rolling update of the daemon's job to version %d took %v, one leader throughout", version, time.Since(upgraded).Round(100*time.Millisecond))
	updateParent(t, c, "dep", setMeta("statefulset_replicas", "3"))
	waitConverged(t, c, &Daemon{Addr: upgradedLeader, nomad: nomad}, "dep", 3, nil)
}

// daemonEnvs returns the environment of every process of the daemon
// binary bin that runs for one of allocs (by allocation ID, as allocPIDs
// finds them). The binary alone does not tell: other tests, running at once
// (scripts/e2e.sh), start daemons of the same binary outside Nomad.
func daemonEnvs(t *testing.T, bin string, allocs map[string]string) []map[string]string {
	t.Helper()
	var out []map[string]string
	for allocID := range allocs {
		for _, pid := range allocPIDs(allocID) {
			p := filepath.Join("/proc", strconv.Itoa(pid))
			cmd, err := os.ReadFile(filepath.Join(p, "cmdline"))
			if err != nil || !strings.HasPrefix(string(cmd), bin+"\x00agent") {
				continue
			}
			raw, err := os.ReadFile(filepath.Join(p, "environ"))
			if err != nil {
				continue
			}
			env := map[string]string{}
			for _, kv := range strings.Split(string(raw), "\x00") {
				if k, v, ok := strings.Cut(kv, "="); ok {
					env[k] = v
				}
			}
			out = append(out, env)
		}
	}
	return out
}
