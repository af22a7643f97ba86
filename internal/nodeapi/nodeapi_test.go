package nodeapi_test

import (
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
)

// exported returns the exported top-level names declared in dir's non-test files.
func exported(t *testing.T, dir string) map[string]bool {
	t.Helper()
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	names := map[string]bool{}
	for _, e := range entries {
		if !strings.HasSuffix(e.Name(), ".go") || strings.HasSuffix(e.Name(), "_test.go") {
			continue
		}
		f, err := parser.ParseFile(token.NewFileSet(), filepath.Join(dir, e.Name()), nil, parser.SkipObjectResolution)
		if err != nil {
			t.Fatal(err)
		}
		for _, d := range f.Decls {
			switch d := d.(type) {
			case *ast.FuncDecl:
				if d.Recv == nil && d.Name.IsExported() {
					names[d.Name.Name] = true
				}
			case *ast.GenDecl:
				for _, s := range d.Specs {
					switch s := s.(type) {
					case *ast.TypeSpec:
						if s.Name.IsExported() {
							names[s.Name.Name] = true
						}
					case *ast.ValueSpec:
						for _, n := range s.Names {
							if n.IsExported() {
								names[n.Name] = true
							}
						}
					}
				}
			}
		}
	}
	return names
}

// Every name of the contract (client/nodeapi) is re-exported here, so a
// package of this module that still imports internal/nodeapi sees all of it.
func TestReexportsEverything(t *testing.T) {
	_, file, _, _ := runtime.Caller(0)
	here := filepath.Dir(file)
	contract := exported(t, filepath.Join(here, "..", "..", "client", "nodeapi"))
	mine := exported(t, here)
	if len(contract) < 10 {
		t.Fatalf("client/nodeapi declares only %v", contract)
	}
	for name := range contract {
		if !mine[name] {
			t.Errorf("internal/nodeapi does not re-export %s", name)
		}
	}
}
