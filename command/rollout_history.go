package command

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"sort"
	"strconv"
	"strings"

	"github.com/nomad-statefulset/nomad-statefulset/client"
)

// RolloutHistoryCommand is `nomad-statefulset rollout history <set>`.
type RolloutHistoryCommand struct {
	Meta
}

// Synopsis implements cli.Command.
func (c *RolloutHistoryCommand) Synopsis() string {
	return "List a statefulset's revisions, or show one"
}

// Help implements cli.Command.
func (c *RolloutHistoryCommand) Help() string {
	return strings.TrimSpace(`
Usage: nomad-statefulset rollout history [options] <set>

  Lists the set's stored revisions, oldest first: number, name, when it was
  created, the parent job version it was first seen in, and whether it is
  the current or the update revision. A rollback gives an old revision a new
  number, so the numbers say the order in which templates were rolled out.

  With -revision, shows that revision's template: the canonical JSON of the
  revisioned fields (the template group, the job meta other than the
  statefulset_* keys, and the placement fields).

Examples:

  $ nomad-statefulset rollout history web
  $ nomad-statefulset rollout history -revision 3 web
  $ nomad-statefulset rollout history -json web | jq '.revisions[].name'

` + commonOptionsHelp + agentOptionsHelp + `
Rollout History Options:

  -revision=<number>
    Show the template of the revision with this number.
` + exitCodesHelp)
}

// historyOutput is the -json output of rollout history without -revision.
type historyOutput struct {
	Namespace       string            `json:"namespace"`
	Name            string            `json:"name"`
	CurrentRevision string            `json:"current_revision"`
	UpdateRevision  string            `json:"update_revision"`
	Revisions       []client.Revision `json:"revisions"`
}

// revisionOutput is the -json output of rollout history -revision N; the
// template is embedded as JSON, not as a string, so jq can reach into it.
type revisionOutput struct {
	Namespace  string          `json:"namespace"`
	Name       string          `json:"name"`
	Number     int64           `json:"number"`
	Revision   string          `json:"revision"`
	CreatedAt  string          `json:"created_at"`
	JobVersion uint64          `json:"job_version"`
	Template   json.RawMessage `json:"template"`
}

// Run implements cli.Command.
func (c *RolloutHistoryCommand) Run(args []string) int {
	var revision int64
	f := c.FlagSet("rollout history", FlagSetCommon|FlagSetAgent)
	f.Int64Var(&revision, "revision", 0, "")
	pos, code, ok := c.parse("rollout history", f, args, 1, 1, "nomad-statefulset rollout history [options] <set>")
	if !ok {
		return code
	}
	if revision < 0 {
		return c.usageError("rollout history", "-revision must be a revision number >= 1, got %d", revision)
	}
	ac, err := c.AgentClient()
	if err != nil {
		return c.report(err)
	}
	ns, name := c.Namespace(), pos[0]
	ctx := context.Background()
	if revision == 0 {
		d, err := ac.GetSet(ctx, ns, name)
		if err != nil {
			return c.report(setNotFound(ns, name, err))
		}
		revs := sortedRevisions(d.Revisions)
		if c.JSON() {
			for i := range revs {
				revs[i].Template = "" // the list is an index; -revision shows one
			}
			return c.outputJSON(historyOutput{Namespace: ns, Name: name, CurrentRevision: d.Status.CurrentRevision, UpdateRevision: d.Status.UpdateRevision, Revisions: revs})
		}
		if len(revs) == 0 {
			c.UI.Output(fmt.Sprintf("Statefulset %q has no revisions yet", name))
			return ExitOK
		}
		c.UI.Output(formatHistory(d))
		return ExitOK
	}

	rev, err := fetchRevision(ctx, ac, ns, name, revision)
	if err != nil {
		return c.report(err)
	}
	tmpl, err := indentTemplate(rev.Template)
	if err != nil {
		return c.report(fmt.Errorf("revision %d of %q: %w", revision, name, err))
	}
	if c.JSON() {
		return c.outputJSON(revisionOutput{Namespace: ns, Name: name, Number: rev.Number, Revision: rev.Name,
			CreatedAt: formatTime(rev.CreatedAt), JobVersion: rev.JobVersion, Template: json.RawMessage(rev.Template)})
	}
	c.UI.Output(formatKV([][2]string{
		{"Revision", strconv.FormatInt(rev.Number, 10)},
		{"Name", rev.Name},
		{"Created", formatTime(rev.CreatedAt)},
		{"Job Version", strconv.FormatUint(rev.JobVersion, 10)},
	}))
	c.UI.Output("\nTemplate\n" + tmpl)
	return ExitOK
}

// fetchRevision reads one revision with its template from the agent.
func fetchRevision(ctx context.Context, ac *client.Client, ns, name string, number int64) (*client.Revision, error) {
	d, err := ac.GetSetRevision(ctx, ns, name, number)
	if err != nil {
		return nil, setNotFound(ns, name, err)
	}
	var known []string
	for _, r := range sortedRevisions(d.Revisions) {
		if r.Number == number {
			if r.Template == "" {
				return nil, fmt.Errorf("the agent at %s did not return the template of revision %d of %q (it must fill Template for GET /v1/statefulset/%s/%s?revision=%d)", ac.Address(), number, name, ns, name, number)
			}
			return &r, nil
		}
		known = append(known, strconv.FormatInt(r.Number, 10))
	}
	return nil, fmt.Errorf("statefulset %q has no revision %d (it has: %s): %w", name, number, orDash(strings.Join(known, ", ")), errNotFound)
}

// sortedRevisions returns a copy of revs ordered by number.
func sortedRevisions(revs []client.Revision) []client.Revision {
	out := append([]client.Revision(nil), revs...)
	sort.Slice(out, func(i, j int) bool { return out[i].Number < out[j].Number })
	return out
}

// formatHistory renders the revision table.
func formatHistory(d *client.SetDetail) string {
	rows := [][]string{{"Revision", "Name", "Created", "Job Version", "Status"}}
	for _, r := range sortedRevisions(d.Revisions) {
		var marks []string
		if r.Name == d.Status.CurrentRevision {
			marks = append(marks, "current")
		}
		if r.Name == d.Status.UpdateRevision {
			marks = append(marks, "update")
		}
		rows = append(rows, []string{
			strconv.FormatInt(r.Number, 10),
			r.Name,
			formatTime(r.CreatedAt),
			strconv.FormatUint(r.JobVersion, 10),
			orDash(strings.Join(marks, ",")),
		})
	}
	return formatTable(rows)
}

// indentTemplate pretty-prints a revision's canonical JSON.
func indentTemplate(t string) (string, error) {
	var buf bytes.Buffer
	if err := json.Indent(&buf, []byte(t), "", "  "); err != nil {
		return "", fmt.Errorf("template is not valid JSON: %w", err)
	}
	return buf.String(), nil
}
