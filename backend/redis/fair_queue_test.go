package redis

// The FairBackend's queue on a real redis-server: what a hand-off costs,
// how long a waiter's entry lives, and that an expired lease lets no
// newcomer overtake the queue.

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/fencedlock/fencedlock/driver"
	"github.com/fencedlock/fencedlock/internal/rediscore"
	"github.com/fencedlock/fencedlock/internal/redisnames"
)

// TestFairHandOffCommands counts, on a real redis-server (INFO
// commandstats, commands run inside scripts included), what one contended
// acquisition costs in the steady state: a FairBackend waiter whose
// channel is still subscribed queues behind a holder (one wait.lua) and
// is handed the lock by the holder's release (one release.lua), while
// another owner's clean-up is remembered (a waiter gave up). Each
// command is named, so that a new one shows here first.
func TestFairHandOffCommands(t *testing.T) {
	b, c := startBackend(t)
	ctx := context.Background()
	const key = "cmds"
	lk := b.LockKey(key)
	queued := func() {
		t.Helper()
		deadline := time.Now().Add(10 * time.Second)
		for num(t, c, "LLEN", lk+redisnames.QueueSuffix) != 1 {
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
			g, err = b.AcquireWait(ctx, driver.AcquireRequest{Key: key, Owner: owner(), TTL: 10 * time.Second})
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
			cmds = opStats(t, c, "llen")
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
	do(t, c, "SADD", lk+redisnames.AbandonedSuffix, "0000000000000000000000000000000000000000")
	do(t, c, "PEXPIRE", lk+redisnames.AbandonedSuffix, "60000")
	got := round(true)
	var total int64
	for _, v := range got {
		total += v
	}
	t.Logf("one hand-off: %d commands %v", total, got)
	// wait.lua (new entry behind a holder): EVALSHA, SISMEMBER abandoned,
	// MGET lock+fence, TIME, RPUSH, PEXPIRE of the queue (GT when it
	// exists already: Redis 7), PTTL of the lock (the holder's lease left:
	// TestWaiterGetsExpiredHoldersKey in internal/rediscore).
	// release.lua (hand-off): EVALSHA, EXISTS queue, GET lock, LPOP, TIME,
	// INCR, PTTL fence, SET, PUBLISH.
	want := map[string]int64{
		"evalsha": 2, "sismember": 1, "exists": 1, "mget": 1, "time": 2, "rpush": 1, "pttl": 2, "pexpire": 1,
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
	second := opStats(t, c)
	wantSecond := map[string]int64{"evalsha": 1, "sismember": 1, "mget": 1, "time": 1, "rpush": 1, "pexpire": 1, "pttl": 1}
	if fmt.Sprint(second) != fmt.Sprint(wantSecond) {
		t.Errorf("a second waiter's wait.lua ran %v, want %v", second, wantSecond)
	}
	if pttl := num(t, c, "PTTL", lk+redisnames.QueueSuffix); pttl <= 5000 || pttl > 20000 {
		t.Errorf("queue PTTL %d after a shorter entry joined, want the first entry's 20000 ms kept", pttl)
	}
	if err := b.Release(ctx, h); err != nil {
		t.Fatal(err)
	}
}

// TestFairEntryOutlivesShortLease: a waiter with a short lease (250 ms)
// gets a queue entry valid for rediscore.FairMinEntryTTL (2 s) of server time, so a
// refresh that comes a few hundred milliseconds late does not send it to
// the back of the queue. (With the entry valid for the lease only, the
// conformance FIFO check failed under load: waiters granted in order
// [0 2 3 1].) A waiter that gives up still leaves nothing.
func TestFairEntryOutlivesShortLease(t *testing.T) {
	b, c := startBackend(t)
	fb := b
	acquire(t, b, "k", time.Minute) // the waiter stays queued
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		_, err := fb.AcquireWait(ctx, driver.AcquireRequest{Key: "k", Owner: owner(), TTL: 250 * time.Millisecond})
		done <- err
	}()
	qk := b.LockKey("k") + redisnames.QueueSuffix
	var entry string
	for deadline := time.Now().Add(10 * time.Second); entry == ""; time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the waiter never queued")
		}
		if es, err := c.Do(context.Background(), c.B().Lrange().Key(qk).Start(0).Stop(-1).Build()).AsStrSlice(); err == nil && len(es) > 0 {
			entry = es[0]
		}
	}
	tm, err := c.Do(context.Background(), c.B().Time().Build()).AsStrSlice()
	if err != nil || len(tm) != 2 {
		t.Fatalf("TIME: %v %v", tm, err)
	}
	sec, _ := strconv.ParseInt(tm[0], 10, 64)
	usec, _ := strconv.ParseInt(tm[1], 10, 64)
	now := sec*1000 + usec/1000
	expiry, err := strconv.ParseInt(strings.SplitN(entry, ":", 2)[0], 10, 64)
	if err != nil {
		t.Fatalf("entry %q: %v", entry, err)
	}
	// At least rediscore.FairMinEntryTTL less one refresh interval (lease/3) and
	// some scheduling: well above the 250 ms lease.
	if left := time.Duration(expiry-now) * time.Millisecond; left < rediscore.FairMinEntryTTL-time.Second {
		t.Fatalf("a waiter with a 250ms lease has an entry valid for %v more, want about %v", left, rediscore.FairMinEntryTTL)
	} else {
		t.Logf("entry valid for %v more (lease 250ms)", left)
	}
	cancel()
	if err := <-done; err == nil {
		t.Fatal("cancelled AcquireWait returned no error")
	}
	if n := do(t, c, "LLEN", qk); n.Error() == nil {
		if v, _ := n.AsInt64(); v != 0 {
			t.Fatalf("%d entries left after the waiter gave up", v)
		}
	}
}

// TestFairNoOvertakeAfterExpiry: a holder's lease that ends without a
// release (it expired: simulated by deleting the lock key, as the server
// does) leaves the lock free with a waiter queued. Until that waiter's
// next wait.lua takes it, an Acquire (TryAcquire, and
// the attempt the Locker makes before it queues) must not take the lock
// ahead of it: it reports the key held, so the newcomer queues behind.
// Before acquire.lua looked at the queue, the newcomer took the lock
// (fence 2) and the queued waiter had to wait for it.
func TestFairNoOvertakeAfterExpiry(t *testing.T) {
	b, c := startBackend(t)
	ctx := context.Background()
	const key = "expired-holder"

	h := acquire(t, b, key, 10*time.Second)
	// A waiter of another process: queued by wait.lua, entry valid 10 s.
	waiter := owner()
	if n, err := runWait(t, b, key, waiter, 10*time.Second, 10*time.Second); err != nil || n != 0 {
		t.Fatalf("wait.lua = %d, %v; want queued", n, err)
	}
	// The holder's lease ends without a release.
	if n := num(t, c, "DEL", b.LockKey(key)); n != 1 {
		t.Fatalf("DEL %s = %d", b.LockKey(key), n)
	}

	do(t, c, "CONFIG", "RESETSTAT")
	_, err := b.Acquire(ctx, driver.AcquireRequest{Key: key, Owner: owner(), TTL: 10 * time.Second})
	// The attempt costs no SHA-1 of the owner while only the queue exists
	// (no abandoned set): EXISTS of both, EXISTS of the queue, GET.
	stats := commandStats(t, c)
	delete(stats, "config|resetstat")
	if want := map[string]int64{"evalsha": 1, "exists": 2, "get": 1}; fmt.Sprint(stats) != fmt.Sprint(want) {
		t.Errorf("a newcomer's Acquire with a waiter queued ran %v, want %v", stats, want)
	}
	var held *driver.HeldError
	if !errors.As(err, &held) || !errors.Is(err, driver.ErrNotAcquired) {
		t.Fatalf("a newcomer's Acquire with a live waiter queued = %v; want a HeldError (the waiter is first)", err)
	}
	if n := num(t, c, "EXISTS", b.LockKey(key)); n != 0 {
		t.Fatalf("the newcomer's refused attempt left the lock key behind")
	}
	// The queued waiter takes it at its next wait.lua, with the next fence.
	n, err := runWait(t, b, key, waiter, 10*time.Second, 10*time.Second)
	if err != nil || n != int64(h.Fence)+1 {
		t.Fatalf("the queued waiter's wait.lua = %d, %v; want fence %d", n, err, h.Fence+1)
	}

	// Another key, without a queue, is taken at once.
	if _, err := b.Acquire(ctx, driver.AcquireRequest{Key: "other-" + key, Owner: owner(), TTL: time.Second}); err != nil {
		t.Fatal(err)
	}
}
