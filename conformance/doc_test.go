package conformance_test

import (
	"os"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"unicode"

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

// TestGuideNamesOnlyProperties checks the converse of
// TestGuideCoverageTable: every name in a property column of GUIDE.md's
// tables (the coverage table's second column, every column but the first
// of the key-states table) is a property Run checks, so that a property
// removed or renamed cannot stay in the guide. A cell lists names separated
// by commas; text in parentheses or backquotes, "—" and phrases that do not
// start with a capital letter (such as "not visible through a Harness") are
// notes, not names.
func TestGuideNamesOnlyProperties(t *testing.T) {
	src, err := os.ReadFile("GUIDE.md")
	if err != nil {
		t.Fatal(err)
	}
	run := conformance.PropertyNames()
	notes := regexp.MustCompile("\\([^)]*\\)|`[^`]*`")
	name := regexp.MustCompile(`^[A-Z]\w*$`)
	tables := 0
	var columns []int // the property columns of the current table
	for line := range strings.Lines(string(src)) {
		line = strings.TrimSpace(line)
		if !strings.HasPrefix(line, "|") {
			columns = nil
			continue
		}
		cells := strings.Split(strings.Trim(line, "|"), "|")
		switch {
		case columns == nil && strings.TrimSpace(cells[1]) == "Property":
			columns = []int{1}
			tables++
			continue
		case columns == nil && strings.TrimSpace(cells[0]) == "State":
			columns = []int{1, 2, 3, 4}
			tables++
			continue
		case columns == nil || strings.HasPrefix(cells[0], "---"):
			continue
		}
		for _, c := range columns {
			for item := range strings.SplitSeq(notes.ReplaceAllString(cells[c], ""), ",") {
				item = strings.TrimSpace(item)
				if item == "" || item == "—" || !unicode.IsUpper([]rune(item)[0]) {
					continue
				}
				if !name.MatchString(item) || !slices.Contains(run, item) {
					t.Errorf("GUIDE.md names %q as a property in %q, but Run checks no such property", item, line)
				}
			}
		}
	}
	if tables != 2 {
		t.Errorf("found %d property tables in GUIDE.md, want 2 (the coverage table and the key states)", tables)
	}
}

// TestReadmeCounts checks the counts the repository's README gives for the
// suite: one subtest per property, and the broken backends it catches.
func TestReadmeCounts(t *testing.T) {
	src, err := os.ReadFile("../README.md")
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		re   string
		want int
	}{
		{`One subtest per property \((\d+)\)`, len(conformance.PropertyNames())},
		{`catches \((\d+) in all\)`, len(brokenVariants)},
	} {
		m := regexp.MustCompile(c.re).FindStringSubmatch(string(src))
		if m == nil {
			t.Errorf("README.md: no match for %q", c.re)
			continue
		}
		if m[1] != strconv.Itoa(c.want) {
			t.Errorf("README.md says %q, the suite has %d", m[0], c.want)
		}
	}
}
