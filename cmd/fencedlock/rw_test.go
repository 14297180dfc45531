//go:build unix

package main

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/fencedlock/fencedlock/backend/memory"
	"github.com/fencedlock/fencedlock/internal/clitest"
)

// TestRunReadWriteRedis, against a real redis-server: two `run --read`
// holders of KEY run their commands at once; `run --write --try` is
// refused (exit 75) while they hold; a waiting `run --write` starts only
// once both readers' commands ended, with a fence above both of theirs;
// while it holds, `run --read --try` is refused.
func TestRunReadWriteRedis(t *testing.T) {
	_, url := redisServer(t)
	env := []string{"FENCEDLOCK_REDIS=" + url}
	dir := t.TempDir()
	goFile := filepath.Join(dir, "go")
	// A reader writes its fence, then waits (bounded) for goFile.
	reader := func(name string) (*clitest.Proc, string) {
		file := filepath.Join(dir, name)
		p := bin.Start(t, env, "run", "--read", "--ttl", "5s", "cfg", "--", "/bin/sh", "-c",
			`echo "$FENCEDLOCK_FENCE $FENCEDLOCK_KEY" > `+file+`.tmp; mv `+file+`.tmp `+file+`; i=0; while [ ! -e `+goFile+` ] && [ $i -lt 600 ]; do sleep 0.1; i=$((i+1)); done`)
		return p, file
	}
	r1, f1 := reader("r1")
	r2, f2 := reader("r2")
	got1 := strings.Fields(clitest.WaitFile(t, f1, 20*time.Second))
	got2 := strings.Fields(clitest.WaitFile(t, f2, 20*time.Second)) // both commands run at once: neither has seen goFile
	if len(got1) != 2 || len(got2) != 2 || got1[1] != "cfg" || got1[0] == got2[0] {
		t.Fatalf("readers wrote %q and %q, want distinct fences and FENCEDLOCK_KEY cfg", got1, got2)
	}
	if code, p := bin.Run(t, env, "run", "--write", "--try", "cfg", "--", "true"); code != exitNotAcquired {
		t.Errorf("run --write --try while two readers hold: exit %d, want %d; stderr:\n%s", code, exitNotAcquired, p.Stderr)
	}
	wFile := filepath.Join(dir, "w")
	w := bin.Start(t, env, "run", "--write", "--ttl", "5s", "cfg", "--", "/bin/sh", "-c",
		`echo "$FENCEDLOCK_FENCE" > `+wFile+`.tmp; mv `+wFile+`.tmp `+wFile+`; sleep 2`)
	time.Sleep(500 * time.Millisecond)
	if _, err := os.Stat(wFile); err == nil {
		t.Fatal("the writer's command ran while two readers held cfg")
	}
	if err := os.WriteFile(goFile, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	for _, r := range []*clitest.Proc{r1, r2} {
		if code := r.Wait(20 * time.Second); code != exitOK {
			t.Errorf("reader: exit %d; stderr:\n%s", code, r.Stderr)
		}
	}
	fw := strings.TrimSpace(clitest.WaitFile(t, wFile, 20*time.Second))
	if atoi(t, fw) <= max(atoi(t, got1[0]), atoi(t, got2[0])) {
		t.Errorf("writer's fence %s not above the readers' %s and %s", fw, got1[0], got2[0])
	}
	if code, p := bin.Run(t, env, "run", "--read", "--try", "cfg", "--", "true"); code != exitNotAcquired {
		t.Errorf("run --read --try while the writer holds: exit %d, want %d; stderr:\n%s", code, exitNotAcquired, p.Stderr)
	}
	if code := w.Wait(20 * time.Second); code != exitOK {
		t.Errorf("writer: exit %d; stderr:\n%s", code, w.Stderr)
	}
	if !strings.Contains(w.Stderr.String(), `acquired "cfg"`) {
		t.Errorf("writer's progress does not name cfg:\n%s", w.Stderr)
	}
}

func TestReadWriteUsageErrors(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"run", "--read", "--write", "k", "--", "true"}, "--read and --write exclude each other"},
		{[]string{"run", "--read", "--limit", "2", "k", "--", "true"}, "--read and --write take no --limit"},
	} {
		e, _, errb := memEnv(memory.NewStore(), nil)
		if code := e.main(context.Background(), tc.args); code != exitUsage || !strings.Contains(errb.String(), tc.want) {
			t.Errorf("%q: exit %d, want %d saying %q; stderr:\n%s", tc.args, code, exitUsage, tc.want, errb)
		}
	}
}
