package e2e

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	nomadapi "github.com/hashicorp/nomad/api"
)

// Issue 20's contract: each Nomad verb an operator uses on a child is seen
// on the event stream and answered within seconds, never runs two tasks of
// one ordinal at once (the cluster's watchdog fails the test otherwise),
// and keeps the ordinal's data unless the verb deleted its volume. The time
// bounds are the issue's: 15 s for a stop, a scale and an edit, 30 s for
// the others. `nomad job stop -purge` is TestVerbPurgeChild.

const (
	verbSet = "vb"
	// stopBound is the bound for a stop, a scale and an edit;
	// otherBound for the other verbs.
	stopBound  = 15 * time.Second
	otherBound = 30 * time.Second
)

// verbRig is one cluster and daemon with a three-ordinal set that the
// verbs are tried on in turn.
type verbRig struct {
	c *Cluster
	d *Daemon
}

// identityLines counts the starts recorded in ordinal ord's volume: the
// task appends its pod name to /data/identity each time it starts.
func (r verbRig) identityLines(t *testing.T, ord int) int {
	t.Helper()
	return starts(t, r.c, fmt.Sprintf("%s-%d", verbSet, ord))
}

// restored waits for the set to be whole again (3 healthy pods, the
// daemon's status agreeing) and for check, and fails the test if that took
// longer than bound after start.
func (r verbRig) restored(t *testing.T, verb string, start time.Time, bound time.Duration, check func() error) time.Duration {
	t.Helper()
	Eventually(t, 2*time.Minute, "the set to be whole after "+verb, func() error {
		if check != nil {
			if err := check(); err != nil {
				return err
			}
		}
		st, err := setStatus(r.d, verbSet)
		if err != nil {
			return err
		}
		if st.Status.ReadyReplicas != 3 || st.Status.AvailableReplicas != 3 {
			return fmt.Errorf("ready %d available %d", st.Status.ReadyReplicas, st.Status.AvailableReplicas)
		}
		return nil
	})
	took := time.Since(start)
	t.Logf("%s: the set was whole again %v after the verb", verb, took.Round(100*time.Millisecond))
	if took > bound {
		t.Errorf("%s took %v to restore, over the issue's bound of %v", verb, took.Round(100*time.Millisecond), bound)
	}
	return took
}

func ptrInt(v int) *int { return &v }

// newestAlloc returns the newest allocation of child id.
func (r verbRig) newestAlloc(t *testing.T, id string) *nomadapi.AllocationListStub {
	t.Helper()
	allocs := Allocations(t, r.c.Nomad.Client, "default", id)
	if len(allocs) == 0 {
		t.Fatalf("%s has no allocation", id)
	}
	return allocs[0]
}

// event returns an error unless the daemon's status has an event of typ
// whose message holds every part.
func (r verbRig) event(typ string, parts ...string) error {
	st, err := setStatus(r.d, verbSet)
	if err != nil {
		return err
	}
	for _, e := range st.Events {
		ok := e.Type == typ
		for _, p := range parts {
			ok = ok && strings.Contains(e.Message, p)
		}
		if ok {
			return nil
		}
	}
	return fmt.Errorf("no %s event naming %q", typ, parts)
}

func TestVerbs(t *testing.T) {
	c := NewCluster(t)
	d := c.StartDaemon()
	r := verbRig{c: c, d: d}
	RegisterHCL(t, c.Nomad.Client, setSpec{name: verbSet, meta: map[string]string{"statefulset_replicas": "3"}}.hcl())
	waitConverged(t, c, d, verbSet, 3, nil)
	jobs := c.Nomad.Client.Jobs()
	allocs := c.Nomad.Client.Allocations()

	t.Run("job stop", func(t *testing.T) {
		before := r.identityLines(t, 1)
		old := r.newestAlloc(t, "vb-1")
		start := time.Now()
		if _, _, err := jobs.Deregister("vb-1", false, nil); err != nil {
			t.Fatal(err)
		}
		r.restored(t, "nomad job stop", start, stopBound, func() error {
			if a := r.newestAlloc(t, "vb-1"); a.ID == old.ID || !Healthy(a) {
				return fmt.Errorf("vb-1 not running a new allocation yet")
			}
			return nil
		})
		if n := r.identityLines(t, 1); n != before+1 {
			t.Fatalf("vb-1's volume has %d starts, want %d: the data did not survive", n, before+1)
		}
	})

	t.Run("alloc stop", func(t *testing.T) {
		before := r.identityLines(t, 2)
		old := r.newestAlloc(t, "vb-2")
		start := time.Now()
		if _, err := allocs.Stop(&nomadapi.Allocation{ID: old.ID, Namespace: "default"}, nil); err != nil {
			t.Fatal(err)
		}
		r.restored(t, "nomad alloc stop", start, otherBound, func() error {
			if a := r.newestAlloc(t, "vb-2"); a.ID == old.ID || !Healthy(a) {
				return fmt.Errorf("vb-2 not running a new allocation yet")
			}
			return nil
		})
		if n := r.identityLines(t, 2); n != before+1 {
			t.Fatalf("vb-2's volume has %d starts, want %d", n, before+1)
		}
	})

	t.Run("alloc restart", func(t *testing.T) {
		before := r.identityLines(t, 0)
		old := r.newestAlloc(t, "vb-0")
		start := time.Now()
		if err := allocs.Restart(&nomadapi.Allocation{ID: old.ID, Namespace: "default", NodeID: old.NodeID}, "", nil); err != nil {
			t.Fatal(err)
		}
		r.restored(t, "nomad alloc restart", start, otherBound, func() error {
			if n := r.identityLines(t, 0); n != before+1 {
				return fmt.Errorf("vb-0's task has not started again (%d starts)", n)
			}
			// The pod was not Ready while its task restarted: its
			// readiness starts again from the new start. Before live
			// readiness it stayed Available throughout, its ReadySince
			// latched at the first start.
			st, err := setStatus(r.d, verbSet)
			if err != nil {
				return err
			}
			for _, p := range st.Pods {
				if p.Ordinal == 0 && !p.ReadySince.After(start) {
					return fmt.Errorf("vb-0 ready since %s, before the restart at %s", p.ReadySince, start)
				}
			}
			return nil
		})
		if a := r.newestAlloc(t, "vb-0"); a.ID != old.ID {
			t.Fatalf("vb-0 runs allocation %s, want %s restarted in place", a.ID, old.ID)
		}
	})

	t.Run("system gc", func(t *testing.T) {
		type state struct {
			index uint64
			alloc string
		}
		snap := func() map[string]state {
			out := map[string]state{}
			for _, j := range ChildJobs(t, c.Nomad.Client, "default", verbSet) {
				out[j.ID] = state{j.JobModifyIndex, r.newestAlloc(t, j.ID).ID}
			}
			return out
		}
		before := snap()
		if err := c.Nomad.Client.System().GarbageCollect(); err != nil {
			t.Fatal(err)
		}
		// Nothing is to happen, so there is no event to wait for: a few
		// seconds is many reconcile passes.
		time.Sleep(5 * time.Second)
		after := snap()
		for id, s := range before {
			if after[id] != s {
				t.Fatalf("%s changed after nomad system gc: %+v, was %+v", id, after[id], s)
			}
		}
	})

	t.Run("job scale", func(t *testing.T) {
		before := r.identityLines(t, 0)
		old := r.newestAlloc(t, "vb-0")
		job, _, err := jobs.Info("vb-0", nil)
		if err != nil {
			t.Fatal(err)
		}
		start := time.Now()
		two := 2
		if _, _, err := jobs.Scale("vb-0", *job.TaskGroups[0].Name, &two, "e2e: scale a child by hand", false, nil, nil); err != nil {
			t.Fatal(err)
		}
		r.restored(t, "nomad job scale", start, stopBound, func() error {
			j, _, err := jobs.Info("vb-0", nil)
			if err != nil {
				return err
			}
			if *j.TaskGroups[0].Count != 1 || *j.JobModifyIndex <= *job.JobModifyIndex {
				return fmt.Errorf("vb-0's count is %d", *j.TaskGroups[0].Count)
			}
			return r.event("RestoreCount", "vb-0: its child was scaled to 2")
		})
		// The original allocation kept running: the count went back in
		// place, it was not replaced.
		a, _, err := allocs.Info(old.ID, nil)
		if err != nil {
			t.Fatal(err)
		}
		if a.ClientStatus != "running" || a.DesiredStatus != "run" {
			t.Fatalf("vb-0's original allocation is %s/%s, want it still running", a.ClientStatus, a.DesiredStatus)
		}
		if n := r.identityLines(t, 0); n != before {
			t.Fatalf("vb-0's volume has %d starts, want %d: its task started again", n, before)
		}
	})

	var edited uint64
	t.Run("job run of an edited child", func(t *testing.T) {
		before := r.identityLines(t, 1)
		job, _, err := jobs.Info("vb-1", nil)
		if err != nil {
			t.Fatal(err)
		}
		task := job.TaskGroups[0].Tasks[0]
		task.Env["DEBUG"] = "1"
		start := time.Now()
		if _, _, err := jobs.Register(job, nil); err != nil {
			t.Fatal(err)
		}
		j, _, err := jobs.Info("vb-1", nil)
		if err != nil {
			t.Fatal(err)
		}
		edited = *j.Version
		r.restored(t, "nomad job run of an edited child", start, stopBound, func() error {
			j, _, err := jobs.Info("vb-1", nil)
			if err != nil {
				return err
			}
			if _, ok := j.TaskGroups[0].Tasks[0].Env["DEBUG"]; ok || *j.Stop {
				return fmt.Errorf("vb-1 still has the edit (stopped %v)", *j.Stop)
			}
			if a := r.newestAlloc(t, "vb-1"); !Healthy(a) {
				return fmt.Errorf("vb-1 not healthy yet")
			}
			return r.event("Edited", "vb-1 was changed outside nomad-statefulset", "Group.Tasks[app].Env")
		})
		// The edit is itself a destructive update: Nomad may start the
		// edited task (one start) before the daemon's repair, a stop and a
		// re-create, starts it again (another). Either way on one volume.
		if n := r.identityLines(t, 1); n != before+1 && n != before+2 {
			t.Fatalf("vb-1's volume has %d starts, want %d or %d", n, before+1, before+2)
		}
	})

	t.Run("job revert", func(t *testing.T) {
		if edited == 0 {
			t.Fatal("no edited version of vb-1 to revert to (the edit step failed)")
		}
		before := r.identityLines(t, 1)
		start := time.Now()
		if _, _, err := jobs.Revert("vb-1", edited, nil, nil, "", ""); err != nil {
			t.Fatal(err)
		}
		r.restored(t, "nomad job revert", start, otherBound, func() error {
			j, _, err := jobs.Info("vb-1", nil)
			if err != nil {
				return err
			}
			if _, ok := j.TaskGroups[0].Tasks[0].Env["DEBUG"]; ok || *j.Stop {
				return fmt.Errorf("vb-1 still runs the reverted-to version")
			}
			if n := r.identityLines(t, 1); n < before+1 {
				return fmt.Errorf("vb-1 not started again (%d starts)", n)
			}
			if a := r.newestAlloc(t, "vb-1"); !Healthy(a) {
				return fmt.Errorf("vb-1 not healthy yet")
			}
			return nil
		})
		// As for the edit: Nomad's own start of the reverted-to version
		// may come before the daemon's repair.
		if n := r.identityLines(t, 1); n > before+2 {
			t.Fatalf("vb-1's volume has %d starts, want at most %d", n, before+2)
		}
	})

	// The same verbs with the daemon down while they happen: it learns
	// of them from its first full list, not from the event stream, and
	// must come to the same outcome (issue 20, contract 7).
	t.Run("job scale while the daemon is down", func(t *testing.T) {
		before := r.identityLines(t, 2)
		old := r.newestAlloc(t, "vb-2")
		job, _, err := jobs.Info("vb-2", nil)
		if err != nil {
			t.Fatal(err)
		}
		d.Stop()
		two := 2
		if _, _, err := jobs.Scale("vb-2", *job.TaskGroups[0].Name, &two, "e2e: scale a child by hand", false, nil, nil); err != nil {
			t.Fatal(err)
		}
		start := time.Now()
		d.Start()
		r.restored(t, "nomad job scale, daemon started after it", start, otherBound, func() error {
			j, _, err := jobs.Info("vb-2", nil)
			if err != nil {
				return err
			}
			if *j.TaskGroups[0].Count != 1 {
				return fmt.Errorf("vb-2's count is %d", *j.TaskGroups[0].Count)
			}
			return nil
		})
		a, _, err := allocs.Info(old.ID, nil)
		if err != nil {
			t.Fatal(err)
		}
		if a.ClientStatus != "running" || a.DesiredStatus != "run" {
			t.Fatalf("vb-2's original allocation is %s/%s, want it still running", a.ClientStatus, a.DesiredStatus)
		}
		if n := r.identityLines(t, 2); n != before {
			t.Fatalf("vb-2's volume has %d starts, want %d: its task started again", n, before)
		}
	})

	t.Run("job run of an edited child while the daemon is down", func(t *testing.T) {
		before := r.identityLines(t, 0)
		job, _, err := jobs.Info("vb-0", nil)
		if err != nil {
			t.Fatal(err)
		}
		job.TaskGroups[0].Tasks[0].Resources.MemoryMB = ptrInt(32)
		d.Stop()
		if _, _, err := jobs.Register(job, nil); err != nil {
			t.Fatal(err)
		}
		start := time.Now()
		d.Start()
		r.restored(t, "nomad job run of an edited child, daemon started after it", start, otherBound, func() error {
			j, _, err := jobs.Info("vb-0", nil)
			if err != nil {
				return err
			}
			if *j.TaskGroups[0].Tasks[0].Resources.MemoryMB == 32 || *j.Stop {
				return fmt.Errorf("vb-0 still has the edit (stopped %v)", *j.Stop)
			}
			if a := r.newestAlloc(t, "vb-0"); !Healthy(a) {
				return fmt.Errorf("vb-0 not healthy yet")
			}
			return r.event("Edited", "vb-0 was changed outside nomad-statefulset", "Group.Tasks[app].Resources")
		})
		if n := r.identityLines(t, 0); n != before+1 {
			t.Fatalf("vb-0's volume has %d starts, want %d", n, before+1)
		}
	})

	t.Run("volume delete while scaled away", func(t *testing.T) {
		vols := HostVolumes(t, c.Nomad.Client, "default", "data-vb-2")
		if len(vols) != 1 {
			t.Fatalf("%d data-vb-2 volumes", len(vols))
		}
		// A delete Nomad refuses (the volume is in use) changes nothing.
		if _, _, err := c.Nomad.Client.HostVolumes().Delete(&nomadapi.HostVolumeDeleteRequest{ID: vols[0].ID}, nil); err == nil {
			t.Fatal("Nomad deleted a volume in use")
		}
		if now := HostVolumes(t, c.Nomad.Client, "default", "data-vb-2"); len(now) != 1 || now[0].ID != vols[0].ID {
			t.Fatalf("a refused delete changed data-vb-2: %+v", now)
		}
		updateParent(t, c, verbSet, setMeta("statefulset_replicas", "2"))
		Eventually(t, 2*time.Minute, "vb-2 to be gone and its volume kept", func() error {
			for _, j := range ChildJobs(t, c.Nomad.Client, "default", verbSet) {
				if j.ID == "vb-2" && !j.Stop {
					return fmt.Errorf("vb-2 still live")
				}
			}
			for _, a := range Allocations(t, c.Nomad.Client, "default", "vb-2") {
				if a.ClientStatus == "running" || a.ClientStatus == "pending" {
					return fmt.Errorf("vb-2's allocation %s is %s", a.ID, a.ClientStatus)
				}
			}
			return nil
		})
		Eventually(t, time.Minute, "data-vb-2 to be deleted", func() error {
			_, _, err := c.Nomad.Client.HostVolumes().Delete(&nomadapi.HostVolumeDeleteRequest{ID: vols[0].ID}, nil)
			return err // Nomad refuses while the ended allocation still claims it
		})
		start := time.Now()
		updateParent(t, c, verbSet, setMeta("statefulset_replicas", "3"))
		r.restored(t, "nomad volume delete, then a scale-up", start, otherBound, func() error {
			now := HostVolumes(t, c.Nomad.Client, "default", "data-vb-2")
			if len(now) != 1 || now[0].ID == vols[0].ID {
				return fmt.Errorf("no fresh data-vb-2 volume yet: %d volumes", len(now))
			}
			if a := r.newestAlloc(t, "vb-2"); !Healthy(a) || a.ClientStatus != "running" {
				return fmt.Errorf("vb-2 not running yet")
			}
			return r.event("NewVolume", "vb-2")
		})
		if n := r.identityLines(t, 2); n != 1 {
			t.Fatalf("vb-2's fresh volume has %d starts, want 1", n)
		}
	})

	t.Run("nomad alone: a count = 1 job placed", func(t *testing.T) {
		// The yardstick for the times above (BENCHMARKS.md): Nomad
		// placing a plain count = 1 job of the same task, from the
		// register to its allocation judged healthy.
		start := time.Now()
		RegisterHCL(t, c.Nomad.Client, `job "native" {
  datacenters = ["*"]
  group "app" {
    update {
      min_healthy_time = "1s"
      healthy_deadline = "2m"
    }
    task "app" {
      driver = "exec"
      config {
        command = "/bin/sh"
        args    = ["-c", "while true; do sleep 1; done"]
      }
      resources {
        cpu    = 20
        memory = 24
      }
    }
  }
}
`)
		WaitJobHealthy(t, c.Nomad.Client, "default", "native", 2*time.Minute)
		t.Logf("nomad alone: a count = 1 job was healthy %v after its register", time.Since(start).Round(100*time.Millisecond))
	})
}

// TestVerbPurgeUnderOnDelete: issue 20's purge under the other policy and
// strategy (Parallel, OnDelete): a purged child comes back within the
// bound, on its volume, and at the update revision, as a deleted pod does
// in Kubernetes under OnDelete; the other ordinal stays at the old one.
func TestVerbPurgeUnderOnDelete(t *testing.T) {
	c := NewCluster(t)
	d := c.StartDaemon()
	RegisterHCL(t, c.Nomad.Client, setSpec{name: "po", meta: map[string]string{"statefulset_replicas": "2",
		"statefulset_update_strategy": "OnDelete", "statefulset_pod_management_policy": "Parallel"}}.hcl())
	old := waitConverged(t, c, d, "po", 2, nil)[0]
	update := newTemplate(t, c, d, "po", old)
	p := purgeChild(t, c, "po-1", nil)
	waitConverged(t, c, d, "po", 2, func(o int, r string) error {
		if want := map[int]string{0: old, 1: update}[o]; r != want {
			return fmt.Errorf("po-%d at %s, want %s", o, r, want)
		}
		return nil
	})
	p.restoredInOrder(t, c)
}

// TestChildVerbsUnderEveryPolicy is issue 20's first point across the
// matrix: under each pod management policy and update strategy, `nomad
// job stop` and `nomad job stop -purge` of a child bring it back on its
// volume (under OnDelete at the update revision, as Kubernetes re-creates a
// deleted pod from the current template), and `nomad job stop -purge` of
// the parent cascades: every child goes, the set is forgotten, and its
// volumes are kept (Retain). The watchdog sees no two tasks of one ordinal.
func TestChildVerbsUnderEveryPolicy(t *testing.T) {
	c := NewCluster(t)
	d := c.StartDaemon()
	type combo struct{ name, policy, strategy string }
	combos := []combo{
		{"mx-or", "OrderedReady", "RollingUpdate"},
		{"mx-pr", "Parallel", "RollingUpdate"},
		{"mx-od", "OrderedReady", "OnDelete"},
		{"mx-pd", "Parallel", "OnDelete"},
	}
	for _, cb := range combos {
		RegisterHCL(t, c.Nomad.Client, setSpec{name: cb.name, meta: map[string]string{"statefulset_replicas": "2",
			"statefulset_pod_management_policy": cb.policy, "statefulset_update_strategy": cb.strategy}}.hcl())
	}
	for _, cb := range combos {
		t.Run(cb.policy+"/"+cb.strategy, func(t *testing.T) {
			old := waitConverged(t, c, d, cb.name, 2, nil)[0]
			update := old
			if cb.strategy == "OnDelete" {
				update = newTemplate(t, c, d, cb.name, old)
			}
			at := func(want map[int]string) func(int, string) error {
				return func(o int, r string) error {
					if r != want[o] {
						return fmt.Errorf("%s-%d at %s, want %s", cb.name, o, r, want[o])
					}
					return nil
				}
			}

			child := cb.name + "-1"
			before := starts(t, c, child)
			start := time.Now()
			if _, _, err := c.Nomad.Client.Jobs().Deregister(child, false, nil); err != nil {
				t.Fatal(err)
			}
			waitConverged(t, c, d, cb.name, 2, at(map[int]string{0: old, 1: update}))
			if n := starts(t, c, child); n != before+1 {
				t.Fatalf("%s's volume has %d starts, want %d", child, n, before+1)
			}
			t.Logf("nomad job stop %s: whole again after %v", child, time.Since(start).Round(100*time.Millisecond))

			p := purgeChild(t, c, cb.name+"-0", nil)
			waitConverged(t, c, d, cb.name, 2, at(map[int]string{0: update, 1: update}))
			p.restoredInOrder(t, c)

			if _, _, err := c.Nomad.Client.Jobs().Deregister(cb.name, true, nil); err != nil {
				t.Fatal(err)
			}
			Eventually(t, convergeTimeout, "the cascade to finish", func() error {
				if _, live := healthyRevisions(t, c, cb.name); live != 0 {
					return fmt.Errorf("%d live children", live)
				}
				if _, err := setStatus(d, cb.name); err == nil {
					return fmt.Errorf("the daemon still shows the set")
				}
				return nil
			})
			if n := len(HostVolumes(t, c.Nomad.Client, "default", "data-"+cb.name+"-")); n != 2 {
				t.Fatalf("the purged parent's cascade kept %d volumes, want 2 (Retain)", n)
			}
		})
	}
}

// starts counts the starts recorded in child's volume: the task appends its
// pod name to /data/identity each time it starts.
func starts(t *testing.T, c *Cluster, child string) int {
	t.Helper()
	vols := HostVolumes(t, c.Nomad.Client, "default", "data-"+child)
	if len(vols) != 1 {
		t.Fatalf("%d data-%s volumes", len(vols), child)
	}
	b, err := os.ReadFile(filepath.Join(c.Nomad.HostVolumesDir, vols[0].ID, "identity"))
	if err != nil {
		t.Fatalf("reading %s's data: %v", child, err)
	}
	return strings.Count(string(b), child+"\n")
}

// newTemplate changes set's template and returns the update revision the
// daemon then reports (old was the revision before).
func newTemplate(t *testing.T, c *Cluster, d *Daemon, set, old string) string {
	t.Helper()
	updateParent(t, c, set, changeTemplate("v2"))
	var update string
	Eventually(t, time.Minute, "the daemon to see the new revision", func() error {
		st, err := setStatus(d, set)
		if err != nil {
			return err
		}
		if st.Status.UpdateRevision == old || st.Status.UpdateRevision == "" {
			return fmt.Errorf("update revision %q", st.Status.UpdateRevision)
		}
		update = st.Status.UpdateRevision
		return nil
	})
	return update
}
