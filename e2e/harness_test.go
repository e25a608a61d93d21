package e2e

import (
	"encoding/json"
	"net/http"
	"strings"
	"testing"

	"github.com/nomad-statefulset/nomad-statefulset/internal/testagent"
)

// TestHarnessDaemon checks the harness itself end to end: Consul, Nomad with
// ACLs, the nomad-statefulset binary built from this repository and started
// with a config file as a user starts it, its HTTP API, and its CLI reaching
// it through NOMAD_STATEFULSET_ADDR.
func TestHarnessDaemon(t *testing.T) {
	c := NewCluster(t, testagent.WithACL())
	d := c.StartDaemon()

	resp, err := http.Get(d.Addr + "/v1/statefulsets")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var list struct {
		Sets []json.RawMessage `json:"sets"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&list); err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("GET /v1/statefulsets: %s %v", resp.Status, err)
	}
	if len(list.Sets) != 0 {
		t.Fatalf("a fresh cluster has no sets: %s", list.Sets)
	}
	out, err := d.CLI("version")
	if err != nil || strings.TrimSpace(out) == "" {
		t.Fatalf("nomad-statefulset version: %v\n%s", err, out)
	}
	if out, err := d.CLI("status"); err != nil {
		t.Fatalf("nomad-statefulset status: %v\n%s", err, out)
	}
	// A kill and a start keep the same address and config.
	d.Kill()
	d.Start()
	if v := c.Watchdog.Violations(); len(v) != 0 {
		t.Fatalf("watchdog: %v", v)
	}
}
