package e2e

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	nomadapi "github.com/hashicorp/nomad/api"

	"github.com/nomad-statefulset/nomad-statefulset/client"
	"github.com/nomad-statefulset/nomad-statefulset/internal/testagent"
	"github.com/nomad-statefulset/nomad-statefulset/jobs"
)

// haConfig gives both agents the same lock with the shortest session TTL
// Consul allows. The lock delay must exceed the agent's 6s stop timeout by
// the lease: 15s gives a lease of min(10s, 15s − 6s) = 9s, and a takeover
// within 2 × 10s + 15s.
const haConfig = `
high_availability {
  enabled     = true
  session_ttl = "10s"
  lock_delay  = "15s"
}`

func health(t *testing.T, d *Daemon) client.Health {
	t.Helper()
	var h client.Health
	resp, err := httpGetJSON(d.Addr+"/v1/health", &h)
	if err != nil {
		t.Fatalf("GET %s/v1/health: %v (%v)", d.Addr, err, resp)
	}
	return h
}

// Two agents on one Consul: exactly one leads and acts; SIGKILL the leader
// mid-rollout and the other takes over within 2 × session_ttl + lock_delay,
// finishes the rollout, never runs two allocations of one ordinal (the
// watchdog) and records no extra revision.
func TestHATakeoverMidRollout(t *testing.T) {
	c := NewCluster(t)
	a := c.StartDaemon(haConfig)
	b := c.StartDaemon(haConfig)
	leader, follower := leaderAndFollower(t, a, b)
	RegisterHCL(t, c.Nomad.Client, setSpec{name: "ha", noVolume: true, meta: map[string]string{"statefulset_replicas": "3"}}.hcl())
	old := waitConverged(t, c, leader, "ha", 3, nil)[0]
	if _, err := setStatus(follower, "ha"); err == nil {
		t.Fatalf("the follower shows the set: it must not be acting")
	}

	updateParent(t, c, "ha", changeTemplate("v2"))
	Eventually(t, time.Minute, "the rollout to start", func() error {
		revs, _ := healthyRevisions(t, c, "ha")
		if revs[2] == old {
			return fmt.Errorf("ha-2 still at %s", old)
		}
		return nil
	})
	killed := time.Now()
	leader.Kill()
	Eventually(t, time.Minute, "the follower to take over", func() error {
		if !health(t, follower).Leader {
			return fmt.Errorf("not leading yet")
		}
		return nil
	})
	took := time.Since(killed)
	t.Logf("takeover after SIGKILL of the leader: %v", took.Round(100*time.Millisecond))
	if limit := 2*10*time.Second + 15*time.Second + 5*time.Second; took > limit {
		t.Fatalf("takeover took %v, more than 2 × session_ttl + lock_delay (+5s slack) = %v", took, limit)
	}
	waitConverged(t, c, follower, "ha", 3, func(o int, r string) error {
		if r == old {
			return fmt.Errorf("ha-%d still at the old revision", o)
		}
		return nil
	})
	st, err := setStatus(follower, "ha")
	if err != nil {
		t.Fatal(err)
	}
	if len(st.Revisions) != 2 {
		t.Fatalf("want exactly 2 revisions after the takeover, got %+v", st.Revisions)
	}
}

// The revision data of every example is the same as written (parsed from
// HCL) and as read back from a real Nomad after registration: Nomad's
// canonicalization must not make a new revision.
func TestRevisionDataSurvivesARoundTripThroughNomad(t *testing.T) {
	files := annotatedExamples(t)
	n := testagent.Nomad(t)
	for _, f := range files {
		t.Run(filepath.Base(f), func(t *testing.T) {
			src, err := os.ReadFile(f)
			if err != nil {
				t.Fatal(err)
			}
			// As `nomad job run` submits it: parsed, not canonicalized.
			written, err := n.Client.Jobs().ParseHCLOpts(&nomadapi.JobsParseRequest{JobHCL: string(src)})
			if err != nil {
				t.Fatal(err)
			}
			before, err := jobs.RevisionData(written)
			if err != nil {
				t.Fatal(err)
			}
			if _, _, err := n.Client.Jobs().Register(written, nil); err != nil {
				t.Fatal(err)
			}
			back, _, err := n.Client.Jobs().Info(*written.ID, &nomadapi.QueryOptions{Namespace: deref(written.Namespace)})
			if err != nil {
				t.Fatal(err)
			}
			after, err := jobs.RevisionData(back)
			if err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(before, after) {
				t.Fatalf("revision data changed in a round trip through Nomad:\nwritten: %s\nread:    %s", before, after)
			}
			if strings.TrimSpace(string(before)) == "" {
				t.Fatal("empty revision data")
			}
		})
	}
}
