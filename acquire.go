package fencedlock

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"log/slog"
	mrand "math/rand/v2"
	"time"

	"github.com/fencedlock/fencedlock/driver"
)

func newOwner() string { return rand.Text() }

// TryAcquire makes one attempt to take key. If another owner holds it, the
// error wraps [ErrNotAcquired] (and is a *[HeldError] when the backend
// reports the remaining TTL). ctx bounds the attempt only; the lease
// outlives it. If the attempt fails in a way the server may have applied,
// TryAcquire deletes what it may have taken (owner-checked) before it
// returns.
//
// A Lease is handed out only with at least its safety margin left before
// its local deadline (the send time of the request + TTL - margin; see
// [Lease.Deadline]): a grant whose reply came back later than that (a slow
// link, a paused process) is released (owner-checked, bounded by
// Options.ReleaseTimeout) and TryAcquire returns an error wrapping
// [ErrNotAcquired] and [ErrLateGrant] that says how late it came.
//
// opts set this lease's TTL, renewal and safety margin in place of the
// Locker's (see [LeaseOption]).
func (l *Locker) TryAcquire(ctx context.Context, key string, opts ...LeaseOption) (*Lease, error) {
	return l.acquire(ctx, key, opts, false)
}

// Acquire blocks until key is held or ctx is done. While another owner
// holds the key it waits as the backend allows: in the server's queue (a
// [driver.WaitAcquirer]; one that is a [driver.TryFirstWaiter] is first
// tried once, as other backends are, and queued only if held); or for a release notification (a [driver.Notifier]), looking
// again when the holder's remaining TTL ends and after MaxRetryDelay at
// the latest, since notifications may be lost; or else polling, with an
// exponential backoff from Options.MinRetryDelay up to MaxRetryDelay
// (each sleep drawn from [d/2, d]) cut short by the holder's remaining
// TTL when the backend reports it (see [HeldError]).
//
// When ctx ends first, the error is both [ErrNotAcquired] and ctx.Err(), and
// also the last attempt's error if that attempt failed for another reason
// than a holder. An error no retry can fix ([ErrPermanent], [ErrInvalid],
// [ErrClosed]) ends the wait at once and is returned as the backend
// reported it. Whichever way Acquire fails, no lock of its attempts is
// left on the server: an attempt whose outcome is unknown is followed by
// an owner-checked release (bounded by Options.ReleaseTimeout) before
// Acquire returns. A grant that came back with less than its safety
// margin left before its local deadline (see [Locker.TryAcquire]) is
// released and counts as not acquired: Acquire keeps waiting within ctx,
// and if ctx ends first its error also wraps [ErrLateGrant] when the last
// attempt was refused so. ctx bounds only the wait: the returned Lease
// lives until released or lost. opts set this lease's TTL, renewal and
// safety margin in place of the Locker's (see [LeaseOption]).
func (l *Locker) Acquire(ctx context.Context, key string, opts ...LeaseOption) (*Lease, error) {
	return l.acquire(ctx, key, opts, true)
}

// acquire is TryAcquire (wait false) and Acquire (wait true): the one
// place an acquisition starts and ends. The uncontended path is one
// attempt on the caller's context, with nothing set up for waiting.
func (l *Locker) acquire(ctx context.Context, key string, opts []LeaseOption, wait bool) (ls *Lease, err error) {
	ctx, ao := l.observeAcquire(ctx, key, wait) // observe: acquire start and end
	defer ao.end(&ls, &err)
	if err := l.check(key); err != nil {
		return nil, err
	}
	if err := l.reentry(ctx, key, wait); err != nil { // reentry.go
		return nil, err
	}
	lt, err := l.timing(opts)
	if err != nil {
		return nil, err
	}
	req := driver.AcquireRequest{Key: key, Owner: newOwner(), TTL: lt.ttl, RenewInterval: lt.renew}
	if wait && l.waitq != nil && (l.first == nil || !l.first.TryFirst(key)) {
		return l.wait(ctx, req, lt, nil) // the server keeps the queue
	}
	g, sent, err := l.attempt(ctx, req)
	if err == nil {
		ls, err = l.start(ctx, g, sent, lt)
		if !wait || !errors.Is(err, ErrLateGrant) {
			return ls, err
		}
	}
	if wait {
		return l.wait(ctx, req, lt, err)
	}
	if mayHaveApplied(err) {
		l.cleanup(ctx, req)
	}
	return nil, err
}

// attempt makes one attempt to take req.Key. sent is when it was sent,
// the start of the lease the server grants.
func (l *Locker) attempt(ctx context.Context, req driver.AcquireRequest) (g driver.Grant, sent stamp, err error) {
	sent = l.clk.now()
	g, err = l.b.Acquire(ctx, req)
	return g, sent, err
}

// wait is Acquire after a failed first attempt (first; nil for a
// WaitAcquirer that was not asked to try first, which waits on the
// server). It registers the wait with the Locker (Close ends it with
// ErrClosed and waits for it), and every way out of it after an attempt of
// unknown outcome sends the cleanup release.
func (l *Locker) wait(ctx context.Context, req driver.AcquireRequest, lt leaseTiming, first error) (*Lease, error) {
	// Close waits for waiters, so that their cleanup is done when it
	// returns.
	l.mu.Lock()
	if l.closed {
		l.mu.Unlock()
		if first != nil && mayHaveApplied(first) {
			l.cleanup(ctx, req)
		}
		return nil, fmt.Errorf("fencedlock: acquire %q: %w", req.Key, ErrClosed)
	}
	l.wg.Add(1)
	l.mu.Unlock()
	defer l.wg.Done()

	// Close must end the wait too.
	wctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	go func() {
		select {
		case <-l.closeCh:
			cancel(ErrClosed)
		case <-wctx.Done():
		}
	}()

	if l.waitq != nil {
		return l.queue(ctx, wctx, req, lt, first)
	}
	ls, unknown, err := l.poll(wctx, req, lt, first)
	if err != nil && unknown {
		// Our owner token may hold the key: release it (owner-checked,
		// it can delete nothing else).
		l.cleanup(ctx, req)
	}
	return ls, err
}

// queue is the wait of a WaitAcquirer, on wctx (ctx, ended also by
// Close): AcquireWait, or after a first attempt that did not take the key
// (first; the backend is a TryFirstWaiter) AcquireWaitHeld. An error no
// wait can fix, or wctx's end, stops it after the first attempt as in
// poll, with the cleanup release if that attempt may have been applied.
func (l *Locker) queue(ctx, wctx context.Context, req driver.AcquireRequest, lt leaseTiming, first error) (*Lease, error) {
	var late error // the last grant refused as late (see Locker.start)
	for {
		var (
			g    driver.Grant
			err  error
			sent = l.clk.now()
		)
		switch {
		case first == nil:
			g, err = l.waitq.AcquireWait(wctx, req)
		case (errors.Is(first, ErrNotAcquired) || !permanent(first)) && wctx.Err() == nil:
			l.observeWait(wctx, first) // observe: the first attempt found the key held (or failed)
			g, err = l.first.AcquireWaitHeld(wctx, req)
		default:
			if mayHaveApplied(first) {
				l.cleanup(ctx, req)
			}
			if errors.Is(first, ErrNotAcquired) && !errors.Is(first, ErrLateGrant) {
				first = nil // ctx ended: waitErr says so
			}
			return nil, l.waitErr(wctx, req.Key, first)
		}
		if err != nil {
			if late != nil && wctx.Err() != nil {
				err = late // the wait ended with ctx: say why no grant was taken
			}
			return nil, l.waitErr(wctx, req.Key, err)
		}
		ls, err := l.start(ctx, g, sent, lt)
		if !errors.Is(err, ErrLateGrant) {
			return ls, err
		}
		// Refused and released: queue again, within ctx.
		late, first = err, nil
		l.observeWait(wctx, err) // observe: a wait (the grant came back too late)
	}
}

// poll repeats the attempt (after first, the failure of the one made
// already) until one succeeds, an error no retry can fix comes back or
// ctx ends. Between attempts it sleeps as l.policy decides, waking early
// on a release notification. unknown reports whether an attempt failed in
// a way the server may have applied.
func (l *Locker) poll(ctx context.Context, req driver.AcquireRequest, lt leaseTiming, first error) (ls *Lease, unknown bool, err error) {
	var (
		notify  <-chan struct{} // non-nil once a watch is in effect
		stop    func()
		timer   *time.Timer
		backoff = l.opts.MinRetryDelay
		last    error // the last attempt's failure, unless the key was held
	)
	defer func() {
		if stop != nil {
			stop()
		}
		if timer != nil {
			timer.Stop()
		}
	}()
	for err = first; ; err = nil {
		if err == nil {
			var g driver.Grant
			var sent stamp
			if g, sent, err = l.attempt(ctx, req); err == nil {
				ls, err = l.start(ctx, g, sent, lt)
				if !errors.Is(err, ErrLateGrant) {
					return ls, unknown, err
				}
				// Refused and released: wait and try again, as if held.
			}
		}
		held := errors.Is(err, ErrNotAcquired)
		l.observeWait(ctx, err) // observe: a wait (held, or a failed attempt)
		switch {
		case errors.Is(err, ErrLateGrant):
			last = err // kept: it says why the wait got no lease
		case held:
			last = nil
		default:
			last = err
			unknown = unknown || mayHaveApplied(err)
		}
		if ctx.Err() != nil {
			return nil, unknown, l.waitErr(ctx, req.Key, last)
		}
		step, next := l.policy.next(err, backoff, notify != nil)
		if step.giveUp {
			return nil, unknown, err
		}
		if step.watch {
			// Watch, then try once more at once: a release between the
			// failed attempt and the watch is not missed.
			n, s, werr := l.notify.Watch(ctx, req.Key)
			if werr == nil {
				notify, stop = n, s
				continue
			}
			if l.debug() {
				l.log.Debug("fencedlock: watch failed; polling", "key", req.Key, "err", werr)
			}
		}
		if !held {
			l.log.Warn("fencedlock: acquire attempt failed; retrying", "key", req.Key, "err", err)
		}
		backoff = next
		if timer == nil {
			timer = time.NewTimer(step.sleep)
		} else {
			timer.Reset(step.sleep)
		}
		select {
		case <-ctx.Done():
			return nil, unknown, l.waitErr(ctx, req.Key, last)
		case <-notify:
			l.observeWait(ctx, nil) // observe: woken by a release notification
		case <-timer.C:
		}
	}
}

// waitPolicy decides what a waiting Acquire does after a failed attempt.
type waitPolicy struct {
	max      time.Duration // Options.MaxRetryDelay
	notifier bool          // the backend announces releases (a Notifier)
	jitter   func(time.Duration) time.Duration
}

// waitStep is what a waiting Acquire does after a failed attempt.
type waitStep struct {
	giveUp bool          // no retry can fix the error: return it
	watch  bool          // start watching for releases, then try again at once (if the watch fails: sleep)
	sleep  time.Duration // otherwise sleep this long before the next attempt, or until a release is announced
}

// next is the decision after an attempt failed with err: a pure function
// of the error (permanent? held, with the holder's RetryAfter hint?), the
// backoff state (backoff: the current exponential backoff) and the
// notifier (whether the backend announces releases, and whether a watch
// is in effect). It returns the step and the backoff that follows a sleep
// (kept only if the wait sleeps).
//
// A transient failure or a holder without a hint: sleep the backoff with
// equal jitter (a uniform draw in [backoff/2, backoff], see jitter), then double it up to max. A holder's hint shorter than
// that: wake 1ms after it (an expiry is not announced). With a watch in
// effect and a hint: sleep until the hint, but no longer than max,
// because notifications are at-most-once (a pub/sub message is lost with
// its connection).
func (p waitPolicy) next(err error, backoff time.Duration, watching bool) (step waitStep, nextBackoff time.Duration) {
	held := errors.Is(err, ErrNotAcquired)
	if !held && permanent(err) {
		return waitStep{giveUp: true}, backoff
	}
	var hint time.Duration
	if held {
		var he *HeldError
		if errors.As(err, &he) {
			hint = he.RetryAfter
		}
	}
	step.watch = held && p.notifier && !watching
	step.sleep = p.jitter(backoff)
	switch {
	case held && watching && hint > 0:
		step.sleep = min(hint+time.Millisecond, p.max)
	case held && hint > 0 && hint < step.sleep:
		step.sleep = hint + time.Millisecond
	}
	return step, min(2*backoff, p.max)
}

// mayHaveApplied reports whether a failed Acquire may have taken the key on
// the server. A holder's refusal, invalid input and a closed backend are
// known to have changed nothing (and a closed backend could not clean up).
// A permanent error is not: a script may fail on its second command (an
// ACL that allows SET but not INCR), after the first one took the key.
func mayHaveApplied(err error) bool {
	return !errors.Is(err, ErrNotAcquired) && !errors.Is(err, ErrInvalid) && !errors.Is(err, ErrClosed)
}

// permanent reports whether no retry can fix err.
func permanent(err error) bool {
	return errors.Is(err, ErrPermanent) || errors.Is(err, ErrClosed) || errors.Is(err, ErrInvalid)
}

// debug reports whether debug records are wanted, so that the hot path
// does not box log arguments for a handler that drops them.
func (l *Locker) debug() bool { return l.log.Enabled(context.Background(), slog.LevelDebug) }

// waitErr is the error of a wait that ended with ctx, or, if ctx is still
// live, the backend's error last.
func (l *Locker) waitErr(ctx context.Context, key string, last error) error {
	if ctx.Err() == nil {
		return last // the backend failed for its own reasons
	}
	if last != nil && errors.Is(last, ctx.Err()) {
		last = nil // the attempt failed because ctx ended: nothing to add
	}
	cause := context.Cause(ctx)
	if errors.Is(cause, ErrClosed) {
		if last != nil {
			return fmt.Errorf("fencedlock: acquire %q: %w; last attempt: %w", key, ErrClosed, last)
		}
		return fmt.Errorf("fencedlock: acquire %q: %w", key, ErrClosed)
	}
	return &waitError{key: key, cause: cause, last: last}
}

// cleanup removes a lock an attempt may have taken although it reported an
// error (the reply was lost after the server applied the request). The
// release is owner-checked, so it can delete nothing but our own key. It
// runs detached from ctx's cancellation, bounded by Options.ReleaseTimeout.
func (l *Locker) cleanup(ctx context.Context, req driver.AcquireRequest) {
	rctx, cancel := context.WithTimeout(detached(ctx), l.opts.ReleaseTimeout)
	defer cancel()
	err := l.release(rctx, &driver.Grant{Key: req.Key, Owner: req.Owner})
	switch {
	case err == nil:
		if l.debug() {
			l.log.Debug("fencedlock: removed a lock taken by a failed attempt", "key", req.Key)
		}
	case !errors.Is(err, ErrNotHeld):
		l.log.Warn("fencedlock: could not remove a lock a failed attempt may have taken; it expires with its TTL",
			"key", req.Key, "ttl", req.TTL, "err", err)
	}
}

// jitter returns a random duration in [d/2, d] ("equal jitter"): waiters
// spread out, and none comes back sooner than half the backoff.
func jitter(d time.Duration) time.Duration {
	if d <= 0 {
		return 0
	}
	return d/2 + mrand.N(d/2+1)
}
