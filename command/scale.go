package command

import (
	"errors"
	"fmt"
	"math"
	"slices"
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
  revisioned template, so scaling never starts a rollout. Removed ordinals
  go from the highest ordinal down. New ordinals get the revision the
  Kubernetes controller gives them: the update revision, except below a
  RollingUpdate's partition, where they get the current revision, and
  while paused, where they get the current revision (or the update
  revision, for an ordinal that ran it before). No ordinal is created at
  an older revision than it last ran, unless the user stepped back (a
  rollback, or a partition raised above it).

  <replicas> is an integer from 0 to 2147483647, the most the
  statefulset_replicas annotation takes. A count that would make the job
  invalid in any other way (the longest pod name, <set>-<last ordinal>,
  must fit in 63 characters) is refused too, and nothing is written.

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
	n, err := parseReplicas(pos[1])
	if err != nil {
		return c.usageError("scale", "%v", err)
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
		before := problemsOf(job)
		job.Meta[jobs.KeyReplicas] = strconv.Itoa(n)
		if added := newProblems(before, problemsOf(job)); len(added) > 0 {
			return false, "", fmt.Errorf("not scaling statefulset %q to %d replicas: the job would be invalid, and the set left as it is (InvalidSpec):\n  %s",
				name, n, strings.Join(added, "\n  "))
		}
		return true, fmt.Sprintf("Scaling statefulset %q from %s to %d replicas", name, old, n), nil
	})
}

// maxReplicas is the most statefulset_replicas takes: jobs.Parse refuses
// more (TestScaleBoundIsTheParsers holds the two together).
const maxReplicas = math.MaxInt32

// parseReplicas reads the replica count as the annotation takes it: a
// plain decimal from 0 to maxReplicas.
func parseReplicas(s string) (int, error) {
	n, err := strconv.ParseUint(s, 10, 64)
	var ne *strconv.NumError
	switch {
	case errors.As(err, &ne) && errors.Is(ne.Err, strconv.ErrRange), err == nil && n > maxReplicas:
		return 0, fmt.Errorf("replicas %s is more than %d, the most %s takes", s, maxReplicas, jobs.KeyReplicas)
	case err != nil:
		return 0, fmt.Errorf("replicas must be an integer from 0 to %d, not %q", maxReplicas, s)
	}
	return int(n), nil
}

// problemsOf lists the problems jobs.Parse finds in job, as the agent would
// report them.
func problemsOf(job *api.Job) []string {
	_, err := jobs.Parse(job)
	var verr *jobs.ValidationError
	if !errors.As(err, &verr) {
		return nil
	}
	out := make([]string, 0, len(verr.Problems))
	for _, p := range verr.Problems {
		out = append(out, p.String())
	}
	return out
}

// newProblems is what after lists that before did not: a scale refuses
// to make a job invalid, not to touch one that already is.
func newProblems(before, after []string) []string {
	var added []string
	for _, p := range after {
		if !slices.Contains(before, p) {
			added = append(added, p)
		}
	}
	return added
}
