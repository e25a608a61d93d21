package command

import (
	"fmt"
	"strings"
	"time"

	"github.com/hashicorp/nomad/api"
)

// RestartedAtKey is the template group's meta key that rollout restart
// stamps. Group meta is part of the revisioned template, so a new value
// makes a new revision, and the set rolls every pod onto it; tasks also see
// it as NOMAD_META_restarted_at.
const RestartedAtKey = "restarted_at"

// RolloutRestartCommand is `nomad-statefulset rollout restart <set>`.
type RolloutRestartCommand struct {
	Meta
}

// Synopsis implements cli.Command.
func (c *RolloutRestartCommand) Synopsis() string {
	return "Restart every pod of a statefulset with a rolling update"
}

// Help implements cli.Command.
func (c *RolloutRestartCommand) Help() string {
	return strings.TrimSpace(`
Usage: nomad-statefulset rollout restart [options] <set>

  Sets the template group's meta restarted_at to the current time (RFC 3339)
  and re-registers the parent job. The group meta is part of the revisioned
  template, so this makes a new revision, and the set replaces its pods one
  by one as its update strategy says, like 'kubectl rollout restart'.

  A paused set is refused: the restart would not roll until resumed.

  The write is a check-and-set on the job's JobModifyIndex: if the job
  changed since it was read, nothing is written and the command exits 3.

Examples:

  $ nomad-statefulset rollout restart web
  $ nomad-statefulset rollout restart web && nomad-statefulset rollout status web

` + commonOptionsHelp + nomadOptionsHelp + exitCodesHelp)
}

// Run implements cli.Command.
func (c *RolloutRestartCommand) Run(args []string) int {
	f := c.FlagSet("rollout restart", FlagSetCommon|FlagSetNomad)
	pos, code, ok := c.parse("rollout restart", f, args, 1, 1, "nomad-statefulset rollout restart [options] <set>")
	if !ok {
		return code
	}
	set := pos[0]
	return c.updateParent("restart", set, func(job *api.Job) (bool, string, error) {
		if isPaused(job) {
			return false, "", fmt.Errorf("statefulset %q is paused; run 'nomad-statefulset rollout resume %s' first", set, set)
		}
		tg := job.TaskGroups[0]
		if tg.Meta == nil {
			tg.Meta = map[string]string{}
		}
		// Two restarts within one second would write the same stamp and so
		// make no new revision: the stamp always moves past the last one.
		now := c.now().UTC().Truncate(time.Second)
		if prev, err := time.Parse(time.RFC3339, tg.Meta[RestartedAtKey]); err == nil && !now.After(prev) {
			now = prev.UTC().Add(time.Second)
		}
		stamp := now.Format(time.RFC3339)
		tg.Meta[RestartedAtKey] = stamp
		return true, fmt.Sprintf("Restarting statefulset %q: group meta %s = %s", set, RestartedAtKey, stamp), nil
	})
}
