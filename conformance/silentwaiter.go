package conformance

// SilentWaiter (WaitAcquirer and Inspector backends, FaultInjector
// harnesses): a queued waiter that went silent loses its place.

import (
	"context"
	"testing"
	"time"

	"github.com/fencedlock/fencedlock/driver"
)

// testSilentWaiter queues two waiters behind a holder, the first on a
// backend whose way to the store the harness then refuses (its process
// paused, its connection cut: it can neither keep its place nor leave),
// waits until that waiter's place may last no longer (max(its TTL,
// Config.QueuePlaceTTL) + ExpirySlack), and releases the key. The key must
// go to the second waiter: the store must never show the silent waiter as
// its holder (a hand-off to a dead entry makes everyone behind it wait for
// that waiter's whole lease, and a waiter that comes back finds a lock it
// no longer expects), and the second waiter's AcquireWait must return the
// key with a fence above the holder's.
func testSilentWaiter(t *testing.T, e *env) {
	if !implements[driver.WaitAcquirer](t, e) || !implements[driver.Inspector](t, e) {
		return
	}
	fi, ok := harnessIs[FaultInjector](t, e)
	if !ok {
		return
	}
	key := e.key("silent")
	silentTTL := 3 * e.ttl
	place := max(silentTTL, e.cfg.QueuePlaceTTL) + e.cfg.ExpirySlack
	hb, lb := e.backend(t), e.backend(t)
	sb, faults, err := fi.NewFaultyBackend(e.ctx)
	if err != nil {
		t.Fatalf("NewFaultyBackend: %v", err)
	}
	t.Cleanup(func() { _ = sb.Close() })

	// The holder's lease outlasts the silent waiter's place.
	hg, err := hb.Acquire(e.ctx, driver.AcquireRequest{Key: key, Owner: owner(), TTL: 2*place + e.hold})
	if err != nil {
		t.Fatalf("holder's Acquire: %v", err)
	}
	silentOwner, liveOwner := owner(), owner()
	wait := func(b driver.Backend, ctx context.Context, o string, ttl time.Duration) chan waitOutcome {
		done := make(chan waitOutcome, 1)
		go func() {
			g, err := b.(driver.WaitAcquirer).AcquireWait(ctx, driver.AcquireRequest{Key: key, Owner: o, TTL: ttl})
			done <- waitOutcome{g, err}
		}()
		return done
	}
	sctx, scancel := context.WithCancel(e.ctx)
	sdone := wait(sb, sctx, silentOwner, silentTTL)
	time.Sleep(e.cfg.QueueDelay)
	lctx, lcancel := context.WithCancel(e.ctx)
	ldone := wait(lb, lctx, liveOwner, e.hold)
	defer func() {
		lcancel()
		if r := <-ldone; r.err == nil {
			_ = lb.Release(e.ctx, r.g)
		}
	}()
	time.Sleep(e.cfg.QueueDelay)
	for _, w := range []struct {
		name string
		done chan waitOutcome
	}{{"first", sdone}, {"second", ldone}} {
		select {
		case r := <-w.done:
			w.done <- r // for the clean-up
			t.Fatalf("the %s waiter's AcquireWait returned while the key was held: %+v, %v", w.name, r.g, r.err)
		default:
		}
	}

	faults.Refuse(true)
	silent := time.Now()
	defer func() {
		scancel()
		faults.Refuse(false)
		if r := <-sdone; r.err == nil {
			_ = sb.Release(e.ctx, r.g)
		}
	}()
	time.Sleep(time.Until(silent.Add(place)))
	if err := hb.Release(e.ctx, hg); err != nil {
		t.Fatalf("holder's Release %v after it acquired (lease %v): %v", time.Since(silent)+2*e.cfg.QueueDelay, 2*place+e.hold, err)
	}
	released := time.Now()

	silentID, liveID := driver.HolderID(silentOwner), driver.HolderID(liveOwner)
	ins := hb.(driver.Inspector)
	deadline := released.Add(e.cfg.ExpirySlack + 10*e.cfg.QueueDelay + 5*time.Second)
	for {
		info, err := ins.Inspect(e.ctx, key)
		if err != nil {
			t.Fatalf("Inspect after the release: %v", err)
		}
		if info.Held && info.Holder == silentID {
			t.Fatalf("%v after the release the key is held by the first waiter (fence %d, %v left), whose requests had stopped reaching the store %v before the release, longer than its place may last (max(its TTL %v, QueuePlaceTTL %v) + ExpirySlack %v): the release handed the key to a silent waiter's place, and the waiter behind it waits for that lease",
				time.Since(released).Round(time.Millisecond), info.Fence, info.TTL, released.Sub(silent).Round(time.Millisecond), silentTTL, e.cfg.QueuePlaceTTL, e.cfg.ExpirySlack)
		}
		if info.Held && info.Holder == liveID {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%v after the release the second waiter does not hold the key (the key: %+v); the first waiter had been silent %v before the release", time.Since(released).Round(time.Millisecond), info, released.Sub(silent).Round(time.Millisecond))
		}
		time.Sleep(5 * time.Millisecond)
	}
	select {
	case r := <-ldone:
		ldone <- r // for the clean-up
		if r.err != nil {
			t.Fatalf("the second waiter holds the key, and its AcquireWait returned %v", r.err)
		}
		if r.g.Fence <= hg.Fence {
			t.Fatalf("the second waiter's fence %d is not above the holder's %d", r.g.Fence, hg.Fence)
		}
		t.Logf("the first waiter silent %v before the release (its place lasts %v at most): the second waiter was granted the key %v after the release (fence %d after %d)",
			released.Sub(silent).Round(time.Millisecond), place, time.Since(released).Round(time.Millisecond), r.g.Fence, hg.Fence)
	case <-time.After(time.Until(deadline) + 5*time.Second):
		t.Fatalf("the second waiter holds the key on the store, but its AcquireWait has not returned %v after the release", time.Since(released).Round(time.Millisecond))
	}
}
