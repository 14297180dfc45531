// This file compares the names of package fencedlock with those of
// package driver (driver-move: keep the names as written).

package fencedlock_test

import (
	"errors"
	"fmt"
	"go/ast"
	"go/doc"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/fencedlock/fencedlock"
	"github.com/fencedlock/fencedlock/driver"
)

// reexported are the names of package driver that package fencedlock
// re-exports for its users, as the same values: the errors, the limits and
// ValidateKey. Every other exported name of driver is the backend author's
// contract and must not appear in the user's package.
var reexported = []string{
	"DefaultReleaseTimeout", "ErrClosed", "ErrInvalid", "ErrNotAcquired", "ErrNotHeld", "ErrPermanent",
	"HeldError", "MaxKeyLen", "MaxTTL", "MinTTL", "ValidateKey",
}

// docNames returns the exported top-level names go doc shows for the
// package in dir (its non-test files), and for each the source of its
// declaration.
func docNames(t *testing.T, dir, importPath string) map[string]string {
	t.Helper()
	fset := token.NewFileSet()
	paths, err := filepath.Glob(filepath.Join(dir, "*.go"))
	if err != nil {
		t.Fatal(err)
	}
	var files []*ast.File
	srcs := map[string][]byte{}
	for _, p := range paths {
		if strings.HasSuffix(p, "_test.go") {
			continue
		}
		src, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		f, err := parser.ParseFile(fset, p, src, parser.ParseComments)
		if err != nil {
			t.Fatal(err)
		}
		files = append(files, f)
		srcs[p] = src
	}
	pkg, err := doc.NewFromFiles(fset, files, importPath, doc.PreserveAST)
	if err != nil {
		t.Fatal(err)
	}
	names := map[string]string{}
	text := func(n ast.Node) string {
		p, e := fset.Position(n.Pos()), fset.Position(n.End())
		return string(srcs[p.Filename][p.Offset:e.Offset])
	}
	values := func(vs []*doc.Value) {
		for _, v := range vs {
			for _, sp := range v.Decl.Specs {
				for _, n := range sp.(*ast.ValueSpec).Names {
					names[n.Name] = text(sp)
				}
			}
		}
	}
	values(append(pkg.Consts, pkg.Vars...))
	for _, f := range pkg.Funcs {
		names[f.Name] = text(f.Decl)
	}
	for _, ty := range pkg.Types {
		names[ty.Name] = text(ty.Decl)
		values(append(ty.Consts, ty.Vars...))
		for _, f := range ty.Funcs {
			names[f.Name] = text(f.Decl)
		}
	}
	return names
}

// TestRootDocShowsNoDriverContract is the test of issue 18's decision:
// go doc of the user's package lists no name of the driver contract
// (Backend, Grant, AcquireRequest, Notifier, WaitAcquirer, KeepAliver,
// Renewal, Inspector, Info, HolderID, ...), and every name it shares with
// package driver is a re-export of the driver's value, not a copy.
func TestRootDocShowsNoDriverContract(t *testing.T) {
	root := docNames(t, ".", "github.com/fencedlock/fencedlock")
	drv := docNames(t, "driver", "github.com/fencedlock/fencedlock/driver")
	for _, want := range []string{"Backend", "Grant", "AcquireRequest", "Notifier", "WaitAcquirer", "KeepAliver", "Renewal", "Inspector", "Info", "HolderID"} {
		if _, ok := drv[want]; !ok {
			t.Errorf("package driver does not declare %s", want)
		}
	}
	for name := range drv {
		decl, ok := root[name]
		switch {
		case !ok:
		case !slices.Contains(reexported, name):
			t.Errorf("go doc of package fencedlock lists %s, part of the driver contract", name)
		case !strings.Contains(decl, "driver."+name):
			t.Errorf("package fencedlock declares %s as %q: want a re-export of driver.%s (the same value)", name, decl, name)
		}
	}
	for _, name := range reexported {
		if _, ok := root[name]; !ok {
			t.Errorf("package fencedlock does not re-export %s, which its users need", name)
		}
	}
}

// TestDriverErrorsAreRootErrors: the errors a backend returns through
// package driver are the ones users check through package fencedlock, both
// ways, wrapped or not.
func TestDriverErrorsAreRootErrors(t *testing.T) {
	for _, p := range []struct {
		name      string
		root, drv error
	}{
		{"ErrNotAcquired", fencedlock.ErrNotAcquired, driver.ErrNotAcquired},
		{"ErrNotHeld", fencedlock.ErrNotHeld, driver.ErrNotHeld},
		{"ErrClosed", fencedlock.ErrClosed, driver.ErrClosed},
		{"ErrInvalid", fencedlock.ErrInvalid, driver.ErrInvalid},
		{"ErrPermanent", fencedlock.ErrPermanent, driver.ErrPermanent},
	} {
		if p.root != p.drv {
			t.Errorf("fencedlock.%s and driver.%s are different values", p.name, p.name)
		}
		if !errors.Is(fmt.Errorf("mystore: %w", p.drv), p.root) || !errors.Is(fmt.Errorf("mystore: %w", p.root), p.drv) {
			t.Errorf("errors.Is does not match a wrapped %s across the two packages", p.name)
		}
	}
	err := fmt.Errorf("mystore: %w", &driver.HeldError{Key: "k", RetryAfter: time.Second})
	var held *fencedlock.HeldError
	if !errors.As(err, &held) || held.RetryAfter != time.Second || !errors.Is(err, fencedlock.ErrNotAcquired) {
		t.Errorf("a driver.HeldError is not a *fencedlock.HeldError wrapping ErrNotAcquired: %v", err)
	}
	if err := fencedlock.ValidateKey(""); !errors.Is(err, driver.ErrInvalid) {
		t.Errorf("fencedlock.ValidateKey(\"\") = %v, want driver.ErrInvalid", err)
	}
}

// maxRootNames bounds the exported top-level names (types, functions,
// constants, variables; methods not counted) of package fencedlock, the
// user's package (issue 30 item 3): the trace events live in package
// locktrace, the driver contract in package driver.
const maxRootNames = 40

// TestRootExportsAtMost40 pins the size of go doc's index of package
// fencedlock: a newcomer reads it in one screen.
func TestRootExportsAtMost40(t *testing.T) {
	root := docNames(t, ".", "github.com/fencedlock/fencedlock")
	names := make([]string, 0, len(root))
	for n := range root {
		names = append(names, n)
	}
	slices.Sort(names)
	if len(names) > maxRootNames {
		t.Errorf("package fencedlock exports %d top-level names, want at most %d: %s", len(names), maxRootNames, strings.Join(names, " "))
	}
	t.Logf("package fencedlock exports %d top-level names: %s", len(names), strings.Join(names, " "))
}
