// Package tools_test checks the setup scripts in tools/.
package tools_test

import (
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// runCIDeps runs ci-deps.sh with service, systemctl, sudo and apt-get
// replaced by stubs that only record their arguments, and returns the
// recorded calls.
func runCIDeps(t *testing.T, ci string) []string {
	t.Helper()
	bin := t.TempDir()
	calls := filepath.Join(bin, "calls")
	stub := "#!/bin/sh\necho \"$(basename \"$0\") $*\" >> " + calls + "\n"
	for _, name := range []string{"service", "systemctl", "sudo", "apt-get"} {
		if err := os.WriteFile(filepath.Join(bin, name), []byte(stub), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	cmd := exec.Command("bash", "ci-deps.sh")
	var env []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "CI=") && !strings.HasPrefix(kv, "PATH=") {
			env = append(env, kv)
		}
	}
	env = append(env, "PATH="+bin+string(os.PathListSeparator)+os.Getenv("PATH"))
	if ci != "" {
		env = append(env, "CI="+ci)
	}
	cmd.Env = env
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("ci-deps.sh (CI=%q): %v\n%s", ci, err, out)
	}
	b, err := os.ReadFile(calls)
	if err != nil && !os.IsNotExist(err) {
		t.Fatal(err)
	}
	var lines []string
	for _, l := range strings.Split(strings.TrimSpace(string(b)), "\n") {
		if l != "" && !strings.HasPrefix(l, "apt-get") && !strings.HasPrefix(l, "sudo apt-get") {
			lines = append(lines, l)
		}
	}
	return lines
}

// TestCIDepsLeavesDeveloperServicesAlone: a developer who runs ci-deps.sh
// keeps the redis-server, PostgreSQL and PgBouncer services running on their machine;
// only CI (CI=true, set by .ci/run) stops them.
func TestCIDepsLeavesDeveloperServicesAlone(t *testing.T) {
	if got := runCIDeps(t, ""); len(got) != 0 {
		t.Errorf("without CI, ci-deps.sh touched services: %q", got)
	}
	if got := runCIDeps(t, "false"); len(got) != 0 {
		t.Errorf("with CI=false, ci-deps.sh touched services: %q", got)
	}
	want := []string{"service redis-server stop", "service redis-sentinel stop", "service postgresql stop", "service pgbouncer stop"}
	if got := runCIDeps(t, "true"); !slices.Equal(got, want) {
		t.Errorf("with CI=true, ci-deps.sh ran %q, want %q", got, want)
	}
}
