package main

import (
	"bytes"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// runMainEnv, when set, makes the test binary run main with its arguments
// instead of the tests, so a test can run the command as a user would and
// see its exit status and messages.
const runMainEnv = "FENCEDLOCK_REPORT_RUN_MAIN"

func TestMain(m *testing.M) {
	if os.Getenv(runMainEnv) == "1" {
		main()
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// fakeBench is a module with one cheap benchmark that reports like the
// bench module's baseline, and accepts the flags the report passes on.
const fakeBench = `package fakebench

import (
	"flag"
	"testing"
)

var (
	_ = flag.Duration("duration", 0, "")
	_ = flag.Int("leases", 0, "")
	_ = flag.String("leases-scale", "", "")
	_ = flag.Duration("scale-ttl", 0, "")
	_ = flag.Duration("hold", 0, "")
	_ = flag.Int("pass", -1, "")
	_ = flag.Duration("capacity-duration", 0, "")
	_ = flag.Int("capacity-reps", 0, "")
	_ = flag.Int("gap-reps", 0, "")
)

func BenchmarkAcquireRelease(b *testing.B) {
	b.Run("conc=1", func(b *testing.B) {
		b.Run("lib=raw-rueidis", func(b *testing.B) {
			for b.Loop() {
			}
		})
	})
}
`

// runReport runs the report command in a fresh directory holding the fake
// benchmark module and a README with the report markers, and returns that
// directory, the command's standard error and its exit code.
func runReport(t *testing.T, args ...string) (dir, stderr string, code int) {
	t.Helper()
	dir = t.TempDir()
	files := map[string]string{
		"go.mod":            "module fakebench\n\ngo 1.26\n",
		"fakebench_test.go": fakeBench,
		"README.md":         "# bench\n\n" + beginMarker + "\n" + endMarker + "\n",
	}
	for name, content := range files {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	args = append([]string{"-bench", "^BenchmarkAcquireRelease$", "-benchtime", "1x", "-count", "1"}, args...)
	cmd := exec.Command(os.Args[0], args...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), runMainEnv+"=1", "GOWORK=off", "GOFLAGS=")
	var errBuf bytes.Buffer
	cmd.Stderr = &errBuf
	err := cmd.Run()
	var ee *exec.ExitError
	switch {
	case err == nil:
	case errors.As(err, &ee):
		code = ee.ExitCode()
	default:
		t.Fatalf("running the report: %v", err)
	}
	return dir, errBuf.String(), code
}

// TestSaveFailureReported: when the raw output cannot be saved (-save), the
// report says so and exits non-zero, instead of dropping the error; it
// still renders the run it has.
func TestSaveFailureReported(t *testing.T) {
	t.Run("saved", func(t *testing.T) {
		dir, stderr, code := runReport(t, "-save", filepath.Join("results", "latest.txt"))
		if code != 0 {
			t.Fatalf("exit status %d; stderr:\n%s", code, stderr)
		}
		raw, err := os.ReadFile(filepath.Join(dir, "results", "latest.txt"))
		if err != nil || !bytes.Contains(raw, []byte("BenchmarkAcquireRelease/conc=1/lib=raw-rueidis")) {
			t.Fatalf("saved raw output: %v\n%s", err, raw)
		}
	})
	t.Run("unwritable", func(t *testing.T) {
		// README.md is a file, so README.md/latest.txt cannot be created.
		dir, stderr, code := runReport(t, "-save", filepath.Join("README.md", "latest.txt"))
		if code == 0 || !strings.Contains(stderr, "saving raw output") {
			t.Fatalf("exit status %d, want non-zero with the save error; stderr:\n%s", code, stderr)
		}
		readme, err := os.ReadFile(filepath.Join(dir, "README.md"))
		if err != nil || !bytes.Contains(readme, []byte("| raw rueidis (baseline) |")) {
			t.Errorf("the run was not rendered into README.md: %v\n%s", err, readme)
		}
	})
}
