package main

import (
	"bytes"
	"net"
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
