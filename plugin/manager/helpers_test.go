package manager

import (
	"context"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/nomad-statefulset/nomad-statefulset/agent/config"
	"github.com/nomad-statefulset/nomad-statefulset/plugin"
	"github.com/nomad-statefulset/nomad-statefulset/plugin/builtin/hostvolume"
)

// deadline is the generous bound of every wait in these tests: long enough
// for a loaded 2-core CI machine, and only reached when something is broken.
const deadline = 60 * time.Second

// loadConfig writes src to agent.hcl in a new dir and loads it, so that
// plugin blocks carry real file positions.
func loadConfig(t *testing.T, src string) (*config.Config, string) {
	t.Helper()
	path := filepath.Join(t.TempDir(), "agent.hcl")
	if err := os.WriteFile(path, []byte(src), 0o600); err != nil {
		t.Fatalf("writing the config: %v", err)
	}
	cfg, err := config.Load(path)
	if err != nil {
		t.Fatalf("loading the config: %v\n%s", err, src)
	}
	return cfg, path
}

func testLogger(t *testing.T) hclog.Logger {
	return hclog.New(&hclog.LoggerOptions{Name: t.Name(), Level: hclog.Debug, Output: testWriter{t}})
}

// testWriter sends the log to t.Log, so it shows only for failing tests.
type testWriter struct{ t *testing.T }

func (w testWriter) Write(p []byte) (int, error) {
	w.t.Log(strings.TrimRight(string(p), "\n"))
	return len(p), nil
}

func newManager(t *testing.T, opts Options) *Manager {
	t.Helper()
	opts.Logger = testLogger(t)
	if opts.Builtins == nil {
		// The built-in is declared by every config; these tests do not
		// call it, so it needs no Nomad.
		opts.Builtins = map[string]plugin.Factory{config.BuiltinHostVolume: hostvolume.Factory(nil)}
	}
	m := New(opts)
	t.Cleanup(m.Close)
	return m
}

func start(t *testing.T, m *Manager, cfg *config.Config) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), deadline)
	defer cancel()
	if err := m.Start(ctx, ConfigOf(cfg)); err != nil {
		t.Fatalf("Start: %v", err)
	}
}

// eventually polls cond until it holds or the deadline passes.
func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	end := time.Now().Add(deadline)
	for !cond() {
		if time.Now().After(end) {
			t.Fatalf("gave up after %s waiting for %s", deadline, what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// readPID reads a pid_file written by the test plugin.
func readPID(t *testing.T, path string) int {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("reading %s: %v", path, err)
	}
	pid, err := strconv.Atoi(string(b))
	if err != nil {
		t.Fatalf("pid file %s: %v", path, err)
	}
	return pid
}

func kill(t *testing.T, pid int) {
	t.Helper()
	if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
		t.Fatalf("killing plugin process %d: %v", pid, err)
	}
}

func statusOf(t *testing.T, m *Manager, name string) Status {
	t.Helper()
	for _, s := range m.Status() {
		if s.Name == name {
			return s
		}
	}
	t.Fatalf("no status for plugin %q in %+v", name, m.Status())
	return Status{}
}

var testPod = plugin.Pod{Namespace: "default", Set: "web", Ordinal: 2, Name: "web-2", Revision: "web-7d9f"}
