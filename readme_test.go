package fencedlock_test

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/fencedlock/fencedlock/internal/testserver"
)

// TestReadmeSnippetsCompile extracts every Go code block of README.md and
// type-checks it (go vet) as a program of this module, so that the README
// cannot show code that does not compile against the API it documents.
// Every block is a complete file (its package clause and imports): a
// program, or a _test package, whose tests are also run.
func TestReadmeSnippetsCompile(t *testing.T) {
	testserver.SkipShort(t, "go vet and go test of the README's programs")
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

// TestReadmeQuickStart holds the README's first screen to what works on a
// fresh machine: a quick start of three lines; the module go get names is
// this one; what go install names is a command of this module (a package
// main without replace directives in its module, so that @latest works);
// and the local etcd it offers starts, serves a Put and a Get, and stops
// on SIGINT (not under -short: that part starts a server).
func TestReadmeQuickStart(t *testing.T) {
	readme, lines, _ := readmeShBlock(t, "## Quick start")
	if len(lines) != 3 {
		t.Fatalf("the quick start is %d lines, want 3:\n%s", len(lines), strings.Join(lines, "\n"))
	}
	if head := strings.Join(strings.Split(readme, "\n")[:40], "\n"); !strings.Contains(head, "## Quick start") {
		t.Error("the quick start is not on the README's first screen (40 lines)")
	}
	mod, err := exec.Command("go", "list", "-m").Output()
	if err != nil {
		t.Fatal(err)
	}
	module := strings.TrimSpace(string(mod))
	if f := strings.Fields(lines[0]); len(f) < 3 || f[0] != "go" || f[1] != "get" || f[2] != module+"@latest" {
		t.Errorf("line 1 %q: want go get %s@latest", lines[0], module)
	}
	f := strings.Fields(lines[1])
	if len(f) < 3 || f[0] != "go" || f[1] != "install" || !strings.HasSuffix(f[2], "@latest") {
		t.Fatalf("line 2 %q: want go install PKG@latest", lines[1])
	}
	pkg := strings.TrimSuffix(f[2], "@latest")
	out, err := exec.Command("go", "list", "-f", "{{.Name}} {{.Module.Path}} {{.Module.GoMod}}", pkg).CombinedOutput()
	if err != nil {
		t.Fatalf("go list %s: %v\n%s", pkg, err, out)
	}
	var name, modPath, gomod string
	fmt.Sscan(string(out), &name, &modPath, &gomod)
	if name != "main" || modPath != module {
		t.Errorf("%s is package %s of module %s, want a command of %s", pkg, name, modPath, module)
	}
	if data, err := os.ReadFile(gomod); err != nil || strings.Contains(string(data), "\nreplace") {
		t.Errorf("%s has replace directives (go install @latest would refuse it) or cannot be read: %v", gomod, err)
	}
	if !strings.Contains(lines[2], "redis-server") || !strings.Contains(lines[2], "(cd bench && go run ./cmd/devetcd)") {
		t.Fatalf("line 3 %q: want a local redis-server and the development etcd (cd bench && go run ./cmd/devetcd)", lines[2])
	}

	// The development etcd: built as the README runs it, on a free port.
	testserver.SkipShort(t, "the development etcd (bench/cmd/devetcd)")
	exe := filepath.Join(t.TempDir(), "devetcd")
	build := exec.Command("go", "build", "-o", exe, "./cmd/devetcd")
	build.Dir = "bench"
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("building bench/cmd/devetcd: %v\n%s", err, out)
	}
	cmd := exec.Command(exe, "-listen", "127.0.0.1:0")
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	var stderr strings.Builder
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer cmd.Process.Kill()
	first := make(chan string, 1)
	go func() {
		line, _ := bufio.NewReader(stdout).ReadString('\n')
		first <- line
		_, _ = io.Copy(io.Discard, stdout)
	}()
	var ready string
	select {
	case ready = <-first:
	case <-time.After(60 * time.Second):
		t.Fatalf("devetcd not ready after 60s; stderr:\n%s", stderr.String())
	}
	ep := regexp.MustCompile(`http://127\.0\.0\.1:\d+`).FindString(ready)
	if ep == "" {
		t.Fatalf("devetcd said %q; stderr:\n%s", ready, stderr.String())
	}
	client, err := clientv3.New(clientv3.Config{Endpoints: []string{ep}, DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
	if err != nil {
		t.Fatal(err)
	}
	defer client.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if _, err := client.Put(ctx, "readme", "ok"); err != nil {
		t.Fatalf("Put on devetcd: %v", err)
	}
	resp, err := client.Get(ctx, "readme")
	if err != nil || len(resp.Kvs) != 1 || string(resp.Kvs[0].Value) != "ok" {
		t.Fatalf("Get on devetcd: %v, %v", resp, err)
	}
	if err := cmd.Process.Signal(syscall.SIGINT); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("devetcd after SIGINT: %v; stderr:\n%s", err, stderr.String())
		}
	case <-time.After(30 * time.Second):
		t.Fatal("devetcd did not stop within 30s of SIGINT")
	}
}

// TestReadmeContributing pins what the README offers contributors first:
// the block of commands from a checkout keeps its two first commands (the
// demo, make test), and the line under it offers make short, a Makefile
// target that runs go test -short (the loop that starts no server).
func TestReadmeContributing(t *testing.T) {
	_, lines, rest := readmeShBlock(t, "From a checkout of this repository:")
	if len(lines) < 2 || !strings.HasPrefix(lines[0], "go run ./cmd/fencedlock demo") || !strings.HasPrefix(lines[1], "make test") {
		t.Fatalf("the checkout block's first commands are %q, want go run ./cmd/fencedlock demo, then make test", lines)
	}
	next, _, _ := strings.Cut(strings.TrimLeft(rest, "\n"), "\n")
	if !strings.HasPrefix(next, "Contributing:") || !strings.Contains(next, "`make short`") {
		t.Fatalf("the line under the checkout block is %q, want a Contributing: line offering `make short`", next)
	}
	mk, err := os.ReadFile("Makefile")
	if err != nil {
		t.Fatal(err)
	}
	target := regexp.MustCompile(`(?m)^short:.*\n((?:\t.*\n)+)`).FindSubmatch(mk)
	if target == nil || !strings.Contains(string(target[1]), "test -short") || !strings.Contains(string(target[1]), "./...") {
		t.Fatalf("the Makefile has no short target running go test -short ./... (found %q)", target)
	}
}

// readmeShBlock returns README.md, the lines of the sh code block that
// follows the line opening (after one blank line), and the text after the
// block; it fails t if there is no such block.
func readmeShBlock(t *testing.T, opening string) (readme string, lines []string, rest string) {
	t.Helper()
	b, err := os.ReadFile("README.md")
	if err != nil {
		t.Fatal(err)
	}
	_, after, ok := strings.Cut(string(b), opening+"\n\n```sh\n")
	if !ok {
		t.Fatalf("README.md has no %q line followed by a sh block", opening)
	}
	block, rest, _ := strings.Cut(after, "```\n")
	return string(b), strings.Split(strings.TrimSpace(block), "\n"), rest
}
