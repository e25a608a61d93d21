package e2e

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/nomad-statefulset/nomad-statefulset/internal/testagent"
)

// The NATS tutorial, docs/tutorial-nats.md ("Running a replicated
// database"), is run by TestNATSTutorial as it is written, so that it stays
// true.

const tutorialPage = "docs/tutorial-nats.md"

// tutorialStep is one command of the tutorial and the output it shows.
type tutorialStep struct {
	line int // in tutorialPage
	cmd  string
	want []string
}

// tutorialSteps reads the commands of the page: in its ```console blocks,
// a line "$ cmd" is a command, and the lines after it, up to the next
// command or the end of the block, are its output as shown.
func tutorialSteps(t *testing.T, page string) []tutorialStep {
	t.Helper()
	f, err := os.Open(page)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var steps []tutorialStep
	block := false
	sc := bufio.NewScanner(f)
	for n := 1; sc.Scan(); n++ {
		line := sc.Text()
		switch {
		case line == "```console":
			block = true
		case block && line == "```":
			block = false
		case block && strings.HasPrefix(line, "$ "):
			steps = append(steps, tutorialStep{line: n, cmd: strings.TrimPrefix(line, "$ ")})
		case block && len(steps) > 0:
			steps[len(steps)-1].want = append(steps[len(steps)-1].want, line)
		}
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	if len(steps) < 10 {
		t.Fatalf("%s: %d commands in the tutorial", page, len(steps))
	}
	return steps
}

var (
	ansiEscape = regexp.MustCompile("\x1b\\[[0-9;]*m")
	spaces     = regexp.MustCompile(`\s+`)
)

// tutorialNorm is a line as the comparison sees it: without colours, with
// every word that holds a digit (a number, an ID, a port, a time, a name
// such as nats-1 or a meta leader that differs from run to run) as "#",
// and with spacing collapsed.
func tutorialNorm(line string) string {
	words := strings.Fields(ansiEscape.ReplaceAllString(line, ""))
	for i, w := range words {
		if strings.ContainsAny(w, "0123456789") {
			words[i] = "#"
		}
	}
	return spaces.ReplaceAllString(strings.Join(words, " "), " ")
}

// tutorialMatch checks that every line of want appears in got, in order,
// as tutorialNorm sees them; it returns the first one that does not.
func tutorialMatch(want []string, got string) (string, bool) {
	lines := strings.Split(got, "\n")
	j := 0
	for _, w := range want {
		nw := tutorialNorm(w)
		if nw == "" {
			continue
		}
		for ; j < len(lines) && tutorialNorm(lines[j]) != nw; j++ {
		}
		if j == len(lines) {
			return w, false
		}
		j++
	}
	return "", true
}

func tutorialBinary(t *testing.T, root, env, name string) string {
	t.Helper()
	p := os.Getenv(env)
	if p == "" {
		p = filepath.Join(root, ".cache", "bin", name)
	}
	if _, err := os.Stat(p); err != nil {
		t.Fatalf("%s: %v (set %s or run `make tools`)", name, err, env)
	}
	return p
}

// TestNATSTutorial runs the NATS tutorial against a demo of its own
// (scripts/demo.sh up in a directory of its own, with EXAMPLE=nats, as
// `make demo EXAMPLE=nats` runs it): every command in one shell, in order,
// from the repository's root. Each must succeed, and print the lines the
// page shows, in order, up to what differs between runs.
func TestNATSTutorial(t *testing.T) {
	if _, err := os.Stat(natsBin); err != nil {
		t.Fatalf("nats-server is not installed (%v): %s", err, natsInstall)
	}
	root, err := testagent.ModuleRoot()
	if err != nil {
		t.Fatal(err)
	}
	steps := tutorialSteps(t, filepath.Join(root, tutorialPage))
	if steps[0].cmd != "make demo EXAMPLE=nats" || steps[1].cmd != "source .cache/demo/env.sh" {
		t.Fatalf("the tutorial must begin with `make demo EXAMPLE=nats` and `source .cache/demo/env.sh`; it begins with %q, %q", steps[0].cmd, steps[1].cmd)
	}
	dir, err := os.MkdirTemp("", "nss-tutorial-")
	if err != nil {
		t.Fatal(err)
	}
	demo := filepath.Join(dir, "demo")
	env := append(os.Environ(),
		"DEMO_DIR="+demo, "EXAMPLE=nats",
		"NOMAD_BIN="+tutorialBinary(t, root, "NOMAD_BIN", "nomad"),
		"CONSUL_BIN="+tutorialBinary(t, root, "CONSUL_BIN", "consul"),
		"NSS_BIN="+DaemonBinary(t))
	env = tutorialEnvWithout(env, "AWS_CA_BUNDLE", "NOMAD_ADDR", "NOMAD_TOKEN", "NOMAD_NAMESPACE", "NOMAD_REGION", "CONSUL_HTTP_ADDR", "CONSUL_HTTP_TOKEN")
	run := func(ctx context.Context, name string, args ...string) (string, error) {
		cmd := exec.CommandContext(ctx, name, args...)
		cmd.Dir, cmd.Env = root, env
		cmd.WaitDelay = 10 * time.Second
		out, err := cmd.CombinedOutput()
		return string(out), err
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		out, err := run(ctx, "bash", "scripts/demo.sh", "down")
		if err != nil {
			t.Logf("demo down: %v\n%s", err, out)
		}
		os.RemoveAll(dir)
	})

	start := time.Now()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	out, err := run(ctx, "bash", "scripts/demo.sh", "up")
	cancel()
	if err != nil {
		t.Fatalf(tutorialPage+":%d: `%s` (scripts/demo.sh up): %v\n%s", steps[0].line, steps[0].cmd, err, out)
	}
	if missing, ok := tutorialMatch(steps[0].want, out); !ok {
		t.Fatalf(tutorialPage+":%d: `%s` does not print %q; it printed:\n%s", steps[0].line, steps[0].cmd, missing, out)
	}
	t.Logf(tutorialPage+":%d: %s: %v", steps[0].line, steps[0].cmd, time.Since(start).Round(time.Second))

	// The rest in one shell, between markers, stopping at the first
	// command that fails.
	var script strings.Builder
	script.WriteString("set +e\n")
	fmt.Fprintf(&script, "source %q\n", filepath.Join(demo, "env.sh"))
	rest := steps[2:]
	for i, s := range rest {
		fmt.Fprintf(&script, "printf '\\n@@step %d begin %%s\\n' \"$(date +%%s.%%N)\"\n%s\n__rc=$?\nprintf '\\n@@step %d end %%s %%s\\n' \"$__rc\" \"$(date +%%s.%%N)\"\n[ \"$__rc\" = 0 ] || exit 1\n", i, s.cmd, i)
	}
	path := filepath.Join(dir, "tutorial.sh")
	if err := os.WriteFile(path, []byte(script.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	ctx, cancel = context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	out, err = run(ctx, "bash", path)
	outputs := map[int]string{}
	took := map[int]time.Duration{}
	rcs := map[int]string{}
	cur, began := -1, 0.0
	var buf strings.Builder
	for _, line := range strings.Split(out, "\n") {
		var i int
		var at float64
		var rc string
		if n, _ := fmt.Sscanf(line, "@@step %d begin %f", &i, &at); n == 2 {
			cur, began = i, at
			buf.Reset()
			continue
		}
		if n, _ := fmt.Sscanf(line, "@@step %d end %s %f", &i, &rc, &at); n == 3 {
			outputs[i], rcs[i] = buf.String(), rc
			took[i] = time.Duration((at - began) * float64(time.Second))
			cur = -1
			continue
		}
		if cur >= 0 {
			buf.WriteString(line + "\n")
		}
	}
	for i, s := range rest {
		got, done := outputs[i]
		if !done {
			t.Fatalf(tutorialPage+":%d: `%s` did not finish (%v); its output so far:\n%s", s.line, s.cmd, err, buf.String())
		}
		if rcs[i] != "0" {
			t.Fatalf(tutorialPage+":%d: `%s` exited %s:\n%s", s.line, s.cmd, rcs[i], got)
		}
		if missing, ok := tutorialMatch(s.want, got); !ok {
			t.Fatalf(tutorialPage+":%d: `%s` does not print %q (as %q); it printed:\n%s", s.line, s.cmd, missing, tutorialNorm(missing), got)
		}
		if took[i] > 2*time.Second {
			t.Logf(tutorialPage+":%d: %s: %v", s.line, s.cmd, took[i].Round(100*time.Millisecond))
		}
	}
	if err != nil {
		t.Fatalf("the tutorial's shell: %v\n%s", err, out)
	}
	t.Logf("the tutorial's %d commands ran as the page shows them in %v", len(steps), time.Since(start).Round(time.Second))
}

// tutorialEnvWithout returns env without the variables named.
func tutorialEnvWithout(env []string, names ...string) []string {
	var out []string
	for _, kv := range env {
		drop := false
		for _, n := range names {
			if strings.HasPrefix(kv, n+"=") {
				drop = true
			}
		}
		if !drop {
			out = append(out, kv)
		}
	}
	return out
}

// TestTutorialMatch: what differs between runs is ignored, and nothing
// else is.
func TestTutorialMatch(t *testing.T) {
	got := "\x1b[1m==> nats is ready: 15s\x1b[0m\nnoise\nread 6198 messages of ORDERS, sequences 1 to 6198: none missing\n"
	if _, ok := tutorialMatch([]string{"==> nats is ready: 31s", "read 12 messages of ORDERS, sequences 1 to 12:  none missing"}, got); !ok {
		t.Fatal("numbers and spacing must not matter")
	}
	for _, want := range [][]string{
		{"read 12 messages of ORDERS, sequences 1 to 12: 3 missing"},
		{"read 6198 messages of ORDERS, sequences 1 to 6198: none missing", "==> nats is ready: 15s"},
		{"==> web is ready: 15s"},
	} {
		if _, ok := tutorialMatch(want, got); ok {
			t.Fatalf("%q matched %q", want, got)
		}
	}
}
