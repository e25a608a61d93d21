package e2e

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/nomad-statefulset/nomad-statefulset/internal/testagent"
)

// defaultProfileSeconds is how long a phase's CPU profile runs unless
// NSS_BENCH_SCALE_PROFILE_SECONDS says otherwise: about the shortest create
// phase, so that a profile covers the same work on each side. A longer one
// covers a whole create phase, where the sides' total CPU differs.
const defaultProfileSeconds = 25

// profileSeconds is NSS_BENCH_SCALE_PROFILE_SECONDS, or
// defaultProfileSeconds.
func profileSeconds(b *testing.B) int {
	return envInt(b, "NSS_BENCH_SCALE_PROFILE_SECONDS", defaultProfileSeconds)
}

// profileNomad starts a CPU profile of a Nomad agent, or of the daemon
// (both started with enable_debug, both serving /debug/pprof/profile), into
// dir/name.pprof and returns a function that waits for it. It is the
// NSS_BENCH_SCALE_PROFILE knob: it tells where a side's Nomad spends its
// CPU, for example on the daemon's event stream, and where the daemon does.
func profileNomad(b *testing.B, addr, dir, name string) (wait func()) {
	b.Helper()
	seconds := profileSeconds(b)
	done := make(chan error, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Duration(seconds)*time.Second)
		defer cancel()
		url := fmt.Sprintf("%s/debug/pprof/profile?seconds=%d", addr, seconds)
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
		if err != nil {
			done <- err
			return
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			done <- fmt.Errorf("profiling %s: %w", addr, err)
			return
		}
		defer resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			body, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
			done <- fmt.Errorf("profiling %s: %s: %s", addr, resp.Status, body)
			return
		}
		f, err := os.Create(filepath.Join(dir, name+".pprof"))
		if err != nil {
			done <- err
			return
		}
		if _, err := io.Copy(f, resp.Body); err != nil {
			f.Close()
			done <- fmt.Errorf("writing the profile of %s: %w", addr, err)
			return
		}
		done <- f.Close()
	}()
	return func() {
		if err := <-done; err != nil {
			b.Errorf("NSS_BENCH_SCALE_PROFILE: %v", err)
		}
	}
}

// enableDaemonDebug turns on the daemon's /debug/pprof endpoints (http {
// enable_debug }) in the config NewDaemon wrote, before it starts.
func enableDaemonDebug(b *testing.B, d *Daemon) {
	b.Helper()
	raw, err := os.ReadFile(d.ConfigPath)
	if err != nil {
		b.Fatal(err)
	}
	cfg := strings.Replace(string(raw), "http {\n", "http {\n  enable_debug = true\n", 1)
	if cfg == string(raw) {
		b.Fatalf("NSS_BENCH_SCALE_PROFILE: no http block in the daemon's config %s", d.ConfigPath)
	}
	if err := os.WriteFile(d.ConfigPath, []byte(cfg), 0o644); err != nil {
		b.Fatal(err)
	}
}

// machineCPU reads the machine's CPU time so far.
func machineCPU(b *testing.B) testagent.MachineCPU {
	b.Helper()
	m, err := testagent.ReadMachineCPU()
	if err != nil {
		b.Fatal(err)
	}
	return m
}

// consulWrites reads a Consul server's applied raft index: the writes it
// has made, the daemon's KV writes among them.
func consulWrites(b *testing.B, c *testagent.ConsulAgent) uint64 {
	b.Helper()
	self, err := c.Client.Agent().Self()
	if err != nil {
		b.Fatalf("reading consul's raft index: %v", err)
	}
	raft, _ := self["Stats"]["raft"].(map[string]any)
	s, _ := raft["applied_index"].(string)
	n, err := strconv.ParseUint(s, 10, 64)
	if err != nil {
		b.Fatalf("consul's Stats.raft.applied_index is %q: %v", s, err)
	}
	return n
}
