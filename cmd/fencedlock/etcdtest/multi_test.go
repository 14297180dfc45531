package etcdtest

import (
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/fencedlock/fencedlock/internal/clitest"
)

// TestEtcdRunSet, on an in-process 3-member etcd cluster: `run b a -- CMD`
// holds both keys at once and gives COMMAND FENCEDLOCK_FENCES (KEY=FENCE
// lines, keys sorted: one Txn, so one revision for both); a single-key
// run of one of them and a set overlapping them are refused, and the
// refused set took none of its free keys.
func TestEtcdRunSet(t *testing.T) {
	_, eps, _ := cluster(t)
	env := []string{"FENCEDLOCK_ETCD=" + eps}
	file := filepath.Join(t.TempDir(), "fences")
	bin.Start(t, env, "run", "--ttl", "5s", "b", "a", "--", "/bin/sh", "-c",
		`printf '%s\n' "$FENCEDLOCK_FENCES" > `+file+`.tmp; mv `+file+`.tmp `+file+`; exec sleep 30`)
	lines := strings.Fields(clitest.WaitFile(t, file, 30*time.Second))
	if len(lines) != 2 || !strings.HasPrefix(lines[0], "a=") || !strings.HasPrefix(lines[1], "b=") || lines[0][2:] != lines[1][2:] {
		t.Fatalf("FENCEDLOCK_FENCES = %q, want a=R and b=R (one revision)", lines)
	}
	bin.CheckSetHeld(t, env, "a", "b", "c", exitNotAcquired)
}
