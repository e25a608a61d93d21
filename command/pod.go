package command

import (
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/hashicorp/nomad/api"

	"github.com/nomad-statefulset/nomad-statefulset/jobs"
)

// PodCommand is the bare `nomad-statefulset pod`: it only lists its
// subcommands.
type PodCommand struct {
	Meta
}

// Synopsis implements cli.Command.
func (c *PodCommand) Synopsis() string {
	return "Act on one pod (ordinal) of a statefulset"
}

// Help implements cli.Command.
func (c *PodCommand) Help() string {
	return strings.TrimSpace(`
Usage: nomad-statefulset pod <subcommand> [options] <set> <ordinal>

  Commands for one pod of a statefulset; the subcommands are listed below.
` + exitCodesHelp)
}

// Run implements cli.Command; hashicorp/cli only gets here when no known
// subcommand was given.
func (c *PodCommand) Run(args []string) int {
	if len(args) > 0 {
		c.UI.Error("Error: unknown pod subcommand " + quote(args[0]))
	} else {
		c.UI.Error("Error: missing pod subcommand")
	}
	c.UI.Error(c.Help())
	return ExitUsage
}

// PodReplaceCommand is `nomad-statefulset pod replace <set> <ordinal>`.
type PodReplaceCommand struct {
	Meta
}

// Synopsis implements cli.Command.
func (c *PodReplaceCommand) Synopsis() string {
	return "Recreate one pod of a statefulset, on its volume or on a new one"
}

// Help implements cli.Command.
func (c *PodReplaceCommand) Help() string {
	return strings.TrimSpace(`
Usage: nomad-statefulset pod replace [options] <set> <ordinal>

  Asks the daemon to recreate one pod, like 'kubectl delete pod': the
  leader runs the pre_delete hooks, stops the child job and, once it is
  gone, creates it again. Without -new-volume the pod comes back on its own
  volumes, with its data: this restarts one member without editing the set.
  With -new-volume its volumes are deleted once the pod is gone and fresh,
  empty ones are created, wherever they can be placed: the way to rebuild an
  ordinal whose node is gone for good. Its data is lost.

  The request goes through Nomad, so that whichever agent leads carries it
  out, once: the parent job's meta statefulset_pod_replace_<ordinal> is set
  to a new token (a check-and-set on the job's JobModifyIndex). Follow it
  with 'nomad-statefulset status <set>'.

  It asks for confirmation unless -yes is given.

Examples:

  $ nomad-statefulset pod replace web 1
  $ nomad-statefulset pod replace -new-volume -yes db 2

Pod replace options:

  -new-volume
    Discard the pod's volumes and create fresh ones.

  -yes
    Do not ask for confirmation.

` + commonOptionsHelp + nomadOptionsHelp + exitCodesHelp)
}

// Run implements cli.Command.
func (c *PodReplaceCommand) Run(args []string) int {
	f := c.FlagSet("pod replace", FlagSetCommon|FlagSetNomad)
	var newVolume, yes bool
	f.BoolVar(&newVolume, "new-volume", false, "")
	f.BoolVar(&yes, "yes", false, "")
	pos, code, ok := c.parse("pod replace", f, args, 2, 2, "nomad-statefulset pod replace [options] <set> <ordinal>")
	if !ok {
		return code
	}
	set := pos[0]
	ord, err := strconv.Atoi(pos[1])
	if err != nil || ord < 0 {
		return c.usageError("pod replace", "ordinal must be an integer >= 0, not %q", pos[1])
	}
	pod := fmt.Sprintf("%s-%d", set, ord)
	if !yes {
		what := "stopped (after its pre_delete hooks) and created again on its own volumes, with its data"
		if newVolume {
			what = "stopped (after its pre_delete hooks), its volumes DELETED with their data, and created again on new, empty volumes"
		}
		answer, err := c.UI.Ask(fmt.Sprintf("Pod %s will be %s. Type 'yes' to go on:", pod, what))
		if err != nil {
			return c.usageError("pod replace", "no confirmation could be read (%v); pass -yes to replace without asking", err)
		}
		if strings.TrimSpace(answer) != "yes" {
			c.UI.Error("Not replacing " + pod + ": not confirmed")
			return ExitError
		}
	}
	return c.updateParent("pod replace", set, func(job *api.Job) (bool, string, error) {
		token := c.now().UTC().Format(time.RFC3339Nano)
		key := jobs.KeyPodReplacePrefix + strconv.Itoa(ord)
		if prev, _, _ := strings.Cut(job.Meta[key], ","); prev == token {
			// Two requests within one clock tick must still differ.
			token = c.now().UTC().Add(time.Nanosecond).Format(time.RFC3339Nano)
		}
		value := token
		if newVolume {
			value += jobs.PodReplaceNewVolume
		}
		job.Meta[key] = value
		msg := fmt.Sprintf("Replacing pod %s of statefulset %q on its volumes (request %s)", pod, set, token)
		if newVolume {
			msg = fmt.Sprintf("Replacing pod %s of statefulset %q on new volumes (request %s)", pod, set, token)
		}
		return true, msg, nil
	})
}
