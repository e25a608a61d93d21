package reconciler

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

// TestTroubleshootingNamesEveryReason: docs/troubleshooting.md names every
// condition type, condition reason and hold reason this package defines,
// as `Name`, so that a new one cannot go undocumented. The constants are
// read from the package's source, not listed here.
func TestTroubleshootingNamesEveryReason(t *testing.T) {
	doc, err := os.ReadFile("../docs/troubleshooting.md")
	if err != nil {
		t.Fatalf("reading the troubleshooting reference: %v", err)
	}
	fset := token.NewFileSet()
	files, err := parseSources(fset)
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, f := range files {
		for _, decl := range f.Decls {
			gd, ok := decl.(*ast.GenDecl)
			if !ok || gd.Tok != token.CONST {
				continue
			}
			for _, spec := range gd.Specs {
				vs := spec.(*ast.ValueSpec)
				for i, name := range vs.Names {
					if !strings.HasPrefix(name.Name, "Condition") && !strings.HasPrefix(name.Name, "Reason") && !strings.HasPrefix(name.Name, "Hold") {
						continue
					}
					lit, ok := vs.Values[i].(*ast.BasicLit)
					if !ok || lit.Kind != token.STRING {
						continue
					}
					v, _ := strconv.Unquote(lit.Value)
					n++
					if !strings.Contains(string(doc), "`"+v+"`") {
						t.Errorf("docs/troubleshooting.md does not name %s (%q)", name.Name, v)
					}
				}
			}
		}
	}
	if n < 20 {
		t.Fatalf("found only %d constants: the test reads the wrong source", n)
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
