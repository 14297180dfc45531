package conformance

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/fencedlock/fencedlock"
	"github.com/fencedlock/fencedlock/driver"
	"github.com/fencedlock/fencedlock/fencing"
)

// This file holds the properties of the optional capabilities Inspector,
// KeepAliver (with KeepAliveStopper) and ForceReleaser, found by type
// assertion on a backend and checked only when present.

func testInspector(t *testing.T, e *env) {
	if !implements[driver.Inspector](t, e) {
		return
	}
	key := e.key("inspect")
	b1, b2 := e.backend(t), e.backend(t)
	in := b2.(driver.Inspector)
	inspect := func(what string) driver.Info {
		t.Helper()
		info, err := in.Inspect(e.ctx, key)
		if err != nil {
			t.Fatalf("Inspect %s: %v", what, err)
		}
		return info
	}

	info := inspect("of a never-used key")
	if info.Held || info.Holder != "" || info.TTL != 0 {
		t.Fatalf("Inspect of a never-used key = %+v, want not held", info)
	}
	if e.held(t, key) {
		t.Fatal("never-used key is held")
	}
	// held() above took and released the key once; start from here.
	g := e.grab(t, b1, key)
	info = inspect("of a held key")
	if !info.Held {
		t.Fatal("Inspect reports a held key free")
	}
	if info.Fence != g.Fence {
		t.Errorf("Inspect fence %v, want the holder's %v", info.Fence, g.Fence)
	}
	if limit := grantTTL(g.TTL, e.hold) + e.cfg.ExpirySlack; info.TTL <= 0 || info.TTL > limit {
		t.Errorf("Inspect TTL %v, want in (0, %v]", info.TTL, limit)
	}
	if info.Holder != "" && info.Holder != driver.HolderID(g.Owner) {
		// Not printed: it may be the secret itself.
		t.Errorf("Inspect Holder (%d bytes) is not HolderID(owner) nor empty", len(info.Holder))
	}
	noSecret(t, "Info", fmt.Sprintf("%#v", info), g.Owner)
	if !e.held(t, key) {
		t.Fatal("Acquire finds free a key Inspect reports held")
	}
	if err := b1.Release(e.ctx, g); err != nil {
		t.Fatalf("Release: %v", err)
	}
	info = inspect("after release")
	if info.Held {
		t.Fatal("Inspect reports a released key held")
	}
	if info.Fence != 0 && info.Fence != g.Fence {
		t.Errorf("Inspect fence after release %v, want the last granted %v (or 0)", info.Fence, g.Fence)
	}
	if e.held(t, key) {
		t.Fatal("Acquire finds held a key Inspect reports free")
	}
	g = e.grab(t, b1, key)
	e.invalidate(t, key)
	if info = inspect("after invalidation"); info.Held {
		t.Fatal("Inspect reports an invalidated key held")
	}
}

func testKeepAliver(t *testing.T, e *env) {
	if !implements[driver.KeepAliver](t, e) {
		return
	}
	key := e.key("keepalive")
	b := e.backend(t)
	ka := b.(driver.KeepAliver)
	if st, ok := b.(driver.KeepAliveStopper); ok {
		keepAliveStop(t, e, b, st)
	}
	g := e.grabTTL(t, b, key, e.ttl)
	ctx, cancel := context.WithCancel(e.ctx)
	defer cancel()
	ch := ka.KeepAlive(ctx, g)
	ttl := grantTTL(g.TTL, e.ttl)
	until := time.Now().Add(2*ttl + e.cfg.ExpirySlack)
	renewals := 0
	for time.Now().Before(until) {
		r := nextRenewal(t, ch, ttl+e.schedAllowance(), renewals)
		if r.TTL <= 0 {
			t.Fatalf("KeepAlive Renewal.TTL = %v", r.TTL)
		}
		renewals++
	}
	if !e.held(t, key) {
		t.Fatalf("key free after %v of KeepAlive (%d renewals)", 2*ttl, renewals)
	}
	// A KeepAlive whose context ends closes its channel.
	ctx2, cancel2 := context.WithCancel(e.ctx)
	ch2 := ka.KeepAlive(ctx2, g)
	cancel2()
	closed := make(chan struct{})
	go func() {
		for range ch2 {
		}
		close(closed)
	}()
	if !e.waitDone(closed, ttl+e.schedAllowance()) {
		t.Fatalf("KeepAlive channel still open %v after its context ended", ttl+e.schedAllowance())
	}
	e.invalidate(t, key)
	bound := ttl + e.cfg.ExpirySlack + e.schedAllowance()
	timeout := time.After(bound)
	for {
		select {
		case r, ok := <-ch:
			if !ok {
				t.Logf("%d renewals, then the channel closed after invalidation", renewals)
				return
			}
			if r.Err != nil {
				if !errors.Is(r.Err, fencedlock.ErrNotHeld) {
					t.Logf("KeepAlive error after invalidation (not ErrNotHeld, treated as transient): %v", r.Err)
					continue
				}
				t.Logf("%d renewals, then ErrNotHeld after invalidation", renewals)
				return
			}
		case <-timeout:
			t.Fatalf("KeepAlive did not report the invalidated key within %v", bound)
		}
	}
}

// stopRounds is how many keepalives keepAliveStop stops. One look right
// after stop returns catches a stop that only asks the keepalive to end
// unless the keepalive's goroutine happens to run and close the channel
// in between, which a loaded machine makes possible: the reference
// KeepAliveStopAsync passed the suite once in a loaded run. Each round is
// another chance to catch it.
const stopRounds = 8

// keepAliveStop checks a KeepAliveStopper's stop: once it has returned,
// the channel is closed (after the Renewals already in it), stop may be
// called again, and the key is no longer kept alive: it expires within its
// TTL. The Locker's Release relies on it to send the release at once.
// The first keepalive is stopped after a confirmed renewal, stopRounds-1
// more at once, each on a key of its own released after it.
func keepAliveStop(t *testing.T, e *env, b driver.Backend, st driver.KeepAliveStopper) {
	t.Helper()
	key := e.key("keepalive-stop")
	g := e.grabTTL(t, b, key, e.ttl)
	ttl := grantTTL(g.TTL, e.ttl)
	ctx, cancel := context.WithCancel(e.ctx)
	defer cancel()
	ch, stop := st.KeepAliveStop(ctx, g)
	// A confirmed renewal first: stop ends a keepalive that runs.
	select {
	case r, ok := <-ch:
		if !ok || r.Err != nil {
			t.Fatalf("KeepAliveStop of a held key: channel open %v, Renewal.Err %v; want a renewal", ok, r.Err)
		}
	case <-time.After(ttl + e.schedAllowance()):
		t.Fatalf("KeepAliveStop: no renewal within a TTL (%v)", ttl)
	}
	stop()
	stoppedClosed(t, ch, "after a renewal")
	stop() // again: a no-op
	stopped := time.Now()
	for i := 1; i < stopRounds; i++ {
		gi := e.grabTTL(t, b, e.key(fmt.Sprintf("keepalive-stop-%d", i)), e.ttl)
		chi, stopi := st.KeepAliveStop(ctx, gi)
		stopi()
		stoppedClosed(t, chi, fmt.Sprintf("stopped at once (round %d of %d)", i+1, stopRounds))
		if err := b.Release(e.ctx, gi); err != nil {
			t.Fatalf("KeepAliveStop: Release after stop (round %d of %d): %v", i+1, stopRounds, err)
		}
	}
	bound := ttl + e.cfg.ExpirySlack + e.schedAllowance()
	for e.held(t, key) {
		if time.Since(stopped) > bound {
			t.Fatalf("KeepAliveStop: key still held %v after stop returned: renewals go on", bound)
		}
		time.Sleep(ttl / 10)
	}
}

// stoppedClosed checks that the channel of a keepalive whose stop has
// returned is closed: a receive never blocks, and ends within what was
// buffered.
func stoppedClosed(t *testing.T, ch <-chan driver.Renewal, when string) {
	t.Helper()
	for n := 0; ; n++ {
		select {
		case _, ok := <-ch:
			if !ok {
				return
			}
			if n >= cap(ch) {
				t.Fatalf("KeepAliveStop (%s): %d Renewals received after stop returned, more than the channel holds (%d)", when, n+1, cap(ch))
			}
		default:
			t.Fatalf("KeepAliveStop (%s): the channel is still open when stop has returned (after %d buffered Renewals)", when, n)
		}
	}
}

// testForceReleaser checks an operator's forced release: the holder loses
// the key at once (Renew and Release: ErrNotHeld; a Locker's lease ends
// with ErrLeaseLost by its next renewal), the fence advances past the
// broken one, and every later grant, a queued waiter's included, is
// greater than the consumed fence ForceResult.After.
func testForceReleaser(t *testing.T, e *env) {
	if !implements[driver.ForceReleaser](t, e) {
		return
	}
	key := e.key("force")
	fr := e.backend(t).(driver.ForceReleaser)
	last := e.forceHeld(t, fr, key)
	e.forceFree(t, fr, key, last)
	e.forceLockerLease(t, fr, key)
}

// forceHeld checks ForceRelease of a key held by a direct grant: the
// result, the broken holder's Renew and Release (ErrNotHeld, the new
// holder's lock untouched), the next grant above After. It returns the
// last fence granted.
func (e *env) forceHeld(t *testing.T, fr driver.ForceReleaser, key string) fencing.Token {
	t.Helper()
	b1, b3 := e.backend(t), e.backend(t)
	g := e.grab(t, b1, key)
	r, err := fr.ForceRelease(e.ctx, key)
	if err != nil {
		t.Fatalf("ForceRelease of a held key: %v", err)
	}
	noSecret(t, "ForceResult", fmt.Sprintf("%#v", r), g.Owner)
	if !r.Held || r.Before != g.Fence || r.After <= r.Before {
		t.Fatalf("ForceRelease of a key held with fence %v = {Held:%v Before:%v After:%v}, want held, Before %v, After > Before",
			g.Fence, r.Held, r.Before, r.After, g.Fence)
	}
	if r.Holder != "" && r.Holder != driver.HolderID(g.Owner) {
		t.Errorf("ForceResult.Holder (%d bytes) is not HolderID(owner) nor empty", len(r.Holder))
	}
	if _, err := b1.Renew(e.ctx, g, e.hold); !errors.Is(err, fencedlock.ErrNotHeld) {
		t.Fatalf("Renew after ForceRelease: %v, want ErrNotHeld", err)
	}
	g3 := e.grab(t, b3, key)
	if g3.Fence <= r.After {
		t.Fatalf("grant after ForceRelease has fence %v, want > After %v", g3.Fence, r.After)
	}
	// The broken holder's Renew and Release, once the key has a new
	// holder, change nothing.
	if _, err := b1.Renew(e.ctx, g, e.hold); !errors.Is(err, fencedlock.ErrNotHeld) {
		t.Fatalf("Renew by the broken holder while another holds the key: %v, want ErrNotHeld", err)
	}
	wantNotHeld(t, "Release by the broken holder", b1.Release(e.ctx, g))
	e.mustBeHeld(t, b3, &g3, "the old holder's Release after a forced release deleted the new holder's lock")
	if err := b3.Release(e.ctx, g3); err != nil {
		t.Fatalf("Release: %v", err)
	}
	return g3.Fence
}

// forceFree checks ForceRelease of a free key whose last fence was last:
// not an error; the fence still advances past the last.
func (e *env) forceFree(t *testing.T, fr driver.ForceReleaser, key string, last fencing.Token) {
	t.Helper()
	r, err := fr.ForceRelease(e.ctx, key)
	if err != nil {
		t.Fatalf("ForceRelease of a free key: %v", err)
	}
	if r.Held || r.Holder != "" || r.After <= r.Before || r.After <= last {
		t.Fatalf("ForceRelease of a free key (last fence %v) = %+v, want not held, After > Before and > %v", last, r, last)
	}
	b := e.backend(t)
	if g := e.grab(t, b, key); g.Fence <= r.After {
		t.Fatalf("grant after ForceRelease of a free key has fence %v, want > After %v", g.Fence, r.After)
	} else if err := b.Release(e.ctx, g); err != nil {
		t.Fatalf("Release: %v", err)
	}
}

// forceLockerLease checks ForceRelease of a Locker's lease with a waiter:
// the lease is reported lost by its next renewal; the waiter is granted a
// fence above After.
func (e *env) forceLockerLease(t *testing.T, fr driver.ForceReleaser, key string) {
	t.Helper()
	const rounds = 3
	for round := 1; !e.forceLockerRound(t, fr, key); round++ {
		if round == rounds {
			t.Fatalf("ForceRelease of a Locker's lease: %d rounds in which the holder's lease ran out before ForceRelease returned (scheduling lateness up to %v): the machine is too loaded to judge", rounds, e.lag.Max())
		}
		key = e.key(fmt.Sprintf("force-locker-%d", round))
	}
}

// forceLockerRound is a round of forceLockerLease on key. It reports false,
// having judged nothing, if ForceRelease found the key free or held by
// another lease after the holder's own deadline had passed (a lease of
// TTL MinTTL lost on a loaded machine).
func (e *env) forceLockerRound(t *testing.T, fr driver.ForceReleaser, key string) bool {
	t.Helper()
	l := e.locker(t, e.short)
	lease := e.mustTryAcquire(t, l, key)
	waiter := e.locker(t, nil)
	got := e.acquireAsync(waiter, key)
	time.Sleep(e.ttl / 4) // let the waiter queue or poll
	t0 := time.Now()
	deadline := lease.Deadline() // before the store can grant the key to anyone else
	r, err := fr.ForceRelease(e.ctx, key)
	if err != nil {
		t.Fatalf("ForceRelease of a Locker's lease: %v", err)
	}
	if !r.Held || r.Before != lease.Fence() {
		if returned := time.Now(); deadline.Before(returned) {
			t.Logf("ForceRelease = %+v, not the lease of fence %v, whose deadline had passed %v before ForceRelease returned: not judged", r, lease.Fence(), returned.Sub(deadline).Round(time.Millisecond))
			if res := <-got; res.err == nil {
				_ = res.ls.Release(e.ctx)
			}
			_ = lease.Release(e.ctx)
			return false
		}
		t.Fatalf("ForceRelease = %+v, want held with the lease's fence %v (whose deadline had not passed)", r, lease.Fence())
	}
	renewEvery := l.Options().RenewInterval
	bound := grantTTL(lease.TTL(), e.ttl) + renewEvery + e.cfg.ExpirySlack
	if !e.waitDone(lease.Done(), bound+e.schedAllowance()) {
		t.Fatalf("lease not reported lost %v after ForceRelease (bound %v)", time.Since(t0).Round(time.Millisecond), bound)
	}
	t.Logf("loss reported %v after ForceRelease (renew interval %v)", time.Since(t0).Round(time.Millisecond), renewEvery)
	if cause := context.Cause(lease.Context()); !errors.Is(cause, fencedlock.ErrLeaseLost) {
		t.Fatalf("cause %v, want ErrLeaseLost", cause)
	}
	res := <-got
	if res.err != nil {
		t.Fatalf("waiter's Acquire after ForceRelease: %v", res.err)
	}
	if res.ls.Fence() <= r.After {
		t.Fatalf("waiter granted fence %v after ForceRelease, want > After %v", res.ls.Fence(), r.After)
	}
	if err := res.ls.Release(e.ctx); err != nil {
		t.Fatalf("waiter's Release: %v", err)
	}
	return true
}
