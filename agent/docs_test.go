package agent

import (
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// TestTroubleshootingNamesEveryStateAndHold: docs/troubleshooting.md names
// every pod state the agent shows and every hold reason it makes up
// itself (reconciler's own are checked there), read from the source: the
// string literals podState, nodeReason and podStateAndReason give a
// state, and the reason of every waitError literal.
func TestTroubleshootingNamesEveryStateAndHold(t *testing.T) {
	doc, err := os.ReadFile("../docs/troubleshooting.md")
	if err != nil {
		t.Fatalf("reading the troubleshooting reference: %v", err)
	}
	fset := token.NewFileSet()
	files, err := parseSources(fset)
	if err != nil {
		t.Fatal(err)
	}
	names := map[string]string{string(ConditionHeld): "ConditionHeld"}
	stateFuncs := map[string]bool{"podState": true, "nodeReason": true, "podStateAndReason": true}
	for _, f := range files {
		ast.Inspect(f, func(n ast.Node) bool {
			switch n := n.(type) {
			case *ast.FuncDecl:
				if !stateFuncs[n.Name.Name] {
					return true
				}
				ast.Inspect(n.Body, func(m ast.Node) bool {
					var exprs []ast.Expr
					switch m := m.(type) {
					case *ast.ReturnStmt:
						exprs = m.Results[:min(1, len(m.Results))]
					case *ast.AssignStmt:
						if id, ok := m.Lhs[0].(*ast.Ident); ok && id.Name == "state" {
							exprs = m.Rhs
						}
					}
					for _, e := range exprs {
						if lit, ok := e.(*ast.BasicLit); ok && lit.Kind == token.STRING {
							v, _ := strconv.Unquote(lit.Value)
							if v != "" {
								names[v] = n.Name.Name
							}
						}
					}
					return true
				})
				return false
			case *ast.CompositeLit:
				if id, ok := n.Type.(*ast.Ident); !ok || id.Name != "waitError" {
					return true
				}
				for _, el := range n.Elts {
					kv, ok := el.(*ast.KeyValueExpr)
					if k, isIdent := kv.Key.(*ast.Ident); !ok || !isIdent || k.Name != "reason" {
						continue
					}
					if lit, ok := kv.Value.(*ast.BasicLit); ok && lit.Kind == token.STRING {
						v, _ := strconv.Unquote(lit.Value)
						names[v] = "waitError"
					}
				}
			}
			return true
		})
	}
	if len(names) < 12 {
		// ConditionHeld, 11 pod states and 2 hold reasons at the time of writing.
		t.Fatalf("found only %v: the test reads the wrong source", names)
	}
	for v, where := range names {
		if !strings.Contains(string(doc), "`"+v+"`") {
			t.Errorf("docs/troubleshooting.md does not name %q (from %s)", v, where)
		}
	}
}

// parseSources parses the package's own source files, tests left out.
func parseSources(fset *token.FileSet) ([]*ast.File, error) {
	paths, err := filepath.Glob("*.go")
	if err != nil {
		return nil, err
	}
	var files []*ast.File
	for _, path := range paths {
		if strings.HasSuffix(path, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(fset, path, nil, 0)
		if err != nil {
			return nil, err
		}
		files = append(files, f)
	}
	return files, nil
}
