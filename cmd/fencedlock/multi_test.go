//go:build unix

package main

import (
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/fencedlock/fencedlock/internal/clitest"
)

// TestRunSetRedis, against a real redis-server: `run k3 k1 k2 -- CMD`
// holds the three keys at once and gives COMMAND FENCEDLOCK_FENCES (KEY=FENCE
// lines, keys sorted) and no FENCEDLOCK_FENCE; while it runs, a single-key run of one of them
// and a set overlapping it are refused, and the refused set took none of
// its free keys; once the holder ends, the set is taken again with greater
// fences. Usage errors: a duplicate KEY, --limit with several KEYs.
func TestRunSetRedis(t *testing.T) {
	_, url := redisServer(t)
	env := []string{"FENCEDLOCK_REDIS=" + url}
	out := filepath.Join(t.TempDir(), "vars")
	script := `printf '%s\n' "$FENCEDLOCK_FENCES" > ` + out + `.tmp; mv ` + out + `.tmp ` + out + `; [ -z "$FENCEDLOCK_FENCE" ] || echo "FENCEDLOCK_FENCE set" >&2; `
	holder := bin.Start(t, env, "run", "--ttl", "5s", "k3", "k1", "k2", "--", "/bin/sh", "-c", script+"sleep 30")
	fences := clitest.WaitFile(t, out, 20*time.Second)
	first := strings.Fields(fences)
	if len(first) != 3 || !strings.HasPrefix(first[0], "k1=") || !strings.HasPrefix(first[2], "k3=") {
		t.Fatalf("FENCEDLOCK_FENCES = %q, want k1=F k2=F k3=F, one a line", fences)
	}

	bin.CheckSetHeld(t, env, "k2", "k3", "k4", exitNotAcquired)

	if err := holder.Cmd.Process.Signal(syscall.SIGTERM); err != nil { // forwarded to COMMAND; the set is released
		t.Fatal(err)
	}
	holder.Wait(20 * time.Second)
	if strings.Contains(holder.Stderr.String(), "FENCEDLOCK_FENCE set") {
		t.Errorf("FENCEDLOCK_FENCE is set for a set of keys")
	}
	os.Remove(out)
	if code, p := bin.Run(t, env, "run", "--try", "k1", "k2", "k3", "--", "/bin/sh", "-c", script); code != 0 {
		t.Fatalf("the set after its holder ended: exit %d; stderr:\n%s", code, p.Stderr)
	}
	fences = clitest.WaitFile(t, out, 5*time.Second)
	for i, kv := range strings.Fields(fences) {
		k, f, _ := strings.Cut(kv, "=")
		_, f0, _ := strings.Cut(first[i], "=")
		if atoi(t, f) <= atoi(t, f0) {
			t.Errorf("fence of %s: %s after %s, want greater", k, f, f0)
		}
	}

	for _, args := range [][]string{
		{"run", "a", "b", "a", "--", "true"},
		{"run", "--limit", "2", "a", "b", "--", "true"},
	} {
		if code, p := bin.Run(t, env, args...); code != exitUsage {
			t.Errorf("%q: exit %d, want %d; stderr:\n%s", args, code, exitUsage, p.Stderr)
		}
	}
}
