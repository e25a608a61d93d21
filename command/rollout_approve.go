package command

import (
	"fmt"
	"strings"
	"time"

	"github.com/hashicorp/nomad/api"

	"github.com/nomad-statefulset/nomad-statefulset/jobs"
)

// RolloutApproveCommand is `nomad-statefulset rollout approve <set>`.
type RolloutApproveCommand struct {
	Meta
}

// Synopsis implements cli.Command.
func (c *RolloutApproveCommand) Synopsis() string {
	return "Let one held step of a statefulset through"
}

// Help implements cli.Command.
func (c *RolloutApproveCommand) Help() string {
	return strings.TrimSpace(`
Usage: nomad-statefulset rollout approve [options] <set>

  Lets the one pending step of a set through: taking its leader down under
  statefulset_leader_update = "supervised" (the set waits with the
  condition WaitingForApproval), a step held because its switchover or
  disruption check failed, which this overrules, or one step of a rollout,
  repair, volume expansion or scale-down held outside the set's
  statefulset_maintenance_window (the condition WaitingForMaintenanceWindow).
  One approval answers for the whole of that one step.

  The approval goes through Nomad, so that whichever agent leads carries
  it out, once: the parent job's meta statefulset_approve is set to a new
  token (a check-and-set on the job's JobModifyIndex; if the job changed
  since it was read, nothing is written and the command exits 3). Changing
  it makes no new revision. Follow it with 'nomad-statefulset rollout
  status <set>'.

Examples:

  $ nomad-statefulset rollout approve db
  $ nomad-statefulset rollout approve db && nomad-statefulset rollout status db

` + commonOptionsHelp + nomadOptionsHelp + exitCodesHelp)
}

// Run implements cli.Command.
func (c *RolloutApproveCommand) Run(args []string) int {
	f := c.FlagSet("rollout approve", FlagSetCommon|FlagSetNomad)
	pos, code, ok := c.parse("rollout approve", f, args, 1, 1, "nomad-statefulset rollout approve [options] <set>")
	if !ok {
		return code
	}
	set := pos[0]
	return c.updateParent("approve", set, func(job *api.Job) (bool, string, error) {
		token := c.now().UTC().Format(time.RFC3339Nano)
		if strings.TrimSpace(job.Meta[jobs.KeyApprove]) == token {
			// Two approvals within one clock tick must still differ, or
			// the second would approve nothing.
			token = c.now().UTC().Add(time.Nanosecond).Format(time.RFC3339Nano)
		}
		job.Meta[jobs.KeyApprove] = token
		return true, fmt.Sprintf("Approving the pending step of statefulset %q (meta %s = %s)", set, jobs.KeyApprove, token), nil
	})
}
