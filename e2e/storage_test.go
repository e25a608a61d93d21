package e2e

import (
	"bufio"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	nomadapi "github.com/hashicorp/nomad/api"

	"github.com/nomad-statefulset/nomad-statefulset/backend/nomad"
	"github.com/nomad-statefulset/nomad-statefulset/client"
	"github.com/nomad-statefulset/nomad-statefulset/internal/testagent"
)

// storageAgentHCL gives the daemon a storage class "fast" on the test's
// sized host volume plugin, which reports each volume's size and can grow
// it; the default class stays Nomad's mkdir, which reports no size.
const storageAgentHCL = `volume_provisioner "fast" {
  config = { plugin_id = "sized" }
}`

// markerScript leaves two things in the volume: marker, written by the
// first allocation only (the same file afterwards means the data survived),
// and starts, one line per start (how often the pod was restarted on it).
const markerScript = `[ -f /data/marker ] || echo "$NOMAD_ALLOC_ID" > /data/marker; echo "$NOMAD_ALLOC_ID" >> /data/starts; while true; do sleep 1; done`

const mib = 1 << 20

// TestStorage runs DESIGN §3b's claim templates on a real Nomad, on one
// cluster and one daemon, in order:
//
//   - classes: two sets of different classes and sizes, each volume made by
//     its class's plugin at the size its claim asks;
//   - a rolling update of the 3-replica set, timed, for comparison;
//   - growth: raising the claim's capacity expands the three volumes one at
//     a time, highest ordinal first, with their data, and Nomad shows it;
//   - a shrink is refused with a condition, and nothing restarts;
//   - a mkdir volume, which reports no size, is left alone when its claim
//     grows;
//   - a daemon killed mid-expansion finishes it after its restart, with no
//     volume expanded twice and no data lost.
//
// The watchdog checks throughout that no ordinal ever runs twice, and from
// the rolling update on that at most one ordinal of db is down at once.
func TestStorage(t *testing.T) {
	c := NewCluster(t, testagent.WithHostVolumePlugin("sized", testagent.SizedHostVolumePlugin))
	d := c.StartDaemon(storageAgentHCL)
	events := recordEvents(t, d, "db")
	s := &storageRun{c: c, d: d, events: events}

	RegisterHCL(t, c.Nomad.Client, setSpec{name: "db", script: markerScript, meta: map[string]string{
		"statefulset_replicas": "3", "statefulset_pod_management_policy": "Parallel", "statefulset_max_unavailable": "1",
		"statefulset_claim_data_capacity": "10MiB", "statefulset_claim_data_class": "fast"}}.hcl())
	RegisterHCL(t, c.Nomad.Client, setSpec{name: "cache", script: markerScript, meta: map[string]string{
		"statefulset_replicas": "1", "statefulset_claim_data_capacity": "1MiB"}}.hcl())

	steps := []struct {
		name string
		run  func(t *testing.T)
	}{
		{"ClassesAndSizes", s.classesAndSizes},
		{"RollingUpdate", s.rollingUpdate},
		{"GrowOneAtATime", s.grow},
		{"ShrinkRefused", s.shrinkRefused},
		{"UnknownCapacityLeftAlone", s.unknownCapacityLeftAlone},
		{"RestartMidExpansion", s.restartMidExpansion},
	}
	for _, step := range steps {
		// Each step starts from where the previous one left the set.
		if !t.Run(step.name, step.run) {
			t.Fatalf("%s failed; the steps after it build on it", step.name)
		}
	}
	t.Logf("timings for BENCHMARKS.md: rolling update of 3 pods %s; expansion of 3 volumes (10MiB → 20MiB) %s; "+
		"expansion 20MiB → 30MiB with a daemon kill in the middle %s", s.rollTime, s.growTime, s.restartTime)
}

// storageRun is TestStorage's shared state, carried from step to step.
type storageRun struct {
	c      *Cluster
	d      *Daemon
	events *eventLog
	// markers are db's volume markers, by volume name, once written.
	markers map[string]string
	// rev is db's revision after the rolling update.
	rev string
	// cacheAlloc is cache-0's allocation, which nothing here may restart.
	cacheAlloc string

	rollTime, growTime, restartTime time.Duration
}

func (s *storageRun) classesAndSizes(t *testing.T) {
	c, d := s.c, s.d
	waitConverged(t, c, d, "db", 3, nil)
	waitConverged(t, c, d, "cache", 1, nil)

	for _, v := range fullVolumes(t, c, "data-db-", 3) {
		if v.PluginID != "sized" || v.Parameters[nomad.ClassParameter] != "fast" ||
			v.CapacityBytes != 10*mib || v.RequestedCapacityMinBytes != 10*mib {
			t.Errorf("%s: plugin %q, class %q, capacity %d, capacity_min %d; want sized, fast, 10MiB, 10MiB",
				v.Name, v.PluginID, v.Parameters[nomad.ClassParameter], v.CapacityBytes, v.RequestedCapacityMinBytes)
		}
	}
	// mkdir makes a plain directory: Nomad records what was asked, and
	// the volume has no size.
	for _, v := range fullVolumes(t, c, "data-cache-", 1) {
		if v.PluginID != "mkdir" || v.Parameters[nomad.ClassParameter] != "" || v.CapacityBytes != 0 || v.RequestedCapacityMinBytes != 1*mib {
			t.Errorf("%s: plugin %q, class %q, capacity %d, capacity_min %d; want mkdir, no class, 0, 1MiB",
				v.Name, v.PluginID, v.Parameters[nomad.ClassParameter], v.CapacityBytes, v.RequestedCapacityMinBytes)
		}
	}
	// The daemon shows each pod's volume with its class and size.
	s.waitClaims(t, "db", 3, client.ClaimVolume{Class: "fast", Capacity: 10 * mib, Requested: 10 * mib})
	s.waitClaims(t, "cache", 1, client.ClaimVolume{Requested: 1 * mib})
	if out, err := d.CLI("status", "db"); err != nil || !strings.Contains(out, "data-db-2 (fast, 10.0 MiB)") {
		t.Errorf("status db (%v) does not show data-db-2 (fast, 10.0 MiB):\n%s", err, out)
	}

	s.markers = map[string]string{}
	Eventually(t, time.Minute, "every db pod to write its marker", func() error {
		for name, v := range volumeData(t, c, "data-db-", 3) {
			if v.marker == "" || v.starts != 1 {
				return fmt.Errorf("%s: marker %q, %d starts", name, v.marker, v.starts)
			}
			s.markers[name] = v.marker
		}
		return nil
	})
	s.cacheAlloc = newestAllocs(t, c, "cache")["cache-0"].id
}

// rollingUpdate changes an env var of db's template and times the rollout,
// the figure the expansion is compared with.
func (s *storageRun) rollingUpdate(t *testing.T) {
	c, d := s.c, s.d
	c.Watchdog.TrackDown("db", 3)
	before, err := setStatus(d, "db")
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	updateParent(t, c, "db", func(j *nomadapi.Job) { j.TaskGroups[0].Tasks[0].Env = map[string]string{"ROLLED": "1"} })
	Eventually(t, convergeTimeout, "db to roll to a new revision", func() error {
		st, err := setStatus(d, "db")
		if err != nil {
			return err
		}
		ss := st.Status
		if ss.UpdateRevision == before.Status.UpdateRevision || ss.CurrentRevision != ss.UpdateRevision ||
			ss.UpdatedReplicas != 3 || ss.ReadyReplicas != 3 {
			return fmt.Errorf("current %s update %s, updated %d ready %d", ss.CurrentRevision, ss.UpdateRevision, ss.UpdatedReplicas, ss.ReadyReplicas)
		}
		s.rev = ss.UpdateRevision
		return nil
	})
	waitConverged(t, c, d, "db", 3, func(o int, rev string) error {
		if rev != s.rev {
			return fmt.Errorf("db-%d at %s", o, rev)
		}
		return nil
	})
	s.rollTime = time.Since(start)
	t.Logf("rolling update of db (3 pods, max_unavailable 1): %s", s.rollTime.Round(time.Millisecond))
	if n, at := c.Watchdog.MaxDown("db"); n > 1 {
		t.Errorf("%d ordinals of db were down at once during the rolling update (%s)", n, at)
	}
	s.checkData(t, 2)
}

// grow raises db's claim to 20MiB: each volume is expanded while its pod
// is gone, one pod at a time, highest ordinal first, and the pod comes back
// on it with its data. It is not a new revision.
func (s *storageRun) grow(t *testing.T) {
	c, d := s.c, s.d
	start := time.Now()
	updateParent(t, c, "db", setMeta("statefulset_claim_data_capacity", "20MiB"))
	s.waitGrown(t, 20*mib)
	s.growTime = time.Since(start)
	t.Logf("expansion of db's 3 volumes 10MiB → 20MiB (max_unavailable 1): %s, against %s for the rolling update",
		s.growTime.Round(time.Millisecond), s.rollTime.Round(time.Millisecond))

	if n, at := c.Watchdog.MaxDown("db"); n > 1 {
		t.Errorf("%d ordinals of db were down at once during the expansion (%s)", n, at)
	}
	exp := s.events.expanded("20MiB")
	var order []string
	for _, e := range exp {
		order = append(order, strings.SplitN(e.Message, ":", 2)[0])
		t.Logf("event %s %s", e.Type, e.Message)
	}
	if got := strings.Join(order, ","); got != "data-db-2,data-db-1,data-db-0" {
		t.Errorf("VolumeExpanded to 20MiB for %q; want data-db-2,data-db-1,data-db-0, once each, in that order", got)
	}
	for _, e := range exp {
		if !strings.Contains(e.Message, ": 10MiB → 20MiB in ") {
			t.Errorf("VolumeExpanded %q; want both sizes, 10MiB → 20MiB, and the time", e.Message)
		}
	}
	for _, v := range fullVolumes(t, c, "data-db-", 3) {
		if v.RequestedCapacityMinBytes != 20*mib || v.Parameters[nomad.ClassParameter] != "fast" {
			t.Errorf("%s after the expansion: capacity_min %d, class %q; want 20MiB, fast", v.Name, v.RequestedCapacityMinBytes, v.Parameters[nomad.ClassParameter])
		}
	}
	s.checkPluginCreates(t, 10*mib, 20*mib)
	s.checkData(t, 3)
	st, err := setStatus(d, "db")
	if err != nil {
		t.Fatal(err)
	}
	if st.Status.UpdateRevision != s.rev || st.Status.CurrentRevision != s.rev {
		t.Errorf("db is at %s/%s after the expansion; a growing claim is not a new revision (%s)", st.Status.CurrentRevision, st.Status.UpdateRevision, s.rev)
	}
	if got := newestAllocs(t, c, "cache")["cache-0"].id; got != s.cacheAlloc {
		t.Errorf("cache-0 runs allocation %s, was %s: another set's growth restarted it", got, s.cacheAlloc)
	}
	if cond, ok := trueCondition(st, "VolumeClaimRefused"); ok {
		t.Errorf("VolumeClaimRefused after an expansion that was done: %+v", cond)
	}
	if evs := s.events.ofType("ExpandUnsupported"); len(evs) > 0 {
		t.Errorf("ExpandUnsupported on the fast class: %+v", evs)
	}
}

// unknownCapacityLeftAlone raises the claim of cache, whose mkdir volume
// reports no size: nothing can tell it is too small, so it is left alone,
// and its pod keeps running.
func (s *storageRun) unknownCapacityLeftAlone(t *testing.T) {
	c := s.c
	updateParent(t, c, "cache", setMeta("statefulset_claim_data_capacity", "2MiB"))
	// The daemon shows the new request once it has reconciled the new
	// claim, in the pass that would have taken cache-0 down.
	s.waitClaims(t, "cache", 1, client.ClaimVolume{Requested: 2 * mib})
	if got := newestAllocs(t, c, "cache")["cache-0"]; got.id != s.cacheAlloc || got.count != 1 {
		t.Errorf("cache-0 runs allocation %v, was %s alone: a volume of unknown size was acted on", got, s.cacheAlloc)
	}
	st, err := setStatus(s.d, "cache")
	if err != nil {
		t.Fatal(err)
	}
	if cond, ok := trueCondition(st, "VolumeClaimRefused"); !ok || !strings.Contains(cond.Message, "reports no size") {
		t.Errorf("cache does not say its mkdir volume cannot be grown: %+v", st.Status.Conditions)
	}
}

// shrinkRefused asks for a maximum below the volumes' size: the set says
// the volumes do not shrink, and nothing is stopped or touched.
func (s *storageRun) shrinkRefused(t *testing.T) {
	c, d := s.c, s.d
	allocs := newestAllocs(t, c, "db")
	creates := s.pluginCreates(t)
	deletes := len(s.events.ofType("DeletePod"))
	updateParent(t, c, "db", setMeta("statefulset_claim_data_capacity", "10MiB..15MiB"))

	const want = "volumes do not shrink; larger than their claim's maximum: data-db-0, data-db-1, data-db-2"
	// The condition comes out of the same reconcile pass that would have
	// taken pods down for the new claim: once it shows, the daemon has
	// decided on the change.
	Eventually(t, time.Minute, "db to have the condition VolumeClaimRefused", func() error {
		st, err := setStatus(d, "db")
		if err != nil {
			return err
		}
		if cond, ok := trueCondition(st, "VolumeClaimRefused"); !ok || !strings.Contains(cond.Message, want) {
			return fmt.Errorf("conditions %+v", st.Status.Conditions)
		}
		return nil
	})
	out, err := d.CLI("status", "db")
	if err != nil || !strings.Contains(out, "VolumeClaimRefused") || !strings.Contains(out, "volumes do not shrink") {
		t.Errorf("status db (%v) does not show VolumeClaimRefused and why:\n%s", err, out)
	}
	t.Logf("status db:\n%s", out)

	if got := newestAllocs(t, c, "db"); fmt.Sprint(got) != fmt.Sprint(allocs) {
		t.Errorf("db's allocations changed after a refused shrink:\n  before %v\n  after  %v", allocs, got)
	}
	if n := len(s.events.ofType("DeletePod")); n != deletes {
		t.Errorf("%d DeletePod events after a refused shrink, %d before", n, deletes)
	}
	if got := s.pluginCreates(t); fmt.Sprint(got) != fmt.Sprint(creates) {
		t.Errorf("the plugin was called after a refused shrink:\n  before %v\n  after  %v", creates, got)
	}
	for _, v := range fullVolumes(t, c, "data-db-", 3) {
		if v.CapacityBytes != 20*mib {
			t.Errorf("%s: capacity %d after a refused shrink; want 20MiB", v.Name, v.CapacityBytes)
		}
	}
	s.waitClaims(t, "db", 3, client.ClaimVolume{Class: "fast", Capacity: 20 * mib, Requested: 10 * mib})
	s.checkData(t, 3)
}

// restartMidExpansion grows db to 30MiB and kills the daemon once it has
// expanded data-db-2 and taken db-1 down, the moment a pod is gone and its
// volume not grown yet. The daemon started again finishes: every volume is
// expanded once (the plugin's own log), every pod comes back with its data.
func (s *storageRun) restartMidExpansion(t *testing.T) {
	c, d := s.c, s.d
	deletes := len(s.events.ofType("DeletePod"))
	start := time.Now()
	updateParent(t, c, "db", setMeta("statefulset_claim_data_capacity", "30MiB"))
	Eventually(t, convergeTimeout, "data-db-2 to be expanded and db-1 taken down", func() error {
		if len(s.events.expanded("30MiB")) == 0 {
			return fmt.Errorf("no VolumeExpanded to 30MiB yet")
		}
		st := client.SetDetail{Events: s.events.ofType("DeletePod")[deletes:]}
		for _, pod := range deletedPods(st) {
			if pod == "db-1" {
				return nil
			}
		}
		return fmt.Errorf("db-1 not taken down yet")
	})
	d.Kill()
	killedAt := time.Now()
	db1 := fullVolumes(t, c, "data-db-1", 1)[0].CapacityBytes
	t.Logf("daemon killed %s into the expansion; data-db-1 is %s then", killedAt.Sub(start).Round(time.Millisecond), sizeName(db1))
	d.Start()
	// The killed daemon's Consul session holds the leader lock until it
	// expires: up to 2 × session_ttl + lock_delay (45s by default), the
	// safety of high availability, not the expansion's doing.
	Eventually(t, 2*time.Minute, "the restarted daemon to lead", func() error {
		h, err := daemonHealth(d)
		if err != nil || !h.Leader {
			return fmt.Errorf("health %+v, %v", h, err)
		}
		return nil
	})
	leads := time.Now()
	s.waitGrown(t, 30*mib)
	s.restartTime = time.Since(start)
	t.Logf("expansion of db's 3 volumes 20MiB → 30MiB with the daemon killed and started again: %s "+
		"(leader again %s after the kill, done %s after that)", s.restartTime.Round(time.Millisecond),
		leads.Sub(killedAt).Round(time.Millisecond), time.Since(leads).Round(time.Millisecond))

	if n, at := c.Watchdog.MaxDown("db"); n > 1 {
		t.Errorf("%d ordinals of db were down at once around the restart (%s)", n, at)
	}
	// The plugin's log is the truth on how often each volume was grown: an
	// expansion repeated after the restart would be a second create at
	// 30MiB.
	s.checkPluginCreates(t, 10*mib, 20*mib, 30*mib)
	exp := s.events.expanded("30MiB")
	per := map[string]int{}
	for _, e := range exp {
		per[strings.SplitN(e.Message, ":", 2)[0]]++
		t.Logf("event %s %s", e.Type, e.Message)
	}
	for name, n := range per {
		if n > 1 {
			t.Errorf("%d VolumeExpanded events for %s to 30MiB", n, name)
		}
	}
	// Events live in the daemon's memory: one emitted just before the kill
	// can be lost, but only if Nomad had the volume grown by then.
	if want := 3; db1 != 30*mib && len(exp) != want {
		t.Errorf("%d VolumeExpanded events to 30MiB (%v); want %d", len(exp), per, want)
	}
	s.checkData(t, 4)
	st, err := setStatus(d, "db")
	if err != nil {
		t.Fatal(err)
	}
	if cond, ok := trueCondition(st, "VolumeClaimRefused"); ok {
		t.Errorf("VolumeClaimRefused still holds once the claim asks what can be done: %+v", cond)
	}
	if got := newestAllocs(t, c, "cache")["cache-0"].id; got != s.cacheAlloc {
		t.Errorf("cache-0 runs allocation %s, was %s", got, s.cacheAlloc)
	}
}

// waitGrown waits until Nomad reports every db volume at size, ready, the
// daemon shows no growth pending, and the set has converged.
func (s *storageRun) waitGrown(t *testing.T, size int64) {
	t.Helper()
	c, d := s.c, s.d
	Eventually(t, convergeTimeout, fmt.Sprintf("db's volumes to be %s and its pods back", sizeName(size)), func() error {
		vols := HostVolumes(t, c.Nomad.Client, "default", "data-db-")
		if len(vols) != 3 {
			return fmt.Errorf("%d data-db-* volumes", len(vols))
		}
		for _, v := range vols {
			if v.CapacityBytes != size || v.State != nomadapi.HostVolumeStateReady {
				return fmt.Errorf("%s: %s, %d bytes", v.Name, v.State, v.CapacityBytes)
			}
		}
		if err := claimsAre(d, "db", 3, client.ClaimVolume{Class: "fast", Capacity: size, Requested: size}); err != nil {
			return err
		}
		revs, live := healthyRevisions(t, c, "db")
		if live != 3 || len(revs) != 3 {
			return fmt.Errorf("%d live children, healthy %v", live, revs)
		}
		return nil
	})
	waitConverged(t, c, d, "db", 3, nil)
}

// checkData checks that each db volume still holds the marker its first
// pod wrote, and that its pod has started on it starts times.
func (s *storageRun) checkData(t *testing.T, starts int) {
	t.Helper()
	Eventually(t, time.Minute, fmt.Sprintf("every db pod to have started %d times on its own data", starts), func() error {
		for name, v := range volumeData(t, s.c, "data-db-", 3) {
			if v.marker != s.markers[name] {
				return fmt.Errorf("%w: %s: marker %q, was %q: its data is gone", ErrGiveUp, name, v.marker, s.markers[name])
			}
			if v.starts > starts {
				return fmt.Errorf("%w: %s: %d starts, want %d", ErrGiveUp, name, v.starts, starts)
			}
			if v.starts != starts {
				return fmt.Errorf("%s: %d starts, want %d", name, v.starts, starts)
			}
		}
		return nil
	})
}

// checkPluginCreates checks that the plugin created each db volume once
// at each size, in that order, and deleted none.
func (s *storageRun) checkPluginCreates(t *testing.T, sizes ...int64) {
	t.Helper()
	got := s.pluginCreates(t)
	ids := map[string]string{}
	for _, v := range HostVolumes(t, s.c.Nomad.Client, "default", "data-db-") {
		ids[v.ID] = v.Name
	}
	for id, name := range ids {
		if fmt.Sprint(got[id]) != fmt.Sprint(sizes) {
			t.Errorf("the plugin created %s at %v; want once at each of %v", name, got[id], sizes)
		}
	}
	for id := range got {
		if ids[id] == "" {
			t.Errorf("the plugin made volume %s (%v), which is not one of db's", id, got[id])
		}
	}
}

// pluginCreates reads the sized plugin's log: the sizes of its creates, by
// volume ID. A delete is recorded as -1.
func (s *storageRun) pluginCreates(t *testing.T) map[string][]int64 {
	t.Helper()
	f, err := os.Open(s.c.Nomad.HostVolumePluginLog("sized"))
	if err != nil {
		t.Fatalf("the sized plugin's log: %v", err)
	}
	defer f.Close()
	out := map[string][]int64{}
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		switch {
		case len(f) == 3 && f[0] == "create":
			n, err := strconv.ParseInt(f[2], 10, 64)
			if err != nil {
				t.Fatalf("the sized plugin's log: %q: %v", sc.Text(), err)
			}
			out[f[1]] = append(out[f[1]], n)
		case len(f) == 2 && f[0] == "delete":
			out[f[1]] = append(out[f[1]], -1)
		default:
			t.Fatalf("the sized plugin's log: %q", sc.Text())
		}
	}
	return out
}

// waitClaims waits until the daemon shows each of replicas pods of set with
// one data claim as want (its class, capacity and request, nothing pending).
func (s *storageRun) waitClaims(t *testing.T, set string, replicas int, want client.ClaimVolume) {
	t.Helper()
	Eventually(t, time.Minute, fmt.Sprintf("the daemon to show %s's volumes as %+v", set, want), func() error {
		return claimsAre(s.d, set, replicas, want)
	})
}

// claimsAre checks the daemon's view of set's data claims against want,
// except for the volume name.
func claimsAre(d *Daemon, set string, replicas int, want client.ClaimVolume) error {
	st, err := setStatus(d, set)
	if err != nil {
		return err
	}
	if len(st.Pods) != replicas {
		return fmt.Errorf("%d pods", len(st.Pods))
	}
	for _, p := range st.Pods {
		if len(p.Claims) != 1 {
			return fmt.Errorf("%s claims %+v", p.Name, p.Claims)
		}
		got := p.Claims[0]
		want.Claim, want.Name = "data", fmt.Sprintf("data-%s", p.Name)
		if got != want {
			return fmt.Errorf("%s: %+v", p.Name, got)
		}
	}
	return nil
}

// fullVolumes reads the n host volumes named prefix* in full (a list stub
// has no parameters or requested sizes), by name.
func fullVolumes(t *testing.T, c *Cluster, prefix string, n int) []*nomadapi.HostVolume {
	t.Helper()
	stubs := HostVolumes(t, c.Nomad.Client, "default", prefix)
	if len(stubs) != n {
		t.Fatalf("%d %s* volumes, want %d", len(stubs), prefix, n)
	}
	var out []*nomadapi.HostVolume
	for _, st := range stubs {
		v, _, err := c.Nomad.Client.HostVolumes().Get(st.ID, &nomadapi.QueryOptions{Namespace: "default"})
		if err != nil {
			t.Fatalf("reading volume %s: %v", st.Name, err)
		}
		out = append(out, v)
	}
	return out
}

// volumeFiles is what markerScript left in one volume.
type volumeFiles struct {
	marker string
	starts int
}

// volumeData reads the marker and start count of the n volumes named
// prefix* from the client's host volumes directory, by volume name.
func volumeData(t *testing.T, c *Cluster, prefix string, n int) map[string]volumeFiles {
	t.Helper()
	stubs := HostVolumes(t, c.Nomad.Client, "default", prefix)
	if len(stubs) != n {
		t.Fatalf("%d %s* volumes, want %d", len(stubs), prefix, n)
	}
	out := map[string]volumeFiles{}
	for _, v := range stubs {
		var f volumeFiles
		if b, err := os.ReadFile(filepath.Join(c.Nomad.HostVolumesDir, v.ID, "marker")); err == nil {
			f.marker = strings.TrimSpace(string(b))
		}
		if b, err := os.ReadFile(filepath.Join(c.Nomad.HostVolumesDir, v.ID, "starts")); err == nil {
			f.starts = strings.Count(string(b), "\n")
		}
		out[v.Name] = f
	}
	return out
}

// allocSummary is a child's newest allocation and how many it has had.
type allocSummary struct {
	id    string
	count int
}

func (a allocSummary) String() string { return fmt.Sprintf("%s(%d)", a.id, a.count) }

// newestAllocs gives each live child of set its newest allocation and its
// number of allocations: a restart shows in either.
func newestAllocs(t *testing.T, c *Cluster, set string) map[string]allocSummary {
	t.Helper()
	out := map[string]allocSummary{}
	for _, j := range ChildJobs(t, c.Nomad.Client, "default", set) {
		if j.Stop {
			continue
		}
		allocs := Allocations(t, c.Nomad.Client, "default", j.ID)
		var s allocSummary
		if len(allocs) > 0 {
			s = allocSummary{id: allocs[0].ID, count: len(allocs)}
		}
		out[j.ID] = s
	}
	return out
}

// trueCondition returns the condition typ of the set when it holds.
func trueCondition(st client.SetDetail, typ string) (client.Condition, bool) {
	for _, c := range st.Status.Conditions {
		if c.Type == typ && c.Status {
			return c, true
		}
	}
	return client.Condition{}, false
}

// sizeName writes a byte count in MiB, as the events do.
func sizeName(n int64) string {
	if n%mib == 0 {
		return fmt.Sprintf("%dMiB", n/mib)
	}
	return fmt.Sprintf("%dB", n)
}

// eventLog gathers a set's events from the daemon as they come: the daemon
// keeps only its last few, in memory, and a restart loses them.
type eventLog struct {
	mu   sync.Mutex
	seen map[string]bool
	all  []client.Event
}

// recordEvents polls the daemon's view of set until the test ends. Errors
// (the daemon down for a restart) are skipped: the next poll catches up.
func recordEvents(t *testing.T, d *Daemon, set string) *eventLog {
	l := &eventLog{seen: map[string]bool{}}
	t.Cleanup(pollUntilStopped(200*time.Millisecond, func() {
		if st, err := setStatus(d, set); err == nil {
			l.add(st.Events)
		}
	}))
	return l
}

func (l *eventLog) add(evs []client.Event) {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, e := range evs {
		k := e.Time.String() + "\x00" + e.Type + "\x00" + e.Message
		if !l.seen[k] {
			l.seen[k] = true
			l.all = append(l.all, e)
		}
	}
}

// ofType returns the events of type typ seen so far, in order.
func (l *eventLog) ofType(typ string) []client.Event {
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []client.Event
	for _, e := range l.all {
		if e.Type == typ {
			out = append(out, e)
		}
	}
	return out
}

// expanded returns the VolumeExpanded events that grew a volume to size.
func (l *eventLog) expanded(size string) []client.Event {
	var out []client.Event
	for _, e := range l.ofType("VolumeExpanded") {
		if strings.Contains(e.Message, "→ "+size+" ") {
			out = append(out, e)
		}
	}
	return out
}
