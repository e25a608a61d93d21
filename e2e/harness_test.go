package e2e

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"runtime"
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

	// Nomad's ACLs are on: the harness sends the management token.
	resp, err := d.Get("/v1/statefulsets", "")
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

// fatalRecorder is a testing.TB whose Fatalf records the message and ends
// the goroutine, as the real one does.
type fatalRecorder struct {
	testing.TB
	msg string
}

func (f *fatalRecorder) Helper() {}

func (f *fatalRecorder) Fatalf(format string, args ...any) {
	f.msg = fmt.Sprintf(format, args...)
	runtime.Goexit()
}

// Eventually gives up at once on a condition error that wraps ErrGiveUp,
// however it is wrapped, and otherwise reports a timeout.
func TestEventuallyGivesUp(t *testing.T) {
	for _, tc := range []struct {
		name string
		err  error
		want string
	}{
		{"wrapped with %w", fmt.Errorf("ph-1 is Failed: %w", ErrGiveUp), "gave up waiting for x"},
		{"joined", errors.Join(errors.New("ph-1 is Failed"), ErrGiveUp), "gave up waiting for x"},
		{"another error", errors.New("not yet"), "timed out after 0s waiting for x"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := &fatalRecorder{TB: t}
			calls := 0
			done := make(chan struct{})
			go func() {
				defer close(done)
				// A zero timeout: a condition error that is not a give-up
				// ends in a timeout after the first call.
				Eventually(f, 0, "x", func() error { calls++; return tc.err })
			}()
			<-done
			if !strings.Contains(f.msg, tc.want) || calls != 1 {
				t.Fatalf("after %d calls: %q; want one call and %q", calls, f.msg, tc.want)
			}
		})
	}
}
