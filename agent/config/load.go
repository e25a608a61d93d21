package config

import (
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"

	"github.com/hashicorp/hcl/v2"
	"github.com/hashicorp/hcl/v2/hclparse"
	"github.com/zclconf/go-cty/cty"
	"github.com/zclconf/go-cty/cty/function"
)

// tempDir is os.TempDir, replaceable in tests.
var tempDir = os.TempDir

// lookupEnvFunc is os.LookupEnv's shape. Loading takes one as a parameter so
// that tests never depend on, or change, the process environment.
type lookupEnvFunc func(name string) (string, bool)

// origin records where an attribute's value came from.
type origin struct {
	// rng is the range of the value expression, when it came from a file.
	rng *hcl.Range
	// env names the environment variable, when it came from one.
	env string
}

// source is one configuration text to decode, in order.
type source struct {
	name string
	src  []byte // nil: read the file name
}

// Load builds the configuration from Default(), the NOMAD_* and CONSUL_*
// environment variables, and then each path in order. A path is a file
// (HCL, or HCL's JSON syntax when it ends in .json) or a directory, which
// stands for its *.hcl files sorted by name (hidden files are skipped, and
// subdirectories are not read). Later paths override earlier ones attribute by
// attribute; see the package doc. With no paths, Load returns the defaults
// with the environment applied.
//
// The configuration is validated. On any problem Load returns nil and an
// *Error listing every problem found, each with its file, line and column.
func Load(paths ...string) (*Config, error) {
	var diags hcl.Diagnostics
	var srcs []source
	for _, p := range paths {
		s, d := expandPath(p)
		diags = append(diags, d...)
		srcs = append(srcs, s...)
	}
	return load(os.LookupEnv, srcs, diags)
}

// expandPath turns a -config argument into the files it stands for.
func expandPath(p string) ([]source, hcl.Diagnostics) {
	fi, err := os.Stat(p)
	if err != nil {
		return nil, hcl.Diagnostics{{
			Severity: hcl.DiagError,
			Summary:  "Cannot read configuration",
			Detail:   fmt.Sprintf("%s: %v.", p, err),
		}}
	}
	if !fi.IsDir() {
		return []source{{name: p}}, nil
	}
	entries, err := os.ReadDir(p)
	if err != nil {
		return nil, hcl.Diagnostics{{
			Severity: hcl.DiagError,
			Summary:  "Cannot read configuration directory",
			Detail:   fmt.Sprintf("%s: %v.", p, err),
		}}
	}
	var out []source
	// os.ReadDir sorts by name, which is the documented merge order.
	for _, e := range entries {
		name := e.Name()
		// Hidden files are editor droppings (.#agent.hcl, .agent.hcl.swp
		// matches nothing, but .x.hcl would), never intended config.
		if e.IsDir() || strings.HasPrefix(name, ".") || filepath.Ext(name) != ".hcl" {
			continue
		}
		out = append(out, source{name: filepath.Join(p, name)})
	}
	return out, nil
}

// load is Load with the environment and the sources explicit. Tests and
// FuzzLoad call it directly.
func load(lookup lookupEnvFunc, srcs []source, diags hcl.Diagnostics) (*Config, error) {
	c := Default()
	c.origins = map[string]origin{}
	parser := hclparse.NewParser()
	d := &decoder{
		ctx:     &hcl.EvalContext{Functions: map[string]function.Function{"env": envFunction(lookup)}},
		origins: c.origins,
	}

	diags = append(diags, applyEnv(c, lookup)...)

	var order []string
	for _, s := range srcs {
		order = append(order, s.name)
		var f *hcl.File
		var pd hcl.Diagnostics
		switch {
		case s.src != nil && strings.HasSuffix(s.name, ".json"):
			f, pd = parser.ParseJSON(s.src, s.name)
		case s.src != nil:
			f, pd = parser.ParseHCL(s.src, s.name)
		case strings.HasSuffix(s.name, ".json"):
			f, pd = parser.ParseJSONFile(s.name)
		default:
			f, pd = parser.ParseHCLFile(s.name)
		}
		diags = append(diags, pd...)
		// A file with syntax errors is not decoded: its partial body would
		// only add confusing follow-on errors. The other files still are, so
		// their problems show up in the same run.
		if f == nil || pd.HasErrors() {
			continue
		}
		diags = append(diags, d.decodeBody(f.Body, c, "")...)
	}

	c.resolveConsulToken()
	c.derive()
	diags = append(diags, c.validate()...)
	if diags.HasErrors() {
		sortDiagnostics(diags, order)
		return nil, &Error{Diagnostics: diags, files: maskSecrets(parser.Files(), d.secrets)}
	}
	return c, nil
}

// sortDiagnostics orders diagnostics by file (in load order), then line and
// column, so the report reads top to bottom. Diagnostics with no position
// (environment, unreadable paths) come first. The sort is stable, so
// diagnostics at the same place keep the order they were found in.
func sortDiagnostics(diags hcl.Diagnostics, order []string) {
	rank := map[string]int{}
	for i, n := range order {
		if _, ok := rank[n]; !ok {
			rank[n] = i
		}
	}
	key := func(d *hcl.Diagnostic) (int, int, int) {
		if d.Subject == nil {
			return -1, 0, 0
		}
		r, ok := rank[d.Subject.Filename]
		if !ok {
			r = len(order)
		}
		return r, d.Subject.Start.Line, d.Subject.Start.Column
	}
	sort.SliceStable(diags, func(i, j int) bool {
		fi, li, ci := key(diags[i])
		fj, lj, cj := key(diags[j])
		if fi != fj {
			return fi < fj
		}
		if li != lj {
			return li < lj
		}
		return ci < cj
	})
}

// resolveConsulToken keeps at most one of consul.token and
// consul.token_file. The one set by the higher layer wins (a file beats the
// environment); when both come from the environment, CONSUL_HTTP_TOKEN_FILE
// wins, as it does in Consul's own client. Both set in files is an error,
// reported by validate.
func (c *Config) resolveConsulToken() {
	if c.Consul.Token == "" || c.Consul.TokenFile == "" {
		return
	}
	tok, file := c.origins["consul.token"], c.origins["consul.token_file"]
	switch {
	case tok.env == "" && file.env == "":
		// both from files (or set in Go): validate reports it.
	case tok.env == "":
		c.Consul.TokenFile = ""
		delete(c.origins, "consul.token_file")
	default:
		c.Consul.Token = ""
		delete(c.origins, "consul.token")
	}
}

// envFunction returns the HCL function env(name [, default]). An unset
// variable with no default is an error, so that `token = env("NOMAD_TOKEN")`
// cannot silently run with no token; a set but empty variable is "". The
// default may be null, which leaves the attribute at its previous value.
func envFunction(lookup lookupEnvFunc) function.Function {
	return function.New(&function.Spec{
		Description: "Returns the value of an environment variable, or the default when it is unset.",
		Params: []function.Parameter{{
			Name: "name",
			Type: cty.String,
		}},
		VarParam: &function.Parameter{
			Name:      "default",
			Type:      cty.String,
			AllowNull: true,
		},
		Type: function.StaticReturnType(cty.String),
		Impl: func(args []cty.Value, _ cty.Type) (cty.Value, error) {
			if len(args) > 2 {
				return cty.NilVal, function.NewArgErrorf(2, "env takes a name and at most one default, got %d arguments", len(args))
			}
			name := args[0].AsString()
			if name == "" {
				return cty.NilVal, function.NewArgErrorf(0, "the variable name must not be empty")
			}
			if v, ok := lookup(name); ok {
				return cty.StringVal(v), nil
			}
			if len(args) == 2 {
				return args[1], nil
			}
			return cty.NilVal, fmt.Errorf("environment variable %s is not set; to make it optional, give a default: env(%q, \"\")", name, name)
		},
	})
}
