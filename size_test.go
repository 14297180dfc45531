package fencedlock_test

import (
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"path/filepath"
	"strings"
	"testing"
)

// TestSourceSizes holds the whole tree, every module, to the size limits
// of issue 30: no non-test function over 80 lines and no non-test file
// over 500, so that each function can be read against the invariants at
// the top of its file. Test-helper packages (internal/*test) count: they
// are not _test.go files. Generated files are left out.
func TestSourceSizes(t *testing.T) {
	const maxFunc, maxFile = 80, 500
	fset := token.NewFileSet()
	checked := 0
	err := filepath.WalkDir(".", func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			if name := d.Name(); path != "." && (strings.HasPrefix(name, ".") || name == "testdata" || name == "vendor") {
				return filepath.SkipDir
			}
			return nil
		}
		if !d.Type().IsRegular() || !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
			return nil // symbolic links (otel/etcdtest shares files) are read where they point
		}
		f, err := parser.ParseFile(fset, path, nil, parser.ParseComments)
		if err != nil {
			return err
		}
		if ast.IsGenerated(f) {
			return nil
		}
		checked++
		if n := fset.File(f.Pos()).LineCount(); n > maxFile {
			t.Errorf("%s: %d lines, over %d", path, n, maxFile)
		}
		for _, decl := range f.Decls {
			fd, ok := decl.(*ast.FuncDecl)
			if !ok {
				continue
			}
			if n := fset.Position(fd.End()).Line - fset.Position(fd.Pos()).Line + 1; n > maxFunc {
				t.Errorf("%s: func %s: %d lines, over %d", path, fd.Name.Name, n, maxFunc)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if checked < 200 {
		t.Fatalf("checked %d files: the walk missed the tree", checked)
	}
	t.Logf("%d non-test Go files checked", checked)
}
