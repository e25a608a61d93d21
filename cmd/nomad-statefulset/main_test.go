package main

import (
	"bytes"
	"math"
	"net"
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
		"rollout restart", "rollout pause", "rollout resume", "scale", "validate", "version",
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
	if code != command.ExitUsage || !strings.Contains(errOut, "Available commands are") {
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
