package e2e

import (
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	nomadapi "github.com/hashicorp/nomad/api"

	"github.com/nomad-statefulset/nomad-statefulset/internal/testagent"
)

func child(w *Watchdog, id, parent, ord string) {
	w.ObserveJob("default", id, map[string]string{MetaParent: parent, MetaOrdinal: ord}, 0, 1)
}

func TestWatchdogSameJobTwoRunning(t *testing.T) {
	w := NewWatchdog()
	child(w, "web-0", "web", "0")
	w.ObserveAlloc("a1", "default", "web-0", "running", 10, time.Time{})
	w.ObserveAlloc("a2", "default", "web-0", "pending", 11, time.Time{})
	if v := w.Violations(); len(v) != 0 {
		t.Fatalf("pending must not count: %v", v)
	}
	w.ObserveAlloc("a2", "default", "web-0", "running", 12, time.Time{})
	v := w.Violations()
	if len(v) != 1 || !strings.Contains(v[0], "a1") || !strings.Contains(v[0], "a2") {
		t.Fatalf("want one violation naming a1 and a2, got %v", v)
	}
	// The same pair seen again (e.g. from the poll) is reported once.
	w.ObserveAlloc("a1", "default", "web-0", "running", 13, time.Time{})
	w.ObserveAlloc("a2", "default", "web-0", "running", 14, time.Time{})
	if v := w.Violations(); len(v) != 1 {
		t.Fatalf("want the pair reported once, got %v", v)
	}
}

func TestWatchdogReplacementAfterStop(t *testing.T) {
	w := NewWatchdog()
	child(w, "web-0", "web", "0")
	w.ObserveAlloc("a1", "default", "web-0", "running", 10, time.Time{})
	w.ObserveAlloc("a1", "default", "web-0", "complete", 12, time.Time{})
	w.ObserveAlloc("a2", "default", "web-0", "running", 13, time.Time{})
	if v := w.Violations(); len(v) != 0 {
		t.Fatalf("sequential allocations are fine: %v", v)
	}
	// A listing taken before a1 stopped arrives late: it must not revive a1.
	w.ObserveAlloc("a1", "default", "web-0", "running", 10, time.Time{})
	// Nor may a terminal allocation run again, whatever its index.
	w.ObserveAlloc("a1", "default", "web-0", "running", 20, time.Time{})
	if v := w.Violations(); len(v) != 0 {
		t.Fatalf("stale or post-terminal updates made a violation: %v", v)
	}
}

func TestWatchdogSameOrdinalDifferentJobs(t *testing.T) {
	w := NewWatchdog()
	child(w, "web-0", "web", "0")
	child(w, "web-0-adopted", "web", "0")
	child(w, "web-1", "web", "1")
	child(w, "db-0", "db", "0")
	w.ObserveAlloc("a1", "default", "web-0", "running", 10, time.Time{})
	w.ObserveAlloc("b1", "default", "web-1", "running", 11, time.Time{})
	w.ObserveAlloc("c1", "default", "db-0", "running", 11, time.Time{})
	if v := w.Violations(); len(v) != 0 {
		t.Fatalf("different ordinals or sets are fine: %v", v)
	}
	w.ObserveAlloc("a2", "default", "web-0-adopted", "running", 12, time.Time{})
	if v := w.Violations(); len(v) != 1 {
		t.Fatalf("want one violation for web ordinal 0 in two jobs, got %v", v)
	}
}

func TestWatchdogOtherNamespaceIsAnotherSet(t *testing.T) {
	w := NewWatchdog()
	child(w, "web-0", "web", "0")
	w.ObserveJob("prod", "web-0", map[string]string{MetaParent: "web", MetaOrdinal: "0"}, 0, 1)
	w.ObserveAlloc("a1", "default", "web-0", "running", 10, time.Time{})
	w.ObserveAlloc("a2", "prod", "web-0", "running", 11, time.Time{})
	if v := w.Violations(); len(v) != 0 {
		t.Fatalf("namespaces are separate: %v", v)
	}
}

func TestWatchdogUnknownCountsAsRunning(t *testing.T) {
	w := NewWatchdog()
	child(w, "web-0", "web", "0")
	w.ObserveAlloc("a1", "default", "web-0", "unknown", 10, time.Time{})
	w.ObserveAlloc("a2", "default", "web-0", "running", 11, time.Time{})
	if v := w.Violations(); len(v) != 1 {
		t.Fatalf("an unknown (disconnected) allocation may still run: %v", v)
	}
}

func TestWatchdogAllocBeforeJob(t *testing.T) {
	w := NewWatchdog()
	// Allocation events can arrive before the job's meta is known.
	w.ObserveAlloc("a1", "default", "web-0", "running", 10, time.Time{})
	w.ObserveAlloc("a2", "default", "web-0", "running", 11, time.Time{})
	w.ObserveAlloc("x1", "default", "plain", "running", 11, time.Time{})
	w.ObserveAlloc("x2", "default", "plain", "running", 12, time.Time{})
	if v := w.Violations(); len(v) != 0 {
		t.Fatalf("nothing known to be a child yet: %v", v)
	}
	child(w, "web-0", "web", "0")
	if v := w.Violations(); len(v) != 1 {
		t.Fatalf("want the pair found once the job is known, got %v", v)
	}
	w.ObserveJob("default", "plain", nil, 0, 1) // not a child: ignored
	if v := w.Violations(); len(v) != 1 {
		t.Fatalf("jobs without statefulset meta are not watched: %v", v)
	}
}

func TestWatchdogOrders(t *testing.T) {
	w := NewWatchdog()
	base := time.Unix(1000, 0)
	w.ObserveJob("default", "web-1", map[string]string{MetaParent: "web", MetaOrdinal: "1"}, base.Add(5*time.Second).UnixNano(), 7)
	w.ObserveJob("default", "web-0", map[string]string{MetaParent: "web", MetaOrdinal: "0"}, base.UnixNano(), 3)
	w.ObserveJob("default", "web-0", map[string]string{MetaParent: "web", MetaOrdinal: "0"}, 0, 9) // a new version
	w.ObserveJob("default", "web-0", map[string]string{MetaParent: "web", MetaOrdinal: "0"}, 0, 9) // seen again
	w.ObserveAlloc("a0", "default", "web-0", "running", 4, base.Add(3*time.Second))
	w.ObserveAlloc("a1", "default", "web-1", "running", 8, time.Time{})
	w.ObserveAlloc("a1", "default", "web-1", "running", 9, base.Add(2*time.Second)) // earlier than web-0's
	if got := strings.Join(w.RegistrationOrder("web"), ","); got != "web-0,web-1" {
		t.Fatalf("registration order %s", got)
	}
	if got := strings.Join(w.HealthyOrder("web"), ","); got != "web-1,web-0" {
		t.Fatalf("healthy order %s", got)
	}
	r, ok := w.Child("default", "web-0")
	if !ok || r.Registrations != 2 || !r.RegisteredAt.Equal(base) || !r.HealthyAt.Equal(base.Add(3*time.Second)) {
		t.Fatalf("record %+v", r)
	}
	if len(w.Children("web")) != 2 || len(w.Children("db")) != 0 {
		t.Fatalf("children %+v", w.Children("web"))
	}
}

// The "seen" times are the watchdog's own clock when it first saw the
// registration and the health, not the times Nomad stamped.
func TestWatchdogSeenTimes(t *testing.T) {
	w := NewWatchdog()
	clock := time.Unix(2000, 0)
	w.now = func() time.Time { return clock }
	w.ObserveJob("default", "web-0", map[string]string{MetaParent: "web", MetaOrdinal: "0"}, time.Unix(1000, 0).UnixNano(), 3)
	clock = clock.Add(time.Second)
	w.ObserveAlloc("a0", "default", "web-0", "running", 4, time.Time{})
	clock = clock.Add(time.Second)
	w.ObserveAlloc("a0", "default", "web-0", "running", 5, time.Unix(1001, 0))
	clock = clock.Add(time.Second)
	w.ObserveAlloc("a0", "default", "web-0", "running", 6, time.Unix(1001, 0)) // seen again
	r, _ := w.Child("default", "web-0")
	if !r.RegisteredSeenAt.Equal(time.Unix(2000, 0)) || !r.RegisteredAt.Equal(time.Unix(1000, 0)) {
		t.Fatalf("registration: seen %v, stamped %v", r.RegisteredSeenAt, r.RegisteredAt)
	}
	if !r.HealthySeenAt.Equal(time.Unix(2002, 0)) || !r.HealthyAt.Equal(time.Unix(1001, 0)) {
		t.Fatalf("health: seen %v, stamped %v", r.HealthySeenAt, r.HealthyAt)
	}
}

// TestWatchdogRealNomad runs two jobs that claim the same ordinal of a set on
// a real Nomad and checks that the watchdog, fed by the event stream and the
// listing, sees them register, become healthy, and run at once.
func TestWatchdogRealNomad(t *testing.T) {
	n := testagent.Nomad(t)
	w := NewWatchdog()
	w.Watch(n.Client)
	defer w.Stop()
	job := func(id string) string {
		return `job "` + id + `" {
  datacenters = ["*"]
  meta {
    statefulset_parent  = "fake"
    statefulset_ordinal = "0"
  }
  update {
    min_healthy_time = "1s"
  }
  group "g" {
    task "t" {
      driver = "mock_driver"
      config {
        run_for = "1h"
      }
      resources {
        cpu    = 10
        memory = 10
      }
    }
  }
}`
	}
	RegisterHCL(t, n.Client, job("fake-0"))
	WaitJobHealthy(t, n.Client, "default", "fake-0", time.Minute)
	Eventually(t, 10*time.Second, "the watchdog to see fake-0 healthy", func() error {
		if r, ok := w.Child("default", "fake-0"); !ok || r.HealthyAt.IsZero() || r.RegisteredAt.IsZero() {
			return fmt.Errorf("record %+v (last error %v)", r, w.LastError())
		}
		return nil
	})
	if v := w.Violations(); len(v) != 0 {
		t.Fatalf("one job is no violation: %v", v)
	}
	RegisterHCL(t, n.Client, job("fake-0-dup"))
	Eventually(t, time.Minute, "the watchdog to report ordinal 0 of fake running twice", func() error {
		if v := w.Violations(); len(v) != 1 {
			return fmt.Errorf("violations: %v", v)
		}
		return nil
	})
	// The listing helpers see the same set.
	var ids []string
	for _, j := range ChildJobs(t, n.Client, "default", "fake") {
		ids = append(ids, j.ID)
	}
	if strings.Join(ids, ",") != "fake-0,fake-0-dup" {
		t.Fatalf("ChildJobs: %v", ids)
	}
	if all := SetAllocations(t, n.Client, "default", "fake"); len(all) != 2 || len(all["fake-0"]) != 1 {
		t.Fatalf("SetAllocations: %v", all)
	}
	if _, _, err := n.Client.HostVolumes().Create(&nomadapi.HostVolumeCreateRequest{Volume: &nomadapi.HostVolume{
		Name: "data-fake-0", PluginID: "mkdir",
		RequestedCapabilities: []*nomadapi.HostVolumeCapability{{
			AttachmentMode: nomadapi.HostVolumeAttachmentModeFilesystem,
			AccessMode:     nomadapi.HostVolumeAccessModeSingleNodeSingleWriter,
		}},
	}}, nil); err != nil {
		t.Fatal(err)
	}
	if vols := HostVolumes(t, n.Client, "default", "data-fake-"); len(vols) != 1 || vols[0].Name != "data-fake-0" {
		t.Fatalf("HostVolumes: %v", vols)
	}
	r, _ := w.Child("default", "fake-0")
	if got := w.RegistrationOrder("fake"); len(got) != 2 || got[0] != "fake-0" {
		t.Fatalf("registration order %v", got)
	}
	t.Logf("fake-0: registered %s, healthy %s later", r.RegisteredAt.Format(time.RFC3339Nano), r.HealthyAt.Sub(r.RegisteredAt))
}

// RegisteredAfterHealthy fails on an out-of-order registration, and also
// when a record it needs is missing, so that a watchdog that missed an
// event cannot make an ordering assertion pass.
func TestWatchdogRegisteredAfterHealthy(t *testing.T) {
	base := time.Unix(1000, 0)
	at := func(s int) time.Time { return base.Add(time.Duration(s) * time.Second) }
	register := func(w *Watchdog, id, ord string, s int) {
		w.ObserveJob("default", id, map[string]string{MetaParent: "web", MetaOrdinal: ord}, at(s).UnixNano(), 1)
	}
	for _, tc := range []struct {
		name    string
		observe func(w *Watchdog)
		wantErr string
	}{
		{"in order", func(w *Watchdog) {
			register(w, "web-0", "0", 0)
			w.ObserveAlloc("a0", "default", "web-0", "running", 2, at(2))
			register(w, "web-1", "1", 2)
			w.ObserveAlloc("a1", "default", "web-1", "running", 3, at(4))
			register(w, "web-2", "2", 5)
		}, ""},
		{"registered before the predecessor was healthy", func(w *Watchdog) {
			register(w, "web-0", "0", 0)
			w.ObserveAlloc("a0", "default", "web-0", "running", 2, at(2))
			register(w, "web-1", "1", 2)
			w.ObserveAlloc("a1", "default", "web-1", "running", 3, at(4))
			register(w, "web-2", "2", 3)
		}, "web-2 registered at"},
		{"predecessor never seen healthy", func(w *Watchdog) {
			register(w, "web-0", "0", 0)
			w.ObserveAlloc("a0", "default", "web-0", "running", 2, at(2))
			register(w, "web-1", "1", 2)
			w.ObserveAlloc("a1", "default", "web-1", "running", 3, time.Time{})
			register(w, "web-2", "2", 5)
		}, "never saw web-1 healthy"},
		{"predecessor never seen", func(w *Watchdog) {
			register(w, "web-1", "1", 2)
			w.ObserveAlloc("a1", "default", "web-1", "running", 3, at(4))
			register(w, "web-2", "2", 5)
		}, "never saw web-0 healthy"},
		{"last pod never seen", func(w *Watchdog) {
			register(w, "web-0", "0", 0)
			w.ObserveAlloc("a0", "default", "web-0", "running", 2, at(2))
			register(w, "web-1", "1", 2)
			w.ObserveAlloc("a1", "default", "web-1", "running", 3, at(4))
		}, "never saw web-2 registered"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			w := NewWatchdog()
			tc.observe(w)
			err := w.RegisteredAfterHealthy("default", "web-0", "web-1", "web-2")
			switch {
			case tc.wantErr == "" && err != nil:
				t.Fatalf("want no error, got %v", err)
			case tc.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tc.wantErr)):
				t.Fatalf("want an error containing %q, got %v", tc.wantErr, err)
			}
		})
	}
}

// TestWatchdogMaxDown: an ordinal is down from the moment Nomad asks its
// allocation to stop until a new allocation of it is running and healthy;
// MaxDown reports the worst moment and which ordinals were down.
func TestWatchdogMaxDown(t *testing.T) {
	w := NewWatchdog()
	healthy := time.Unix(100, 0)
	for o := 0; o < 3; o++ {
		id := "web-" + strconv.Itoa(o)
		child(w, id, "web", strconv.Itoa(o))
		w.ObserveAlloc("a"+strconv.Itoa(o), "default", id, "running", 10, healthy)
	}
	w.TrackDown("web", 3)
	if n, _ := w.MaxDown("web"); n != 0 {
		t.Fatalf("a converged set has %d down", n)
	}
	w.ObserveDesired("a2", "stop") // stopping: down already
	if n, _ := w.MaxDown("web"); n != 1 {
		t.Fatalf("after a stop request: %d down, want 1", n)
	}
	w.ObserveAlloc("a2", "default", "web-2", "complete", 11, healthy)
	w.ObserveAlloc("b2", "default", "web-2", "running", 12, time.Time{}) // running, not yet healthy
	w.ObserveAlloc("a1", "default", "web-1", "failed", 13, healthy)
	n, at := w.MaxDown("web")
	if n != 2 || !strings.Contains(at, "[1 2]") {
		t.Fatalf("MaxDown = %d (%s), want 2 with ordinals 1 and 2", n, at)
	}
	w.ObserveAlloc("b2", "default", "web-2", "running", 14, healthy)
	if n, _ := w.MaxDown("web"); n != 2 {
		t.Fatalf("MaxDown went down to %d; it is the maximum", n)
	}
}
