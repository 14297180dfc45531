package conformance_test

import (
	"os"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/fencedlock/fencedlock/conformance"
)

// TestDocListsProperties checks that the package documentation lists
// exactly the properties Run checks, in the same order.
func TestDocListsProperties(t *testing.T) {
	src, err := os.ReadFile("doc.go")
	if err != nil {
		t.Fatal(err)
	}
	var documented []string
	for _, m := range regexp.MustCompile(`(?m)^//   - (\w+): `).FindAllStringSubmatch(string(src), -1) {
		documented = append(documented, m[1])
	}
	run := conformance.PropertyNames()
	if !slices.Equal(documented, run) {
		t.Errorf("doc.go lists the properties\n\t%v\nRun checks\n\t%v", documented, run)
	}
}

// TestEveryPropertyHasABrokenBackend checks that each property is the one
// meant to catch at least one broken variant, which
// TestBrokenBackendsAreReported then shows it does.
func TestEveryPropertyHasABrokenBackend(t *testing.T) {
	for _, p := range conformance.PropertyNames() {
		if !slices.ContainsFunc(brokenVariants, func(v variant) bool { return slices.Contains(v.want, p) }) {
			t.Errorf("no broken variant is meant to be caught by %s", p)
		}
	}
}

// TestGuideCoverageTable checks that GUIDE.md's contract coverage table
// names every property and every broken variant.
func TestGuideCoverageTable(t *testing.T) {
	src, err := os.ReadFile("GUIDE.md")
	if err != nil {
		t.Fatal(err)
	}
	guide := string(src)
	for _, p := range conformance.PropertyNames() {
		if !strings.Contains(guide, "| "+p+" |") && !strings.Contains(guide, "| "+p+",") && !strings.Contains(guide, ", "+p+" |") {
			t.Errorf("GUIDE.md's coverage table has no row checked by %s", p)
		}
	}
	for _, v := range brokenVariants {
		if !strings.Contains(guide, "`"+v.name+"`") {
			t.Errorf("GUIDE.md's coverage table does not name the broken variant %s", v.name)
		}
		if only := strings.Contains(guide, "`"+v.name+"` (only)"); only != exclusive[v.name] {
			t.Errorf("GUIDE.md marks %s (only) = %v, but TestBrokenBackendsAreReported asserts exclusive = %v", v.name, only, exclusive[v.name])
		}
	}
}
