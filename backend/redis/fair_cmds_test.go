package redis

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/fencedlock/fencedlock/driver"
	"github.com/fencedlock/fencedlock/internal/redistest"
)

// TestFairHandOffCommands counts, on a real redis-server (INFO
// commandstats, commands run inside scripts included), what one contended
// acquisition costs in the steady state: a FairBackend waiter whose
// channel is still subscribed queues behind a holder (one wait.lua) and
// is handed the lock by the holder's release (one release.lua), while
// another owner's clean-up is remembered (a waiter gave up). Each
// command is named, so that a new one shows here first.
func TestFairHandOffCommands(t *testing.T) {
	srv := redistest.Start(t)
	b, c := newBackend(t, srv, Options{})
	f := &FairBackend{b}
	ctx := context.Background()
	const key = "cmds"
	lk := b.LockKey(key)
	queued := func() {
		t.Helper()
		deadline := time.Now().Add(10 * time.Second)
		for num(t, c, "LLEN", lk+queueSuffix) != 1 {
			if time.Now().After(deadline) {
				t.Fatal("the waiter did not queue within 10s")
			}
			time.Sleep(time.Millisecond)
		}
	}
	round := func(stats bool) map[string]int64 {
		t.Helper()
		h := acquire(t, b, key, 10*time.Second)
		if stats {
			do(t, c, "CONFIG", "RESETSTAT")
		}
		done := make(chan error, 1)
		var g driver.Grant
		go func() {
			var err error
			g, err = f.AcquireWait(ctx, driver.AcquireRequest{Key: key, Owner: owner(), TTL: 10 * time.Second})
			done <- err
		}()
		queued()
		if err := b.Release(ctx, h); err != nil {
			t.Fatal(err)
		}
		if err := <-done; err != nil {
			t.Fatal(err)
		}
		if g.Fence != h.Fence+1 {
			t.Fatalf("handed fence %d, want %d", g.Fence, h.Fence+1)
		}
		var cmds map[string]int64
		if stats {
			cmds = commandStats(t, c)
			for _, k := range []string{"config|resetstat", "llen", "info"} {
				delete(cmds, k)
			}
		}
		if stats {
			if err := b.Release(ctx, g); err != nil {
				t.Fatal(err)
			}
			return cmds
		}
		// The warm-up's last release publishes on the channel that stays
		// subscribed. Delivered after the counted round's waiter started
		// watching, that message woke it for one more wait.lua (23
		// commands instead of 15, in a run beside another make test).
		// Wait until the backend's subscription has dispatched it.
		seen, stop, err := b.Watch(ctx, key)
		if err != nil {
			t.Fatal(err)
		}
		defer stop()
		if err := b.Release(ctx, g); err != nil {
			t.Fatal(err)
		}
		select {
		case <-seen:
		case <-time.After(10 * time.Second):
			t.Fatal("the warm-up's release message was not delivered within 10s")
		}
		return nil
	}
	round(false) // the first wait subscribes; the channel stays subscribed for a while
	// Another owner gave up recently (its clean-up is remembered for a
	// while): the check of the owner against it is still one command.
	do(t, c, "SADD", lk+abandonedSuffix, "0000000000000000000000000000000000000000")
	do(t, c, "PEXPIRE", lk+abandonedSuffix, "60000")
	got := round(true)
	var total int64
	for _, v := range got {
		total += v
	}
	t.Logf("one hand-off: %d commands %v", total, got)
	// wait.lua (new entry behind a holder): EVALSHA, SISMEMBER abandoned,
	// MGET lock+fence, TIME, RPUSH, PEXPIRE of the queue (GT when it
	// exists already: Redis 7).
	// release.lua (hand-off): EVALSHA, EXISTS queue, GET lock, LPOP, TIME,
	// INCR, PTTL fence, SET, PUBLISH.
	want := map[string]int64{
		"evalsha": 2, "sismember": 1, "exists": 1, "mget": 1, "time": 2, "rpush": 1, "pttl": 1, "pexpire": 1,
		"get": 1, "lpop": 1, "incr": 1, "set": 1, "publish": 1,
	}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("one hand-off ran %v (%d commands), want %v", got, total, want)
	}

	// Joining a queue that exists already (a second waiter): the same
	// count, the queue extended with PEXPIRE GT, and never shortened.
	h := acquire(t, b, key, 10*time.Second)
	args := func(o string) []string { return []string{o, "10000", "20000", "new"} }
	if _, err := runWaitScript(ctx, b.c, fairKeys(b, key), args(owner())); err != nil {
		t.Fatal(err)
	}
	do(t, c, "CONFIG", "RESETSTAT")
	if _, err := runWaitScript(ctx, b.c, fairKeys(b, key), []string{owner(), "10000", "5000", "new"}); err != nil {
		t.Fatal(err)
	}
	second := commandStats(t, c)
	delete(second, "config|resetstat")
	delete(second, "info")
	wantSecond := map[string]int64{"evalsha": 1, "sismember": 1, "mget": 1, "time": 1, "rpush": 1, "pexpire": 1}
	if fmt.Sprint(second) != fmt.Sprint(wantSecond) {
		t.Errorf("a second waiter's wait.lua ran %v, want %v", second, wantSecond)
	}
	if pttl := num(t, c, "PTTL", lk+queueSuffix); pttl <= 5000 || pttl > 20000 {
		t.Errorf("queue PTTL %d after a shorter entry joined, want the first entry's 20000 ms kept", pttl)
	}
	if err := b.Release(ctx, h); err != nil {
		t.Fatal(err)
	}
}
