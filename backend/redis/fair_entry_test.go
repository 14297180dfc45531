package redis

import (
	"context"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/fencedlock/fencedlock/driver"
	"github.com/fencedlock/fencedlock/internal/redistest"
)

// TestFairEntryOutlivesShortLease: a waiter with a short lease (250 ms)
// gets a queue entry valid for fairMinEntryTTL (2 s) of server time, so a
// refresh that comes a few hundred milliseconds late does not send it to
// the back of the queue. (With the entry valid for the lease only, the
// conformance FIFO check failed under load: waiters granted in order
// [0 2 3 1].) A waiter that gives up still leaves nothing.
func TestFairEntryOutlivesShortLease(t *testing.T) {
	srv := redistest.Start(t)
	b, c := newBackend(t, srv, Options{})
	fb := &FairBackend{Backend: b}
	acquire(t, b, "k", time.Minute) // the waiter stays queued
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		_, err := fb.AcquireWait(ctx, driver.AcquireRequest{Key: "k", Owner: owner(), TTL: 250 * time.Millisecond})
		done <- err
	}()
	qk := b.LockKey("k") + queueSuffix
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
	// At least fairMinEntryTTL less one refresh interval (lease/3) and
	// some scheduling: well above the 250 ms lease.
	if left := time.Duration(expiry-now) * time.Millisecond; left < fairMinEntryTTL-time.Second {
		t.Fatalf("a waiter with a 250ms lease has an entry valid for %v more, want about %v", left, fairMinEntryTTL)
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
