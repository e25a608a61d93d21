package config

import (
	"errors"
	"fmt"
	"os"
	"strings"
	"testing"
)

// FuzzLoad feeds arbitrary text, as HCL or as JSON, through the whole load:
// parse, decode, derive, validate. Properties:
//
// A NUL in the text splits it into several files, so the merge is fuzzed
// too.
//
//   - no panic;
//   - a failure is an *Error, and every error in it names the file, a line
//     and a column (no env is set, so nothing is positionless);
//   - a success validates, and its rendering loads back to the same config
//     (so the merge, the derived defaults and String agree).
func FuzzLoad(f *testing.F) {
	for _, seed := range []string{
		"",
		`workers = 8`,
		`log_level = "debug"` + "\n" + `log_json = true`,
		`nomad { address = "https://n:4646" token = env("T", "") }`,
		"nomad {\n  address = \"unix:///run/nomad.sock\"\n}\n",
		"consul {\n  kv_prefix = \"a/b\"\n  ssl = true\n}\n",
		"high_availability {\n  session_ttl = \"20s\"\n  monitor_retries = 9\n}\n",
		"state {\n  backend = \"embedded\"\n}\n",
		"plugin \"p\" {\n  driver = \"d\"\n  args = [\"a\"]\n  config = { k = 1 }\n}\nhook \"h\" {\n  plugin = \"p\"\n  events = [\"pre_delete\"]\n  timeout = \"1s\"\n}\n",
		"volume_provisioner {\n  config = { plugin_id = \"mkdir\", capacity_min = \"1GiB\" }\n}\n",
		"plugin \"lvm\" {}\nvolume_provisioner \"fast\" {\n  plugin = \"lvm\"\n}\nvolume_provisioner {}\x00volume_provisioner \"fast\" { config = { a = 1 } }",
		"volume_provisioner \"x\" \"y\" {}\nvolume_provisioner \"9\" {}",
		`{"volume_provisioner": [{"plugin": "nomad-host-volume"}, {"fast": {"config": {"plugin_id": "lvm"}}}]}`,
		`data_dir = "$${x}%%{y}\t\"q\""`,
		`{"workers": 3, "plugin": {"p": {"driver": "x"}}}`,
		`workers = "x"` + "\n" + `nomd {}`,
		`resync_interval = 5`,
		"log_json = true\nplugin \"p\" { args = [\"a\"] }\x00log_json = false\nplugin \"p\" { config = { k = \"v\" } }",
		"state { backend = \"embedded\" }\x00high_availability { enabled = true }",
		"nomad {}\x00nomad {}\x00nomad { region = \"x\" }",
	} {
		f.Add(seed, strings.HasPrefix(seed, "{"))
	}
	for _, name := range exampleFiles(f) {
		b, err := os.ReadFile(name)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(string(b), false)
	}

	f.Fuzz(func(t *testing.T, text string, asJSON bool) {
		ext := ".hcl"
		if asJSON {
			ext = ".json"
		}
		// A NUL splits the text into several files, to fuzz the merge.
		var srcs []source
		names := map[string]bool{}
		for i, part := range strings.Split(text, "\x00") {
			name := fmt.Sprintf("fuzz%d%s", i, ext)
			names[name] = true
			srcs = append(srcs, source{name: name, src: []byte(part)})
		}
		c, err := load(noEnv, srcs, nil)
		if err != nil {
			var ce *Error
			if !errors.As(err, &ce) {
				t.Fatalf("error is %T: %v", err, err)
			}
			if len(ce.Diagnostics) == 0 || ce.Error() == "" {
				t.Fatalf("empty error")
			}
			for _, d := range ce.Diagnostics {
				if d.Subject == nil || !names[d.Subject.Filename] || d.Subject.Start.Line < 1 || d.Subject.Start.Column < 1 {
					t.Fatalf("diagnostic without a position in %q: %s; %s", text, d.Summary, d.Detail)
				}
			}
			return
		}
		if verr := c.Validate(); verr != nil {
			t.Fatalf("Load succeeded but Validate fails: %v", verr)
		}
		rendered := c.render(false)
		back, err := load(noEnv, []source{{name: "rendered.hcl", src: []byte(rendered)}}, nil)
		if err != nil {
			t.Fatalf("rendering of %q does not load:\n%s\n%v", text, rendered, err)
		}
		assertEqualConfig(t, back, c)
		_ = c.String()
	})
}
