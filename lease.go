package fencedlock

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/fencedlock/fencedlock/driver"
	"github.com/fencedlock/fencedlock/fencing"
)

// Lease is a held lock. Its watchdog (a timer, see watchdog.go) renews it
// (unless it is renewed by hand, or by a [driver.KeepAliver] backend) and
// enforces its local deadline until Release, loss, or the Locker's Close.
// All methods are safe for concurrent use. Printing a Lease (fmt, slog)
// shows its key, fence and holder id, never its owner token.
//
// A lease is held until it ends, once: released (Release, or the Locker's
// Close) or lost (the server reported it gone, a renewal failed
// permanently, a KeepAliver's keepalive stopped, or no renewal succeeded
// before the local deadline). Once ended, a lease never holds again.
type Lease struct {
	l     *Locker
	grant driver.Grant
	lt    leaseTiming // this lease's TTL, renew interval, margin, ManualRenew

	holderOnce sync.Once
	holder     string // HolderID(grant.Owner), made on first use

	// The state machine of watchdog.go, under mu.
	mu sync.Mutex
	// ctx is cancelled when the lease ends (cause: ErrReleased or a
	// *lostError); it also cancels the watchdog's renewal in flight. It is
	// made on first use (see context): an acquire+release that nobody
	// watches does not pay for it.
	ctx       context.Context
	cancel    context.CancelCauseFunc
	state     leaseState
	err       error         // nil while held; ErrReleased or a *lostError after
	timer     *time.Timer   // the watchdog: runs tick
	armed     bool          // the timer is set, or fired and its tick has not run yet
	renewing  bool          // a watchdog renewal is in flight
	keepalive bool          // the keepalive reader of a KeepAliver is running
	stopped   chan struct{} // made by a waitStopped; closed at done
	kaStop    func()        // stops a KeepAliveStopper's keepalive at once; nil otherwise
	deadline  time.Time     // local deadline (monotonic)
	// bootDeadline is the local deadline on the boot clock, which counts
	// suspended time (clock.go): the lease is valid only before both.
	bootDeadline int64
	next         time.Time // next renewal due (watchdog renewals only)
	lastErr      error     // last renewal failure
	released     bool      // Release was called

	since time.Duration // when the lease was granted, after obsEpoch (observed leases only)

	rel releaseCtx // Release's context, set once by the Release that ends the lease
}

// Key returns the lock name.
func (ls *Lease) Key() string { return ls.grant.Key }

// Fence returns the lease's fencing token: strictly greater than every
// fence granted before on this key. Pass it to the guarded resource.
func (ls *Lease) Fence() fencing.Token { return ls.grant.Fence }

// Holder returns the lease's holder id: non-secret, derived from the owner
// token (see [driver.HolderID]). Guards use it to accept an equal fence only from
// the same holder.
func (ls *Lease) Holder() string {
	ls.holderOnce.Do(func() { ls.holder = driver.HolderID(ls.grant.Owner) })
	return ls.holder
}

// TTL returns the lease the server granted on acquire.
func (ls *Lease) TTL() time.Duration { return ls.grant.TTL }

// Context returns a context that is cancelled when the lease is lost or
// released. context.Cause tells which: an error wrapping [ErrLeaseLost]
// (with the reason) or [ErrReleased].
func (ls *Lease) Context() context.Context { return ls.context() }

// Done returns a channel closed when the lease is lost or released.
func (ls *Lease) Done() <-chan struct{} { return ls.context().Done() }

// context returns the lease's context, made on first use: already
// cancelled (with the end as its cause) if the lease has ended.
func (ls *Lease) context() context.Context {
	ls.mu.Lock()
	defer ls.mu.Unlock()
	if ls.ctx == nil {
		ls.ctx, ls.cancel = context.WithCancelCause(withLease(context.Background(), ls)) // reentry.go
		if ls.state != held {
			ls.cancel(ls.err)
		}
	}
	return ls.ctx
}

// Err returns nil while the lease is held, then an error wrapping
// [ErrLeaseLost] (and the reason) or [ErrReleased]. It reads the clock
// itself: past the local deadline it reports the loss even if the watchdog
// has not run yet (a descheduled process, a late timer, a system suspend:
// on Linux the deadline is also kept on CLOCK_BOOTTIME, which counts the
// time the system was suspended, as the server's TTL does; see the
// package documentation for other platforms).
func (ls *Lease) Err() error { return ls.errAt(stamp{}) }

// errAt is Err with the clocks read at now (zero: read when needed, only
// while the lease is held).
func (ls *Lease) errAt(now stamp) error {
	ls.mu.Lock()
	err, deadline, bootDeadline, lastErr := ls.err, ls.deadline, ls.bootDeadline, ls.lastErr
	ls.mu.Unlock()
	if err == nil && now.mono.IsZero() {
		now = ls.l.clk.now()
	}
	if err == nil && untilDeadline(now, deadline, bootDeadline) <= 0 {
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
// owner (measured from when the last successful request was sent). Time
// the system spent suspended since then (seen on Linux, see [Lease.Err])
// brings it closer.
func (ls *Lease) Deadline() time.Time {
	now := ls.l.clk.now()
	ls.mu.Lock()
	defer ls.mu.Unlock()
	return now.mono.Add(untilDeadline(now, ls.deadline, ls.bootDeadline))
}

// endedErr is the error of an operation on a lease that ended: it wraps
// [ErrNotHeld] and the lease's end (ErrReleased, or ErrLeaseLost and the
// reason).
func (ls *Lease) endedErr(op string, end error) error {
	return fmt.Errorf("fencedlock: %s %q: %w: %w", op, ls.grant.Key, ErrNotHeld, end)
}

// Renew renews the lease now. The watchdog (or a [driver.KeepAliver] backend)
// does this on its own unless Options.ManualRenew is set (or
// [WithManualRenew] was given for this lease). ctx bounds the request
// (Release does not cancel a manual renewal in flight). If the server no longer holds the
// lease for this owner, the lease is lost and the error wraps [ErrNotHeld];
// an error no retry can fix ([ErrPermanent]) loses it too. Once the lease
// has ended, Renew fails with an error wrapping [ErrNotHeld] and the end
// ([ErrLeaseLost] or [ErrReleased]), also when the renewal was already in
// flight: a lost lease stays lost, and a renewal that succeeded on the
// server after the loss is followed by a release of the key.
func (ls *Lease) Renew(ctx context.Context) error {
	// One clock reading for both: the deadline check and the renewal's
	// send time (taken a little before the request leaves: the new
	// deadline, counted from it, errs early).
	sent := ls.l.clk.now()
	if err := ls.errAt(sent); err != nil {
		return ls.endedErr("renew", err)
	}
	return ls.renew(ctx, sent)
}

// renew sends one renewal (the watchdog's or a manual one) and applies
// its result. sent is the clock read just before.
func (ls *Lease) renew(ctx context.Context, sent stamp) error {
	ttl, err := ls.l.b.Renew(ctx, ls.grant, ls.lt.ttl)
	ls.observeRenew(ctx, sent.mono, false, err) // observe: a renewal
	if err == nil && ttl <= 0 {
		ttl = ls.lt.ttl
	}
	ended := ls.renewed(sent, ttl, err)
	if ended == nil {
		return err
	}
	// The lease ended while the renewal was in flight. A lost lease stays
	// lost; if the server applied the renewal anyway, the key is ours for
	// another TTL while nobody thinks it is held: free it. (After Release,
	// Release itself deletes the key.)
	if err == nil && errors.Is(ended, ErrLeaseLost) {
		rctx, cancel := context.WithTimeout(detached(ctx), ls.l.opts.ReleaseTimeout)
		rerr := ls.l.release(rctx, &ls.grant)
		cancel()
		if rerr != nil && !errors.Is(rerr, ErrNotHeld) {
			ls.l.log.Warn("fencedlock: could not release a key renewed after its lease was lost; it expires with its TTL",
				"key", ls.grant.Key, "fence", ls.grant.Fence, "holder", ls.Holder(), "err", rerr)
		}
	}
	return ls.endedErr("renew", ended)
}

// Release ends the lease (its context is cancelled with cause
// [ErrReleased]), cancels the watchdog's renewal in flight, deletes the key
// on the server if this owner still holds it, and waits for the cancelled
// renewal to return (with a [driver.KeepAliver], it waits for the backend's
// keepalive to stop before it deletes the key; a [driver.KeepAliveStopper]'s
// it stops itself). It runs detached from ctx's cancellation, so a caller
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
	ctx, ro := ls.observeRelease(ctx) // observe: release start and end
	defer ro.end(&err)
	now := time.Now()
	ls.mu.Lock()
	if ls.released {
		ls.mu.Unlock()
		return ls.endedErr("release", ErrReleased)
	}
	ls.released = true
	ls.mu.Unlock()
	// Bounded by ReleaseTimeout from now (at least 31/32 of it: the
	// deadline is shared with Releases that started close to this one; see
	// releasectx.go). Only this Release, the one that set released, writes
	// ls.rel.
	ls.rel = releaseCtx{parent: detached(ctx), bound: ls.l.relClock.bound(now)}
	rctx := context.Context(&ls.rel)

	ls.end(releasing, ErrReleased)
	var lost error
	if err := ls.Err(); errors.Is(err, ErrLeaseLost) {
		lost = err
	}
	if ls.keptAlive() {
		// The backend's keepalive stops before the key is deleted: at once
		// with a KeepAliveStopper (the lease has ended, so its reader takes
		// the closed channel for the release, not a loss), else once the
		// backend has seen the lease's context end.
		ls.mu.Lock()
		stop := ls.kaStop
		ls.mu.Unlock()
		if stop != nil {
			stop()
		} else {
			ls.waitStopped(rctx)
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
	ls.mu.Lock()
	inFlight := ls.renewing
	ls.mu.Unlock()
	if inFlight {
		err = ls.l.release(rctx, &ls.grant)
	} else {
		err = ls.l.b.Release(rctx, ls.grant)
	}
	ls.waitStopped(rctx)
	return ls.releaseResult(err, lost)
}

// releaseResult is the outcome of Release, given the backend's answer err
// and the loss that ended the lease before Release (nil if none).
func (ls *Lease) releaseResult(err, lost error) error {
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

// keptAlive reports whether a KeepAliver keeps the lease alive (and a
// keepalive reader runs for it).
func (ls *Lease) keptAlive() bool { return ls.l.keeper != nil && !ls.lt.manual }
