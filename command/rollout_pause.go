package command

import (
	"fmt"
	"strings"

	"github.com/hashicorp/nomad/api"

	"github.com/nomad-statefulset/nomad-statefulset/jobs"
)

// RolloutPauseCommand is `nomad-statefulset rollout pause|resume <set>`;
// Resume selects which.
type RolloutPauseCommand struct {
	Meta
	// Resume makes the command `rollout resume`: statefulset_paused=false.
	Resume bool
}

func (c *RolloutPauseCommand) verb() string {
	if c.Resume {
		return "resume"
	}
	return "pause"
}

// Synopsis implements cli.Command.
func (c *RolloutPauseCommand) Synopsis() string {
	if c.Resume {
		return "Resume a paused rollout"
	}
	return "Pause a statefulset's rollout"
}

// Help implements cli.Command.
func (c *RolloutPauseCommand) Help() string {
	if c.Resume {
		return strings.TrimSpace(`
Usage: nomad-statefulset rollout resume [options] <set>

  Sets the parent job's meta statefulset_paused to "false", so that pods
  move to the update revision again. It does nothing if the set is not
  paused.

  The write is a check-and-set on the job's JobModifyIndex: if the job
  changed since it was read, nothing is written and the command exits 3.

Examples:

  $ nomad-statefulset rollout resume web
  $ nomad-statefulset rollout resume web && nomad-statefulset rollout status web

` + commonOptionsHelp + nomadOptionsHelp + exitCodesHelp)
	}
	return strings.TrimSpace(`
Usage: nomad-statefulset rollout pause [options] <set>

  Sets the parent job's meta statefulset_paused to "true". While paused, the
  set keeps its replica count (failed pods are still replaced, scaling still
  works) but no pod is moved to a new revision. Resume with
  'nomad-statefulset rollout resume'.

  The write is a check-and-set on the job's JobModifyIndex: if the job
  changed since it was read, nothing is written and the command exits 3.

Examples:

  $ nomad-statefulset rollout pause web

` + commonOptionsHelp + nomadOptionsHelp + exitCodesHelp)
}

// Run implements cli.Command.
func (c *RolloutPauseCommand) Run(args []string) int {
	name := "rollout " + c.verb()
	f := c.FlagSet(name, FlagSetCommon|FlagSetNomad)
	pos, code, ok := c.parse(name, f, args, 1, 1, "nomad-statefulset "+name+" [options] <set>")
	if !ok {
		return code
	}
	set := pos[0]
	want := !c.Resume
	return c.updateParent(c.verb(), set, func(job *api.Job) (bool, string, error) {
		paused := isPaused(job)
		if paused == want {
			if want {
				return false, fmt.Sprintf("Statefulset %q is already paused; nothing to do", set), nil
			}
			return false, fmt.Sprintf("Statefulset %q is not paused; nothing to do", set), nil
		}
		if want {
			job.Meta[jobs.KeyPaused] = "true"
			return true, fmt.Sprintf("Pausing the rollout of statefulset %q", set), nil
		}
		job.Meta[jobs.KeyPaused] = "false"
		return true, fmt.Sprintf("Resuming the rollout of statefulset %q", set), nil
	})
}
