package etcd

import (
	"go/ast"
	"go/parser"
	"go/token"
	"path/filepath"
	"strings"
	"testing"
)

// TestSourceSizes holds the package to the size limits of issue 30: no
// non-test function over 80 lines and no non-test file over 500, so that
// each function can be read against the invariants at the top of its file.
func TestSourceSizes(t *testing.T) {
	const maxFunc, maxFile = 80, 500
	files, err := filepath.Glob("*.go")
	if err != nil {
		t.Fatal(err)
	}
	fset := token.NewFileSet()
	for _, name := range files {
		if strings.HasSuffix(name, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(fset, name, nil, 0)
		if err != nil {
			t.Fatal(err)
		}
		if n := fset.File(f.Pos()).LineCount(); n > maxFile {
			t.Errorf("%s: %d lines, over %d", name, n, maxFile)
		}
		for _, d := range f.Decls {
			fd, ok := d.(*ast.FuncDecl)
			if !ok {
				continue
			}
			n := fset.Position(fd.End()).Line - fset.Position(fd.Pos()).Line + 1
			if n > maxFunc {
				t.Errorf("%s: func %s: %d lines, over %d", name, fd.Name.Name, n, maxFunc)
			}
		}
	}
}
