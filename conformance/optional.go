package conformance

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/fencedlock/fencedlock"
	"github.com/fencedlock/fencedlock/driver"
)

// This file holds the properties of the optional capabilities, found by
// type assertion on a backend and checked only when present: Notifier,
// WaitAcquirer, Inspector and KeepAliver.

func testNotifier(t *testing.T, e *env) {
	if !implements[driver.Notifier](t, e) {
		return
	}
	key := e.key("notify")
	b1, b2 := e.backend(t), e.backend(t)
	n := b2.(driver.Notifier)
	wake := e.hold / 2 // well before the holder's TTL
	g := e.grabTTL(t, b1, key, e.hold)
	ch, stop, err := n.Watch(e.ctx, key)
	if err != nil {
		t.Fatalf("Watch: %v", err)
	}
	released := time.Now()
	if err := b1.Release(e.ctx, g); err != nil {
		t.Fatalf("Release: %v", err)
	}
	select {
	case <-ch:
		t.Logf("watcher woken %v after the release", time.Since(released).Round(time.Microsecond))
	case <-time.After(wake):
		stop()
		t.Fatalf("watcher not woken %v after the release (the holder's TTL was %v)", wake, e.hold)
	}
	g2 := e.grab(t, b2, key) // agreement: the woken watcher can take the key
	// A wake-up while the watcher is not receiving is kept (a buffer of
	// one), not dropped.
	if err := b2.Release(e.ctx, g2); err != nil {
		t.Fatalf("Release: %v", err)
	}
	select {
	case <-ch:
	case <-time.After(wake):
		stop()
		t.Fatalf("a release while the watcher was not receiving left no pending wake-up %v after it (the channel must have a buffer of one)", wake)
	}
	stop()

	// Two watches of one key on one backend: stopping one leaves the other
	// in effect (a backend that keeps one subscription per key must count
	// its watchers).
	key = e.key("notify-two")
	g = e.grab(t, b1, key)
	_, stopA, err := n.Watch(e.ctx, key)
	if err != nil {
		t.Fatalf("Watch: %v", err)
	}
	chB, stopB, err := n.Watch(e.ctx, key)
	if err != nil {
		stopA()
		t.Fatalf("second Watch of the same key: %v", err)
	}
	stopA()
	if err := b1.Release(e.ctx, g); err != nil {
		t.Fatalf("Release: %v", err)
	}
	select {
	case <-chB:
	case <-time.After(wake):
		stopB()
		t.Fatalf("watcher not woken %v after the release: stopping another watch of the same key on the same backend ended it too", wake)
	}
	stopB()

	// A Locker's waiting Acquire is woken by the release too.
	key = e.key("notify-locker")
	holder := e.locker(t, nil)
	waiter := e.locker(t, func(o *fencedlock.Options) { o.MaxRetryDelay = e.hold })
	h, err := e.tryAcquire(t, holder, key)
	if err != nil {
		t.Fatalf("TryAcquire: %v", err)
	}
	got := make(chan acquired, 1)
	go func() {
		ls, err := waiter.Acquire(e.ctx, key)
		got <- acquired{ls, err}
	}()
	time.Sleep(e.ttl) // let the waiter fail once and start watching
	released = time.Now()
	if err := h.Release(e.ctx); err != nil {
		t.Fatalf("Release: %v", err)
	}
	select {
	case r := <-got:
		if r.err != nil {
			t.Fatalf("waiting Acquire: %v", r.err)
		}
		ls := r.ls
		t.Logf("waiting Acquire woken %v after the release", time.Since(released).Round(time.Microsecond))
		if ls.Fence() <= h.Fence() {
			t.Errorf("woken waiter's fence %v, want > %v", ls.Fence(), h.Fence())
		}
		_ = ls.Release(e.ctx)
	case <-time.After(wake):
		t.Fatalf("waiting Acquire not woken %v after the release (the holder's TTL was %v)", wake, e.hold)
	}
}

func testWaitAcquirer(t *testing.T, e *env) {
	if !implements[driver.WaitAcquirer](t, e) {
		return
	}
	key := e.key("queue")
	b1 := e.backend(t)
	w1 := b1.(driver.WaitAcquirer)
	req := func() driver.AcquireRequest {
		return driver.AcquireRequest{Key: key, Owner: owner(), TTL: e.hold}
	}

	// A free key is granted at once, exclusively.
	start := time.Now()
	g, err := w1.AcquireWait(e.ctx, req())
	if err != nil {
		t.Fatalf("AcquireWait of a free key: %v", err)
	}
	e.checkGrant(t, g, key, e.hold)
	if !g.Sent.IsZero() && g.Sent.Before(start) {
		t.Errorf("Grant.Sent lies %v before the AcquireWait call that made the lease", start.Sub(g.Sent))
	}
	if !e.held(t, key) {
		t.Fatal("key free after AcquireWait granted it")
	}
	if err := b1.Release(e.ctx, g); err != nil {
		t.Fatalf("Release: %v", err)
	}

	// A held key blocks the waiter until released; the waiter's fence is
	// greater.
	holder := e.locker(t, nil)
	h, err := e.tryAcquire(t, holder, key)
	if err != nil {
		t.Fatalf("TryAcquire: %v", err)
	}
	type result struct {
		g   driver.Grant
		err error
		at  time.Time
	}
	res := make(chan result, 1)
	go func() {
		g, err := w1.AcquireWait(e.ctx, req())
		res <- result{g, err, time.Now()}
	}()
	time.Sleep(2 * e.ttl) // the holder renews meanwhile
	select {
	case r := <-res:
		t.Fatalf("AcquireWait returned (%v, fence %v) while the key was held and renewed", r.err, r.g.Fence)
	default:
	}
	if err := h.Release(e.ctx); err != nil {
		t.Fatalf("Release: %v", err)
	}
	select {
	case r := <-res:
		if r.err != nil {
			t.Fatalf("AcquireWait after the release: %v", r.err)
		}
		if r.g.Fence <= h.Fence() {
			t.Fatalf("waiter's fence %v, want > holder's %v", r.g.Fence, h.Fence())
		}
		if !e.held(t, key) {
			t.Fatal("key free after AcquireWait granted it")
		}
		if err := b1.Release(e.ctx, r.g); err != nil {
			t.Fatalf("Release: %v", err)
		}
	case <-time.After(e.hold / 2):
		t.Fatalf("waiter not granted the key %v after the holder released it", e.hold/2)
	}

	// FIFO: waiters are granted in the order they queued. The suite cannot
	// see when a waiter is queued, so it starts them QueueDelay apart; if
	// the order is wrong it tries once more with 4x the delay, and fails
	// only if the order is wrong again (an unfair queue is unfair both
	// times; a slow registration is unlikely to be that slow twice).
	delay := e.cfg.QueueDelay
	for attempt := 1; ; attempt++ {
		order := e.fifoRound(t, holder, req, delay)
		if slices.IsSorted(order) {
			t.Logf("%d waiters granted in FIFO order %v (started %v apart)", len(order), order, delay)
			break
		}
		if attempt == 2 {
			t.Fatalf("waiters granted in order %v, want FIFO (waiters started %v apart, after a first round with %v)", order, delay, e.cfg.QueueDelay)
		}
		t.Logf("waiters granted in order %v with starts %v apart; trying again with %v", order, delay, 4*delay)
		delay *= 4
	}
	e.waitPastTTL(t)
	e.cancelRacesGrant(t, "AcquireWait", nil, func(ctx context.Context, b driver.Backend, req driver.AcquireRequest) (driver.Grant, error) {
		return b.(driver.WaitAcquirer).AcquireWait(ctx, req)
	})
}

// waitPastTTL checks that a waiter that waits longer than its own TTL is
// granted a live lease (etcd #11456): its key is held, it can renew it,
// and its Grant's Sent and TTL do not say that the lease already ran out.
func (e *env) waitPastTTL(t *testing.T) {
	t.Helper()
	key := e.key("wait-past-ttl")
	hb, wb := e.backend(t), e.backend(t)
	h := e.grab(t, hb, key)
	type result struct {
		g   driver.Grant
		err error
		at  time.Time
	}
	res := make(chan result, 1)
	called := time.Now()
	go func() {
		g, err := wb.(driver.WaitAcquirer).AcquireWait(e.ctx, driver.AcquireRequest{Key: key, Owner: owner(), TTL: e.ttl})
		res <- result{g, err, time.Now()}
	}()
	wait := 2*e.ttl + e.cfg.ExpirySlack // longer than the waiter's TTL
	time.Sleep(wait)
	if err := hb.Release(e.ctx, h); err != nil {
		t.Fatalf("Release: %v", err)
	}
	var r result
	select {
	case r = <-res:
	case <-time.After(e.hold / 2):
		t.Fatalf("waiter not granted the key %v after the holder released it", e.hold/2)
	}
	if r.err != nil {
		t.Fatalf("AcquireWait after waiting %v (its TTL %v): %v", wait, e.ttl, r.err)
	}
	sent := r.g.Sent
	if sent.IsZero() {
		sent = called // the Locker's reckoning: the AcquireWait call
	}
	ttl := grantTTL(r.g.TTL, e.ttl)
	// A lease whose own send time and TTL ended before the grant came back
	// may have expired on the store (allowing for the scheduling lateness
	// measured, which may have delayed the backend's renewals).
	if end := sent.Add(ttl); end.Add(2 * e.lag.max()).Before(r.at) {
		t.Fatalf("AcquireWait granted a lease that had run out %v before it returned (Grant.Sent %v after the call, TTL %v): a waiter whose lease expired while it waited was granted the key",
			r.at.Sub(end).Round(time.Millisecond), sent.Sub(called).Round(time.Millisecond), ttl)
	}
	if !e.held(t, key) {
		t.Fatalf("key free right after AcquireWait granted it to a waiter that waited %v (its TTL %v): its lease expired while it waited", wait, e.ttl)
	}
	if _, err := wb.Renew(e.ctx, r.g, e.ttl); err != nil {
		t.Fatalf("the waiter granted after %v (its TTL %v) cannot renew: %v", wait, e.ttl, err)
	}
	if err := wb.Release(e.ctx, r.g); err != nil {
		t.Fatalf("Release: %v", err)
	}
	t.Logf("a waiter that waited %v (TTL %v) was granted a live lease", wait, e.ttl)
}

// cancelRacesGrant cancels waiters at about the moment the holder releases
// the key, in both orders, and checks that a waiter whose wait (name:
// AcquireWait, or the Locker's Acquire then AcquireWaitHeld) returned the
// context's error left no trace: the key is free. Each waiter is on its
// own backend b: before (if not nil) is called with it and the waiter's
// request once the key is held, then wait in a goroutine.
func (e *env) cancelRacesGrant(t *testing.T, name string, before func(*testing.T, driver.Backend, driver.AcquireRequest), wait func(context.Context, driver.Backend, driver.AcquireRequest) (driver.Grant, error)) {
	t.Helper()
	const rounds = 24
	hb := e.backend(t)
	type round struct {
		key    string
		w      driver.Backend
		h      driver.Grant
		ctx    context.Context
		cancel context.CancelFunc
		res    chan error
		g      driver.Grant
	}
	rs := make([]*round, rounds)
	for i := range rs {
		r := &round{key: e.key("cancel-race"), w: e.backend(t), res: make(chan error, 1)}
		r.h = e.grab(t, hb, r.key)
		r.ctx, r.cancel = context.WithCancel(e.ctx)
		rs[i] = r
		req := driver.AcquireRequest{Key: r.key, Owner: owner(), TTL: e.hold}
		if before != nil {
			before(t, r.w, req)
		}
		go func() {
			g, err := wait(r.ctx, r.w, req)
			r.g = g
			r.res <- err
		}()
	}
	defer func() {
		for _, r := range rs {
			r.cancel()
		}
	}()
	time.Sleep(e.cfg.QueueDelay)
	var wg sync.WaitGroup
	relErrs := make([]error, rounds)
	for i, r := range rs {
		wg.Go(func() {
			// Mostly cancel first, then release: the grant races the
			// waiter's leaving the queue.
			gap := time.Duration(i%3) * time.Millisecond / 2
			if i%4 != 3 {
				r.cancel()
				time.Sleep(gap)
				relErrs[i] = hb.Release(e.ctx, r.h)
			} else {
				relErrs[i] = hb.Release(e.ctx, r.h)
				time.Sleep(gap)
				r.cancel()
			}
		})
	}
	wg.Wait()
	if err := errors.Join(relErrs...); err != nil {
		t.Fatalf("the holders' Release: %v", err)
	}
	granted, cancelled := 0, 0
	for i, r := range rs {
		var err error
		select {
		case err = <-r.res:
		case <-time.After(e.ttl + e.schedAllowance()):
			t.Fatalf("round %d: %s still waiting %v after its context was cancelled", i+1, name, e.ttl+e.schedAllowance())
		}
		if err == nil {
			granted++
			if err := r.w.Release(e.ctx, r.g); err != nil {
				t.Fatalf("round %d: Release of the granted waiter: %v", i+1, err)
			}
			continue
		}
		cancelled++
		if !errors.Is(err, context.Canceled) {
			t.Fatalf("round %d: cancelled %s: %v, want an error wrapping context.Canceled", i+1, name, err)
		}
		if e.held(t, r.key) {
			t.Fatalf("round %d: key held after the holder released it and the only waiter's %s returned %v: a cancel racing the grant left the key to no one", i+1, name, err)
		}
	}
	t.Logf("%d cancels raced the grant of %s: %d waiters granted, %d cancelled without a trace", rounds, name, granted, cancelled)
}

// fifoRound holds the key with holder, starts 4 waiters (each on its own
// backend) delay apart, releases the key and returns the order in which
// the waiters were granted it.
func (e *env) fifoRound(t *testing.T, holder *fencedlock.Locker, req func() driver.AcquireRequest, delay time.Duration) []int {
	t.Helper()
	const waiters = 4
	h, err := e.tryAcquire(t, holder, req().Key)
	if err != nil {
		t.Fatalf("TryAcquire: %v", err)
	}
	var (
		mu    sync.Mutex
		order []int
		errs  []error
		wg    sync.WaitGroup
	)
	defer wg.Wait() // after cancel below: the waiters end before the test
	ctx, cancel := context.WithCancel(e.ctx)
	defer cancel()
	for i := range waiters {
		b := e.backend(t)
		w := b.(driver.WaitAcquirer)
		wg.Go(func() {
			g, err := w.AcquireWait(ctx, req())
			if err == nil {
				// Recorded while holding the key, before the release
				// hands it on: recorded after it, a waiter raced the
				// next one (granted FIFO, reported [1 0 3 2] under load).
				mu.Lock()
				order = append(order, i)
				mu.Unlock()
				err = b.Release(ctx, g)
			}
			if err != nil {
				mu.Lock()
				errs = append(errs, fmt.Errorf("waiter %d: %w", i, err))
				mu.Unlock()
			}
		})
		time.Sleep(delay)
	}
	if err := h.Release(e.ctx); err != nil {
		t.Fatalf("Release: %v", err)
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		t.Fatal(err)
	}
	return order
}

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
		select {
		case r, ok := <-ch:
			if !ok {
				t.Fatalf("KeepAlive channel closed after %d renewals of a held key", renewals)
			}
			if r.Err != nil {
				t.Fatalf("KeepAlive of a held key reported %v", r.Err)
			}
			if r.TTL <= 0 {
				t.Fatalf("KeepAlive Renewal.TTL = %v", r.TTL)
			}
			renewals++
		case <-time.After(ttl + e.schedAllowance()):
			t.Fatalf("no KeepAlive renewal within a TTL (%v) after %d renewals", ttl, renewals)
		}
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
