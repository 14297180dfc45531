//go:build unix

package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os/exec"
	"path/filepath"
	"runtime/debug"
	"strings"
	"testing"

	"github.com/fencedlock/fencedlock/backend/memory"
	"github.com/fencedlock/fencedlock/driver"
	"github.com/fencedlock/fencedlock/internal/testserver"
)

// TestOldTLSFlagsRefused: --key was the etcd client's private key file
// while KEY is the lock name: `run --redis URL --key orders -- true` failed
// with a baffling "missing COMMAND after KEY" (Redis ignored the flag). The
// TLS flags are --tls-ca, --tls-cert and --tls-key; the old names are
// refused with a hint, on every command.
func TestOldTLSFlagsRefused(t *testing.T) {
	cases := []struct {
		args []string
		want string
	}{
		{[]string{"run", "--redis", "redis://x", "--key", "orders", "--", "true"}, "--key is now --tls-key"},
		{[]string{"run", "--etcd", "e:2379", "-cacert=ca.pem", "k", "--", "true"}, "--cacert is now --tls-ca"},
		{[]string{"inspect", "--etcd", "e:2379", "--cert", "c.pem", "k"}, "--cert is now --tls-cert"},
		{[]string{"list", "--key", "k.pem"}, "--key is now --tls-key"},
		{[]string{"release", "--force", "--key", "k.pem", "k"}, "--key is now --tls-key"},
		{[]string{"demo", "--key", "k.pem"}, "--key is now --tls-key"},
	}
	for _, tc := range cases {
		e, out, errb := memEnv(memory.NewStore(), nil)
		if code := e.main(context.Background(), tc.args); code != exitUsage {
			t.Errorf("%q: exit %d, want %d; stderr:\n%s", tc.args, code, exitUsage, errb)
		}
		if !strings.Contains(errb.String(), tc.want) {
			t.Errorf("%q: stderr does not say %q:\n%s", tc.args, tc.want, errb)
		}
		if out.String() != "" {
			t.Errorf("%q: stdout %q", tc.args, out)
		}
	}
	// The new names work (and are checked as before).
	e, _, errb := memEnv(memory.NewStore(), nil)
	if code := e.main(context.Background(), []string{"run", "--etcd", "e:2379", "--tls-cert", "c.pem", "k", "--", "true"}); code != exitUsage || !strings.Contains(errb.String(), "--tls-cert and --tls-key go together") {
		t.Errorf("--tls-cert alone: exit %d, stderr:\n%s", code, errb)
	}
	// A flag value that looks like an old flag is a value.
	e, _, errb = memEnv(memory.NewStore(), nil)
	if code := e.main(context.Background(), []string{"inspect", "--key-prefix", "--key", "k"}); strings.Contains(errb.String(), "is now") {
		t.Errorf("--key-prefix --key: exit %d, stderr:\n%s", code, errb)
	}
}

// TestBadPortIsUsage: a port out of range is a malformed address, found
// before any connection: exit 64, not 69.
func TestBadPortIsUsage(t *testing.T) {
	for _, args := range [][]string{
		{"inspect", "--redis", "redis://127.0.0.1:99999", "k"},
		{"inspect", "--etcd", "127.0.0.1:99999", "k"},
		{"inspect", "--etcd", "http://127.0.0.1:2379,https://10.0.0.1:0", "k"},
		{"list", "--redis", "redis://127.0.0.1:6379?addr=127.0.0.1:70000"},
	} {
		e, _, errb := memEnv(memory.NewStore(), nil)
		code := e.main(context.Background(), args)
		if code != exitUsage || !strings.Contains(errb.String(), "port") {
			t.Errorf("%q: exit %d, want %d with a word on the port; stderr:\n%s", args, code, exitUsage, errb)
		}
	}
}

// TestFatalErrorLoggedAtError: with --log-format json, the error that ends
// the command is an ERROR record (it was WARN), on one record.
func TestFatalErrorLoggedAtError(t *testing.T) {
	e, _, errb := memEnv(memory.NewStore(), nil)
	e.open = func(context.Context, backendConfig) (driver.Backend, func(), error) {
		return nil, nil, errors.New("connecting to redis redis://x: connection refused")
	}
	code := e.main(context.Background(), []string{"run", "--log-format", "json", "k", "--", "true"})
	if code != exitBackend {
		t.Fatalf("exit %d, want %d; stderr:\n%s", code, exitBackend, errb)
	}
	lines := strings.Split(strings.TrimSpace(errb.String()), "\n")
	var rec struct{ Level, Msg string }
	if err := json.Unmarshal([]byte(lines[len(lines)-1]), &rec); err != nil {
		t.Fatalf("last line is not JSON: %v\n%s", err, errb)
	}
	if rec.Level != "ERROR" || !strings.Contains(rec.Msg, "connection refused") {
		t.Fatalf("fatal error logged as %+v, want level ERROR:\n%s", rec, errb)
	}
}

// TestHelpPages: the backend block is printed once, by `fencedlock help
// backends`; each command's help points to it and keeps to what the
// command adds; demo's help says what it really does with the
// environment (it ignores FENCEDLOCK_REDIS and FENCEDLOCK_ETCD).
func TestHelpPages(t *testing.T) {
	e, out, _ := memEnv(memory.NewStore(), nil)
	if code := e.main(context.Background(), []string{"help", "backends"}); code != exitOK {
		t.Fatalf("help backends: exit %d", code)
	}
	for _, want := range []string{"redis://", "rediss://", "unix://", "master_set", "--tls-ca", "--tls-key", "FENCEDLOCK_ETCD_KEY", "FENCEDLOCK_KEY_PREFIX"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("help backends lacks %q:\n%s", want, out)
		}
	}
	for _, cmd := range []string{"run", "inspect", "list", "release", "demo"} {
		e, out, _ := memEnv(memory.NewStore(), nil)
		e.main(context.Background(), []string{cmd, "-help"})
		page := out.String()
		if strings.Contains(page, "master_set") || strings.Contains(page, "unix://[user:password@]") {
			t.Errorf("%s -help repeats the backend URL forms (they belong to fencedlock help backends)", cmd)
		}
		if !strings.Contains(page, "fencedlock help backends") {
			t.Errorf("%s -help does not point to fencedlock help backends", cmd)
		}
		// 88: run's page gained --read, --write and sets of KEYs (issue
		// 32) after the 85 set when the backend block left (70 to 118).
		if n := strings.Count(page, "\n"); n > 88 {
			t.Errorf("%s -help is %d lines, want at most 88 (they were 70 to 118 with the backend block)", cmd, n)
		}
	}
	e, out, _ = memEnv(memory.NewStore(), nil)
	e.main(context.Background(), []string{"demo", "-help"})
	if strings.Contains(out.String(), "flags win over the environment") {
		t.Errorf("demo -help says flags win over the environment, but demo ignores it:\n%s", out)
	}
	if !strings.Contains(out.String(), "FENCEDLOCK_REDIS") {
		t.Errorf("demo -help does not say that it ignores FENCEDLOCK_REDIS and FENCEDLOCK_ETCD:\n%s", out)
	}
}

// TestVersionString: --version shows the module version and the VCS
// revision from the build information (this machine builds with
// -buildvcs=false, so the build info is constructed here).
func TestVersionString(t *testing.T) {
	cases := []struct {
		name string
		bi   debug.BuildInfo
		want string
	}{
		{"go install module@version", debug.BuildInfo{GoVersion: "go1.26.8", Main: debug.Module{Path: "github.com/fencedlock/fencedlock", Version: "v0.1.0"}},
			"fencedlock v0.1.0 (go1.26.8)"},
		{"checkout, clean", debug.BuildInfo{GoVersion: "go1.26.8", Main: debug.Module{Version: "(devel)"}, Settings: []debug.BuildSetting{
			{Key: "vcs", Value: "git"}, {Key: "vcs.revision", Value: "cd1bd47a0c2e8f4b5d6e7f8091a2b3c4d5e6f708"}, {Key: "vcs.time", Value: "2026-12-04T15:00:00Z"}, {Key: "vcs.modified", Value: "false"}}},
			"fencedlock (devel) revision cd1bd47a0c2e, 2026-12-04T15:00:00Z (go1.26.8)"},
		{"checkout, modified", debug.BuildInfo{GoVersion: "go1.26.8", Main: debug.Module{Version: "(devel)"}, Settings: []debug.BuildSetting{
			{Key: "vcs.revision", Value: "cd1bd47a0c2e8f4b5d6e7f8091a2b3c4d5e6f708"}, {Key: "vcs.modified", Value: "true"}}},
			"fencedlock (devel) revision cd1bd47a0c2e+modified (go1.26.8)"},
		{"pseudo-version (go install module@commit)", debug.BuildInfo{GoVersion: "go1.26.8", Main: debug.Module{Version: "v0.0.0-20261204150000-cd1bd47a0c2e"}},
			"fencedlock v0.0.0-20261204150000-cd1bd47a0c2e (go1.26.8)"},
		{"no VCS information (-buildvcs=false)", debug.BuildInfo{GoVersion: "go1.26.8", Main: debug.Module{Version: "(devel)"}},
			"fencedlock (devel), no VCS revision recorded (go1.26.8)"},
	}
	for _, tc := range cases {
		if got := versionString(&tc.bi); got != tc.want {
			t.Errorf("%s: %q, want %q", tc.name, got, tc.want)
		}
	}
}

// TestJSONLinesLevels: an error and its "(hint)" line are one record, at
// ERROR; an outcome the user asked for (--try on a held key) is WARN.
func TestJSONLinesLevels(t *testing.T) {
	var buf strings.Builder
	j := newJSONLines(&buf, "run")
	fmt.Fprintf(j, "fencedlock run: no route to host\n(check that the server at redis x is reachable)\n")
	fmt.Fprintf(j, "fencedlock run: %q is held by holder abc; not waiting (--try).\n", "k")
	lines := strings.Split(strings.TrimSpace(buf.String()), "\n")
	if len(lines) != 2 {
		t.Fatalf("%d records, want 2:\n%s", len(lines), buf.String())
	}
	for i, want := range []struct{ level, msg string }{
		{"ERROR", "no route to host (check that the server at redis x is reachable)"},
		{"WARN", `"k" is held by holder abc; not waiting (--try).`},
	} {
		var rec struct{ Level, Msg string }
		if err := json.Unmarshal([]byte(lines[i]), &rec); err != nil || rec.Level != want.level || rec.Msg != want.msg {
			t.Errorf("record %d: %s (%v), want level %s msg %q", i, lines[i], err, want.level, want.msg)
		}
	}
}

// TestVersionFromCheckoutBuild: a binary built in a git checkout with VCS
// stamping prints the checkout's revision. The build runs in a shallow
// clone of this checkout's HEAD: this machine's GOFLAGS has
// -buildvcs=false (the test asks for stamping), and Go stamps nothing in a
// git worktree, whose .git is a file.
func TestVersionFromCheckoutBuild(t *testing.T) {
	testserver.SkipShort(t, "a git clone of the checkout and a go build of the CLI in it")
	top, err := exec.Command("git", "rev-parse", "--show-toplevel").Output()
	if err != nil {
		t.Fatalf("git rev-parse (the test needs the git checkout it runs in): %v", err)
	}
	clone := filepath.Join(t.TempDir(), "src")
	if out, err := exec.Command("git", "clone", "--quiet", "--depth", "1", "file://"+strings.TrimSpace(string(top)), clone).CombinedOutput(); err != nil {
		t.Fatalf("git clone: %v\n%s", err, out)
	}
	rev, err := exec.Command("git", "-C", clone, "rev-parse", "HEAD").Output()
	if err != nil {
		t.Fatal(err)
	}
	exe := filepath.Join(t.TempDir(), "fencedlock")
	build := exec.Command("go", "build", "-buildvcs=true", "-o", exe, "./cmd/fencedlock")
	build.Dir = clone
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build -buildvcs=true: %v\n%s", err, out)
	}
	out, err := exec.Command(exe, "--version").Output()
	if err != nil {
		t.Fatal(err)
	}
	// Go 1.24 and later also make the main module's version a
	// pseudo-version from the revision (v0.0.0-time-revision).
	want := " revision " + strings.TrimSpace(string(rev))[:12] + ", "
	if !strings.HasPrefix(string(out), "fencedlock ") || !strings.Contains(string(out), want) {
		t.Fatalf("--version: %q, want fencedlock VERSION%s...", out, want)
	}
	t.Logf("--version: %s", strings.TrimSpace(string(out)))
}
