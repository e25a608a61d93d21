package e2e

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nomad-statefulset/nomad-statefulset/client"
)

// podByOrdinal returns the daemon's view of one pod of a set.
func podByOrdinal(d *Daemon, set string, ord int) (client.Pod, client.SetDetail, error) {
	st, err := setStatus(d, set)
	if err != nil {
		return client.Pod{}, st, err
	}
	for _, p := range st.Pods {
		if p.Ordinal == ord {
			return p, st, nil
		}
	}
	return client.Pod{}, st, fmt.Errorf("%s has no pod %d: %+v", set, ord, st.Pods)
}

// podAlloc returns the allocation ID of a child's newest allocation.
func podAlloc(t *testing.T, c *Cluster, jobID string) string {
	t.Helper()
	allocs := Allocations(t, c.Nomad.Client, "default", jobID)
	if len(allocs) == 0 {
		t.Fatalf("%s has no allocation", jobID)
	}
	return allocs[0].ID
}

// volumeFile is the host path of a file in a set's per-ordinal volume:
// the test changes the pod's /data there rather than through nomad alloc
// exec, which ran the command but did not return on this machine.
func volumeFile(t *testing.T, c *Cluster, volume, file string) string {
	t.Helper()
	for _, v := range HostVolumes(t, c.Nomad.Client, "default", volume) {
		if v.Name != volume {
			continue
		}
		full, _, err := c.Nomad.Client.HostVolumes().Get(v.ID, nil)
		if err != nil {
			t.Fatal(err)
		}
		return filepath.Join(full.HostPath, file)
	}
	t.Fatalf("no host volume %s", volume)
	return ""
}

// allocFile is the host path of a file in an allocation's shared alloc/tmp
// directory, which every task of the allocation sees as /alloc/tmp.
func allocFile(c *Cluster, alloc, file string) string {
	return filepath.Join(c.Nomad.DataDir, "alloc", alloc, "alloc", "tmp", file)
}

func touch(t *testing.T, path string) {
	t.Helper()
	if err := os.WriteFile(path, nil, 0o644); err != nil {
		t.Fatal(err)
	}
}

func remove(t *testing.T, path string) {
	t.Helper()
	if err := os.Remove(path); err != nil {
		t.Fatal(err)
	}
}

// checkedService is a group service whose Consul script check passes
// while /data/healthy exists in the pod. Its timeout is long: Nomad
// 1.10.5's exec executor panics ("send on closed channel",
// executor_linux.go handleExecWait) when a script check in an exec task
// times out, and kills the task; a busy machine made a 10 s timeout
// expire in CI.
const checkedService = `
    network {
      port "http" {}
    }
    service {
      name = "%s"
      port = "http"
      check {
        name     = "healthy-file"
        type     = "script"
        task     = "app"
        command  = "/bin/sh"
        args     = ["-c", "test -f /data/healthy || { echo /data/healthy is missing; exit 2; }"]
        interval = "2s"
        timeout  = "60s"
      }
    }`

// A 3-replica set whose service has a Consul script check passing while
// /data/healthy exists. Mid-rollout (pod 2 updated, waiting out
// min_ready_seconds), the file is removed in pod 0: its check turns
// critical, the pod shows not Ready in status with the check as the
// reason and a PodNotReady event, and the rollout takes no other pod down
// although Nomad still calls pod 0 healthy. Putting the file back lets the
// rollout finish.
func TestReadinessConsulCheckStopsRollout(t *testing.T) {
	c := NewCluster(t)
	d := c.StartDaemon()
	spec := setSpec{
		name:   "rdy",
		meta:   map[string]string{"statefulset_replicas": "3", "statefulset_min_ready_seconds": "15"},
		script: `touch /data/healthy; while true; do sleep 1; done`,
		group:  fmt.Sprintf(checkedService, "rdy-web"),
	}
	RegisterHCL(t, c.Nomad.Client, spec.hcl())
	old := waitConverged(t, c, d, "rdy", 3, nil)[0]
	Eventually(t, time.Minute, "every pod to be Available", func() error {
		st, err := setStatus(d, "rdy")
		if err != nil || st.Status.AvailableReplicas != 3 {
			return fmt.Errorf("status %+v %v", st.Status, err)
		}
		return nil
	})
	pod1Alloc := podAlloc(t, c, "rdy-1")

	updateParent(t, c, "rdy", changeTemplate("v2"))
	Eventually(t, 2*time.Minute, "rdy-2 to run at the new revision", func() error {
		p, _, err := podByOrdinal(d, "rdy", 2)
		if err != nil || p.Revision == old || (p.State != "Ready" && p.State != "Running") {
			return fmt.Errorf("rdy-2: %+v %v", p, err)
		}
		return nil
	})
	healthy0 := volumeFile(t, c, "data-rdy-0", "healthy")
	remove(t, healthy0)
	var pod0 client.Pod
	Eventually(t, time.Minute, "rdy-0 to be not Ready because of its check", func() error {
		p, _, err := podByOrdinal(d, "rdy", 0)
		if err != nil || p.State != "Running" || !strings.Contains(p.NotReady, `check "healthy-file" of service "rdy-web" is critical`) {
			return fmt.Errorf("rdy-0: %+v %v", p, err)
		}
		pod0 = p
		return nil
	})
	t.Logf("rdy-0: %s: %s", pod0.State, pod0.NotReady)
	out, err := d.CLI("status", "rdy")
	if err != nil || !strings.Contains(out, "Not Ready Because") || !strings.Contains(out, `healthy-file`) || !strings.Contains(out, "PodNotReady") {
		t.Fatalf("status does not show why rdy-0 is not ready: %v\n%s", err, out)
	}
	if allocs := Allocations(t, c.Nomad.Client, "default", "rdy-0"); !Healthy(allocs[0]) {
		t.Fatalf("Nomad no longer calls rdy-0 healthy; the test proves nothing: %+v", allocs[0])
	}
	// Past min_ready_seconds for rdy-2: without live readiness rdy-1 would
	// now be taken down.
	deadline := time.Now().Add(30 * time.Second)
	for time.Now().Before(deadline) {
		allocs := Allocations(t, c.Nomad.Client, "default", "rdy-1")
		if allocs[0].ID != pod1Alloc || allocs[0].DesiredStatus != "run" {
			t.Fatalf("rdy-1 was taken down while rdy-0 was not ready: %+v", allocs[0])
		}
		time.Sleep(time.Second)
	}

	touch(t, healthy0)
	waitConverged(t, c, d, "rdy", 3, func(o int, r string) error {
		if r == old {
			return fmt.Errorf("rdy-%d still at %s", o, old)
		}
		return nil
	})
	st, err := setStatus(d, "rdy")
	if err != nil {
		t.Fatal(err)
	}
	events := fmt.Sprint(st.Events)
	if !strings.Contains(events, "rdy-0 is ready again") {
		t.Errorf("no PodReady event for rdy-0: %s", events)
	}
}

// A pod whose check fails until after its healthy_deadline is judged
// unhealthy by Nomad once and for all; when its check passes it becomes
// Ready and the OrderedReady set goes on to create the next pod.
func TestReadinessMissedHealthyDeadlineRecovers(t *testing.T) {
	c := NewCluster(t)
	d := c.StartDaemon()
	spec := setSpec{
		name: "late",
		meta: map[string]string{"statefulset_replicas": "2"},
		// Pod 0 starts without the file; pod 1 with it.
		script: `if [ "$STATEFULSET_ORDINAL" != 0 ]; then touch /data/healthy; fi; while true; do sleep 1; done`,
		group:  fmt.Sprintf(checkedService, "late-web"),
		update: `
    update {
      min_healthy_time  = "1s"
      healthy_deadline  = "15s"
      progress_deadline = "1m"
    }`,
	}
	RegisterHCL(t, c.Nomad.Client, spec.hcl())
	Eventually(t, 2*time.Minute, "Nomad to judge late-0 unhealthy", func() error {
		allocs := Allocations(t, c.Nomad.Client, "default", "late-0")
		if len(allocs) == 0 || allocs[0].DeploymentStatus == nil || allocs[0].DeploymentStatus.Healthy == nil || *allocs[0].DeploymentStatus.Healthy {
			return fmt.Errorf("allocations %+v", allocs)
		}
		return nil
	})
	p, _, err := podByOrdinal(d, "late", 0)
	if err != nil || p.State != "Running" || p.NotReady == "" {
		t.Fatalf("late-0 missed its deadline but shows %+v (%v)", p, err)
	}
	t.Logf("late-0 after its deadline: %s: %s", p.State, p.NotReady)
	if jobs := ChildJobs(t, c.Nomad.Client, "default", "late"); len(jobs) != 1 {
		t.Fatalf("late-1 was created while late-0 is not ready: %d children", len(jobs))
	}
	touch(t, volumeFile(t, c, "data-late-0", "healthy"))
	Eventually(t, 2*time.Minute, "the set to have 2 ready pods", func() error {
		st, err := setStatus(d, "late")
		if err != nil || st.Status.ReadyReplicas != 2 {
			return fmt.Errorf("status %+v %v", st.Status, err)
		}
		return nil
	})
	if allocs := Allocations(t, c.Nomad.Client, "default", "late-0"); *allocs[0].DeploymentStatus.Healthy {
		t.Fatal("Nomad changed its mind about late-0; the test proves nothing")
	}
}

// A two-task group whose main task crash-loops while its sidecar keeps
// running: the allocation stays running and healthy in Nomad's eyes, but
// the pod is not Ready, and says which task; once the task runs again the
// pod is Ready again.
func TestReadinessCrashLoopingTaskBesideSidecar(t *testing.T) {
	c := NewCluster(t)
	d := c.StartDaemon()
	spec := setSpec{
		name:     "crash",
		noVolume: true,
		meta:     map[string]string{"statefulset_replicas": "1"},
		script:   `while true; do [ -f /alloc/tmp/crash ] && exit 1; sleep 1; done`,
		group: `
    restart {
      attempts = 100
      interval = "30m"
      delay    = "2s"
      mode     = "delay"
    }
    task "side" {
      driver = "exec"
      lifecycle {
        hook    = "prestart"
        sidecar = true
      }
      config {
        command = "/bin/sh"
        args    = ["-c", "while true; do sleep 1; done"]
      }
      resources {
        cpu    = 20
        memory = 24
      }
    }`,
	}
	RegisterHCL(t, c.Nomad.Client, spec.hcl())
	waitConverged(t, c, d, "crash", 1, nil)
	alloc := podAlloc(t, c, "crash-0")
	touch(t, allocFile(c, alloc, "crash"))
	Eventually(t, time.Minute, "crash-0 to be not Ready because of its main task", func() error {
		p, _, err := podByOrdinal(d, "crash", 0)
		if err != nil || p.State != "Running" || !strings.Contains(p.NotReady, "task app") {
			return fmt.Errorf("crash-0: %+v %v", p, err)
		}
		return nil
	})
	a, _, err := c.Nomad.Client.Allocations().Info(alloc, nil)
	if err != nil {
		t.Fatal(err)
	}
	if a.ClientStatus != "running" || a.DeploymentStatus == nil || !*a.DeploymentStatus.Healthy || a.TaskStates["side"].State != "running" {
		t.Fatalf("the allocation is not running and healthy with its sidecar up; the test proves nothing: %s %+v side %+v", a.ClientStatus, a.DeploymentStatus, a.TaskStates["side"])
	}
	t.Logf("app task: %s, %d restarts", a.TaskStates["app"].State, a.TaskStates["app"].Restarts)
	remove(t, allocFile(c, alloc, "crash"))
	Eventually(t, time.Minute, "crash-0 to be Ready again", func() error {
		p, _, err := podByOrdinal(d, "crash", 0)
		if err != nil || (p.State != "Ready" && p.State != "Available") || p.AllocID != alloc {
			return fmt.Errorf("crash-0: %+v %v", p, err)
		}
		return nil
	})
}
