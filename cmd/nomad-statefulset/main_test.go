package main

import (
	"bytes"
	"encoding/json"
	"math"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"runtime/debug"
	"strings"
	"testing"

	"github.com/nomad-statefulset/nomad-statefulset/command"
)

func runCLI(t *testing.T, args ...string) (int, string, string) {
	t.Helper()
	var out, errOut bytes.Buffer
	code := run(args, strings.NewReader(""), &out, &errOut)
	return code, out.String(), errOut.String()
}

func TestEveryVerbIsWired(t *testing.T) {
	cmds := commands(command.Meta{}, nil)
	for _, verb := range []string{
		"agent", "status", "rollout", "rollout status", "rollout history", "rollout undo",
		"rollout restart", "rollout pause", "rollout resume", "rollout approve", "scale", "validate", "version",
	} {
		f, ok := cmds[verb]
		if !ok {
			t.Errorf("verb %q missing from the command map", verb)
			continue
		}
		c, err := f()
		if err != nil || c.Synopsis() == "" || !strings.Contains(c.Help(), "nomad-statefulset "+verb) {
			t.Errorf("verb %q: err %v, synopsis %q", verb, err, c.Synopsis())
		}
	}
}

func TestTopLevel(t *testing.T) {
	code, out, _ := runCLI(t, "version")
	if code != command.ExitOK || !strings.HasPrefix(out, "nomad-statefulset v") {
		t.Errorf("version: exit %d, out %q", code, out)
	}
	code, out, _ = runCLI(t, "--version")
	if code != command.ExitOK || !strings.HasPrefix(out, "nomad-statefulset v") {
		t.Errorf("--version: exit %d, out %q", code, out)
	}
	code, _, errOut := runCLI(t)
	if code != command.ExitUsage || !strings.Contains(errOut, "rollout") || !strings.Contains(errOut, "validate") {
		t.Errorf("no command: exit %d, stderr %q", code, errOut)
	}
	code, _, errOut = runCLI(t, "frobnicate")
	if code != command.ExitUsage || !strings.Contains(errOut, "Available commands are") || !strings.Contains(errOut, `unknown command "frobnicate"`) {
		t.Errorf("unknown command: exit %d, stderr %q", code, errOut)
	}
	code, out, _ = runCLI(t, "rollout", "status", "-h")
	if code != command.ExitOK || !strings.Contains(out, "Usage: nomad-statefulset rollout status") {
		t.Errorf("help: exit %d, out %q", code, out)
	}
	code, out, _ = runCLI(t, "rollout", "-help")
	if code != command.ExitOK || !strings.Contains(out, "Subcommands:") || !strings.Contains(out, "undo") {
		t.Errorf("rollout help: exit %d, out %q", code, out)
	}
}

func TestUnreachableAgentThroughTheCLI(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := "http://" + ln.Addr().String()
	ln.Close()
	for _, args := range [][]string{
		{"status", "-address", addr},
		{"status", "-address", addr, "web"},
		{"rollout", "history", "-address", addr, "web"},
		{"rollout", "status", "-address", addr, "-nomad-address", addr, "web"},
	} {
		code, out, errOut := runCLI(t, args...)
		if code != command.ExitUnreachable {
			t.Errorf("%v: exit %d, want %d", args, code, command.ExitUnreachable)
		}
		if out != "" || !strings.Contains(errOut, "cannot reach the nomad-statefulset agent at "+addr) {
			t.Errorf("%v: stdout %q stderr %q", args, out, errOut)
		}
		if strings.Contains(errOut, "goroutine") || strings.Contains(errOut, "panic") {
			t.Errorf("%v: crash output %q", args, errOut)
		}
	}
}

// TestDefaultMemoryLimit: the daemon sets a soft memory limit unless the
// operator chose one, and stays under a container's limit.
func TestDefaultMemoryLimit(t *testing.T) {
	cases := []struct {
		name      string
		env       string
		cgroupMax int64
		want      int64
		set       bool
	}{
		{"GOMEMLIMIT set by the operator", "1GiB", 0, 0, false},
		{"GOMEMLIMIT=off is a choice too", "off", 64 << 20, 0, false},
		{"no container limit", "", 0, agentMemoryLimit, true},
		{"a container limit above the default", "", 4 << 30, agentMemoryLimit, true},
		{"a container limit below the default", "", 200 << 20, 200 << 20 / 10 * 9, true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got, set := defaultMemoryLimit(tc.env, tc.cgroupMax)
			if got != tc.want || set != tc.set {
				t.Fatalf("defaultMemoryLimit(%q, %d) = %d, %v; want %d, %v", tc.env, tc.cgroupMax, got, set, tc.want, tc.set)
			}
		})
	}
}

// TestApplyMemoryLimit: `agent` gets the limit, other commands and an
// operator's GOMEMLIMIT are left alone.
func TestApplyMemoryLimit(t *testing.T) {
	orig := debug.SetMemoryLimit(-1)
	defer debug.SetMemoryLimit(orig)
	const unset = math.MaxInt64
	cases := []struct {
		args []string
		env  string
		want int64
	}{
		{[]string{"status"}, "", unset},
		{nil, "", unset},
		{[]string{"agent", "-dev"}, "1GiB", unset},
		{[]string{"agent", "-dev"}, "", agentMemoryLimit},
	}
	for _, tc := range cases {
		debug.SetMemoryLimit(unset)
		applyMemoryLimit(tc.args, tc.env, 0)
		if got := debug.SetMemoryLimit(-1); got != tc.want {
			t.Errorf("args %v, GOMEMLIMIT %q: limit %d, want %d", tc.args, tc.env, got, tc.want)
		}
	}
}

// TestVersionIsStampedAtBuild: a binary built as `make build` and `make
// release` build it, with -ldflags -X for the version and the commit, prints
// them, with the Go version, in `version` and `version -json`.
func TestVersionIsStampedAtBuild(t *testing.T) {
	bin := filepath.Join(t.TempDir(), "nomad-statefulset")
	pkg := "github.com/nomad-statefulset/nomad-statefulset/command"
	build := exec.Command("go", "build", "-ldflags", "-X "+pkg+".Version=v9.8.7-rc1 -X "+pkg+".GitCommit=abc1234", "-o", bin, ".")
	build.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	out, err := exec.Command(bin, "version").CombinedOutput()
	if err != nil {
		t.Fatalf("version: %v\n%s", err, out)
	}
	want := "nomad-statefulset v9.8.7-rc1 (commit abc1234, " + runtime.Version() + ")\n"
	if string(out) != want {
		t.Fatalf("version printed %q, want %q", out, want)
	}
	out, err = exec.Command(bin, "version", "-json").Output()
	if err != nil {
		t.Fatalf("version -json: %v", err)
	}
	var v struct {
		Version   string `json:"version"`
		GitCommit string `json:"git_commit"`
		GoVersion string `json:"go_version"`
	}
	if err := json.Unmarshal(out, &v); err != nil || v.Version != "9.8.7-rc1" || v.GitCommit != "abc1234" || v.GoVersion != runtime.Version() {
		t.Fatalf("version -json: %s (%v)", out, err)
	}
}

// TestSystemdUnitExample: examples/deploy/nomad-statefulset.service runs the
// agent the way the CLI parses it, reloads with SIGHUP (which the agent
// handles) and restarts on failure.
func TestSystemdUnitExample(t *testing.T) {
	b, err := os.ReadFile(filepath.Join("..", "..", "examples", "deploy", "nomad-statefulset.service"))
	if err != nil {
		t.Fatal(err)
	}
	keys := map[string]string{}
	section := ""
	for _, line := range strings.Split(string(b), "\n") {
		line = strings.TrimSpace(line)
		switch {
		case line == "" || strings.HasPrefix(line, "#"):
		case strings.HasPrefix(line, "["):
			section = strings.Trim(line, "[]")
		default:
			k, v, ok := strings.Cut(line, "=")
			if !ok {
				t.Fatalf("not a key=value line in [%s]: %q", section, line)
			}
			keys[section+"."+k] = v
		}
	}
	exec := strings.Fields(keys["Service.ExecStart"])
	if len(exec) != 4 || filepath.Base(exec[0]) != "nomad-statefulset" || exec[1] != "agent" || exec[2] != "-config" {
		t.Fatalf("ExecStart %q, want <bin>/nomad-statefulset agent -config <dir>", keys["Service.ExecStart"])
	}
	// The agent command accepts these arguments: a missing config directory
	// is reported as such, not as a usage error.
	code, _, errOut := runCLI(t, "agent", "-config", filepath.Join(t.TempDir(), "missing"))
	if code != command.ExitError || !strings.Contains(errOut, "Invalid configuration") {
		t.Fatalf("agent -config <dir>: exit %d, %q; want a configuration error, not a usage error", code, errOut)
	}
	for k, want := range map[string]string{
		"Service.ExecReload": "/bin/kill -HUP $MAINPID", "Service.Restart": "on-failure",
		"Install.WantedBy": "multi-user.target", "Unit.After": "network-online.target",
	} {
		if keys[k] != want {
			t.Errorf("%s = %q, want %q", k, keys[k], want)
		}
	}
}
