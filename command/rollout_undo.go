package command

import (
	"bytes"
	"context"
	"fmt"
	"strings"

	"github.com/hashicorp/nomad/api"

	"github.com/nomad-statefulset/nomad-statefulset/client"
	"github.com/nomad-statefulset/nomad-statefulset/jobs"
)

// RolloutUndoCommand is `nomad-statefulset rollout undo <set>`.
type RolloutUndoCommand struct {
	Meta
}

// Synopsis implements cli.Command.
func (c *RolloutUndoCommand) Synopsis() string {
	return "Roll a statefulset back to an earlier revision"
}

// Help implements cli.Command.
func (c *RolloutUndoCommand) Help() string {
	return strings.TrimSpace(`
Usage: nomad-statefulset rollout undo [options] <set>

  Re-registers the parent job with the template of an earlier revision: its
  task group, its meta keys other than statefulset_*, and its placement
  fields. The statefulset_* annotations, and so the replica count, partition
  and pause, are left as they are. The agent recognises the template as
  that revision (a rollback gives it a new number) and rolls the pods back,
  replacing pods stuck not-ready at the bad revision without hand work.

  The revision and its template are read from the agent; the write is a
  check-and-set on the job's JobModifyIndex in Nomad: if the job changed
  since it was read, nothing is written and the command exits 3.

Examples:

  $ nomad-statefulset rollout undo web
  $ nomad-statefulset rollout undo -to-revision 2 web
  $ nomad-statefulset rollout undo web && nomad-statefulset rollout status web

` + commonOptionsHelp + agentAddressHelp + nomadOptionsHelp + `
Rollout Undo Options:

  -to-revision=<number>
    The revision to roll back to, as listed by 'rollout history'. Default:
    0, the revision before the update revision.
` + exitCodesHelp)
}

// Run implements cli.Command.
func (c *RolloutUndoCommand) Run(args []string) int {
	var to int64
	f := c.FlagSet("rollout undo", FlagSetAll)
	f.Int64Var(&to, "to-revision", 0, "")
	pos, code, ok := c.parse("rollout undo", f, args, 1, 1, "nomad-statefulset rollout undo [options] <set>")
	if !ok {
		return code
	}
	if to < 0 {
		return c.usageError("rollout undo", "-to-revision must be a revision number >= 1, or 0 for the previous one; got %d", to)
	}
	ac, err := c.AgentClient()
	if err != nil {
		return c.report(err)
	}
	ns, name := c.Namespace(), pos[0]
	ctx := context.Background()
	d, err := ac.GetSet(ctx, ns, name)
	if err != nil {
		return c.report(setNotFound(ns, name, err))
	}
	if to == 0 {
		if to, err = previousRevision(d); err != nil {
			return c.report(err)
		}
	}
	rev, err := fetchRevision(ctx, ac, ns, name, to)
	if err != nil {
		return c.report(err)
	}
	target := []byte(rev.Template)

	return c.updateParent("undo", name, func(job *api.Job) (bool, string, error) {
		cur, err := jobs.RevisionData(job)
		if err == nil && bytes.Equal(cur, target) {
			return false, fmt.Sprintf("Statefulset %q already has the template of revision %d (%s); nothing to do", name, rev.Number, rev.Name), nil
		}
		next, err := jobs.ApplyRevision(job, target)
		if err != nil {
			return false, "", fmt.Errorf("rolling %q back to revision %d: %w", name, rev.Number, err)
		}
		// The agent recognises a rollback by equal revision data. If the
		// re-registered template would not reproduce it exactly, the set
		// still rolls to that content, but as a new revision: say so.
		if got, err := jobs.RevisionData(next); err != nil || !bytes.Equal(got, target) {
			c.UI.Warn(fmt.Sprintf("Warning: the template re-registered does not reproduce revision %d byte for byte; the agent will record it as a new revision", rev.Number))
		}
		*job = *next
		return true, fmt.Sprintf("Rolling statefulset %q back to revision %d (%s, from job version %d)", name, rev.Number, rev.Name, rev.JobVersion), nil
	})
}

// previousRevision is the default undo target, as in kubectl: the
// highest-numbered revision other than the update revision.
func previousRevision(d *client.SetDetail) (int64, error) {
	revs := sortedRevisions(d.Revisions)
	for i := len(revs) - 1; i >= 0; i-- {
		if revs[i].Name != d.Status.UpdateRevision {
			return revs[i].Number, nil
		}
	}
	return 0, fmt.Errorf("statefulset %q has no revision before %s to roll back to", d.Name, orDash(d.Status.UpdateRevision))
}
