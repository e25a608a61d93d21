package command

import (
	"runtime"
	"strings"
	"testing"

	"github.com/hashicorp/cli"
)

// Every bad invocation exits 2 with a message naming the problem and
// where help is, before any request is made.
func TestUsageErrors(t *testing.T) {
	cases := []struct {
		name string
		cmd  func(Meta) cli.Command
		args []string
		want string
	}{
		{"status two sets", func(m Meta) cli.Command { return &StatusCommand{Meta: m} }, []string{"a", "b"}, "too many arguments (a b)"},
		{"status unknown flag", func(m Meta) cli.Command { return &StatusCommand{Meta: m} }, []string{"-bogus"}, "flag provided but not defined: -bogus"},
		{"rollout status no set", func(m Meta) cli.Command { return &RolloutStatusCommand{Meta: m} }, nil, "missing arguments"},
		{"rollout status negative timeout", func(m Meta) cli.Command { return &RolloutStatusCommand{Meta: m} }, []string{"-timeout", "-1s", "web"}, "-timeout must not be negative"},
		{"rollout status bad duration", func(m Meta) cli.Command { return &RolloutStatusCommand{Meta: m} }, []string{"-timeout", "soon", "web"}, `invalid value "soon" for flag -timeout`},
		{"rollout status zero interval", func(m Meta) cli.Command { return &RolloutStatusCommand{Meta: m} }, []string{"-poll-interval", "0s", "web"}, "-poll-interval must be positive"},
		{"history negative revision", func(m Meta) cli.Command { return &RolloutHistoryCommand{Meta: m} }, []string{"-revision", "-1", "web"}, "-revision must be a revision number"},
		{"history no set", func(m Meta) cli.Command { return &RolloutHistoryCommand{Meta: m} }, nil, "missing arguments"},
		{"undo negative", func(m Meta) cli.Command { return &RolloutUndoCommand{Meta: m} }, []string{"-to-revision", "-2", "web"}, "-to-revision must be"},
		{"undo not a number", func(m Meta) cli.Command { return &RolloutUndoCommand{Meta: m} }, []string{"-to-revision", "two", "web"}, `invalid value "two" for flag -to-revision`},
		{"restart two sets", func(m Meta) cli.Command { return &RolloutRestartCommand{Meta: m} }, []string{"a", "b"}, "too many arguments"},
		{"pause no set", func(m Meta) cli.Command { return &RolloutPauseCommand{Meta: m} }, nil, "missing arguments"},
		{"resume no set", func(m Meta) cli.Command { return &RolloutPauseCommand{Meta: m, Resume: true} }, nil, "rollout resume"},
		{"approve no set", func(m Meta) cli.Command { return &RolloutApproveCommand{Meta: m} }, nil, "missing arguments"},
		{"approve two sets", func(m Meta) cli.Command { return &RolloutApproveCommand{Meta: m} }, []string{"a", "b"}, "too many arguments (a b)"},
		{"scale no count", func(m Meta) cli.Command { return &ScaleCommand{Meta: m} }, []string{"web"}, "missing arguments"},
		{"scale not a number", func(m Meta) cli.Command { return &ScaleCommand{Meta: m} }, []string{"web", "x"}, `replicas must be an integer from 0 to 2147483647, not "x"`},
		{"scale negative after --", func(m Meta) cli.Command { return &ScaleCommand{Meta: m} }, []string{"--", "web", "-1"}, `not "-1"`},
		{"validate no file", func(m Meta) cli.Command { return &ValidateCommand{Meta: m} }, nil, "missing arguments"},
		{"version with argument", func(m Meta) cli.Command { return &VersionCommand{Meta: m} }, []string{"now"}, "takes no arguments"},
		{"scale wildcard namespace", func(m Meta) cli.Command { return &ScaleCommand{Meta: m} }, []string{"-namespace", "*", "web", "2"}, `-namespace "*" names no single namespace`},
		{"status of a set in every namespace", func(m Meta) cli.Command { return &StatusCommand{Meta: m} }, []string{"-namespace", "*", "web"}, `-namespace "*" names no single namespace`},
		{"rollout bare", func(m Meta) cli.Command { return &RolloutCommand{Meta: m} }, nil, "missing rollout subcommand"},
		{"rollout unknown", func(m Meta) cli.Command { return &RolloutCommand{Meta: m} }, []string{"rewind"}, `unknown rollout subcommand "rewind"`},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			m, ui := newTestMeta()
			// Any request would fail loudly: nothing listens here.
			t.Setenv("NOMAD_STATEFULSET_ADDR", closedAddress(t))
			t.Setenv("NOMAD_ADDR", closedAddress(t))
			code := tc.cmd(m).Run(tc.args)
			errOut := ui.ErrorWriter.String()
			if code != ExitUsage {
				t.Fatalf("exit %d, want %d; stderr %q", code, ExitUsage, errOut)
			}
			if !strings.Contains(errOut, tc.want) {
				t.Errorf("stderr %q lacks %q", errOut, tc.want)
			}
			if strings.Contains(errOut, "cannot reach") {
				t.Errorf("a request was made for a usage error: %q", errOut)
			}
			if ui.OutputWriter.String() != "" {
				t.Errorf("stdout %q on a usage error", ui.OutputWriter.String())
			}
			checkNoCrash(t, errOut)
		})
	}
}

func TestParseArgsInterspersed(t *testing.T) {
	m, _ := newTestMeta()
	f := m.FlagSet("x", FlagSetCommon|FlagSetAgent)
	pos, err := parseArgs(f, []string{"web", "-json", "-address", "http://a:1", "extra", "--", "-literal"})
	if err != nil {
		t.Fatal(err)
	}
	if strings.Join(pos, " ") != "web extra -literal" || !m.JSON() || m.AgentAddress() != "http://a:1" {
		t.Errorf("pos %q json %v address %q", pos, m.JSON(), m.AgentAddress())
	}
}

// Every command documents its exit codes and has examples, and every flag
// it parses is in its help.
func TestHelpDocumentsFlagsExamplesAndExitCodes(t *testing.T) {
	m, _ := newTestMeta()
	cmds := map[string]cli.Command{
		"status":          &StatusCommand{Meta: m},
		"rollout":         &RolloutCommand{Meta: m},
		"rollout status":  &RolloutStatusCommand{Meta: m},
		"rollout history": &RolloutHistoryCommand{Meta: m},
		"rollout undo":    &RolloutUndoCommand{Meta: m},
		"rollout restart": &RolloutRestartCommand{Meta: m},
		"rollout pause":   &RolloutPauseCommand{Meta: m},
		"rollout resume":  &RolloutPauseCommand{Meta: m, Resume: true},
		"rollout approve": &RolloutApproveCommand{Meta: m},
		"scale":           &ScaleCommand{Meta: m},
		"validate":        &ValidateCommand{Meta: m},
		"version":         &VersionCommand{Meta: m},
	}
	flagsOf := map[string][]string{
		"status":          {"-namespace", "-json", "-address", "-verbose"},
		"rollout status":  {"-namespace", "-json", "-address", "-nomad-address", "-token", "-timeout", "-poll-interval"},
		"rollout history": {"-namespace", "-json", "-address", "-revision"},
		"rollout undo":    {"-namespace", "-json", "-address", "-nomad-address", "-token", "-to-revision"},
		"rollout restart": {"-namespace", "-json", "-nomad-address", "-token"},
		"rollout pause":   {"-namespace", "-json", "-nomad-address", "-token"},
		"rollout resume":  {"-namespace", "-json", "-nomad-address", "-token"},
		"rollout approve": {"-namespace", "-json", "-nomad-address", "-token"},
		"scale":           {"-namespace", "-json", "-nomad-address", "-token"},
		"validate":        {"-namespace", "-json", "-nomad-address", "-var-file"},
		"version":         {"-namespace", "-json"},
	}
	for name, c := range cmds {
		h := c.Help()
		if !strings.HasPrefix(h, "Usage: nomad-statefulset "+name) {
			t.Errorf("%s: help starts %q", name, h[:min(len(h), 60)])
		}
		for _, want := range []string{"Examples:", "Exit Codes:", "3  conflict", "5  the agent or Nomad"} {
			if !strings.Contains(h, want) {
				t.Errorf("%s: help lacks %q", name, want)
			}
		}
		for _, fl := range flagsOf[name] {
			if !strings.Contains(h, fl) {
				t.Errorf("%s: help does not document %s", name, fl)
			}
		}
		if c.Synopsis() == "" {
			t.Errorf("%s: no synopsis", name)
		}
	}
}

func TestVersion(t *testing.T) {
	m, ui := newTestMeta()
	if code := (&VersionCommand{Meta: m}).Run(nil); code != ExitOK {
		t.Fatalf("exit %d", code)
	}
	if got := strings.TrimSpace(ui.OutputWriter.String()); got != "nomad-statefulset v"+strings.TrimPrefix(Version, "v")+" ("+runtime.Version()+")" {
		t.Errorf("version %q", got)
	}
	m, ui = newTestMeta()
	if code := (&VersionCommand{Meta: m}).Run([]string{"-json"}); code != ExitOK || !strings.Contains(ui.OutputWriter.String(), `"go_version"`) {
		t.Errorf("exit %d, %q", code, ui.OutputWriter.String())
	}
}

func TestBadAgentAddress(t *testing.T) {
	m, ui := newTestMeta()
	code := (&StatusCommand{Meta: m}).Run([]string{"-address", "ftp://x"})
	if code != ExitError || !strings.Contains(ui.ErrorWriter.String(), "scheme must be http or https") {
		t.Errorf("exit %d, stderr %q", code, ui.ErrorWriter.String())
	}
}
