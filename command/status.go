package command

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/nomad-statefulset/nomad-statefulset/client"
)

// StatusCommand is `nomad-statefulset status [set]`.
type StatusCommand struct {
	Meta
}

// Synopsis implements cli.Command.
func (c *StatusCommand) Synopsis() string {
	return "Show statefulsets, or one statefulset in detail"
}

// Help implements cli.Command.
func (c *StatusCommand) Help() string {
	return strings.TrimSpace(`
Usage: nomad-statefulset status [options] [set]

  With no set, lists the statefulsets of the namespace: ready/desired pods,
  current and update revision, and the conditions that are true.

  With a set, shows its summary, one row per ordinal (pod, revision,
  allocation, node, state, ready since, volumes), its conditions and its
  recent events.

  Both start with the agent's state: "Agent: leader" (with high
  availability, since when it holds the lock) or "Agent: follower" (another
  agent acts and shows the sets), and any failing health check. With -json
  the same is under "agent", in the form of GET /v1/health.

  Reads come from the nomad-statefulset agent.

Examples:

  $ nomad-statefulset status
  $ nomad-statefulset status -namespace '*'
  $ nomad-statefulset status web
  $ nomad-statefulset status -json web | jq .status.ready_replicas

` + commonOptionsHelp + agentOptionsHelp + `
Status Options:

  -verbose
    Show full allocation and node IDs.
` + exitCodesHelp)
}

// Run implements cli.Command.
func (c *StatusCommand) Run(args []string) int {
	var verbose bool
	f := c.FlagSet("status", FlagSetCommon|FlagSetAgent)
	f.BoolVar(&verbose, "verbose", false, "")
	pos, code, ok := c.parse("status", f, args, 0, 1, "nomad-statefulset status [options] [set]")
	if !ok {
		return code
	}
	ac, err := c.AgentClient()
	if err != nil {
		return c.report(err)
	}
	ctx := context.Background()
	if len(pos) == 0 {
		// The agent's state comes first: a follower shows no sets, and
		// without it that looks like an empty cluster.
		health, err := ac.AgentHealth(ctx)
		if err != nil {
			return c.report(err)
		}
		list, err := ac.ListSets(ctx, c.Namespace())
		if err != nil {
			return c.report(err)
		}
		if c.JSON() {
			return c.outputJSON(struct {
				*client.SetList
				Agent *client.Health `json:"agent"`
			}{list, health})
		}
		c.UI.Output(formatAgent(health, c.now()) + "\n")
		if len(list.Sets) == 0 {
			if c.Namespace() == "*" {
				c.UI.Output("No statefulsets")
			} else {
				c.UI.Output(fmt.Sprintf("No statefulsets in namespace %q", c.Namespace()))
			}
			return ExitOK
		}
		c.UI.Output(formatSetList(list.Sets))
		return ExitOK
	}
	ns, name := c.Namespace(), pos[0]
	if strings.Contains(ns, "*") {
		return c.usageError("status", "-namespace %q names no single namespace; give the set's namespace", ns)
	}
	health, err := ac.AgentHealth(ctx)
	if err != nil {
		return c.report(err)
	}
	d, err := ac.GetSet(ctx, ns, name)
	if err != nil {
		if errors.Is(err, client.ErrNotFound) && !health.Leader {
			return c.report(fmt.Errorf("statefulset %q is not known to this agent: it is a follower, and only the leader "+
				"reconciles and shows sets; point -address or %s at the leader: %w", name, client.AddressEnv, errNotFound))
		}
		return c.report(setNotFound(ns, name, err))
	}
	if c.JSON() {
		return c.outputJSON(struct {
			*client.SetDetail
			Agent *client.Health `json:"agent"`
		}{d, health})
	}
	c.UI.Output(formatAgent(health, c.now()) + "\n")
	c.UI.Output(formatSetDetail(d, verbose, c.now()))
	return ExitOK
}

// formatAgent renders the agent's state: leader or follower, since when it
// holds the lock, and every health check that is not ok, sorted by name.
func formatAgent(h *client.Health, now time.Time) string {
	var line string
	switch {
	case !h.HighAvailability:
		line = "Agent: leader (high availability off: this agent always acts)"
	case h.Leader && h.LeaderSince != nil:
		line = fmt.Sprintf("Agent: leader (lock held since %s, %s)", formatTime(*h.LeaderSince), formatAgo(*h.LeaderSince, now))
	case h.Leader:
		line = "Agent: leader"
	case h.Checks["leader_election"] != "" && h.Checks["leader_election"] != "ok":
		line = "Agent: not leading (leader election is failing)"
	default:
		line = "Agent: follower (another agent holds the lock and acts; it shows the sets)"
	}
	var failing []string
	for name, msg := range h.Checks {
		if msg != "ok" && !strings.HasPrefix(msg, "standby") {
			failing = append(failing, name)
		}
	}
	sort.Strings(failing)
	for _, name := range failing {
		line += fmt.Sprintf("\nAgent %s: %s", name, oneLine(h.Checks[name]))
	}
	if es := h.EventStream; es != nil && es.LastReset != nil {
		var total uint64
		reasons := make([]string, 0, len(es.Resets))
		for reason, n := range es.Resets {
			total += n
			reasons = append(reasons, fmt.Sprintf("%s %d", reason, n))
		}
		sort.Strings(reasons)
		line += fmt.Sprintf("\nAgent event stream: lost %d time(s) this term (%s); the last %s: %s",
			total, strings.Join(reasons, ", "), formatAgo(es.LastReset.At, now), oneLine(es.LastReset.Message))
	}
	return line
}

// formatSetList renders the table of sets, sorted by namespace and name.
func formatSetList(sets []client.SetSummary) string {
	sets = append([]client.SetSummary(nil), sets...)
	sort.Slice(sets, func(i, j int) bool {
		if sets[i].Namespace != sets[j].Namespace {
			return sets[i].Namespace < sets[j].Namespace
		}
		return sets[i].Name < sets[j].Name
	})
	rows := [][]string{{"Name", "Namespace", "Ready", "Current Revision", "Update Revision", "Conditions"}}
	for _, s := range sets {
		rows = append(rows, []string{
			s.Name,
			s.Namespace,
			fmt.Sprintf("%d/%d", s.ReadyReplicas, s.Replicas),
			orDash(s.CurrentRevision),
			orDash(s.UpdateRevision),
			orDash(trueConditions(s.Conditions)),
		})
	}
	out := formatTable(rows)
	// A set the agent cannot act on (invalid job, corrupt stored state)
	// says why here too, so one look at the list finds it.
	errRows := [][]string{{"Name", "Namespace", "Error"}}
	for _, s := range sets {
		if s.Error != "" {
			errRows = append(errRows, []string{s.Name, s.Namespace, oneLine(s.Error)})
		}
	}
	if len(errRows) > 1 {
		out += "\n\nErrors\n" + formatTable(errRows)
	}
	return out
}

// trueConditions lists the types of the conditions that hold, which is what
// an operator scanning many sets wants to see.
func trueConditions(cs []client.Condition) string {
	var out []string
	for _, cond := range cs {
		if cond.Status {
			out = append(out, cond.Type)
		}
	}
	return strings.Join(out, ",")
}

// formatSetDetail renders one set: summary, pods, conditions, events.
func formatSetDetail(d *client.SetDetail, verbose bool, now time.Time) string {
	var b strings.Builder
	sp, st := d.Spec, d.Status
	strategy := strategyLine(sp.UpdateStrategy, sp.Partition, orDash(sp.MaxUnavailable))
	pairs := [][2]string{
		{"Name", d.Name},
		{"Namespace", d.Namespace},
		{"Replicas", fmt.Sprintf("%d desired, %d ready, %d available, %d current, %d updated",
			sp.Replicas, st.ReadyReplicas, st.AvailableReplicas, st.CurrentReplicas, st.UpdatedReplicas)},
		{"Current Revision", orDash(st.CurrentRevision)},
		{"Update Revision", orDash(st.UpdateRevision)},
		{"Pod Management", orDash(sp.PodManagementPolicy)},
		{"Update Strategy", orDash(strategy)},
		{"Paused", strconv.FormatBool(sp.Paused)},
		{"Ordinals Start", strconv.Itoa(sp.OrdinalsStart)},
		{"Min Ready Seconds", strconv.Itoa(sp.MinReadySeconds)},
		{"Progress Deadline", orDash(sp.ProgressDeadline)},
		{"Volume Claims", orDash(strings.Join(sp.VolumeClaims, ","))},
		{"Volume Retention", fmt.Sprintf("when deleted: %s, when scaled: %s", orDash(sp.WhenDeleted), orDash(sp.WhenScaled))},
		{"Observed Index", strconv.FormatUint(st.ObservedGeneration, 10)},
	}
	pairs = append(pairs, specDetailPairs(sp)...)
	if d.Error != "" {
		pairs = append(pairs, [2]string{"Error", d.Error})
	}
	if older := olderRendering(d.Pods); len(older) > 0 {
		// An upgrade of the daemon restarts nothing: these keep running as
		// an earlier release rendered them.
		pairs = append(pairs, [2]string{"Older Rendering", fmt.Sprintf(
			"%s registered by an earlier release; rendered anew at the next rollout or `rollout restart`", strings.Join(older, ", "))})
	}
	b.WriteString(formatKV(pairs))

	b.WriteString("\n\nPods\n")
	if len(d.Pods) == 0 {
		b.WriteString("No pods")
	} else {
		pods := append([]client.Pod(nil), d.Pods...)
		sort.Slice(pods, func(i, j int) bool { return pods[i].Ordinal < pods[j].Ordinal })
		// The reason column shows only when a pod runs without being Ready,
		// which is when someone wants to know why.
		why := slices.ContainsFunc(pods, func(p client.Pod) bool { return p.NotReady != "" })
		head := []string{"Pod", "Revision", "Allocation", "Node", "State", "Ready Since", "Volumes"}
		if why {
			head = append(head, "Not Ready Because")
		}
		rows := [][]string{head}
		for _, p := range pods {
			name := orDash(p.Name)
			if p.Leader {
				// The pod whose leader check passes (statefulset_leader_check).
				name += " (leader)"
			}
			row := []string{
				name,
				orDash(p.Revision),
				orDash(shortID(p.AllocID, verbose)),
				orDash(shortID(p.NodeID, verbose)),
				orDash(p.State),
				formatAgo(p.ReadySince, now),
				orDash(volumesCell(p)),
			}
			if why {
				row = append(row, oneLine(p.NotReady))
			}
			rows = append(rows, row)
		}
		b.WriteString(formatTable(rows))
	}

	b.WriteString("\n\nConditions\n")
	if len(st.Conditions) == 0 {
		b.WriteString("No conditions")
	} else {
		b.WriteString(formatConditions(st.Conditions, now))
	}

	b.WriteString("\n\nRecent Events\n")
	if len(d.Events) == 0 {
		b.WriteString("No events")
	} else {
		rows := [][]string{{"Time", "Type", "Message"}}
		for _, e := range d.Events {
			rows = append(rows, []string{formatTime(e.Time), orDash(e.Type), oneLine(e.Message)})
		}
		b.WriteString(formatTable(rows))
	}
	return b.String()
}

// formatConditions renders the conditions table.
func formatConditions(cs []client.Condition, now time.Time) string {
	rows := [][]string{{"Type", "Status", "Reason", "Last Transition", "Message"}}
	for _, cond := range cs {
		status := "False"
		if cond.Status {
			status = "True"
		}
		rows = append(rows, []string{cond.Type, status, orDash(cond.Reason), formatAgo(cond.LastTransitionTime, now), oneLine(cond.Message)})
	}
	return formatTable(rows)
}

// oneLine keeps a multi-line message from breaking a table's columns.
func oneLine(s string) string {
	return orDash(strings.Join(strings.Fields(s), " "))
}

// volumesCell names a pod's volumes, each with its class and size when
// known, and what a claim template still asks of it: "data-web-0 (fast,
// 10.0 GiB, growing to 20.0 GiB)".
func volumesCell(p client.Pod) string {
	if len(p.Claims) == 0 {
		return strings.Join(p.Volumes, ",")
	}
	cells := make([]string, 0, len(p.Claims))
	for _, c := range p.Claims {
		var notes []string
		if c.Class != "" {
			notes = append(notes, c.Class)
		}
		if c.Capacity > 0 {
			notes = append(notes, formatBytes(c.Capacity))
		}
		if c.ResizePending {
			notes = append(notes, "growing to "+formatBytes(c.Requested))
		}
		if c.ClassDiffers {
			notes = append(notes, "its claim names another class")
		}
		cell := c.Name
		if len(notes) > 0 {
			cell += " (" + strings.Join(notes, ", ") + ")"
		}
		cells = append(cells, cell)
	}
	return strings.Join(cells, ",")
}

// formatBytes prints a size in binary units, as Nomad's capacities read.
func formatBytes(n int64) string {
	const unit = 1024
	if n < unit {
		return fmt.Sprintf("%d B", n)
	}
	div, exp := int64(unit), 0
	for m := n / unit; m >= unit; m /= unit {
		div *= unit
		exp++
	}
	return fmt.Sprintf("%.1f %ciB", float64(n)/float64(div), "KMGTPE"[exp])
}

// olderRendering names the pods whose child an earlier release rendered
// differently (client.Pod.OlderRendering), in ordinal order.
func olderRendering(pods []client.Pod) []string {
	var out []string
	for _, p := range pods {
		if p.OlderRendering {
			out = append(out, p.Name)
		}
	}
	return out
}
