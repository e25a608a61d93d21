package command

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/nomad-statefulset/nomad-statefulset/client"
	"github.com/nomad-statefulset/nomad-statefulset/reconciler"
)

// formatTable renders rows as columns two spaces apart, the first row being
// the header. Trailing spaces are trimmed so golden files and scripts see
// clean lines.
func formatTable(rows [][]string) string {
	var buf bytes.Buffer
	w := tabwriter.NewWriter(&buf, 0, 0, 2, ' ', 0)
	for _, r := range rows {
		fmt.Fprintln(w, strings.Join(r, "\t"))
	}
	_ = w.Flush() // writes to a bytes.Buffer cannot fail
	return trimLines(buf.String())
}

// formatKV renders key/value pairs as "Key  = value" lines, the nomad CLI's
// summary layout.
func formatKV(pairs [][2]string) string {
	var buf bytes.Buffer
	w := tabwriter.NewWriter(&buf, 0, 0, 1, ' ', 0)
	for _, p := range pairs {
		fmt.Fprintf(w, "%s\t= %s\n", p[0], p[1])
	}
	_ = w.Flush()
	return trimLines(buf.String())
}

// trimLines drops trailing spaces on every line and the final newline.
func trimLines(s string) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	for i, l := range lines {
		lines[i] = strings.TrimRight(l, " ")
	}
	return strings.Join(lines, "\n")
}

// orDash shows "-" for an empty cell, so columns never collapse.
func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

// shortID cuts an allocation or node UUID to 8 characters, as nomad does
// unless -verbose.
func shortID(id string, verbose bool) string {
	if verbose || len(id) <= 8 {
		return id
	}
	return id[:8]
}

// formatTime renders an absolute time in UTC RFC 3339, or "-" when zero.
// UTC keeps output identical wherever the CLI runs.
func formatTime(t time.Time) string {
	if t.IsZero() {
		return "-"
	}
	return t.UTC().Format(time.RFC3339)
}

// formatAgo renders how long before now t was ("3m12s ago"), rounded to
// the second, or "-" when t is zero.
func formatAgo(t, now time.Time) string {
	if t.IsZero() {
		return "-"
	}
	d := now.Sub(t).Round(time.Second)
	if d < 0 {
		// Clock skew between agent and CLI; say so rather than print "-3s ago".
		return "just now"
	}
	if d >= 48*time.Hour {
		return fmt.Sprintf("%dd ago", int(d.Hours())/24)
	}
	if d >= time.Hour {
		// Seconds are noise at this scale: "3h0m", not "3h0m0s".
		return strings.TrimSuffix(d.Round(time.Minute).String(), "0s") + " ago"
	}
	return d.String() + " ago"
}

// toJSON renders v as indented JSON for -json output.
func toJSON(v any) (string, error) {
	b, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		return "", fmt.Errorf("encoding JSON output: %w", err)
	}
	return string(b), nil
}

// outputJSON prints v as JSON, reporting an encoding failure.
func (m *Meta) outputJSON(v any) int {
	s, err := toJSON(v)
	if err != nil {
		return m.report(err)
	}
	m.UI.Output(s)
	return ExitOK
}

// specDetailPairs are the spec's lines beyond its counts and policies, for
// `validate` and `status`: the claims' sizes and classes, the spread, the
// leader and disruption settings and the maintenance windows, each shown
// when it is set, so that a user can see that every key parsed.
func specDetailPairs(s client.Spec) [][2]string {
	var out [][2]string
	for _, c := range s.Claims {
		size := "provisioner default"
		switch {
		case c.CapacityMin > 0 && c.CapacityMax > 0:
			size = formatBytes(c.CapacityMin) + ".." + formatBytes(c.CapacityMax)
		case c.CapacityMin > 0:
			size = formatBytes(c.CapacityMin)
		case c.CapacityMax > 0:
			size = ".." + formatBytes(c.CapacityMax)
		}
		class := c.Class
		if class == "" {
			class = "default"
		}
		out = append(out, [2]string{"Claim " + c.Claim, fmt.Sprintf("%s, class %s", size, class)})
	}
	if s.Spread != "" {
		spread := s.Spread + " (soft)"
		if s.SpreadRequired {
			spread = s.Spread + " (required)"
		}
		out = append(out, [2]string{"Spread", spread})
	}
	if s.LeaderCheck != "" {
		out = append(out, [2]string{"Leader Check", fmt.Sprintf("%s (leader update: %s)", s.LeaderCheck, orDash(s.LeaderUpdate))})
	}
	for _, kv := range [][2]string{{"Switchover Command", s.SwitchoverCommand}, {"Disruption Check", s.DisruptionCheck}, {"Exec Task", s.ExecTask}, {"Exec Timeout", s.ExecTimeout},
		{"Maintenance Window", s.MaintenanceWindow}} {
		if kv[1] != "" {
			out = append(out, kv)
		}
	}
	return out
}

// strategyLine is the Update Strategy line of `status` and `validate`: a
// RollingUpdate with its partition and budget; a Recreate saying that it
// stops every pod at once, and what its budget still bounds (drains and
// repairs, one pod at a time); OnDelete as it is.
func strategyLine(strategy string, partition int, maxUnavailable string) string {
	switch reconciler.UpdateStrategy(strategy) {
	case reconciler.RollingUpdate:
		return fmt.Sprintf("RollingUpdate (partition %d, max unavailable %s)", partition, maxUnavailable)
	case reconciler.Recreate:
		return fmt.Sprintf("Recreate (a new revision stops every pod at once; max unavailable %s bounds drains and repairs)", maxUnavailable)
	}
	return strategy
}
