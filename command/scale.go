package command

import (
	"fmt"
	"strconv"
	"strings"

	"github.com/hashicorp/nomad/api"

	"github.com/nomad-statefulset/nomad-statefulset/jobs"
)

// ScaleCommand is `nomad-statefulset scale <set> <replicas>`.
type ScaleCommand struct {
	Meta
}

// Synopsis implements cli.Command.
func (c *ScaleCommand) Synopsis() string {
	return "Set the number of replicas of a statefulset"
}

// Help implements cli.Command.
func (c *ScaleCommand) Help() string {
	return strings.TrimSpace(`
Usage: nomad-statefulset scale [options] <set> <replicas>

  Sets the parent job's meta statefulset_replicas to <replicas> and
  re-registers the job in Nomad. The annotations are not part of the
  revisioned template, so scaling never starts a rollout: new ordinals come
  up at the update revision, removed ones go from the highest ordinal down.

  The write is a check-and-set on the job's JobModifyIndex: if the job
  changed since it was read, nothing is written and the command exits 3.

Examples:

  $ nomad-statefulset scale web 5
  $ nomad-statefulset scale -namespace prod db 0

` + commonOptionsHelp + nomadOptionsHelp + exitCodesHelp)
}

// Run implements cli.Command.
func (c *ScaleCommand) Run(args []string) int {
	f := c.FlagSet("scale", FlagSetCommon|FlagSetNomad)
	pos, code, ok := c.parse("scale", f, args, 2, 2, "nomad-statefulset scale [options] <set> <replicas>")
	if !ok {
		return code
	}
	name := pos[0]
	n, err := strconv.Atoi(pos[1])
	if err != nil || n < 0 {
		return c.usageError("scale", "replicas must be an integer >= 0, not %q", pos[1])
	}
	return c.updateParent("scale", name, func(job *api.Job) (bool, string, error) {
		raw, had := job.Meta[jobs.KeyReplicas]
		old := strings.TrimSpace(raw)
		if !had {
			old = "1 (the default)"
		}
		if had && old == strconv.Itoa(n) {
			return false, fmt.Sprintf("Statefulset %q already has %d replicas; nothing to do", name, n), nil
		}
		job.Meta[jobs.KeyReplicas] = strconv.Itoa(n)
		return true, fmt.Sprintf("Scaling statefulset %q from %s to %d replicas", name, old, n), nil
	})
}
