package agent

import (
	"go/ast"
	"go/parser"
	"go/token"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// maxFuncLines is the longest a function of the agent may be: the agent
// wires and executes; a longer function is a decision growing outside the
// reconciler, or wiring that wants splitting.
const maxFuncLines = 60

// TestAgentStaysThin keeps the agent's own code (tests aside) within the
// layering DESIGN §5 sets: no function over maxFuncLines lines, and no
// direct use of Nomad's API types, whose reads and edits belong in jobs/
// and whose calls belong in backend/nomad.
func TestAgentStaysThin(t *testing.T) {
	files, err := filepath.Glob("*.go")
	if err != nil {
		t.Fatal(err)
	}
	fset := token.NewFileSet()
	for _, name := range files {
		if strings.HasSuffix(name, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(fset, name, nil, parser.ImportsOnly|parser.ParseComments)
		if err != nil {
			t.Fatal(err)
		}
		for _, imp := range f.Imports {
			if path, _ := strconv.Unquote(imp.Path.Value); path == "github.com/hashicorp/nomad/api" {
				t.Errorf("%s imports %s: job reads and edits belong in jobs/, calls in backend/nomad", name, path)
			}
		}
		if f, err = parser.ParseFile(fset, name, nil, 0); err != nil {
			t.Fatal(err)
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
}
