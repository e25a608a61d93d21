package command

import "strings"

// RolloutCommand is the bare `nomad-statefulset rollout`: it only lists its
// subcommands.
type RolloutCommand struct {
	Meta
}

// Synopsis implements cli.Command.
func (c *RolloutCommand) Synopsis() string {
	return "Follow, inspect and steer a statefulset's rollouts"
}

// Help implements cli.Command.
func (c *RolloutCommand) Help() string {
	return strings.TrimSpace(`
Usage: nomad-statefulset rollout <subcommand> [options] <set>

  Commands for a statefulset's rollouts, like 'kubectl rollout'. Reads
  (status, history) come from the nomad-statefulset agent; writes (undo,
  restart, pause, resume, approve) re-register the parent job in Nomad with
  a check-and-set on its JobModifyIndex.

Examples:

  $ nomad-statefulset rollout status web
  $ nomad-statefulset rollout history web
  $ nomad-statefulset rollout undo -to-revision 3 web

  Run 'nomad-statefulset rollout <subcommand> -help' for a subcommand's
  options.
` + exitCodesHelp)
}

// Run implements cli.Command. hashicorp/cli only gets here when no known
// subcommand was given.
func (c *RolloutCommand) Run(args []string) int {
	if len(args) > 0 {
		c.UI.Error("Error: unknown rollout subcommand " + quote(args[0]))
	} else {
		c.UI.Error("Error: missing rollout subcommand")
	}
	c.UI.Error(c.Help())
	c.UI.Error(rolloutSubcommands)
	return ExitUsage
}

// rolloutSubcommands is listed when rollout is run without a subcommand;
// for -help, hashicorp/cli appends its own list to Help.
const rolloutSubcommands = `
Subcommands:
    approve    Let one held step of a statefulset through
    history    List a statefulset's revisions, or show one
    pause      Pause a statefulset's rollout
    restart    Restart every pod of a statefulset with a rolling update
    resume     Resume a paused rollout
    status     Follow a statefulset's rollout until it is done
    undo       Roll a statefulset back to an earlier revision`

// quote renders s in double quotes for messages.
func quote(s string) string { return `"` + s + `"` }
