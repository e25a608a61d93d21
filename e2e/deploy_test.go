package e2e

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"slices"
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
// the Consul policy of docs/operations.md, reaches them only through the Nomad Variable
// the job's template reads, and the leader lock, the state in KV and the
// health watches all work with it. A leader-aware set (a leader check,
// leader_update = "switchover", a switchover command and a disruption
// check) rolls through the deployed daemons: the example policy's
// alloc-exec lets them run both commands in its pods, in DESIGN §3b's
// order (rollLeaderAwareSet).
func TestDeployAsANomadJob(t *testing.T) {
	root, err := testagent.ModuleRoot()
	if err != nil {
		t.Fatal(err)
	}
	consul := testagent.Consul(t, testagent.WithConsulACL())
	// Nomad registers the job's services with the management token. The
	// static host volume is the leader-aware set's shared state
	// (leaderAwareSetHCL).
	shared := leaderAwareSharedDir(t)
	nomad := testagent.Nomad(t, testagent.WithConsul(consul), testagent.WithACL(),
		testagent.WithConfig(fmt.Sprintf("consul {\n  token = %q\n}", consul.Token)),
		testagent.WithConfig(fmt.Sprintf("client {\n  host_volume %q {\n    path = %q\n  }\n}", leaderAwareVolume, shared)))
	c := &Cluster{Consul: consul, Nomad: nomad, Watchdog: StartWatchdog(t, nomad.Client), t: t}
	nc := c.Nomad.Client
	// The Consul policy of docs/operations.md, for the default kv_prefix the example
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

	// A leader-aware set rolls through the deployed daemons: the policy's
	// alloc-exec lets them run its disruption check and its switchover
	// command in its pods, with their workload identity.
	rollLeaderAwareSet(t, c, &Daemon{Addr: leaderAddr, nomad: nomad}, shared)

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

	// The upgrade path of docs/operations.md: a new version of the daemon's own job
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

// leaderAwareVolume is the static host volume, on the test's Nomad
// client, that the pods of leaderAwareSetHCL share.
const leaderAwareVolume = "ldr-shared"

// leaderAwareSharedDir makes the directory behind leaderAwareVolume, with
// the files the set's commands write, writable by the exec driver's task
// user (nobody).
func leaderAwareSharedDir(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	for _, f := range []string{"leader", "log"} {
		if err := os.WriteFile(filepath.Join(dir, f), nil, 0o666); err != nil {
			t.Fatal(err)
		}
	}
	for _, p := range []string{dir, filepath.Join(dir, "leader"), filepath.Join(dir, "log")} {
		if err := os.Chmod(p, 0o777); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

// leaderAwareSetHCL is a set of two pods whose leader is the pod named in
// the file leader of leaderAwareVolume (dir on the host), which each
// pod's task "app" (exec, the statefulset_exec_task) mounts at /shared (a
// plain group volume, not a claim). Its switchover command writes the
// target's name there; its disruption check always agrees. Both commands,
// and nothing else, append to /shared/log what ran, in which pod and
// about which pod, so that the test sees that the daemon ran them, in its
// pods, in the order DESIGN §3b promises. The commands run in an exec
// task, as the examples' do: a driver without filesystem isolation
// (raw_exec) would need alloc-node-exec, which the example policy rightly
// does not grant.
//
// The leader check ("leader", on a service of its own, ignored by Nomad's
// deployment health) passes in the pod that file names. It is a script
// check in a raw_exec sidecar, which reads the file on the host: Nomad
// 1.10.5's exec executor panics ("send on closed channel") when a script
// check in an exec task times out, which a busy machine makes it do.
func leaderAwareSetHCL(name, dir string) string {
	return fmt.Sprintf(`job %[1]q {
  datacenters = ["*"]
  meta {
    statefulset                    = "true"
    statefulset_replicas           = "2"
    statefulset_leader_check       = "leader"
    statefulset_leader_update      = "switchover"
    statefulset_switchover_command = "echo \"switchover $NSS_POD $NSS_TARGET_POD\" >> /shared/log && echo \"$NSS_TARGET_POD\" > /shared/leader"
    statefulset_disruption_check   = "echo \"check $NSS_POD $NSS_TARGET_POD\" >> /shared/log"
    statefulset_exec_task          = "app"
  }
  group "app" {
    count = 0
    update {
      min_healthy_time = "1s"
      healthy_deadline = "2m"
    }
    volume "shared" {
      type   = "host"
      source = %[2]q
    }
    task "app" {
      driver = "exec"
      config {
        command = "/bin/sh"
        args    = ["-c", "while true; do sleep 1; done"]
      }
      volume_mount {
        volume      = "shared"
        destination = "/shared"
      }
      resources {
        cpu    = 20
        memory = 24
      }
    }
    task "leader-check" {
      driver = "raw_exec"
      config {
        command = "/bin/sh"
        args    = ["-c", "while true; do sleep 1; done"]
      }
      service {
        name     = "%[1]s-leader"
        provider = "consul"
        check {
          name      = "leader"
          type      = "script"
          command   = "/bin/sh"
          args      = ["-c", %[3]q]
          interval  = "1s"
          timeout   = "5s"
          on_update = "ignore"
        }
      }
      resources {
        cpu    = 20
        memory = 24
      }
    }
  }
}
`, name, leaderAwareVolume, fmt.Sprintf(`test "$(cat %s)" = "$STATEFULSET_POD_NAME"`, filepath.Join(dir, "leader")))
}

// rollLeaderAwareSet runs leaderAwareSetHCL through the daemon d leads
// with, with ldr-0 leading (dir is leaderAwareVolume's directory),
// changes its template and waits until the rollout is complete. It
// asserts that the disruption check ran before each pod went down (in the
// other pod, about it), that the switchover command ran in ldr-0 for ldr-1
// after the check about ldr-0 and before ldr-0 was stopped (the commands'
// own log and the daemon's events), that the daemon saw ldr-1 lead before
// it stopped ldr-0 (its Switchover event) and after (the pods' leader
// flag), and that every pod ends at the new revision.
func rollLeaderAwareSet(t *testing.T, c *Cluster, d *Daemon, dir string) {
	t.Helper()
	const set = "ldr"
	if err := os.WriteFile(filepath.Join(dir, "leader"), []byte(set+"-0\n"), 0o666); err != nil {
		t.Fatal(err)
	}
	RegisterHCL(t, c.Nomad.Client, leaderAwareSetHCL(set, dir))
	old := waitConverged(t, c, d, set, 2, nil)[0]
	Eventually(t, time.Minute, set+"-0 to be seen as the leader", func() error {
		return wantLeader(d, set, 0)
	})

	// The daemon keeps the last 20 events; a rollout makes more than the
	// test must see, so they are gathered as it goes.
	seen := map[client.Event]bool{}
	var events []client.Event
	gather := func() {
		st, err := setStatus(d, set)
		if err != nil {
			return
		}
		for _, e := range st.Events {
			if !seen[e] {
				seen[e] = true
				events = append(events, e)
			}
		}
	}
	gather()
	t.Cleanup(func() {
		if t.Failed() {
			raw, _ := os.ReadFile(filepath.Join(dir, "log"))
			var got []string
			for _, e := range events {
				got = append(got, e.Time.Format(time.StampMilli)+" "+e.Type+": "+e.Message)
			}
			st, err := setStatus(d, set)
			t.Logf("%s's events:\n%s\nthe commands' log:\n%s\nits status now: %+v (%v)", set, strings.Join(got, "\n"), raw, st, err)
		}
	})
	updateParent(t, c, set, changeTemplate("v2"))
	started := time.Now()
	Eventually(t, convergeTimeout, set+" to roll to its new revision through a switchover", func() error {
		gather()
		revs, live := healthyRevisions(t, c, set)
		if live != 2 || len(revs) != 2 || revs[0] == old || revs[1] == old {
			return fmt.Errorf("%d live children, healthy at %v (old revision %s)", live, revs, old)
		}
		st, err := setStatus(d, set)
		if err != nil {
			return err
		}
		if st.Status.UpdatedReplicas != 2 || st.Status.ReadyReplicas != 2 || st.Status.CurrentRevision != st.Status.UpdateRevision {
			return fmt.Errorf("daemon status: updated %d ready %d, current revision %s, update revision %s",
				st.Status.UpdatedReplicas, st.Status.ReadyReplicas, st.Status.CurrentRevision, st.Status.UpdateRevision)
		}
		return wantLeader(d, set, 1)
	})
	gather()
	t.Logf("%s rolled through a switchover in %v", set, time.Since(started).Round(100*time.Millisecond))

	raw, err := os.ReadFile(filepath.Join(dir, "log"))
	if err != nil {
		t.Fatalf("neither the disruption check nor the switchover ran: %v", err)
	}
	log := strings.Split(strings.TrimSpace(string(raw)), "\n")
	first := func(line string) int {
		i := slices.Index(log, line)
		if i < 0 {
			t.Fatalf("%q never ran; the commands' log:\n%s", line, raw)
		}
		return i
	}
	aboutFollower := first("check ldr-0 ldr-1") // ldr-1 goes first: asked in ldr-0
	aboutLeader := first("check ldr-1 ldr-0")   // then ldr-0, asked in the updated ldr-1
	switchover := first("switchover ldr-0 ldr-1")
	if aboutFollower > aboutLeader || aboutLeader > switchover {
		t.Fatalf("want the check about ldr-1, then the check about ldr-0, then the switchover; the commands' log:\n%s", raw)
	}
	if b, _ := os.ReadFile(filepath.Join(dir, "leader")); strings.TrimSpace(string(b)) != set+"-1" {
		t.Fatalf("the leader file holds %q after the rollout, want %s-1", b, set)
	}

	// The daemon's own account: the leader's disruption check, then its
	// switchover, then the new leader seen (DESIGN §3b: the switchover
	// waits until the leader check passes on another pod), then the old
	// leader's deletion.
	index := func(typ, prefix string) int {
		return slices.IndexFunc(events, func(e client.Event) bool { return e.Type == typ && strings.HasPrefix(e.Message, prefix) })
	}
	checked := index("CheckDisruption", "CheckDisruption "+set+"-0")
	handing := index("Switchover", "Switchover "+set+"-0: handing leadership to "+set+"-1")
	deleted := index("DeletePod", "DeletePod "+set+"-0")
	led := index("Switchover", set+"-1 leads, after a switchover from "+set+"-0")
	if checked < 0 || handing < 0 || deleted < 0 || led < 0 || checked > handing || handing > led || led > deleted {
		var got []string
		for _, e := range events {
			got = append(got, e.Type+": "+e.Message)
		}
		t.Fatalf("want the events CheckDisruption %[1]s-0, Switchover %[1]s-0 (to %[1]s-1), Switchover (%[1]s-1 leads), "+
			"DeletePod %[1]s-0 in that order; got:\n%[2]s", set, strings.Join(got, "\n"))
	}
}

// wantLeader says whether the daemon sees ordinal ord of set, and it
// alone, as the leader.
func wantLeader(d *Daemon, set string, ord int) error {
	st, err := setStatus(d, set)
	if err != nil {
		return err
	}
	var leaders []int
	for _, p := range st.Pods {
		if p.Leader {
			leaders = append(leaders, p.Ordinal)
		}
	}
	if len(leaders) != 1 || leaders[0] != ord {
		return fmt.Errorf("leaders %v, want [%d]", leaders, ord)
	}
	return nil
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
