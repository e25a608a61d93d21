package agent

import (
	"go/ast"
	"go/parser"
	"go/token"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/nomad-statefulset/nomad-statefulset/jobs"
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

// TestNomadAPIStaysOut checks that nothing the agent or agent/config
// depends on (`go list -deps`) is nomadAPI: the agent sees Nomad through
// backend.Cluster, which command/ wires to backend/nomad, and reads jobs
// only through backend.ParentJob and backend.ChildJob. A failure names the
// agent's imports that bring nomadAPI in.
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
	if _, ok := imports[nomadAPI]; ok {
		var via []string
		for _, pkg := range []string{module + "agent", module + "agent/config"} {
			for _, imp := range imports[pkg] {
				if reaches(imports, imp, nomadAPI) {
					via = append(via, strings.TrimPrefix(pkg, module)+" → "+strings.TrimPrefix(imp, module))
				}
			}
		}
		t.Errorf("go list -deps ./agent ./agent/config holds %s, through %q: the agent must see Nomad only through backend's interfaces", nomadAPI, via)
	}
}

// reaches reports whether pkg depends on target in the import graph.
func reaches(imports map[string][]string, pkg, target string) bool {
	seen := map[string]bool{}
	var walk func(string) bool
	walk = func(p string) bool {
		if p == target {
			return true
		}
		if seen[p] {
			return false
		}
		seen[p] = true
		return slices.ContainsFunc(imports[p], walk)
	}
	return walk(pkg)
}

// TestClaimClassKeyIsTheAnnotation: the agent names a claim's class
// annotation in its messages without importing jobs/ (which reads Nomad's
// jobs); it must be the key jobs/ parses.
func TestClaimClassKeyIsTheAnnotation(t *testing.T) {
	for _, claim := range []string{"data", "wal"} {
		if got, want := claimClassKey(claim), jobs.ClaimClassKey(claim); got != want {
			t.Errorf("claimClassKey(%q) = %q, jobs parses %q", claim, got, want)
		}
	}
}
