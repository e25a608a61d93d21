package config

import (
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"strings"
	"testing"

	"github.com/hashicorp/hcl/v2"
	"github.com/hashicorp/hcl/v2/hclparse"
	"github.com/zclconf/go-cty/cty/function"
)

const examplesDir = "../../examples/agent"

// exampleFiles lists every example agent config; each one is loaded below.
func exampleFiles(t testing.TB) []string {
	t.Helper()
	files, err := filepath.Glob(filepath.Join(examplesDir, "*.hcl"))
	if err != nil {
		t.Fatal(err)
	}
	if len(files) < 2 {
		t.Fatalf("found %d example configs in %s, want at least agent.hcl and dev.hcl", len(files), examplesDir)
	}
	return files
}

// TestExamples_Load: every example loads and validates, as is and in -dev.
func TestExamples_Load(t *testing.T) {
	for _, f := range exampleFiles(t) {
		t.Run(filepath.Base(f), func(t *testing.T) {
			c, err := load(noEnv, []source{{name: f}}, nil)
			if err != nil {
				t.Fatalf("example does not load:\n%v", err)
			}
			if err := c.Validate(); err != nil {
				t.Errorf("example does not validate: %v", err)
			}
			c.ApplyDev()
			if err := c.Validate(); err != nil {
				t.Errorf("example does not validate under -dev: %v", err)
			}
			// Examples never carry a literal token.
			text, _ := os.ReadFile(f)
			if regexp.MustCompile(`(?m)^\s*token\s*=\s*"`).Match(text) {
				t.Errorf("example sets a literal token; use the environment")
			}
		})
	}
}

// TestExamples_AgentShowsDefaults: agent.hcl claims to show every default.
// Loaded as it is, it must equal Default(): what a stock cluster lacks (a
// storage class on a plugin of its own, an external hook plugin) is
// commented out, so that the file starts as it is copied.
func TestExamples_AgentShowsDefaults(t *testing.T) {
	c, err := load(noEnv, []source{{name: filepath.Join(examplesDir, "agent.hcl")}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	assertEqualConfig(t, c, Default())
}

// TestExamples_AgentDeclaresOnlyBuiltins: every plugin a config example
// declares is built in, and none declares a hook, so that every example
// starts on a stock install (issue 47: agent.hcl named an "http-hook"
// driver that exists nowhere, and its blocking pre_delete hook on an
// absent URL would have held every scale-down).
func TestExamples_AgentDeclaresOnlyBuiltins(t *testing.T) {
	for _, f := range exampleFiles(t) {
		t.Run(filepath.Base(f), func(t *testing.T) {
			c, err := load(noEnv, []source{{name: f}}, nil)
			if err != nil {
				t.Fatal(err)
			}
			for _, p := range c.Plugins {
				if p.Driver != BuiltinHostVolume {
					t.Errorf("plugin %q has driver %q, which is not built in", p.Name, p.Driver)
				}
			}
			for _, h := range c.Hooks {
				t.Errorf("hook %q is declared; an example must not hold steps on a plugin a stock install lacks", h.Name)
			}
			for _, vp := range append([]*VolumeProvisionerConfig{&c.VolumeProvisioner}, c.VolumeClasses...) {
				if vp.Config["plugin_id"] == DefaultHostVolumePluginID && (vp.Config["capacity_min"] != "" || vp.Config["capacity_max"] != "") {
					t.Errorf("volume_provisioner %q asks a size of Nomad's %s plugin, which honours none", vp.Name, DefaultHostVolumePluginID)
				}
			}
		})
	}
}

// TestExamples_AgentDocumentsEverything: agent.hcl mentions every attribute
// of the schema, set or in a "# name = value" comment, the commented-out
// blocks' lines ("# hook "x" {", "# }") included. Uncommenting those lines
// must give a file in which every attribute is set and decodes.
func TestExamples_AgentDocumentsEverything(t *testing.T) {
	raw, err := os.ReadFile(filepath.Join(examplesDir, "agent.hcl"))
	if err != nil {
		t.Fatal(err)
	}
	uncomment := regexp.MustCompile(`(?m)^(\s*)# (\s*(?:[a-z_]+\s+=\s.*|[a-z_]+(?:\s+"[^"]*")*\s+\{|\}))$`)
	text := uncomment.ReplaceAll(raw, []byte("$1$2"))

	f, diags := hclparse.NewParser().ParseHCL(text, "agent-uncommented.hcl")
	if diags.HasErrors() {
		t.Fatalf("uncommented example does not parse: %v", diags)
	}
	c := Default()
	c.origins = map[string]origin{}
	d := &decoder{ctx: &hcl.EvalContext{Functions: map[string]function.Function{"env": envFunction(noEnv)}}, origins: c.origins}
	if diags := d.decodeBody(f.Body, c, ""); diags.HasErrors() {
		t.Fatalf("uncommented example does not decode: %v", diags)
	}
	set := map[string]bool{}
	labeled := regexp.MustCompile(`^(plugin|hook|volume_provisioner)\.[^.]+\.`)
	for p := range c.origins {
		set[labeled.ReplaceAllString(p, "$1.*.")] = true
	}
	for _, p := range schemaPaths(reflect.TypeOf(Config{}), "") {
		if strings.HasSuffix(p, ".*.name") {
			continue // labels
		}
		if !set[p] {
			t.Errorf("agent.hcl does not document %s", p)
		}
	}
}
