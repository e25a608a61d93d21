// Command nomad-statefulset is the nomad-statefulset daemon (`agent`) and
// the CLI that watches and steers its sets. The commands live in package
// command; this file only wires them into a hashicorp/cli command map.
package main

import (
	"fmt"
	"io"
	"os"

	"github.com/hashicorp/cli"

	"github.com/nomad-statefulset/nomad-statefulset/command"
)

func main() {
	os.Exit(run(os.Args[1:], os.Stdin, os.Stdout, os.Stderr))
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
