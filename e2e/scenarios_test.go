package e2e

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	nomadapi "github.com/hashicorp/nomad/api"

	"github.com/nomad-statefulset/nomad-statefulset/client"
)

// convergeTimeout bounds one wait for a set to converge on a real agent; a
// pod takes a few seconds (placement, start, min_healthy_time).
const convergeTimeout = 3 * time.Minute

// setSpec is a fast annotated parent job for the scenarios: exec driver, a
// per-ordinal data volume, and a 1s min_healthy_time.
type setSpec struct {
	name   string
	meta   map[string]string
	script string
	// noVolume drops the claim, for scenarios that need none.
	noVolume bool
	// group is extra HCL inside the group block.
	group string
	// update replaces the group's update block (min_healthy_time 1s,
	// healthy_deadline 2m).
	update string
}

func (s setSpec) hcl() string {
	meta := map[string]string{"statefulset": "true"}
	if !s.noVolume {
		meta["statefulset_volume_claims"] = "data"
	}
	for k, v := range s.meta {
		meta[k] = v
	}
	keys := make([]string, 0, len(meta))
	for k := range meta {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	var m strings.Builder
	for _, k := range keys {
		fmt.Fprintf(&m, "    %s = %q\n", k, meta[k])
	}
	script := s.script
	if script == "" {
		script = `echo "$STATEFULSET_POD_NAME" >> /data/identity; while true; do sleep 1; done`
	}
	volume, mount := "", ""
	if !s.noVolume {
		volume = `
    volume "data" {
      type            = "host"
      source          = "data"
      access_mode     = "single-node-single-writer"
      attachment_mode = "file-system"
    }`
		mount = `
      volume_mount {
        volume      = "data"
        destination = "/data"
      }`
	} else {
		script = strings.ReplaceAll(script, "/data/", "/tmp/")
	}
	update := s.update
	if update == "" {
		update = `
    update {
      min_healthy_time = "1s"
      healthy_deadline = "2m"
    }`
	}
	return fmt.Sprintf(`job %q {
  datacenters = ["*"]
  meta {
%s  }
  group "app" {
    count = 0
%s
%s
%s
    task "app" {
      driver = "exec"
      config {
        command = "/bin/sh"
        args    = ["-c", %q]
      }
%s
      resources {
        cpu    = 20
        memory = 24
      }
    }
  }
}
`, s.name, m.String(), volume, update, s.group, script, mount)
}

// setStatus reads GET /v1/statefulset/default/<set> from the daemon.
func setStatus(d *Daemon, set string) (client.SetDetail, error) {
	var out client.SetDetail
	resp, err := d.Get("/v1/statefulset/default/"+set, "")
	if err != nil {
		return out, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
		return out, fmt.Errorf("GET status of %s: %s: %s", set, resp.Status, b)
	}
	return out, json.NewDecoder(resp.Body).Decode(&out)
}

// healthyRevisions returns, per ordinal, the revision of each live child
// whose newest allocation is healthy, and the number of live children.
func healthyRevisions(t *testing.T, c *Cluster, set string) (map[int]string, int) {
	out := map[int]string{}
	live := 0
	for _, j := range ChildJobs(t, c.Nomad.Client, "default", set) {
		if j.Stop {
			continue
		}
		live++
		allocs := Allocations(t, c.Nomad.Client, "default", j.ID)
		if len(allocs) > 0 && Healthy(allocs[0]) {
			ord, _ := strconv.Atoi(j.Meta[MetaOrdinal])
			out[ord] = j.Meta["statefulset_revision"]
		}
	}
	return out, live
}

// waitConverged waits until the set has exactly replicas live children, all
// healthy, and the daemon's status agrees; want, if set, checks revisions.
func waitConverged(t *testing.T, c *Cluster, d *Daemon, set string, replicas int, want func(ord int, rev string) error) map[int]string {
	t.Helper()
	var revs map[int]string
	Eventually(t, convergeTimeout, fmt.Sprintf("%s to converge to %d healthy pods", set, replicas), func() error {
		var live int
		revs, live = healthyRevisions(t, c, set)
		if live != replicas || len(revs) != replicas {
			return fmt.Errorf("%d live children, healthy: %v", live, revs)
		}
		for o, r := range revs {
			if o < 0 || o >= replicas {
				return fmt.Errorf("ordinal %d out of range: %v", o, revs)
			}
			if want != nil {
				if err := want(o, r); err != nil {
					return err
				}
			}
		}
		st, err := setStatus(d, set)
		if err != nil {
			return err
		}
		if st.Status.ReadyReplicas != replicas || st.Status.Replicas != replicas {
			return fmt.Errorf("daemon status: ready %d replicas %d", st.Status.ReadyReplicas, st.Status.Replicas)
		}
		return nil
	})
	return revs
}

// deletedPods lists the pods the daemon deleted, oldest first, from its
// recent events ("DeletePod web-2: reason" or "DeletePod web-2 (revision r): …").
func deletedPods(st client.SetDetail) []string {
	var out []string
	for _, e := range st.Events {
		if f := strings.Fields(e.Message); e.Type == "DeletePod" && len(f) > 1 {
			out = append(out, strings.TrimSuffix(f[1], ":"))
		}
	}
	return out
}

func updateParent(t *testing.T, c *Cluster, set string, change func(j *nomadapi.Job)) {
	t.Helper()
	job, _, err := c.Nomad.Client.Jobs().Info(set, nil)
	if err != nil {
		t.Fatal(err)
	}
	change(job)
	if _, _, err := c.Nomad.Client.Jobs().EnforceRegister(job, *job.JobModifyIndex, nil); err != nil {
		t.Fatalf("updating parent %s: %v", set, err)
	}
}

func setMeta(k, v string) func(*nomadapi.Job) {
	return func(j *nomadapi.Job) { j.Meta[k] = v }
}

// changeTemplate makes a new revision by changing the task's script.
func changeTemplate(marker string) func(*nomadapi.Job) {
	return func(j *nomadapi.Job) {
		args := j.TaskGroups[0].Tasks[0].Config["args"].([]any)
		args[1] = "echo " + marker + "; " + args[1].(string)
	}
}

// Scenario 1: ordered create of 3 with a host volume; web-1 is registered
// only after web-0 is healthy; data in /data survives a restart of the pod.
func TestScenarioOrderedCreateWithVolume(t *testing.T) {
	c := NewCluster(t)
	d := c.StartDaemon()
	RegisterHCL(t, c.Nomad.Client, setSpec{name: "web", meta: map[string]string{"statefulset_replicas": "3"}}.hcl())
	waitConverged(t, c, d, "web", 3, nil)

	if err := c.Watchdog.RegisteredAfterHealthy("default", "web-0", "web-1", "web-2"); err != nil {
		t.Fatal(err)
	}
	vols := HostVolumes(t, c.Nomad.Client, "default", "data-web-")
	if len(vols) != 3 {
		t.Fatalf("want volumes data-web-0..2, got %d", len(vols))
	}
	identity := filepath.Join(c.Nomad.HostVolumesDir, vols[0].ID, "identity")
	Eventually(t, time.Minute, "web-0 to write its identity", func() error {
		b, err := os.ReadFile(identity)
		if err != nil || strings.Count(string(b), "web-0") != 1 {
			return fmt.Errorf("identity file: %q %v", b, err)
		}
		return nil
	})

	// Restart web-0 by stopping its child: the daemon recreates it on the
	// same volume, which still holds what the first run wrote.
	if _, _, err := c.Nomad.Client.Jobs().Deregister("web-0", false, nil); err != nil {
		t.Fatal(err)
	}
	Eventually(t, convergeTimeout, "web-0 to come back and append to its volume", func() error {
		b, err := os.ReadFile(identity)
		if err != nil || strings.Count(string(b), "web-0") != 2 {
			return fmt.Errorf("identity file: %q %v", b, err)
		}
		return nil
	})
	waitConverged(t, c, d, "web", 3, nil)
}

// Scenario 2: Parallel create registers every ordinal without waiting.
func TestScenarioParallelCreate(t *testing.T) {
	c := NewCluster(t)
	d := c.StartDaemon()
	RegisterHCL(t, c.Nomad.Client, setSpec{name: "par", meta: map[string]string{
		"statefulset_replicas": "3", "statefulset_pod_management_policy": "Parallel"}}.hcl())
	waitConverged(t, c, d, "par", 3, nil)
	var firstHealthy time.Time
	var lastRegistered time.Time
	for _, r := range c.Watchdog.Children("par") {
		if firstHealthy.IsZero() || r.HealthyAt.Before(firstHealthy) {
			firstHealthy = r.HealthyAt
		}
		if r.RegisteredAt.After(lastRegistered) {
			lastRegistered = r.RegisteredAt
		}
	}
	if !lastRegistered.Before(firstHealthy) {
		t.Fatalf("under Parallel every child must be registered before any is healthy: last registered %s, first healthy %s", lastRegistered, firstHealthy)
	}
}

// Scenario 3: ordered scale up 3→5 and down 5→2.
func TestScenarioOrderedScale(t *testing.T) {
	c := NewCluster(t)
	d := c.StartDaemon()
	RegisterHCL(t, c.Nomad.Client, setSpec{name: "sc", noVolume: true, meta: map[string]string{"statefulset_replicas": "3"}}.hcl())
	waitConverged(t, c, d, "sc", 3, nil)
	updateParent(t, c, "sc", setMeta("statefulset_replicas", "5"))
	waitConverged(t, c, d, "sc", 5, nil)
	if err := c.Watchdog.RegisteredAfterHealthy("default", "sc-2", "sc-3", "sc-4"); err != nil {
		t.Fatal(err)
	}
	updateParent(t, c, "sc", setMeta("statefulset_replicas", "2"))
	waitConverged(t, c, d, "sc", 2, nil)
	// Reverse order, one at a time: the daemon's events record the deletions.
	st, err := setStatus(d, "sc")
	if err != nil {
		t.Fatal(err)
	}
	deleted := deletedPods(st)
	if strings.Join(deleted, ",") != "sc-4,sc-3,sc-2" {
		t.Fatalf("scale-down deleted %v, want sc-4, sc-3, sc-2 in that order", deleted)
	}
}

// Scenario 5: rolling update from the highest ordinal down, partition 2 then
// 0; a pod deleted below the partition comes back at the old revision.
func TestScenarioRollingUpdateWithPartition(t *testing.T) {
	c := NewCluster(t)
	d := c.StartDaemon()
	RegisterHCL(t, c.Nomad.Client, setSpec{name: "ru", noVolume: true, meta: map[string]string{"statefulset_replicas": "3"}}.hcl())
	old := waitConverged(t, c, d, "ru", 3, nil)[0]

	updateParent(t, c, "ru", func(j *nomadapi.Job) {
		setMeta("statefulset_partition", "2")(j)
		changeTemplate("v2")(j)
	})
	waitConverged(t, c, d, "ru", 3, func(o int, r string) error {
		if (o >= 2) != (r != old) {
			return fmt.Errorf("ordinal %d at %s with partition 2 (old %s)", o, r, old)
		}
		return nil
	})
	// Delete ru-0, below the partition: it must come back at the old revision.
	if _, _, err := c.Nomad.Client.Jobs().Deregister("ru-0", false, nil); err != nil {
		t.Fatal(err)
	}
	time.Sleep(2 * time.Second)
	waitConverged(t, c, d, "ru", 3, func(o int, r string) error {
		if o == 0 && r != old {
			return fmt.Errorf("ru-0 came back at %s, want the current revision %s", r, old)
		}
		return nil
	})
	updateParent(t, c, "ru", setMeta("statefulset_partition", "0"))
	waitConverged(t, c, d, "ru", 3, func(o int, r string) error {
		if r == old {
			return fmt.Errorf("ordinal %d still at the old revision", o)
		}
		return nil
	})
	st, err := setStatus(d, "ru")
	if err != nil {
		t.Fatal(err)
	}
	order := deletedPods(st)
	// ru-2 (partition 2), ru-0 by hand is not the daemon's, then ru-1, ru-0.
	if len(order) < 3 || order[0] != "ru-2" || order[len(order)-2] != "ru-1" || order[len(order)-1] != "ru-0" {
		t.Fatalf("update deletions %v, want ru-2 first and ru-1 then ru-0 last", order)
	}
}

// Scenario 6: OnDelete changes nothing until a child is stopped, which then
// comes back at the new revision.
func TestScenarioOnDelete(t *testing.T) {
	c := NewCluster(t)
	d := c.StartDaemon()
	RegisterHCL(t, c.Nomad.Client, setSpec{name: "od", noVolume: true, meta: map[string]string{
		"statefulset_replicas": "2", "statefulset_update_strategy": "OnDelete"}}.hcl())
	old := waitConverged(t, c, d, "od", 2, nil)[0]
	updateParent(t, c, "od", changeTemplate("v2"))
	Eventually(t, time.Minute, "the daemon to see the new revision", func() error {
		st, err := setStatus(d, "od")
		if err != nil {
			return err
		}
		if st.Status.UpdateRevision == old || st.Status.UpdateRevision == "" {
			return fmt.Errorf("update revision %q", st.Status.UpdateRevision)
		}
		return nil
	})
	time.Sleep(3 * time.Second)
	waitConverged(t, c, d, "od", 2, func(o int, r string) error {
		if r != old {
			return fmt.Errorf("OnDelete updated od-%d by itself", o)
		}
		return nil
	})
	if _, _, err := c.Nomad.Client.Jobs().Deregister("od-1", false, nil); err != nil {
		t.Fatal(err)
	}
	time.Sleep(2 * time.Second)
	waitConverged(t, c, d, "od", 2, func(o int, r string) error {
		if (o == 1) != (r != old) {
			return fmt.Errorf("od-%d at %s (old %s): only od-1 may move", o, r, old)
		}
		return nil
	})
}

// Scenario 8: stopping the parent cascades; volumes follow when_deleted.
func TestScenarioCascadingDelete(t *testing.T) {
	for _, policy := range []string{"Retain", "Delete"} {
		t.Run(policy, func(t *testing.T) {
			c := NewCluster(t)
			d := c.StartDaemon()
			name := "cd" + strings.ToLower(policy)
			RegisterHCL(t, c.Nomad.Client, setSpec{name: name, meta: map[string]string{
				"statefulset_replicas": "2", "statefulset_volume_retention_when_deleted": policy}}.hcl())
			waitConverged(t, c, d, name, 2, nil)
			if _, _, err := c.Nomad.Client.Jobs().Deregister(name, false, nil); err != nil {
				t.Fatal(err)
			}
			Eventually(t, convergeTimeout, "the cascade to finish", func() error {
				_, live := healthyRevisions(t, c, name)
				if live != 0 {
					return fmt.Errorf("%d live children", live)
				}
				if _, err := setStatus(d, name); err == nil {
					return fmt.Errorf("the daemon still shows the set")
				}
				return nil
			})
			vols := HostVolumes(t, c.Nomad.Client, "default", "data-"+name+"-")
			if policy == "Retain" && len(vols) != 2 {
				t.Fatalf("Retain kept %d volumes, want 2", len(vols))
			}
			if policy == "Delete" {
				Eventually(t, time.Minute, "volumes to be deleted", func() error {
					if n := len(HostVolumes(t, c.Nomad.Client, "default", "data-"+name+"-")); n != 0 {
						return fmt.Errorf("%d volumes left", n)
					}
					return nil
				})
			}
		})
	}
}

// Scenario 9: SIGKILL the daemon mid-rollout and restart it: it converges,
// never runs two allocations of one ordinal (the watchdog), and makes no
// extra revision.
func TestScenarioDaemonKilledMidRollout(t *testing.T) {
	c := NewCluster(t)
	d := c.StartDaemon()
	RegisterHCL(t, c.Nomad.Client, setSpec{name: "k", noVolume: true, meta: map[string]string{"statefulset_replicas": "3"}}.hcl())
	old := waitConverged(t, c, d, "k", 3, nil)[0]
	updateParent(t, c, "k", changeTemplate("v2"))
	Eventually(t, time.Minute, "the rollout to start", func() error {
		revs, _ := healthyRevisions(t, c, "k")
		if revs[2] == old {
			return fmt.Errorf("k-2 still at %s", old)
		}
		return nil
	})
	d.Kill()
	d.Start()
	waitConverged(t, c, d, "k", 3, func(o int, r string) error {
		if r == old {
			return fmt.Errorf("k-%d still at the old revision", o)
		}
		return nil
	})
	st, err := setStatus(d, "k")
	if err != nil {
		t.Fatal(err)
	}
	if len(st.Revisions) != 2 {
		t.Fatalf("want exactly 2 revisions after a restart mid-rollout, got %+v", st.Revisions)
	}
}

// Scenario 10: bad annotations give a clear condition; other sets work.
func TestScenarioBadAnnotations(t *testing.T) {
	c := NewCluster(t)
	d := c.StartDaemon()
	RegisterHCL(t, c.Nomad.Client, setSpec{name: "bad", noVolume: true, meta: map[string]string{
		"statefulset_replicas": "three", "statefulset_partiton": "1"}}.hcl())
	RegisterHCL(t, c.Nomad.Client, setSpec{name: "good", noVolume: true, meta: map[string]string{"statefulset_replicas": "2"}}.hcl())
	waitConverged(t, c, d, "good", 2, nil)
	Eventually(t, time.Minute, "the bad set to report its problems", func() error {
		st, err := setStatus(d, "bad")
		if err != nil {
			return err
		}
		for _, want := range []string{"statefulset_replicas", `"three"`, "statefulset_partiton", "statefulset_partition"} {
			if !strings.Contains(st.Error, want) {
				return fmt.Errorf("error %q does not mention %s", st.Error, want)
			}
		}
		return nil
	})
	if kids := ChildJobs(t, c.Nomad.Client, "default", "bad"); len(kids) != 0 {
		t.Fatalf("the bad set got %d children", len(kids))
	}
	out, err := d.CLI("status", "bad")
	if !strings.Contains(out, "statefulset_replicas") {
		t.Fatalf("`status bad` does not show the problem (err %v):\n%s", err, out)
	}
}

// noRestart makes a failing task end its allocation at once, so a broken pod
// reaches Failed quickly instead of after Nomad's restart delays.
const noRestart = `
    restart {
      attempts = 0
      mode     = "fail"
    }`

// Scenario 4: ordered scaling halts while a pod is unhealthy and resumes when
// it recovers. Pod 2 exits unless a marker file exists in its own volume.
func TestScenarioOrderedScalingHaltsOnUnhealthyPod(t *testing.T) {
	c := NewCluster(t)
	d := c.StartDaemon()
	script := `if [ "$STATEFULSET_ORDINAL" = 2 ] && [ ! -e /data/ok ]; then exit 1; fi; while true; do sleep 1; done`
	RegisterHCL(t, c.Nomad.Client, setSpec{name: "halt", script: script, group: noRestart,
		meta: map[string]string{"statefulset_replicas": "4"}}.hcl())
	Eventually(t, convergeTimeout, "halt-0 and halt-1 to be healthy and halt-2 to have failed", func() error {
		revs, _ := healthyRevisions(t, c, "halt")
		if len(revs) != 2 {
			return fmt.Errorf("healthy: %v", revs)
		}
		// A failed pod is purged and recreated, so its allocation goes with
		// its job; the daemon's events are what show it failed.
		st, err := setStatus(d, "halt")
		if err != nil {
			return err
		}
		for _, e := range st.Events {
			if e.Type == "DeletePod" && strings.Contains(e.Message, "halt-2") && strings.Contains(e.Message, "Failed") {
				return nil
			}
		}
		return fmt.Errorf("halt-2 has not failed yet: %+v", st.Events)
	})
	// While halt-2 is unhealthy, halt-3 must never be created.
	time.Sleep(5 * time.Second)
	if kids := ChildJobs(t, c.Nomad.Client, "default", "halt"); len(kids) > 3 {
		t.Fatalf("halt-3 was created while halt-2 was unhealthy: %d children", len(kids))
	}
	vols := HostVolumes(t, c.Nomad.Client, "default", "data-halt-2")
	if len(vols) != 1 {
		t.Fatalf("want the volume data-halt-2, got %d", len(vols))
	}
	if err := os.WriteFile(filepath.Join(c.Nomad.HostVolumesDir, vols[0].ID, "ok"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	waitConverged(t, c, d, "halt", 4, nil)
	if err := c.Watchdog.RegisteredAfterHealthy("default", "halt-2", "halt-3"); err != nil {
		t.Fatal(err)
	}
}

// Scenario 7: a rollout to a template that never gets healthy is stuck; a
// revert with `rollout undo` alone repairs it (no pod is deleted by hand),
// and reuses the old revision.
func TestScenarioRollbackRepairsStuckRollout(t *testing.T) {
	c := NewCluster(t)
	d := c.StartDaemon()
	RegisterHCL(t, c.Nomad.Client, setSpec{name: "rb", noVolume: true, group: noRestart,
		meta: map[string]string{"statefulset_replicas": "3"}}.hcl())
	good := waitConverged(t, c, d, "rb", 3, nil)[0]
	updateParent(t, c, "rb", func(j *nomadapi.Job) {
		j.TaskGroups[0].Tasks[0].Config["args"] = []any{"-c", "exit 1"}
	})
	Eventually(t, convergeTimeout, "the bad revision to break rb-2", func() error {
		st, err := setStatus(d, "rb")
		if err != nil {
			return err
		}
		if st.Status.UpdateRevision == good || st.Status.UpdateRevision == "" {
			return fmt.Errorf("update revision %q", st.Status.UpdateRevision)
		}
		for _, e := range st.Events {
			if e.Type == "DeletePod" && strings.Contains(e.Message, "rb-2") && strings.Contains(e.Message, "Failed") {
				return nil
			}
		}
		return fmt.Errorf("rb-2 has not failed at the bad revision yet")
	})
	out, err := d.CLI("rollout", "undo", "rb")
	if err != nil {
		t.Fatalf("rollout undo: %v\n%s", err, out)
	}
	waitConverged(t, c, d, "rb", 3, func(o int, r string) error {
		if r != good {
			return fmt.Errorf("rb-%d at %s, want the good revision %s", o, r, good)
		}
		return nil
	})
	st, err := setStatus(d, "rb")
	if err != nil {
		t.Fatal(err)
	}
	if len(st.Revisions) != 2 || st.Status.UpdateRevision != good {
		t.Fatalf("a rollback must reuse the old revision: update %s, revisions %+v", st.Status.UpdateRevision, st.Revisions)
	}
}

// Every CLI verb against real agents: validate, version, status, scale,
// pause/resume, restart followed by rollout status with a partition,
// history.
func TestCLIVerbsAgainstRealAgents(t *testing.T) {
	c := NewCluster(t)
	d := c.StartDaemon()
	spec := setSpec{name: "cli", noVolume: true, meta: map[string]string{"statefulset_replicas": "2"}}
	jobFile := filepath.Join(t.TempDir(), "cli.nomad.hcl")
	if err := os.WriteFile(jobFile, []byte(spec.hcl()), 0o644); err != nil {
		t.Fatal(err)
	}
	run := func(wantCode int, args ...string) string {
		t.Helper()
		out, err := d.CLI(args...)
		code := 0
		if ee, ok := err.(interface{ ExitCode() int }); ok {
			code = ee.ExitCode()
		} else if err != nil {
			t.Fatalf("%v: %v", args, err)
		}
		if code != wantCode {
			t.Fatalf("nomad-statefulset %s exited %d, want %d:\n%s", strings.Join(args, " "), code, wantCode, out)
		}
		return out
	}
	run(0, "version")
	run(0, "validate", jobFile)
	bad := filepath.Join(t.TempDir(), "bad.nomad.hcl")
	if err := os.WriteFile(bad, []byte(setSpec{name: "bad", noVolume: true, meta: map[string]string{"statefulset_replicas": "-2"}}.hcl()), 0o644); err != nil {
		t.Fatal(err)
	}
	if out := run(1, "validate", bad); !strings.Contains(out, "statefulset_replicas") {
		t.Fatalf("validate does not name the bad key:\n%s", out)
	}
	RegisterFile(t, c.Nomad.Client, jobFile)
	waitConverged(t, c, d, "cli", 2, nil)
	if out := run(0, "status"); !strings.Contains(out, "cli") || !strings.HasPrefix(out, "Agent: leader (lock held since ") {
		t.Fatalf("status lists no set cli, or not the agent's state first:\n%s", out)
	}
	if out := run(0, "status", "-json", "cli"); !strings.Contains(out, `"agent": {`) || !strings.Contains(out, `"leader": true`) {
		t.Fatalf("status -json carries no agent state:\n%s", out)
	}
	if out := run(0, "status", "cli"); !strings.Contains(out, "cli-1") {
		t.Fatalf("status cli shows no pod cli-1:\n%s", out)
	}
	run(0, "scale", "cli", "3")
	waitConverged(t, c, d, "cli", 3, nil)
	run(0, "rollout", "pause", "cli")
	old := waitConverged(t, c, d, "cli", 3, nil)[0]
	updateParent(t, c, "cli", setMeta("statefulset_partition", "1"))
	run(0, "rollout", "resume", "cli")
	run(0, "rollout", "restart", "cli")
	out := run(0, "rollout", "status", "-timeout", "3m", "cli")
	if !strings.Contains(strings.ToLower(out), "updated") {
		t.Fatalf("rollout status printed no progress:\n%s", out)
	}
	revs := waitConverged(t, c, d, "cli", 3, nil)
	if revs[0] != old || revs[1] == old || revs[2] == old {
		t.Fatalf("with partition 1 only cli-1 and cli-2 move: %v (old %s)", revs, old)
	}
	if out := run(0, "rollout", "history", "cli"); !strings.Contains(out, revs[2]) || !strings.Contains(out, old) {
		t.Fatalf("history lacks the revisions %s and %s:\n%s", old, revs[2], out)
	}
	run(6, "status", "nope")
}

// httpGetJSON GETs url and decodes a JSON body into out.
func httpGetJSON(url string, out any) (*http.Response, error) {
	resp, err := http.Get(url)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	return resp, json.NewDecoder(resp.Body).Decode(out)
}
