package command

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/hashicorp/nomad/api"
)

// TestHelpSaysWhatTheCommandDoes holds help texts to what the code does,
// where an earlier text said otherwise.
func TestHelpSaysWhatTheCommandDoes(t *testing.T) {
	m, _ := newTestMeta()
	for _, tc := range []struct {
		name   string
		help   string
		want   []string
		refuse []string
	}{
		{"agent", (&AgentCommand{Meta: m}).Help(),
			// SIGHUP reloads the log level, plugins, hooks and storage
			// classes (command/agent.go's reload, manager.Reload).
			[]string{"SIGHUP reads the configuration again", "log level, plugin_dir, and the plugin, hook and volume_provisioner blocks", "The agent takes no -json"},
			[]string{"the log level takes effect at once; other settings at the next restart", "  -json\n"}},
		{"scale", (&ScaleCommand{Meta: m}).Help(),
			// reconciler.newPodRevision: the current revision below a
			// RollingUpdate's partition and while paused.
			[]string{"except below a RollingUpdate's partition, where they get the current revision", "2147483647", "63 characters"},
			[]string{"new ordinals come up at the update revision"}},
		{"validate", (&ValidateCommand{Meta: m}).Help(),
			[]string{"so Nomad must be reachable", "A JSON job file", "HCL read so needs Nomad as a file does, JSON does not"},
			nil},
		// hashicorp/cli appends the subcommands itself: a list in the
		// command's own help would show twice.
		{"pod", (&PodCommand{Meta: m}).Help(), []string{"Usage: nomad-statefulset pod"}, []string{"replace"}},
		{"rollout", (&RolloutCommand{Meta: m}).Help(), []string{"Usage: nomad-statefulset rollout"}, []string{"Subcommands:"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			// Compared with the lines joined: the wrapping is not the text.
			flat := strings.Join(strings.Fields(tc.help), " ")
			for _, w := range tc.want {
				if !strings.Contains(flat, w) {
					t.Errorf("help lacks %q:\n%s", w, tc.help)
				}
			}
			for _, r := range tc.refuse {
				if strings.Contains(tc.help, r) || strings.Contains(flat, r) {
					t.Errorf("help says %q:\n%s", r, tc.help)
				}
			}
		})
	}
}

// TestAgentRefusesJSON: `agent -json` is a usage error, as its help says.
func TestAgentRefusesJSON(t *testing.T) {
	m, ui := newTestMeta()
	if code := (&AgentCommand{Meta: m}).Run([]string{"-json"}); code != ExitUsage || !strings.Contains(ui.ErrorWriter.String(), "flag provided but not defined: -json") {
		t.Fatalf("exit %d, stderr %q", code, ui.ErrorWriter.String())
	}
}

// TestValidateSuggestsOnlyPlausibleSizes: validate's "did you mean" for a
// claim's capacity keeps the magnitude written; 10XB gets none, never 10B.
func TestValidateSuggestsOnlyPlausibleSizes(t *testing.T) {
	for _, tc := range []struct {
		capacity, want, refuse string
	}{
		{"10XB", `statefulset_claim_data_capacity: "10XB" is not <min> or <min>..<max>`, "did you mean"},
		{"10GiBs", `(did you mean "10GiB"?)`, ""},
		{"10GiB-20GiB", `(did you mean "10GiB..20GiB"?)`, ""},
	} {
		t.Run(tc.capacity, func(t *testing.T) {
			j := parentJob("web")
			j.Meta["statefulset_volume_claims"] = "data"
			j.Meta["statefulset_claim_data_capacity"] = tc.capacity
			j.TaskGroups[0].Volumes = map[string]*api.VolumeRequest{"data": {Name: "data", Type: "host", Source: "data"}}
			code, out, errOut := runValidate(t, closedAddress(t), writeJSONJob(t, j, true))
			if code != ExitError || !strings.Contains(out, tc.want) {
				t.Fatalf("exit %d, stdout %q, stderr %q; want %q", code, out, errOut, tc.want)
			}
			if tc.refuse != "" && strings.Contains(out, tc.refuse) {
				t.Errorf("validate suggests a size for %s:\n%s", tc.capacity, out)
			}
		})
	}
}

// TestValidateHCLFromStdinNeedsNomad: HCL on standard input goes through
// Nomad's parse API like a file, and says so when Nomad is down; JSON on
// standard input needs no Nomad.
func TestValidateHCLFromStdinNeedsNomad(t *testing.T) {
	m, ui := newTestMeta()
	c := &ValidateCommand{Meta: m, Stdin: strings.NewReader(`job "web" {}`)}
	code := c.Run([]string{"-nomad-address", closedAddress(t), "-"})
	if code != ExitUnreachable || !strings.Contains(ui.ErrorWriter.String(), "validate needs Nomad to parse HCL job files") {
		t.Fatalf("HCL on stdin: exit %d, stderr %q", code, ui.ErrorWriter.String())
	}
	b, err := json.Marshal(map[string]any{"Job": parentJob("web")})
	if err != nil {
		t.Fatal(err)
	}
	m, ui = newTestMeta()
	c = &ValidateCommand{Meta: m, Stdin: strings.NewReader(string(b))}
	if code := c.Run([]string{"-nomad-address", closedAddress(t), "-"}); code != ExitOK {
		t.Fatalf("JSON on stdin: exit %d, stderr %q", code, ui.ErrorWriter.String())
	}
}
