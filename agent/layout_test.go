package agent

import (
	"go/ast"
	"go/parser"
	"go/token"
	"maps"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
)

// maxFuncLines is the longest a function of the agent may be: the agent
// wires and executes; a longer function is a decision growing outside the
// reconciler, or wiring that wants splitting.
const maxFuncLines = 60

// nomadAPI is Nomad's API package, which DESIGN §5 keeps out of the agent:
// job reads and edits belong in jobs/, calls in backend/nomad, and the
// client is built where everything is wired (command/).
const nomadAPI = "github.com/hashicorp/nomad/api"

// module is this repository's module path.
const module = "github.com/nomad-statefulset/nomad-statefulset/"

// nomadAPIVia are the packages the agent imports that still bring in
// nomadAPI, and why. Issue 24 asks that `go list -deps ./agent` have none;
// that needs jobs/ and backend/nomad to expose their values without
// Nomad's types, which is not done yet. Until then this list may only
// shrink: a new import that brings Nomad's API into the agent fails
// TestAgentStaysThin.
var nomadAPIVia = map[string]string{
	// Parse reads the parent *api.Job and RenderChild, RestoreCount and
	// ApplyRevision produce *api.Job values, which the agent hands from the
	// cache to the API without looking inside.
	"jobs": "parses and renders *api.Job",
	// The API interface, Cache, Snapshot and Observation (Parent,
	// PodDetail.Job) are declared with Nomad's types.
	"backend/nomad": "API, Cache and Observation are declared with Nomad's types",
	// The built-in provisioner's factory takes the agent's nomad.API, and
	// the agent registers it (the autoscaler's setupPlugins).
	"plugin/builtin/hostvolume": "creates host volumes through nomad.API",
}

// TestAgentStaysThin keeps the agent's own code and its configuration
// package (tests aside) within the layering DESIGN §5 sets: no function
// over maxFuncLines lines, and no direct use of Nomad's API types.
func TestAgentStaysThin(t *testing.T) {
	for _, dir := range []string{".", "config"} {
		files, err := filepath.Glob(filepath.Join(dir, "*.go"))
		if err != nil {
			t.Fatal(err)
		}
		for _, name := range files {
			if !strings.HasSuffix(name, "_test.go") {
				checkThin(t, name)
			}
		}
	}
}

// checkThin checks one source file of the agent: no import of nomadAPI and
// no function over maxFuncLines lines.
func checkThin(t *testing.T, name string) {
	t.Helper()
	fset := token.NewFileSet()
	f, err := parser.ParseFile(fset, name, nil, 0)
	if err != nil {
		t.Fatal(err)
	}
	for _, imp := range f.Imports {
		if path, _ := strconv.Unquote(imp.Path.Value); path == nomadAPI {
			t.Errorf("%s imports %s: job reads and edits belong in jobs/, calls in backend/nomad, clients in command/", name, path)
		}
	}
	for _, d := range f.Decls {
		fn, ok := d.(*ast.FuncDecl)
		if !ok {
			continue
		}
		if n := fset.Position(fn.End()).Line - fset.Position(fn.Pos()).Line + 1; n > maxFuncLines {
			t.Errorf("%s: %s is %d lines, over %d", name, fn.Name.Name, n, maxFuncLines)
		}
	}
}

// TestNomadAPIStaysOut checks what the agent's dependency graph holds of
// nomadAPI: agent/config none at all (its clients are built in command/),
// and the agent only through the packages in nomadAPIVia.
func TestNomadAPIStaysOut(t *testing.T) {
	out, err := exec.Command("go", "list", "-deps", "-f", `{{.ImportPath}} {{join .Imports " "}}`, ".", "./config").Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	imports := map[string][]string{}
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		f := strings.Fields(line)
		imports[f[0]] = f[1:]
	}
	reaches := map[string]bool{}
	var reach func(pkg string) bool
	reach = func(pkg string) bool {
		if r, ok := reaches[pkg]; ok {
			return r
		}
		reaches[pkg] = false // the graph is acyclic; this ends the walk
		r := pkg == nomadAPI || slices.ContainsFunc(imports[pkg], reach)
		reaches[pkg] = r
		return r
	}
	if reach(module + "agent/config") {
		t.Errorf("agent/config depends on %s: build API clients in command/", nomadAPI)
	}
	var via []string
	for _, imp := range imports[module+"agent"] {
		if reach(imp) {
			via = append(via, strings.TrimPrefix(imp, module))
		}
	}
	if want := slices.Sorted(maps.Keys(nomadAPIVia)); !slices.Equal(via, want) {
		t.Errorf("the agent reaches %s through %q, want only %q (nomadAPIVia may only shrink)", nomadAPI, via, want)
	}
}
