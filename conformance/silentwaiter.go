package conformance

// SilentWaiter (WaitAcquirer and Inspector backends, FaultInjector
// harnesses): a queued waiter that went silent loses its place.

import (
	"context"
	"testing"
	"time"

	"github.com/fencedlock/fencedlock/driver"
	"github.com/fencedlock/fencedlock/fencing"
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
	s := silentRun{t: t, e: e, key: e.key("silent"), ttl: 3 * e.ttl}
	s.place = max(s.ttl, e.cfg.QueuePlaceTTL) + e.cfg.ExpirySlack
	hb, lb := e.backend(t), e.backend(t)
	sb, faults, err := fi.NewFaultyBackend(e.ctx)
	if err != nil {
		t.Fatalf("NewFaultyBackend: %v", err)
	}
	t.Cleanup(func() { _ = sb.Close() })

	// The holder's lease outlasts the silent waiter's place.
	hg, err := hb.Acquire(e.ctx, driver.AcquireRequest{Key: s.key, Owner: owner(), TTL: 2*s.place + e.hold})
	if err != nil {
		t.Fatalf("holder's Acquire: %v", err)
	}
	silentOwner, liveOwner := owner(), owner()
	sctx, scancel := context.WithCancel(e.ctx)
	sw := startWait(sctx, sb.(driver.WaitAcquirer).AcquireWait, driver.AcquireRequest{Key: s.key, Owner: silentOwner, TTL: s.ttl})
	time.Sleep(e.cfg.QueueDelay)
	lctx, lcancel := context.WithCancel(e.ctx)
	lw := startWait(lctx, lb.(driver.WaitAcquirer).AcquireWait, driver.AcquireRequest{Key: s.key, Owner: liveOwner, TTL: e.hold})
	defer e.stopWait(lb, lw, lcancel)
	time.Sleep(e.cfg.QueueDelay)
	s.stillWaiting("first", sw)
	s.stillWaiting("second", lw)

	faults.Refuse(true)
	s.silent = time.Now()
	defer func() {
		faults.Refuse(false)
		e.stopWait(sb, sw, scancel)
	}()
	time.Sleep(time.Until(s.silent.Add(s.place)))
	if err := hb.Release(e.ctx, hg); err != nil {
		t.Fatalf("holder's Release %v after the first waiter went silent: %v", time.Since(s.silent), err)
	}
	s.released = time.Now()
	s.handedTo(hb.(driver.Inspector), driver.HolderID(silentOwner), driver.HolderID(liveOwner))
	s.granted(lw, hg.Fence)
}

// silentRun is the state of one SilentWaiter check.
type silentRun struct {
	t        *testing.T
	e        *env
	key      string
	ttl      time.Duration // the silent waiter's lease
	place    time.Duration // how long its place may last after it went silent
	silent   time.Time     // when its requests stopped reaching the store
	released time.Time     // when the holder released the key
}

// stillWaiting fails the check if the wait c returned while the key was
// held.
func (s *silentRun) stillWaiting(name string, c *waitCall) {
	s.t.Helper()
	if c.returned() {
		s.t.Fatalf("the %s waiter's AcquireWait returned while the key was held: fence %d, %v", name, c.g.Fence, c.err)
	}
}

// handedTo reads the key on the store after the release until the live
// waiter holds it; the silent waiter must never be shown as its holder.
func (s *silentRun) handedTo(ins driver.Inspector, silentID, liveID string) {
	s.t.Helper()
	e := s.e
	deadline := s.released.Add(e.cfg.ExpirySlack + 10*e.cfg.QueueDelay + 5*time.Second)
	for {
		info, err := ins.Inspect(e.ctx, s.key)
		if err != nil {
			s.t.Fatalf("Inspect after the release: %v", err)
		}
		if info.Held && info.Holder == silentID {
			s.t.Fatalf("%v after the release the key is held by the first waiter (fence %d, %v left), whose requests had stopped reaching the store %v before the release, longer than its place may last (max(its TTL %v, QueuePlaceTTL %v) + ExpirySlack %v): the release handed the key to a silent waiter's place, and the waiter behind it waits for that lease",
				time.Since(s.released).Round(time.Millisecond), info.Fence, info.TTL, s.released.Sub(s.silent).Round(time.Millisecond), s.ttl, e.cfg.QueuePlaceTTL, e.cfg.ExpirySlack)
		}
		if info.Held && info.Holder == liveID {
			return
		}
		if time.Now().After(deadline) {
			s.t.Fatalf("%v after the release the second waiter does not hold the key (the key: %+v); the first waiter had been silent %v before the release", time.Since(s.released).Round(time.Millisecond), info, s.released.Sub(s.silent).Round(time.Millisecond))
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// granted requires the live waiter's AcquireWait (c) to return the key
// with a fence above the holder's.
func (s *silentRun) granted(c *waitCall, holderFence fencing.Token) {
	s.t.Helper()
	if !s.e.waitDone(c.done, 5*time.Second+s.e.cfg.ExpirySlack) {
		s.t.Fatalf("the second waiter holds the key on the store, but its AcquireWait has not returned %v after the release", time.Since(s.released).Round(time.Millisecond))
	}
	if c.err != nil {
		s.t.Fatalf("the second waiter holds the key, and its AcquireWait returned %v", c.err)
	}
	if c.g.Fence <= holderFence {
		s.t.Fatalf("the second waiter's fence %d is not above the holder's %d", c.g.Fence, holderFence)
	}
	s.t.Logf("the first waiter silent %v before the release (its place lasts %v at most): the second waiter was granted the key %v after the release (fence %d after %d)",
		s.released.Sub(s.silent).Round(time.Millisecond), s.place, c.at.Sub(s.released).Round(time.Millisecond), c.g.Fence, holderFence)
}
