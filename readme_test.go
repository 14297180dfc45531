package fencedlock_test

import (
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// TestReadmeSnippetsCompile extracts every Go code block of README.md and
// type-checks it (go vet) as a program of this module, so that the README
// cannot show code that does not compile against the API it documents.
// Every block is a complete file (its package clause and imports): a
// program, or a _test package, whose tests are also run.
func TestReadmeSnippetsCompile(t *testing.T) {
	if testing.Short() {
		t.Skip("builds programs; not in -short")
	}
	readme, err := os.ReadFile("README.md")
	if err != nil {
		t.Fatal(err)
	}
	blocks := regexp.MustCompile("(?ms)^```go\n(.*?)^```").FindAllStringSubmatch(string(readme), -1)
	if len(blocks) == 0 {
		t.Fatal("no Go code block in README.md")
	}
	root, err := os.MkdirTemp(".", "_readme")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(root) })
	var dirs, tests []string
	for i, b := range blocks {
		src := b[1]
		first, _, _ := strings.Cut(src, "\n")
		pkg, ok := strings.CutPrefix(first, "package ")
		if !ok {
			t.Errorf("README Go block %d (%q...) is not a complete file: start it with its package clause and imports", i+1, first)
			continue
		}
		file := "main.go"
		if strings.HasSuffix(pkg, "_test") {
			file = "main_test.go"
		}
		dir := filepath.Join(root, "snippet"+string(rune('a'+i)))
		if err := os.Mkdir(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, file), []byte(src), 0o644); err != nil {
			t.Fatal(err)
		}
		dirs = append(dirs, "./"+filepath.ToSlash(dir))
		if file == "main_test.go" {
			tests = append(tests, "./"+filepath.ToSlash(dir))
		}
	}
	if len(dirs) == 0 {
		return
	}
	cmd := exec.Command("go", append([]string{"vet"}, dirs...)...)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go vet of the README's Go blocks: %v\n%s", err, out)
	}
	// The tests need no server: run them as a reader would. (The programs
	// need a Redis or etcd at a fixed address, so they are only checked.)
	if len(tests) > 0 {
		cmd := exec.Command("go", append([]string{"test", "-count=1"}, tests...)...)
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("go test of the README's test blocks: %v\n%s", err, out)
		}
	}
	t.Logf("%d README Go blocks type-checked, %d of them run as tests", len(dirs), len(tests))
}
