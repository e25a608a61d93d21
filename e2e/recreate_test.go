package e2e

import (
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	nomadapi "github.com/hashicorp/nomad/api"
)

// revisionSampler polls a set's allocations and records, per sample, the
// revisions of the allocations that run or are being placed (ClientStatus
// pending or running: a stopping allocation still runs until it is
// terminal), to show that two revisions never run at once.
type revisionSampler struct {
	client *nomadapi.Client
	set    string

	mu sync.Mutex
	// byAlloc caches the revision of each allocation: an allocation's job
	// version, and so its child's revision, never changes.
	byAlloc map[string]string
	// mixed is the first sample with more than one revision running.
	mixed string
	// seen are the revisions seen running; stopping is the most
	// allocations one sample saw being stopped at once (desired stop, not
	// terminal yet): the whole set, when it is stopped together.
	seen              map[string]bool
	samples, stopping int
	errs              []error
}

// sample takes one sample of the set's children.
func (s *revisionSampler) sample() {
	// The set's children are the jobs "<set>-<ordinal>".
	filter := fmt.Sprintf(`JobID matches "^%s-[0-9]+$"`, s.set)
	stubs, _, err := s.client.Allocations().List(&nomadapi.QueryOptions{Namespace: "default", Filter: filter})
	if err != nil {
		s.note(err)
		return
	}
	running := map[string][]string{} // revision -> allocations
	stopping := 0
	for _, a := range stubs {
		if a.ClientStatus != nomadapi.AllocClientStatusPending && a.ClientStatus != nomadapi.AllocClientStatusRunning {
			continue
		}
		if a.DesiredStatus == nomadapi.AllocDesiredStatusStop {
			stopping++
		}
		rev, err := s.revision(a.ID)
		if err != nil {
			s.note(err)
			return
		}
		running[rev] = append(running[rev], a.JobID+"/"+a.ClientStatus+"/"+a.DesiredStatus)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.samples++
	if len(running) > 1 && s.mixed == "" {
		s.mixed = fmt.Sprint(running)
	}
	s.stopping = max(s.stopping, stopping)
	for rev := range running {
		s.seen[rev] = true
	}
}

// revision is the statefulset_revision of the child job version the
// allocation runs.
func (s *revisionSampler) revision(allocID string) (string, error) {
	s.mu.Lock()
	rev, ok := s.byAlloc[allocID]
	s.mu.Unlock()
	if ok {
		return rev, nil
	}
	alloc, _, err := s.client.Allocations().Info(allocID, &nomadapi.QueryOptions{Namespace: "default"})
	if err != nil {
		return "", fmt.Errorf("allocation %s: %w", allocID, err)
	}
	if alloc.Job == nil || alloc.Job.Meta["statefulset_revision"] == "" {
		return "", fmt.Errorf("allocation %s carries no child job with a revision", allocID)
	}
	rev = alloc.Job.Meta["statefulset_revision"]
	s.mu.Lock()
	s.byAlloc[allocID] = rev
	s.mu.Unlock()
	return rev, nil
}

func (s *revisionSampler) note(err error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.errs) < 5 {
		s.errs = append(s.errs, err)
	}
}

// volumeIDs maps each volume of prefix to its ID.
func volumeIDs(t *testing.T, c *Cluster, prefix string) map[string]string {
	t.Helper()
	out := map[string]string{}
	for _, v := range HostVolumes(t, c.Nomad.Client, "default", prefix) {
		out[v.Name] = v.ID
	}
	return out
}

// recreateScript writes the pod's identity to its volume, and takes
// 2 s per ordinal to stop: the children of one set end at different times,
// so that a child created before the last one has terminated would run
// beside it, and the allocations would show it.
const recreateScript = `trap 'sleep $((STATEFULSET_ORDINAL * 2)); exit 0' INT TERM; ` +
	`echo "$STATEFULSET_POD_NAME" >> /data/identity; while true; do sleep 1; done`

// TestRecreate runs statefulset_update_strategy = "Recreate" (KEP-3541) on
// real Nomad and Consul, under both pod management policies. A 3-replica
// set converges; a template change stops all three children together, and
// no sample of the allocations ever shows two revisions running (or being
// placed) at once, although the children take different times to stop;
// the children come back at the new revision on the same volumes, the data
// each wrote before still there; the status said Recreating meanwhile.
// Then (OrderedReady) a partition with Recreate is refused: InvalidSpec
// names both keys, and no child is touched.
func TestRecreate(t *testing.T) {
	for _, policy := range []string{"OrderedReady", "Parallel"} {
		t.Run(policy, func(t *testing.T) { testRecreate(t, policy) })
	}
}

func testRecreate(t *testing.T, policy string) {
	c := NewCluster(t)
	d := c.StartDaemon()
	RegisterHCL(t, c.Nomad.Client, setSpec{name: "rc", script: recreateScript, meta: map[string]string{
		"statefulset_replicas":              "3",
		"statefulset_update_strategy":       "Recreate",
		"statefulset_pod_management_policy": policy,
	}}.hcl())
	old := waitConverged(t, c, d, "rc", 3, nil)[0]
	vols := volumeIDs(t, c, "data-rc-")
	if len(vols) != 3 {
		t.Fatalf("volumes %v, want data-rc-0..2", vols)
	}
	identity := func(o int) string {
		b, _ := os.ReadFile(filepath.Join(c.Nomad.HostVolumesDir, vols[fmt.Sprintf("data-rc-%d", o)], "identity"))
		return string(b)
	}
	// A task is running before its shell has written anything (a loaded
	// machine shows it): wait for each to have written once.
	Eventually(t, 30*time.Second, "each pod to write its identity once before the rollout", func() error {
		for o := 0; o < 3; o++ {
			if n := strings.Count(identity(o), fmt.Sprintf("rc-%d", o)); n != 1 {
				return fmt.Errorf("rc-%d wrote its identity %d times: %q", o, n, identity(o))
			}
		}
		return nil
	})

	sampler := &revisionSampler{client: c.Nomad.Client, set: "rc", byAlloc: map[string]string{}, seen: map[string]bool{}}
	var reasonsMu sync.Mutex
	reasons := map[string]string{} // Progressing reason -> a message seen with it
	stop := pollUntilStopped(100*time.Millisecond, func() {
		sampler.sample()
		if st, err := setStatus(d, "rc"); err == nil {
			if cond, ok := condOf(st, "Progressing"); ok {
				reasonsMu.Lock()
				reasons[cond.Reason] = cond.Message
				reasonsMu.Unlock()
			}
		}
	})
	updateParent(t, c, "rc", changeTemplate("v2"))
	waitConverged(t, c, d, "rc", 3, func(o int, r string) error {
		if r == old {
			return fmt.Errorf("rc-%d still at the old revision", o)
		}
		return nil
	})
	stop()

	if len(sampler.errs) > 0 {
		t.Fatalf("sampling the allocations: %v", sampler.errs)
	}
	if sampler.mixed != "" {
		t.Fatalf("two revisions ran at once: %s", sampler.mixed)
	}
	if sampler.samples < 10 || len(sampler.seen) != 2 || sampler.stopping != 3 {
		t.Fatalf("%d samples of the allocations saw revisions %v, and at most %d allocations stopping at once: "+
			"want the old revision, all three stopping together, then the new one", sampler.samples, sampler.seen, sampler.stopping)
	}
	if msg, ok := reasons["Recreating"]; !ok {
		t.Errorf("Progressing never said Recreating during the rollout: %v", reasons)
	} else {
		t.Logf("Progressing Recreating: %s (%d samples; %d allocations seen stopping at once)", msg, sampler.samples, sampler.stopping)
	}
	st, err := setStatus(d, "rc")
	if err != nil {
		t.Fatal(err)
	}
	del := deletedPods(st)
	sort.Strings(del)
	if strings.Join(del, ",") != "rc-0,rc-1,rc-2" {
		t.Errorf("the daemon deleted %v, want each of rc-0..2 once", del)
	}
	if now := volumeIDs(t, c, "data-rc-"); fmt.Sprint(now) != fmt.Sprint(vols) {
		t.Fatalf("volumes %v after the Recreate, want the same %v", now, vols)
	}
	Eventually(t, time.Minute, "each child to append its identity to its own volume again", func() error {
		for o := 0; o < 3; o++ {
			if n := strings.Count(identity(o), fmt.Sprintf("rc-%d", o)); n != 2 {
				return fmt.Errorf("data-rc-%d holds %q", o, identity(o))
			}
		}
		return nil
	})

	if policy != "OrderedReady" {
		return
	}
	// A partition with Recreate is refused, and nothing is touched.
	allocs := map[string]string{}
	for o := 0; o < 3; o++ {
		id := fmt.Sprintf("rc-%d", o)
		allocs[id] = Allocations(t, c.Nomad.Client, "default", id)[0].ID
	}
	updateParent(t, c, "rc", func(j *nomadapi.Job) {
		setMeta("statefulset_partition", "1")(j)
		changeTemplate("v3")(j)
	})
	const refusal = `statefulset_partition: "1" is not allowed with statefulset_update_strategy = "Recreate"`
	Eventually(t, time.Minute, "the set to refuse the partition", func() error {
		st, err := setStatus(d, "rc")
		if err != nil {
			return err
		}
		cond, ok := condOf(st, "InvalidSpec")
		if !ok || !cond.Status || !strings.Contains(cond.Message, refusal) {
			return fmt.Errorf("InvalidSpec %+v (error %q), want it to say %q", cond, st.Error, refusal)
		}
		return nil
	})
	time.Sleep(3 * time.Second)
	for id, alloc := range allocs {
		if now := Allocations(t, c.Nomad.Client, "default", id)[0]; now.ID != alloc || now.ClientStatus != nomadapi.AllocClientStatusRunning {
			t.Errorf("%s was touched by a refused spec: allocation %s (%s), was %s", id, now.ID, now.ClientStatus, alloc)
		}
	}
}
