package conformance

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/fencedlock/fencedlock/driver"
)

// testTryFirstWaiter checks a [driver.TryFirstWaiter] the way the Locker
// uses it: one plain Acquire with a request, then, if that did not take
// the key, AcquireWaitHeld with the same request. TryFirst does not block;
// AcquireWaitHeld blocks while another owner holds the key and grants a
// greater fence after its release; after an Acquire that was applied but
// whose reply was lost (the key is held by req.Owner) it grants the key to
// req.Owner at once, with the fence of that Acquire, even with another
// waiter queued; when its context ends it returns the context's error and
// leaves no trace, also when the cancel races the grant.
func testTryFirstWaiter(t *testing.T, e *env) {
	if !implements[driver.TryFirstWaiter](t, e) {
		return
	}
	e.tryFirstFree(t)
	e.waitHeldBlocks(t)
	e.waitHeldLostReply(t, false)
	e.waitHeldLostReply(t, true)
	e.waitHeldCancelled(t)
	e.cancelRacesGrant(t, "AcquireWaitHeld", e.firstAttempt, func(ctx context.Context, b driver.Backend, req driver.AcquireRequest) (driver.Grant, error) {
		return b.(driver.TryFirstWaiter).AcquireWaitHeld(ctx, req)
	})
}

// firstAttempt makes the Locker's plain Acquire of req before
// AcquireWaitHeld, on a key another owner holds, and fails t unless it
// finds the key held.
func (e *env) firstAttempt(t *testing.T, b driver.Backend, req driver.AcquireRequest) {
	t.Helper()
	g, err := b.Acquire(e.ctx, req)
	if err == nil {
		t.Fatalf("Acquire(%s) of a held key succeeded (fence %v)", quote(req.Key), g.Fence)
	}
	if !errors.Is(err, driver.ErrNotAcquired) {
		t.Fatalf("Acquire(%s) of a held key: %v, want an error wrapping ErrNotAcquired", quote(req.Key), err)
	}
}

// waitCall is a call of AcquireWaitHeld (or AcquireWait) running in its
// own goroutine, which calls no method of t: done is closed when it
// returned, with its outcome.
type waitCall struct {
	done chan struct{}
	g    driver.Grant
	err  error
	at   time.Time // when it returned
}

// startWait calls wait(ctx, req) in a new goroutine.
func startWait(ctx context.Context, wait func(context.Context, driver.AcquireRequest) (driver.Grant, error), req driver.AcquireRequest) *waitCall {
	c := &waitCall{done: make(chan struct{})}
	go func() {
		defer close(c.done)
		c.g, c.err = wait(ctx, req)
		c.at = time.Now()
	}()
	return c
}

// returned reports whether the call has returned.
func (c *waitCall) returned() bool {
	select {
	case <-c.done:
		return true
	default:
		return false
	}
}

// stopWait cancels a call that must not outlive the check (cancel is its
// context's) and waits, bounded, for it to return; a grant it returned
// meanwhile is released.
func (e *env) stopWait(b driver.Backend, c *waitCall, cancel context.CancelFunc) {
	cancel()
	if e.waitDone(c.done, e.ttl+e.schedAllowance()) && c.err == nil {
		_ = b.Release(e.ctx, c.g)
	}
}

// tryFirst calls TryFirst(key) and fails t unless it returns within the
// suite's allowance for scheduling: it must not block.
func (e *env) tryFirst(t *testing.T, f driver.TryFirstWaiter, key, state string) bool {
	t.Helper()
	done := make(chan struct{})
	var ok bool
	start := time.Now()
	go func() {
		defer close(done)
		ok = f.TryFirst(key)
	}()
	bound := e.schedAllowance()
	if !e.waitDone(done, bound) {
		t.Fatalf("TryFirst(%s) of a %s still running %v after the call: TryFirst must not block", quote(key), state, bound)
	}
	t.Logf("TryFirst of a %s: %v, in %v", state, ok, time.Since(start).Round(time.Microsecond))
	return ok
}

// tryFirstFree checks TryFirst on a free key without waiters, and that
// the Acquire the Locker then makes grants the key as usual.
func (e *env) tryFirstFree(t *testing.T) {
	t.Helper()
	key := e.key("try-first")
	b := e.backend(t)
	e.tryFirst(t, b.(driver.TryFirstWaiter), key, "free key")
	g := e.grab(t, b, key)
	if !e.held(t, key) {
		t.Fatal("key free after the Acquire made after TryFirst granted it")
	}
	if err := b.Release(e.ctx, g); err != nil {
		t.Fatalf("Release: %v", err)
	}
}

// waitHeldBlocks checks that AcquireWaitHeld after an Acquire that found
// the key held blocks while it is held, and grants req.Owner a greater
// fence once the holder releases it.
func (e *env) waitHeldBlocks(t *testing.T) {
	t.Helper()
	key := e.key("wait-held")
	hb, wb := e.backend(t), e.backend(t)
	w := wb.(driver.TryFirstWaiter)
	h := e.grab(t, hb, key)
	e.tryFirst(t, w, key, "held key")
	req := driver.AcquireRequest{Key: key, Owner: owner(), TTL: e.hold}
	e.firstAttempt(t, wb, req)
	ctx, cancel := context.WithCancel(e.ctx)
	c := startWait(ctx, w.AcquireWaitHeld, req)
	defer e.stopWait(wb, c, cancel)
	time.Sleep(2 * e.ttl)
	e.tryFirst(t, w, key, "held key with a waiter queued")
	if c.returned() {
		t.Fatalf("AcquireWaitHeld returned (%v, fence %v) while another owner held the key", c.err, c.g.Fence)
	}
	e.releaseToWaiter(t, hb, h, c, "AcquireWaitHeld", "")
	e.checkGrant(t, c.g, key, e.hold)
	if c.g.Owner != req.Owner {
		t.Fatal("AcquireWaitHeld's Grant.Owner is not the request's owner token") // not printed: a secret
	}
	if c.g.Fence <= h.Fence {
		t.Fatalf("AcquireWaitHeld granted fence %v, want > the holder's %v", c.g.Fence, h.Fence)
	}
	if !e.held(t, key) {
		t.Fatal("key free after AcquireWaitHeld granted it")
	}
	if err := wb.Release(e.ctx, c.g); err != nil {
		t.Fatalf("Release of AcquireWaitHeld's grant: %v", err)
	}
}

// waitHeldLostReply checks the Acquire whose reply was lost: it was
// applied (the key is held by req.Owner) but the Locker saw an error, and
// calls AcquireWaitHeld with the same req. That must grant req.Owner the
// key it holds, with the fence of that Acquire, at once (not after a TTL,
// not by waiting behind itself, not to another waiter: with queued, a
// waiter on another backend is queued when it is called).
func (e *env) waitHeldLostReply(t *testing.T, queued bool) {
	t.Helper()
	key := e.key("lost-reply")
	wb := e.backend(t)
	w := wb.(driver.TryFirstWaiter)
	lost := e.grab(t, wb, key) // its reply "lost": only the test sees it
	req := driver.AcquireRequest{Key: key, Owner: lost.Owner, TTL: e.hold}
	what := "AcquireWaitHeld(req) after an Acquire(req) that took the key, its reply lost"
	var other *waitCall
	if queued {
		what += ", another waiter queued"
		ob := e.backend(t)
		octx, ocancel := context.WithCancel(e.ctx)
		other = startWait(octx, ob.(driver.WaitAcquirer).AcquireWait, driver.AcquireRequest{Key: key, Owner: owner(), TTL: e.hold})
		defer e.stopWait(ob, other, ocancel)
		time.Sleep(e.cfg.QueueDelay)
		if other.returned() {
			t.Fatalf("AcquireWait of a held key returned (%v, fence %v)", other.err, other.g.Fence)
		}
	}
	ctx, cancel := context.WithCancel(e.ctx)
	called := time.Now()
	c := startWait(ctx, w.AcquireWaitHeld, req)
	defer e.stopWait(wb, c, cancel)
	// Promptly: a wait for the lease (e.hold) would take 20x longer.
	bound := e.schedAllowance()
	if !e.waitDone(c.done, bound) {
		t.Fatalf("%s: still waiting %v after the call: the key is held by req.Owner, which must be granted it at once (not after its lease of %v)", what, bound, e.hold)
	}
	if c.err != nil {
		t.Fatalf("%s: %v, want a grant to req.Owner", what, c.err)
	}
	t.Logf("%s: granted in %v", what, c.at.Sub(called).Round(time.Microsecond))
	g := c.g
	e.checkGrant(t, g, key, e.hold)
	if g.Owner != req.Owner {
		t.Fatalf("%s: Grant.Owner is not req.Owner", what) // not printed: a secret
	}
	if g.Fence != lost.Fence {
		t.Fatalf("%s: fence %v, want the fence of that Acquire, %v (req.Owner already holds the key)", what, g.Fence, lost.Fence)
	}
	if other != nil && other.returned() {
		t.Fatalf("%s: the other waiter returned (%v, fence %v) while req.Owner holds the key", what, other.err, other.g.Fence)
	}
	if !e.held(t, key) {
		t.Fatalf("%s: key free after the grant", what)
	}
	if _, err := wb.Renew(e.ctx, g, e.hold); err != nil {
		t.Fatalf("%s: Renew of the grant: %v", what, err)
	}
	released := time.Now()
	if err := wb.Release(e.ctx, g); err != nil {
		t.Fatalf("%s: Release of the grant: %v", what, err)
	}
	if other == nil {
		if e.held(t, key) {
			t.Fatalf("%s: key held after req.Owner released it", what)
		}
		return
	}
	// The queued waiter is next, with a greater fence.
	if bound := e.hold / 2; !e.waitDone(other.done, bound) {
		t.Fatalf("%s: the queued waiter not granted the key %v after req.Owner released it", what, bound)
	}
	if other.err != nil {
		t.Fatalf("%s: the queued waiter after req.Owner's release: %v", what, other.err)
	}
	if other.g.Fence <= g.Fence {
		t.Fatalf("%s: the queued waiter's fence %v, want > req.Owner's %v", what, other.g.Fence, g.Fence)
	}
	t.Logf("%s: the queued waiter granted %v after req.Owner's release", what, other.at.Sub(released).Round(time.Microsecond))
}

// waitHeldCancelled checks AcquireWaitHeld whose context ends while the
// key is held: it returns promptly an error wrapping the context's error,
// and leaves no trace: a waiter that called after it is granted the key
// at the holder's release (a cancelled waiter left queued, with its lease
// of e.hold, would hold it up for that long), and the key is then free.
func (e *env) waitHeldCancelled(t *testing.T) {
	t.Helper()
	key := e.key("wait-held-cancel")
	hb := e.backend(t)
	h := e.grab(t, hb, key)
	prompt := e.ttl + e.schedAllowance()
	cases := e.endingCtxs()
	for _, cs := range cases {
		wb := e.backend(t)
		req := driver.AcquireRequest{Key: key, Owner: owner(), TTL: e.hold}
		e.firstAttempt(t, wb, req)
		ctx, cancel := cs.ctx()
		c := startWait(ctx, wb.(driver.TryFirstWaiter).AcquireWaitHeld, req)
		<-ctx.Done()
		ended := time.Now()
		if !e.waitDone(c.done, prompt) {
			t.Fatalf("%s: AcquireWaitHeld of a held key still waiting %v after its context ended", cs.name, prompt)
		}
		cancel()
		if c.err == nil {
			t.Fatalf("%s: AcquireWaitHeld granted a key its holder never released (fence %v, the holder's %v)", cs.name, c.g.Fence, h.Fence)
		}
		if !errors.Is(c.err, cs.want) {
			t.Fatalf("%s: AcquireWaitHeld of a held key: %v, want an error wrapping %v", cs.name, c.err, cs.want)
		}
		noSecret(t, cs.name+": the error", c.err.Error(), req.Owner)
		t.Logf("%s: returned %v after the context ended: %v", cs.name, c.at.Sub(ended).Round(time.Microsecond), c.err)
	}
	// A live waiter, queued after the cancelled ones, is next.
	wb := e.backend(t)
	ctx, cancel := context.WithCancel(e.ctx)
	req := driver.AcquireRequest{Key: key, Owner: owner(), TTL: e.hold}
	e.firstAttempt(t, wb, req)
	live := startWait(ctx, wb.(driver.TryFirstWaiter).AcquireWaitHeld, req)
	defer e.stopWait(wb, live, cancel)
	time.Sleep(e.cfg.QueueDelay)
	e.releaseToWaiter(t, hb, h, live, "live waiter", ": a cancelled AcquireWaitHeld holds up the queue")
	if live.g.Fence <= h.Fence {
		t.Fatalf("live waiter's fence %v, want > the holder's %v", live.g.Fence, h.Fence)
	}
	if err := wb.Release(e.ctx, live.g); err != nil {
		t.Fatalf("Release of the live waiter's grant: %v", err)
	}
	if e.held(t, key) {
		t.Fatal("key held after the live waiter released it: a cancelled AcquireWaitHeld left something behind")
	}
}

// releaseToWaiter releases h on hb and fails the test unless the wait w,
// queued behind it, is granted within hold/2 (why says what a wait past
// that bound means).
func (e *env) releaseToWaiter(t *testing.T, hb driver.Backend, h driver.Grant, w *waitCall, what, why string) {
	t.Helper()
	released := time.Now()
	if err := hb.Release(e.ctx, h); err != nil {
		t.Fatalf("holder's Release: %v", err)
	}
	if bound := e.hold / 2; !e.waitDone(w.done, bound) {
		t.Fatalf("%s still waiting %v after the holder released%s", what, bound, why)
	}
	if w.err != nil {
		t.Fatalf("%s after the holder's release: %v", what, w.err)
	}
	t.Logf("%s granted %v after the release", what, w.at.Sub(released).Round(time.Microsecond))
}
