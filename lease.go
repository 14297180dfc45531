package fencedlock

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/fencedlock/fencedlock/fencing"
)

// Lease is a held lock. Its watchdog renews it until Release, loss, or the
// Locker's Close. All methods are safe for concurrent use. Printing a Lease
// (fmt, slog) shows its key, fence and holder id, never its owner token.
//
// A lease is held until it ends, once: released (Release, or the Locker's
// Close) or lost (the server reported it gone, a renewal failed
// permanently, or no renewal succeeded before the local deadline). end is
// the one place that makes that move; once ended, a lease never holds
// again.
type Lease struct {
	l      *Locker
	grant  Grant
	holder string
	lt     leaseTiming // this lease's TTL, renew interval, margin, ManualRenew

	// ctx is cancelled when the lease ends (cause: released or lost); it
	// also cancels renewals in flight.
	ctx    context.Context
	cancel context.CancelCauseFunc

	// The watchdog is a timer, not a goroutine: tick runs when the next
	// renewal or the local deadline is due, and re-arms the timer (under
	// mu, so ticks never overlap) until the lease ends.
	finishOnce sync.Once
	kaDone     chan struct{} // closed when the keepalive reader returned (KeepAliver only)

	mu       sync.Mutex
	ticking  bool          // a tick is running
	tickDone chan struct{} // made by Release to wait for a running tick; closed when it returns
	timer    *time.Timer
	deadline time.Time // local deadline (monotonic)
	next     time.Time // next renewal due (watchdog renewals only)
	lastErr  error     // last renewal failure
	err      error     // nil while held; ErrReleased or a *lostError after
	released bool      // Release was called

	since time.Duration // when the lease was granted, after obsEpoch (observed leases only)
}

// Key returns the lock name.
func (ls *Lease) Key() string { return ls.grant.Key }

// Fence returns the lease's fencing token: strictly greater than every
// fence granted before on this key. Pass it to the guarded resource.
func (ls *Lease) Fence() fencing.Token { return ls.grant.Fence }

// Holder returns the lease's holder id: non-secret, derived from the owner
// token (see [HolderID]). Guards use it to accept an equal fence only from
// the same holder.
func (ls *Lease) Holder() string { return ls.holder }

// TTL returns the lease the server granted on acquire.
func (ls *Lease) TTL() time.Duration { return ls.grant.TTL }

// Context returns a context that is cancelled when the lease is lost or
// released. context.Cause tells which: an error wrapping [ErrLeaseLost]
// (with the reason) or [ErrReleased].
func (ls *Lease) Context() context.Context { return ls.ctx }

// Done returns a channel closed when the lease is lost or released.
func (ls *Lease) Done() <-chan struct{} { return ls.ctx.Done() }

// Err returns nil while the lease is held, then an error wrapping
// [ErrLeaseLost] (and the reason) or [ErrReleased]. It reads the clock
// itself: past the local deadline it reports the loss even if the watchdog
// has not run yet (a descheduled process, a late timer).
func (ls *Lease) Err() error {
	ls.mu.Lock()
	err, deadline, lastErr := ls.err, ls.deadline, ls.lastErr
	ls.mu.Unlock()
	if err == nil && !time.Now().Before(deadline) {
		ls.lose(deadlineReason(lastErr))
		ls.mu.Lock()
		err = ls.err
		ls.mu.Unlock()
	}
	return err
}

// Deadline returns the local deadline: the moment the lease is reported
// lost unless a renewal succeeds first. It lies at least the safety margin
// before the earliest moment the server could grant the key to another
// owner (measured from when the last successful request was sent).
func (ls *Lease) Deadline() time.Time {
	ls.mu.Lock()
	defer ls.mu.Unlock()
	return ls.deadline
}

// end moves the lease from held to ended with cause (ErrReleased or a
// *lostError). It stops the watchdog timer, cancels the lease's context
// (which aborts a watchdog renewal in flight) and removes the lease from
// its Locker. It reports false, changing nothing, if the lease had
// already ended.
func (ls *Lease) end(cause error) bool {
	ls.mu.Lock()
	if ls.err != nil {
		ls.mu.Unlock()
		return false
	}
	ls.err = cause
	stopped := ls.timer != nil && ls.timer.Stop()
	ls.mu.Unlock()
	if stopped {
		ls.finish() // no tick pending; one running (or not yet armed) finishes itself
	}
	ls.observeEnd(cause) // observe: released or lost (before Done closes)
	ls.cancel(cause)
	ls.l.forget(ls)
	return true
}

// lose ends the lease as lost with reason. It does nothing if the lease
// already ended.
func (ls *Lease) lose(reason error) {
	if ls.end(&lostError{key: ls.grant.Key, reason: reason}) {
		ls.l.log.Warn("fencedlock: lease lost", "key", ls.grant.Key, "fence", ls.grant.Fence, "holder", ls.holder, "reason", reason)
	}
}

// finish ends the watchdog's share of the Locker's wait group, once.
func (ls *Lease) finish() { ls.finishOnce.Do(ls.l.wg.Done) }

// endedErr is the error of an operation on a lease that ended: it wraps
// [ErrNotHeld] and the lease's end (ErrReleased, or ErrLeaseLost and the
// reason).
func (ls *Lease) endedErr(op string, end error) error {
	return fmt.Errorf("fencedlock: %s %q: %w: %w", op, ls.grant.Key, ErrNotHeld, end)
}

// Renew renews the lease now. The watchdog does this on its own unless
// Options.ManualRenew is set (or [WithManualRenew] was given for this
// lease). ctx bounds the request (Release does not
// cancel a manual renewal in flight). If the server no longer holds the
// lease for this owner, the lease is lost and the error wraps [ErrNotHeld];
// an error no retry can fix ([ErrPermanent]) loses it too. Once the lease
// has ended, Renew fails with an error wrapping [ErrNotHeld] and the end
// ([ErrLeaseLost] or [ErrReleased]), also when the renewal was already in
// flight: a lost lease stays lost, and a renewal that succeeded on the
// server after the loss is followed by a release of the key.
func (ls *Lease) Renew(ctx context.Context) error {
	if err := ls.Err(); err != nil {
		return ls.endedErr("renew", err)
	}
	return ls.renew(ctx)
}

func (ls *Lease) renew(ctx context.Context) error {
	sent := time.Now()
	ttl, err := ls.l.b.Renew(ctx, ls.grant, ls.lt.ttl)
	ls.observeRenew(ctx, sent, false, err) // observe: a renewal
	ls.mu.Lock()
	// A success that comes back after the local deadline, while nobody has
	// declared the lease lost yet (Err, the watchdog), still proves the key
	// was ours without a gap: the server renewed it, and it renews only a
	// key this owner holds. Once the lease was declared lost, it stays lost.
	ended := ls.err
	if ended == nil {
		if err == nil {
			if ttl <= 0 {
				ttl = ls.lt.ttl
			}
			if d := sent.Add(ttl - ls.lt.margin); d.After(ls.deadline) {
				ls.deadline = d
			}
			ls.lastErr = nil
			ls.mu.Unlock()
			return nil
		}
		if !errors.Is(err, ErrNotHeld) && !permanent(err) {
			ls.lastErr = err
			ls.mu.Unlock()
			return err
		}
		ls.mu.Unlock()
		ls.lose(err)
		return err
	}
	ls.mu.Unlock()
	// The lease ended while the renewal was in flight. A lost lease stays
	// lost; if the server applied the renewal anyway, the key is ours for
	// another TTL while nobody thinks it is held: free it. (After Release,
	// Release itself deletes the key.)
	if err == nil && errors.Is(ended, ErrLeaseLost) {
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), ls.l.opts.ReleaseTimeout)
		rerr := ls.l.release(rctx, &ls.grant)
		cancel()
		if rerr != nil && !errors.Is(rerr, ErrNotHeld) {
			ls.l.log.Warn("fencedlock: could not release a key renewed after its lease was lost; it expires with its TTL",
				"key", ls.grant.Key, "fence", ls.grant.Fence, "holder", ls.holder, "err", rerr)
		}
	}
	return ls.endedErr("renew", ended)
}

var errDeadline = errors.New("no renewal succeeded before the local deadline")

// deadlineReason is the loss reason at the local deadline, with the last
// renewal's error if one failed.
func deadlineReason(lastErr error) error {
	if lastErr != nil {
		return fmt.Errorf("%w: last renewal: %w", errDeadline, lastErr)
	}
	return errDeadline
}

// wakeLocked returns how long the watchdog timer should sleep from now:
// until the next renewal or the local deadline, whichever comes first.
// ls.mu must be held.
func (ls *Lease) wakeLocked(now time.Time) time.Duration {
	wake := ls.deadline
	if ls.renews() && ls.next.Before(wake) {
		wake = ls.next
	}
	return max(wake.Sub(now), 0)
}

// renews reports whether the watchdog itself sends renewals.
func (ls *Lease) renews() bool { return ls.l.keeper == nil && !ls.lt.manual }

// tick is the watchdog: it renews when a renewal is due and reports the
// lease lost at the local deadline. It runs on the timer's goroutine and
// re-arms the timer until the lease ends.
func (ls *Lease) tick() {
	ls.mu.Lock()
	if ls.err != nil {
		ls.mu.Unlock()
		ls.finish()
		return
	}
	ls.ticking = true
	deadline, next, lastErr := ls.deadline, ls.next, ls.lastErr
	ls.mu.Unlock()

	if now := time.Now(); !now.Before(deadline) {
		ls.lose(deadlineReason(lastErr))
	} else if ls.renews() && !now.Before(next) {
		// A renewal in flight must not outlive the deadline nor the lease
		// (its end cancels ls.ctx). At the deadline the lease is lost
		// there and then, whether or not the backend call returns when
		// its context ends; losing it cancels the call. The deadline is a
		// timer, not a context deadline: some clients (rueidis) enforce a
		// context's deadline on the connection and then ignore its
		// cancellation, so Release could not abort the request.
		rctx, cancel := context.WithCancel(ls.ctx)
		t := time.AfterFunc(deadline.Sub(now), func() {
			ls.mu.Lock()
			lastErr := ls.lastErr
			ls.mu.Unlock()
			ls.lose(deadlineReason(lastErr))
		})
		err := ls.renew(rctx)
		t.Stop()
		cancel()
		interval := ls.lt.renew
		if err != nil {
			if ls.ctx.Err() == nil && !errors.Is(err, ErrNotHeld) && ls.l.debug() {
				ls.l.log.Debug("fencedlock: renewal failed; retrying", "key", ls.grant.Key, "err", err)
			}
			// Retry sooner than a full interval: the deadline is near.
			interval = max(interval/4, time.Millisecond)
		}
		ls.mu.Lock()
		ls.next = time.Now().Add(interval)
		ls.mu.Unlock()
	}

	ls.mu.Lock()
	ls.ticking = false
	if ls.tickDone != nil {
		close(ls.tickDone)
		ls.tickDone = nil
	}
	ended := ls.err != nil
	if !ended {
		ls.timer.Reset(ls.wakeLocked(time.Now()))
	}
	ls.mu.Unlock()
	if ended {
		ls.finish()
	}
}

// tickRunning reports whether a tick is running now.
func (ls *Lease) tickRunning() bool {
	ls.mu.Lock()
	defer ls.mu.Unlock()
	return ls.ticking
}

// waitTick waits until a tick running now has returned (its renewal was
// cancelled by the end of the lease), or ctx is done. A tick that starts
// later finds the lease ended and sends nothing.
func (ls *Lease) waitTick(ctx context.Context) {
	ls.mu.Lock()
	if !ls.ticking {
		ls.mu.Unlock()
		return
	}
	if ls.tickDone == nil {
		ls.tickDone = make(chan struct{})
	}
	done := ls.tickDone
	ls.mu.Unlock()
	select {
	case <-done:
	case <-ctx.Done():
	}
}

// readKeepAlive feeds a KeepAliver's renewals into the lease until the
// backend closes the channel (after the lease's context ends, or when it
// can no longer keep the lease alive).
func (ls *Lease) readKeepAlive(kc <-chan Renewal) {
	defer ls.l.wg.Done()
	defer close(ls.kaDone)
	for r := range kc {
		ls.keepAlive(r)
	}
	if ls.ctx.Err() == nil {
		ls.lose(errors.New("keepalive stopped"))
	}
}

func (ls *Lease) keepAlive(r Renewal) {
	ls.observeRenew(ls.ctx, r.Sent, true, r.Err) // observe: a KeepAliver's renewal
	if r.Err != nil {
		if errors.Is(r.Err, ErrNotHeld) || permanent(r.Err) {
			ls.lose(r.Err)
			return
		}
		ls.mu.Lock()
		ls.lastErr = r.Err
		ls.mu.Unlock()
		return
	}
	ls.mu.Lock()
	if d := r.Sent.Add(r.TTL - ls.lt.margin); d.After(ls.deadline) && ls.err == nil {
		ls.deadline = d
		// The timer sleeps until the old deadline at most; it re-arms
		// for the new one when it fires.
	}
	ls.lastErr = nil
	ls.mu.Unlock()
}

// Release ends the lease (its context is cancelled with cause
// [ErrReleased]), cancels the watchdog's renewal in flight, deletes the key
// on the server if this owner still holds it, and waits for the cancelled
// renewal to return. It runs detached from ctx's cancellation, so a caller
// whose context is already cancelled still releases, and the whole of it
// is bounded by Options.ReleaseTimeout when the backend returns once its
// context ends; with a watchdog renewal in flight (whose client may hold
// the release behind it) it does not wait past that bound (plus 20ms) for
// a backend call that ignores its context. If the lease was lost it still
// asks the server to delete the key (owner-checked: the loss may have been
// local only) and returns an error wrapping [ErrNotHeld] and the loss. A
// second Release deletes nothing and returns an error wrapping
// [ErrNotHeld] and [ErrReleased].
func (ls *Lease) Release(ctx context.Context) (err error) {
	// observe: release start and end
	ctx, ro := ls.observeRelease(ctx)
	defer ro.end(&err)
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), ls.l.opts.ReleaseTimeout)
	defer cancel()
	ls.mu.Lock()
	if ls.released {
		ls.mu.Unlock()
		return ls.endedErr("release", ErrReleased)
	}
	ls.released = true
	ls.mu.Unlock()

	ls.end(ErrReleased)
	var lost error
	if err := ls.Err(); errors.Is(err, ErrLeaseLost) {
		lost = err
	}
	if ls.kaDone != nil {
		select {
		case <-ls.kaDone: // the backend's keepalive has stopped
		case <-rctx.Done():
		}
	}
	// The release goes out without waiting for a watchdog renewal in
	// flight: a renewal never recreates a deleted key, whichever reaches
	// the server first. Then wait for that renewal, which end cancelled,
	// to return, within the same bound. A client may not abort a request
	// at once, and may hold others behind it (rueidis: a request waits for
	// the connection another one is dialling, up to its dial timeout), so
	// with a renewal in flight the release is not waited for past the
	// bound either. Without one, it runs on this goroutine: the common
	// path pays no goroutine hand-off.
	if ls.tickRunning() {
		err = ls.l.release(rctx, &ls.grant)
	} else {
		err = ls.l.b.Release(rctx, ls.grant)
	}
	ls.waitTick(rctx)
	if lost != nil {
		return ls.endedErr("release", lost)
	}
	if err != nil {
		return fmt.Errorf("fencedlock: release %q: %w", ls.grant.Key, err)
	}
	if ls.l.debug() {
		ls.l.log.Debug("fencedlock: released", "key", ls.grant.Key, "fence", ls.grant.Fence)
	}
	return nil
}
