package consul

import (
	"context"
	"github.com/nomad-statefulset/nomad-statefulset/backend/internal/codec"
	"strings"
	"testing"
	"time"

	"github.com/nomad-statefulset/nomad-statefulset/reconciler"
)

func TestElectorConfigDefaultsSatisfyTheTimingRule(t *testing.T) {
	c := ElectorConfig{LockKey: DefaultLockKey("")}.WithDefaults()
	if err := c.Validate(); err != nil {
		t.Fatalf("the defaults are invalid: %v", err)
	}
	if c.LockKey != "nomad-statefulset/leader" {
		t.Fatalf("DefaultLockKey(\"\") = %q", c.LockKey)
	}
	// The rule: lease + stop_timeout <= lock_delay, monitor gives up inside the lease.
	if c.Lease()+c.StopTimeout > c.LockDelay {
		t.Fatalf("lease %s + stop_timeout %s > lock_delay %s", c.Lease(), c.StopTimeout, c.LockDelay)
	}
	if mon := time.Duration(c.MonitorRetries) * c.MonitorRetryTime; mon >= c.Lease() {
		t.Fatalf("monitor budget %s >= lease %s", mon, c.Lease())
	}
	if c.Lease() != 12*time.Second || c.RenewInterval() != 4*time.Second {
		t.Fatalf("lease %s, renew interval %s; want 12s and 4s", c.Lease(), c.RenewInterval())
	}
}

func TestElectorConfigValidate(t *testing.T) {
	base := ElectorConfig{LockKey: "p/leader", SessionTTL: 15 * time.Second, LockDelay: 15 * time.Second,
		MonitorRetries: 3, MonitorRetryTime: 2 * time.Second, StopTimeout: 3 * time.Second}
	cases := []struct {
		name    string
		mutate  func(c *ElectorConfig)
		wantErr []string // substrings; none means valid
	}{
		{name: "valid", mutate: func(c *ElectorConfig) {}},
		{name: "no lock key", mutate: func(c *ElectorConfig) { c.LockKey = "" }, wantErr: []string{"lock key is empty"}},
		{name: "ttl below consul minimum", mutate: func(c *ElectorConfig) { c.SessionTTL = 5 * time.Second },
			wantErr: []string{"session_ttl 5s", "10s"}},
		{name: "lock delay above consul maximum", mutate: func(c *ElectorConfig) { c.LockDelay = 90 * time.Second },
			wantErr: []string{"lock_delay 1m30s"}},
		{name: "stop timeout not below lock delay", mutate: func(c *ElectorConfig) { c.StopTimeout = 15 * time.Second },
			wantErr: []string{"lock_delay 15s must exceed the agent's stop timeout 15s", "before the lock-delay lets another agent in"}},
		{name: "monitor outlasts the lease", mutate: func(c *ElectorConfig) { c.MonitorRetries = 10 },
			wantErr: []string{"monitor_retries x monitor_retry_time = 10 x 2s = 20s", "lease", "12s"}},
		{name: "short lock delay shortens the lease", mutate: func(c *ElectorConfig) {
			c.LockDelay, c.StopTimeout, c.MonitorRetries, c.MonitorRetryTime = 5*time.Second, time.Second, 2, 2*time.Second
		}, wantErr: []string{"= 4s must be less than the lease", "= 4s"}},
		{name: "test timings", mutate: func(c *ElectorConfig) {
			c.SessionTTL, c.LockDelay, c.StopTimeout, c.MonitorRetries, c.MonitorRetryTime = 10*time.Second, 8*time.Second, 2*time.Second, 3, time.Second
		}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			c := base
			tc.mutate(&c)
			err := c.Validate()
			if len(tc.wantErr) == 0 {
				if err != nil {
					t.Fatalf("Validate: %v", err)
				}
				return
			}
			if err == nil {
				t.Fatalf("Validate accepted %+v", c)
			}
			for _, w := range tc.wantErr {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not contain %q", err, w)
				}
			}
			if !strings.HasPrefix(err.Error(), "invalid high_availability config") {
				t.Errorf("error %q does not name the config block", err)
			}
		})
	}
}

func TestRunRefusesAnInvalidConfig(t *testing.T) {
	e := NewElector(nil, ElectorConfig{LockKey: "k", LockDelay: time.Second}, nil)
	called := false
	err := e.Run(context.Background(), func(context.Context) error { called = true; return nil })
	if err == nil || !strings.Contains(err.Error(), "lock_delay 1s must exceed the agent's stop timeout 3s") {
		t.Fatalf("Run with lock_delay 1s and the default stop_timeout: error %v, want the timing rule", err)
	}
	if called || e.IsLeader() {
		t.Fatal("Run with an invalid config led")
	}
}

func TestEscapeKeepsSegmentsApart(t *testing.T) {
	seen := map[string]string{}
	for _, name := range []string{"a/b", "a%2Fb", "a", "b", ".", "..", "...", "x y", "web-0"} {
		e := escape(name)
		if strings.Contains(e, "/") || e == "." || e == ".." {
			t.Errorf("escape(%q) = %q is not a single safe path segment", name, e)
		}
		if other, dup := seen[e]; dup {
			t.Errorf("escape(%q) = escape(%q) = %q", name, other, e)
		}
		seen[e] = name
	}
}

func TestCodecRejectsWhatItCannotRead(t *testing.T) {
	raw, err := codec.EncodeRevision(reconciler.Revision{Name: "web-1", Number: 1, Data: []byte("x")})
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(string(raw), `{"v":1,`) {
		t.Fatalf("encoded revision %s does not start with the version", raw)
	}
	if _, err := codec.DecodeRevision(raw, "web-1"); err != nil {
		t.Fatalf("decoding what was encoded: %v", err)
	}
	for _, tc := range []struct{ raw, name, want string }{
		{`not json`, "web-1", "decoding JSON"},
		{`{"revision":{"name":"web-1"}}`, "web-1", "no format version"},
		{`{"v":2,"revision":{"name":"web-1"}}`, "web-1", "format version 2 is not supported"},
		{`{"v":1}`, "web-1", `no "revision" field`},
		{`{"v":1,"revision":{"name":"web-2"}}`, "web-1", "does not match its key"},
		{`{"v":1,"revision":{"name":"web-1","number":"x"}}`, "web-1", "decoding revision"},
	} {
		if _, err := codec.DecodeRevision([]byte(tc.raw), tc.name); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("codec.DecodeRevision(%s) error = %v, want it to contain %q", tc.raw, err, tc.want)
		}
	}
	if _, err := codec.DecodeStatus([]byte(`{"v":1,"status":{"replicas":"three"}}`)); err == nil {
		t.Error("decodeStatus accepted a mistyped field")
	}
	if _, err := codec.DecodeStatus([]byte(`{"v":0,"status":{}}`)); err == nil || !strings.Contains(err.Error(), "format version 0") {
		t.Error("decodeStatus accepted format version 0")
	}
}
