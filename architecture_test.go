package fencedlock_test

import (
	"os"
	"os/exec"
	"path"
	"strings"
	"testing"
)

// archPkg is one package of the module as go list reports it.
type archPkg struct {
	imports, deps []string
}

// TestArchitectureImports checks the import rules written in
// docs/ARCHITECTURE.md (its ```rules block) against go list -deps, so that
// the page and the code cannot drift. A rule naming a package of this
// module that does not exist (yet: the layout issue 30 plans) is skipped
// with a log line, not failed.
func TestArchitectureImports(t *testing.T) {
	doc, err := os.ReadFile("docs/ARCHITECTURE.md")
	if err != nil {
		t.Fatalf("the architecture page: %v", err)
	}
	_, after, ok := strings.Cut(string(doc), "```rules\n")
	if !ok {
		t.Fatal("docs/ARCHITECTURE.md has no ```rules block")
	}
	block, _, _ := strings.Cut(after, "```")

	out, err := exec.Command("go", "list", "-f", "{{.ImportPath}}|{{join .Imports \",\"}}|{{join .Deps \",\"}}", "./...").Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	mod, err := exec.Command("go", "list", "-m").Output()
	if err != nil {
		t.Fatalf("go list -m: %v", err)
	}
	module := strings.TrimSpace(string(mod))
	pkgs := map[string]archPkg{}
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		f := strings.Split(line, "|")
		if len(f) != 3 {
			t.Fatalf("go list line %q", line)
		}
		pkgs[rel(module, f[0])] = archPkg{imports: split(f[1]), deps: split(f[2])}
	}

	checked := 0
	for n, line := range strings.Split(block, "\n") {
		line = strings.TrimSpace(line)
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		fields := strings.Fields(line)
		verb := -1
		for i, f := range fields {
			if f == "may-import" || f == "must-not-depend" || f == "must-import" {
				verb = i
				break
			}
		}
		if verb < 1 || verb == len(fields)-1 {
			t.Fatalf("rules line %d %q: want PACKAGES verb PATTERNS", n+1, line)
		}
		subjects, patterns := fields[:verb], fields[verb+1:]
		if missing := absent(pkgs, append(append([]string{}, subjects...), patterns...)); missing != "" {
			t.Logf("rule %q skipped: %s is not a package of the module yet", line, missing)
			continue
		}
		for _, p := range matching(pkgs, subjects) {
			checked++
			for _, problem := range checkRule(module, p, pkgs[p], fields[verb], patterns) {
				t.Errorf("docs/ARCHITECTURE.md rule %q: %s", line, problem)
			}
		}
	}
	if checked == 0 {
		t.Fatal("no rule of docs/ARCHITECTURE.md applied to any package")
	}
	t.Logf("%d package checks against %d packages", checked, len(pkgs))
}

// checkRule returns what package p (with imports and deps) does against
// the rule verb patterns.
func checkRule(module, p string, pkg archPkg, verb string, patterns []string) []string {
	var problems []string
	switch verb {
	case "may-import":
		for _, imp := range pkg.imports {
			r := rel(module, imp)
			if !strings.HasPrefix(r, ".") {
				continue // the standard library and other modules: not this rule's concern
			}
			if !anyMatch(patterns, r) {
				problems = append(problems, p+" imports "+r)
			}
		}
	case "must-not-depend":
		for _, d := range pkg.deps {
			r := rel(module, d)
			if r == p || (p != "." && strings.HasPrefix(r, p+"/")) {
				continue // the package itself and its own subpackages
			}
			if anyMatch(patterns, r) {
				problems = append(problems, p+" depends on "+r+" (go list -deps "+abs(module, p)+")")
			}
		}
	case "must-import":
		for _, want := range patterns {
			found := false
			for _, imp := range pkg.imports {
				if match(want, rel(module, imp)) {
					found = true
				}
			}
			if !found {
				problems = append(problems, p+" does not import "+want)
			}
		}
	}
	return problems
}

// rel writes a package of module as ./path (the module root as "."), and
// leaves other import paths as they are.
func rel(module, p string) string {
	if p == module {
		return "."
	}
	if r, ok := strings.CutPrefix(p, module+"/"); ok {
		return "./" + r
	}
	return p
}

func abs(module, p string) string {
	if p == "." {
		return module
	}
	if r, ok := strings.CutPrefix(p, "./"); ok {
		return module + "/" + r
	}
	return p
}

// match reports whether package p matches pattern: "x/..." is x and those
// under it, "*" matches within one path element, "-" matches nothing.
func match(pattern, p string) bool {
	if base, ok := strings.CutSuffix(pattern, "/..."); ok {
		return p == base || strings.HasPrefix(p, base+"/")
	}
	ok, _ := path.Match(pattern, p)
	return ok
}

func anyMatch(patterns []string, p string) bool {
	for _, pat := range patterns {
		if match(pat, p) {
			return true
		}
	}
	return false
}

// matching returns the module's packages matching any of patterns.
func matching(pkgs map[string]archPkg, patterns []string) []string {
	var out []string
	for p := range pkgs {
		if anyMatch(patterns, p) {
			out = append(out, p)
		}
	}
	return out
}

// absent returns the first pattern naming packages of this module (./x or
// ./x/..., no *) that matches none of them, or "".
func absent(pkgs map[string]archPkg, patterns []string) string {
	for _, pat := range patterns {
		if pat == "-" || !strings.HasPrefix(pat, ".") || strings.ContainsAny(pat, "*") {
			continue
		}
		if len(matching(pkgs, []string{pat})) == 0 {
			return pat
		}
	}
	return ""
}

func split(s string) []string {
	if s == "" {
		return nil
	}
	return strings.Split(s, ",")
}
