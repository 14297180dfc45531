package etcdtest

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/fencedlock/fencedlock"
	"github.com/fencedlock/fencedlock/fencing"
	"github.com/fencedlock/fencedlock/internal/clitest"
)

// TestEtcdOperatorTools runs list and release --force on an in-process
// 3-member etcd cluster. list pages through the lock directories (--count
// 2) among other keys and shows each lock as inspect would. release
// --force breaks a real holder (fencedlock run): run reports the loss and
// exits 76, a waiter queued behind it is granted a fence above the
// consumed one, and the barrier written to the resource makes the old
// holder's FencedPut stale.
func TestEtcdOperatorTools(t *testing.T) {
	_, eps, admin := cluster(t)
	env := []string{"FENCEDLOCK_ETCD=" + eps}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	b := newBackend(t, admin)
	locker, err := fencedlock.New(b, fencedlock.Options{TTL: 30 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer locker.Close()

	t.Run("list", func(t *testing.T) {
		want := []string{"batch/1", "batch/2", "batch/3 with/slash", "batch/4"}
		for _, k := range append(slices.Clone(want), "other/x") {
			if _, err := locker.TryAcquire(ctx, k); err != nil {
				t.Fatal(k, err)
			}
		}
		for i := range 20 {
			if _, err := admin.Put(ctx, fmt.Sprintf("unrelated/%d", i), "x"); err != nil {
				t.Fatal(err)
			}
		}
		code, p := bin.Run(t, env, "list", "--json", "--count", "2", "batch/")
		if code != 0 {
			t.Fatalf("list: exit %d: %s", code, p.Stderr)
		}
		var names []string
		for _, line := range strings.Split(strings.TrimSpace(p.Stdout.String()), "\n") {
			var o struct {
				Key    string `json:"key"`
				Held   bool   `json:"held"`
				Holder string `json:"holder"`
				TTLms  int64  `json:"ttl_ms"`
				Fence  uint64 `json:"fence"`
			}
			if err := json.Unmarshal([]byte(line), &o); err != nil {
				t.Fatalf("%q: %v", line, err)
			}
			info, err := b.Inspect(ctx, o.Key)
			if err != nil {
				t.Fatal(err)
			}
			if !o.Held || o.Holder != info.Holder || o.Fence != uint64(info.Fence) || o.TTLms <= 0 {
				t.Errorf("listed %+v, inspect says %+v", o, info)
			}
			names = append(names, o.Key)
		}
		if !slices.Equal(names, want) {
			t.Errorf("list batch/ = %q, want %q", names, want)
		}
		code, p = bin.Run(t, env, "list")
		if code != 0 || strings.Count(p.Stdout.String(), "\n") != 1+len(want)+1 || !strings.Contains(p.Stdout.String(), `"other/x"`) {
			t.Errorf("list: exit %d:\n%s%s", code, p.Stdout, p.Stderr)
		}
	})

	t.Run("release --force", func(t *testing.T) {
		dir := t.TempDir()
		holder := bin.Start(t, env, "run", "--ttl", "6s", "job", "--", "/bin/sh", "-c", `echo "$FENCEDLOCK_FENCE $FENCEDLOCK_HOLDER" > `+dir+`/lease; sleep 60`)
		lease := strings.Fields(clitest.WaitFile(t, dir+"/lease", 20*time.Second))
		oldFence, err := strconv.ParseUint(lease[0], 10, 64)
		if err != nil {
			t.Fatal(err)
		}
		oldHolder := lease[1]
		if err := b.FencedPut(ctx, "job-resource", "from the old holder", fencing.Token(oldFence), oldHolder); err != nil {
			t.Fatal(err)
		}
		// A waiter queued behind the holder.
		waiter := make(chan *fencedlock.Lease, 1)
		go func() {
			l, err := locker.Acquire(ctx, "job")
			if err != nil {
				t.Error(err)
			}
			waiter <- l
		}()
		time.Sleep(500 * time.Millisecond)

		rec := runJSON[struct {
			Held     bool     `json:"held"`
			Holder   string   `json:"holder"`
			Before   uint64   `json:"fence_before"`
			After    uint64   `json:"fence_after"`
			Operator string   `json:"operator"`
			Barriers []string `json:"barriers"`
		}](t, env, "release", "--force", "--json", "--resource", "job-resource", "job")
		forcedAt := time.Now()
		t.Logf("release --force: %+v", rec)
		if !rec.Held || rec.Holder != oldHolder || rec.Before != oldFence || rec.After <= rec.Before || !slices.Equal(rec.Barriers, []string{"job-resource"}) {
			t.Fatalf("audit record %+v: want the holder %s with fence %d broken and the barrier written", rec, oldHolder, oldFence)
		}
		// The old holder's next guarded write is rejected.
		err = b.FencedPut(ctx, "job-resource", "late, from the old holder", fencing.Token(oldFence), oldHolder)
		var stale *fencing.StaleError
		if !errors.As(err, &stale) || uint64(stale.Accepted) != rec.After || stale.AcceptedFrom != rec.Operator {
			t.Errorf("old holder's FencedPut after the barrier: %v, want stale against %d", err, rec.After)
		}
		// Its run reports the loss (the KeepAlive watch sees the key deleted).
		if code := holder.Wait(20 * time.Second); code != exitLeaseLost {
			t.Fatalf("holder exited %d, want %d: %s", code, exitLeaseLost, holder.Stderr)
		}
		t.Logf("holder's run exited 76 %v after release --force returned (TTL 6s):\n%s", time.Since(forcedAt).Round(time.Millisecond), holder.Stderr)
		// The waiter starts over and is granted a fence above After.
		select {
		case l := <-waiter:
			if l == nil {
				t.Fatal("waiter not granted")
			}
			if uint64(l.Fence()) <= rec.After {
				t.Errorf("waiter granted fence %v, want > %d", l.Fence(), rec.After)
			}
			if err := b.FencedPut(ctx, "job-resource", "from the waiter", l.Fence(), l.Holder()); err != nil {
				t.Errorf("waiter's FencedPut: %v", err)
			}
			_ = l.Release(ctx)
		case <-time.After(30 * time.Second):
			t.Fatal("waiter not granted 30s after the forced release")
		}
		_ = holder.Cmd.Process.Signal(syscall.SIGTERM)
	})
}
