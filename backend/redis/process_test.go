package redis

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/fencedlock/fencedlock"
	"github.com/fencedlock/fencedlock/internal/testserver"
	"github.com/redis/rueidis"
)

// TestSeedOneHolderAtATimeProcesses: the mutual-exclusion seed with real OS
// processes. Each worker process (this test binary re-executed) acquires
// the key repeatedly and, while holding it, appends "enter FENCE" and
// "exit FENCE" to a shared file (O_APPEND). Exclusive holders produce a
// strict alternation enter/exit of one fence, with fences increasing.
func TestSeedOneHolderAtATimeProcesses(t *testing.T) {
	if addr := os.Getenv("FENCEDLOCK_TEST_WORKER_REDIS"); addr != "" {
		processWorker(t, addr, os.Getenv("FENCEDLOCK_TEST_WORKER_LOG"))
		return
	}
	srv := testserver.StartRedis(t)
	logPath := filepath.Join(t.TempDir(), "history")
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	const workers = 3
	var wg sync.WaitGroup
	outs := make([][]byte, workers)
	errs := make([]error, workers)
	for i := 0; i < workers; i++ {
		ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
		defer cancel()
		cmd := exec.CommandContext(ctx, exe, "-test.run", "^TestSeedOneHolderAtATimeProcesses$", "-test.v")
		cmd.Env = append(os.Environ(), "FENCEDLOCK_TEST_WORKER_REDIS="+srv.Addr, "FENCEDLOCK_TEST_WORKER_LOG="+logPath)
		wg.Add(1)
		go func() {
			defer wg.Done()
			outs[i], errs[i] = cmd.CombinedOutput()
		}()
	}
	wg.Wait()
	for i := range errs {
		if errs[i] != nil {
			t.Fatalf("worker %d: %v\n%s", i, errs[i], outs[i])
		}
	}
	data, err := os.ReadFile(logPath)
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSpace(string(data)), "\n")
	if len(lines) != 2*workers*processRounds {
		t.Fatalf("%d history lines, want %d", len(lines), 2*workers*processRounds)
	}
	var last uint64
	pids := make(map[string]bool)
	for i := 0; i < len(lines); i += 2 {
		var f1, f2 uint64
		var p1, p2 string
		if _, err := fmt.Sscanf(lines[i], "enter %d %s", &f1, &p1); err != nil {
			t.Fatalf("line %d %q: want an enter: %v", i, lines[i], err)
		}
		if _, err := fmt.Sscanf(lines[i+1], "exit %d %s", &f2, &p2); err != nil || f2 != f1 || p2 != p1 {
			t.Fatalf("line %d %q after %q: another holder was inside (overlap)", i+1, lines[i+1], lines[i])
		}
		if f1 <= last {
			t.Fatalf("fence %d after %d: not increasing", f1, last)
		}
		last = f1
		pids[p1] = true
	}
	if len(pids) != workers {
		t.Fatalf("%d distinct processes held the lock, want %d", len(pids), workers)
	}
	t.Logf("%d processes x %d rounds: strict enter/exit alternation, fences increasing up to %d", workers, processRounds, last)
}

const processRounds = 10

func processWorker(t *testing.T, addr, logPath string) {
	c, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: []string{addr}, DisableCache: true})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	b, err := New(c, Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	locker := mustLocker(t, b, fencedlock.Options{TTL: 2 * time.Second})
	defer locker.Close()
	f, err := os.OpenFile(logPath, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o600)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	pid := strconv.Itoa(os.Getpid())
	for i := 0; i < processRounds; i++ {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		l, err := locker.Acquire(ctx, "orders")
		cancel()
		if err != nil {
			t.Fatal(err)
		}
		if _, err := f.WriteString("enter " + l.Fence().String() + " " + pid + "\n"); err != nil {
			t.Fatal(err)
		}
		time.Sleep(2 * time.Millisecond) // widen the window an overlap would need
		if _, err := f.WriteString("exit " + l.Fence().String() + " " + pid + "\n"); err != nil {
			t.Fatal(err)
		}
		if err := l.Release(context.Background()); err != nil {
			t.Fatal(err)
		}
	}
}
