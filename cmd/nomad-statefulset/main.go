// Command nomad-statefulset is the nomad-statefulset daemon (`agent`) and
// the CLI that watches and steers its sets. The commands live in package
// command; this file only wires them into a hashicorp/cli command map.
package main

import (
	"fmt"
	"io"
	"os"
	"runtime/debug"
	"strconv"
	"strings"

	"github.com/hashicorp/cli"

	"github.com/nomad-statefulset/nomad-statefulset/command"
)

func main() {
	applyMemoryLimit(os.Args[1:], os.Getenv("GOMEMLIMIT"), readCgroupMemoryMax())
	os.Exit(run(os.Args[1:], os.Stdin, os.Stdout, os.Stderr))
}

// applyMemoryLimit sets the daemon's default soft memory limit when args
// run the agent; the short-lived CLI commands keep Go's default.
func applyMemoryLimit(args []string, env string, cgroupMax int64) {
	if len(args) == 0 || args[0] != "agent" {
		return
	}
	if limit, ok := defaultMemoryLimit(env, cgroupMax); ok {
		debug.SetMemoryLimit(limit)
	}
}

// agentMemoryLimit is the daemon's default soft memory limit. Go's collector
// otherwise lets the heap grow to twice what is live before it collects
// (GOGC=100), so a daemon whose live heap is 60 MB peaks well above 150 MB
// of RSS. Near this limit the collector runs earlier instead; it is soft,
// so a daemon whose live heap needs more still gets it (the collector then
// uses at most about half a core). 256 MiB is about five times the agent's
// live heap at 1,000 sets × 10 replicas (40–55 MB, BENCHMARKS.md).
const agentMemoryLimit = 256 << 20

// defaultMemoryLimit decides the daemon's soft memory limit: none when the
// operator set GOMEMLIMIT (the runtime has applied it already); else
// agentMemoryLimit, or 90% of the container's memory limit (cgroupMax,
// bytes, 0 when there is none) when that is lower, leaving room for the
// memory Go does not count.
func defaultMemoryLimit(env string, cgroupMax int64) (int64, bool) {
	if env != "" {
		return 0, false
	}
	limit := int64(agentMemoryLimit)
	if cgroupMax > 0 && cgroupMax/10*9 < limit {
		limit = cgroupMax / 10 * 9
	}
	return limit, true
}

// readCgroupMemoryMax returns the cgroup v2 memory limit of this process in
// bytes, or 0 when there is none ("max") or it cannot be read.
func readCgroupMemoryMax() int64 {
	b, err := os.ReadFile("/sys/fs/cgroup/memory.max")
	if err != nil {
		return 0
	}
	n, err := strconv.ParseInt(strings.TrimSpace(string(b)), 10, 64)
	if err != nil || n <= 0 {
		return 0
	}
	return n
}

// run executes the CLI with the given arguments and streams and returns the
// exit code; main is kept to os.Exit so tests can drive run directly.
func run(args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	ui := &cli.BasicUi{Reader: stdin, Writer: stdout, ErrorWriter: stderr}
	meta := command.Meta{UI: ui}
	c := &cli.CLI{
		Name:        "nomad-statefulset",
		Version:     command.VersionString(),
		Args:        args,
		Commands:    commands(meta, stdin),
		HelpFunc:    cli.BasicHelpFunc("nomad-statefulset"),
		HelpWriter:  stdout,
		ErrorWriter: stderr,
	}
	code, err := c.Run()
	if err != nil {
		fmt.Fprintf(stderr, "Error: %v\n", err)
		return command.ExitError
	}
	// hashicorp/cli answers an unknown or missing command with 127 and the
	// command list; to scripts that is a usage error like any other.
	if code == 127 {
		if len(args) > 0 && !strings.HasPrefix(args[0], "-") {
			fmt.Fprintf(stderr, "Error: unknown command %q; the commands are listed above\n", args[0])
		}
		return command.ExitUsage
	}
	return code
}

// commands is the command map. Every command gets its own copy of meta, so
// flag values never leak between commands.
func commands(meta command.Meta, stdin io.Reader) map[string]cli.CommandFactory {
	return map[string]cli.CommandFactory{
		"agent": func() (cli.Command, error) {
			return &command.AgentCommand{Meta: meta}, nil
		},

		"status": func() (cli.Command, error) {
			return &command.StatusCommand{Meta: meta}, nil
		},
		"rollout": func() (cli.Command, error) {
			return &command.RolloutCommand{Meta: meta}, nil
		},
		"rollout status": func() (cli.Command, error) {
			return &command.RolloutStatusCommand{Meta: meta}, nil
		},
		"rollout history": func() (cli.Command, error) {
			return &command.RolloutHistoryCommand{Meta: meta}, nil
		},
		"rollout undo": func() (cli.Command, error) {
			return &command.RolloutUndoCommand{Meta: meta}, nil
		},
		"rollout restart": func() (cli.Command, error) {
			return &command.RolloutRestartCommand{Meta: meta}, nil
		},
		"rollout pause": func() (cli.Command, error) {
			return &command.RolloutPauseCommand{Meta: meta}, nil
		},
		"rollout resume": func() (cli.Command, error) {
			return &command.RolloutPauseCommand{Meta: meta, Resume: true}, nil
		},
		"rollout approve": func() (cli.Command, error) {
			return &command.RolloutApproveCommand{Meta: meta}, nil
		},
		"pod": func() (cli.Command, error) {
			return &command.PodCommand{Meta: meta}, nil
		},
		"pod replace": func() (cli.Command, error) {
			return &command.PodReplaceCommand{Meta: meta}, nil
		},
		"scale": func() (cli.Command, error) {
			return &command.ScaleCommand{Meta: meta}, nil
		},
		"validate": func() (cli.Command, error) {
			return &command.ValidateCommand{Meta: meta, Stdin: stdin}, nil
		},
		"version": func() (cli.Command, error) {
			return &command.VersionCommand{Meta: meta}, nil
		},
	}
}
