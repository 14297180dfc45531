package fencedlock

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/fencedlock/fencedlock/driver"
)

// The lease lifecycle is a small state machine driven by one timer:
//
//	held ──Release, Close──▶ releasing ──┐
//	  │                                  ├──▶ done
//	  └──loss───────────────▶ lost ──────┘
//
// held: the lease is ours as far as this process knows. The watchdog is a
// timer (time.AfterFunc, no goroutine of its own): its tick runs when the
// next renewal is due or at the local deadline, whichever comes first.
//
// releasing, lost: the lease has ended (err is set, ctx is cancelled with
// err as its cause, which aborts a renewal in flight; a ctx first asked
// for later is made cancelled, see Lease.context), but the watchdog
// may still be finishing: a tick that had already fired, a renewal in
// flight, the keepalive reader of a [driver.KeepAliver].
//
// done: the watchdog has stopped: no timer armed, no renewal in flight,
// the keepalive reader returned. Release waits for done.
//
// Invariants, all of them under ls.mu:
//
//  1. The state only moves forward. end is the one place that leaves held
//     (and cancels ctx); settleLocked is the one place that reaches done
//     (and returns the lease's share of the Locker's WaitGroup, and wakes
//     a Release waiting for the watchdog).
//  2. A lease that left held never holds again: a renewal answered after
//     the end changes neither err nor the deadline (a success on a lost
//     lease is followed by a release of the key, see Lease.renew).
//  3. While held, armed || renewing: the local deadline is always
//     enforced, also while a renewal is stuck in a backend call that
//     ignores its context (the timer is armed for the deadline during the
//     renewal; its tick then loses the lease, which cancels the call).
//  4. At most one watchdog renewal is in flight (renewing), and the timer
//     has at most one tick pending: armed is true from a Reset of the
//     timer until its tick runs (a fired timer whose tick waits for ls.mu
//     is still armed), or until a Stop that reports it stopped. A tick
//     clears armed first.
//  5. The deadline only moves later: it is sent + TTL - margin of the
//     latest successful renewal (sent: when its request was sent), kept on
//     both timebases of clock.go (bootDeadline counts suspended time); the
//     lease is held only while both are ahead.
//  6. done is reached once: when the state is releasing or lost and
//     !armed && !renewing && !keepalive.
type leaseState uint8

const (
	held      leaseState = iota // the timer is armed or a watchdog renewal is in flight
	releasing                   // ended by Release or Close; the watchdog may be finishing
	lost                        // ended by a loss; the watchdog may be finishing
	done                        // ended, and the watchdog has stopped
)

// startWatchdog arms the lease's timer and starts the keepalive reader
// of a KeepAliver. The lease is registered with its Locker, which counted
// it in its WaitGroup; settleLocked returns that count.
func (ls *Lease) startWatchdog() {
	if ls.keptAlive() {
		var kc <-chan driver.Renewal
		if st, ok := ls.l.keeper.(driver.KeepAliveStopper); ok {
			var stop func()
			kc, stop = st.KeepAliveStop(ls.context(), ls.grant)
			ls.mu.Lock()
			ls.kaStop = stop
			ls.mu.Unlock()
		} else {
			kc = ls.l.keeper.KeepAlive(ls.context(), ls.grant)
		}
		go ls.readKeepAlive(kc)
	}
	ls.mu.Lock()
	if ls.state == held { // Close may have ended it already
		ls.timer = time.AfterFunc(ls.wakeLocked(ls.l.clk.now()), ls.tick)
		ls.armed = true
	}
	ls.mu.Unlock()
}

// tick is the watchdog, run by the timer: it reports the lease lost at the
// local deadline and renews it when a renewal is due, then re-arms the
// timer while the lease is held.
func (ls *Lease) tick() {
	ls.mu.Lock()
	ls.armed = false
	if ls.state != held {
		ls.settleLocked()
		ls.mu.Unlock()
		return
	}
	now := ls.l.clk.exact() // exact: the backstop of a suspend Err did not see
	if untilDeadline(now, ls.deadline, ls.bootDeadline) <= 0 {
		reason := deadlineReason(ls.lastErr)
		ls.mu.Unlock()
		ls.lose(reason)
		return
	}
	if ls.renewing {
		// The deadline moved while a renewal is in flight (invariant 5):
		// that renewal re-arms the timer when it returns.
		ls.mu.Unlock()
		return
	}
	if !ls.renews() || now.mono.Before(ls.next) {
		ls.rearmLocked(now)
		ls.mu.Unlock()
		return
	}

	// Renew. The timer keeps the deadline meanwhile (invariant 3). The
	// deadline is a timer, not a context deadline: some clients (rueidis)
	// enforce a context's deadline on the connection and then ignore its
	// cancellation, so Release could not abort the request. The renewal
	// runs on the lease's context: the end of the lease cancels it.
	ls.renewing = true
	ls.timer.Reset(untilDeadline(now, ls.deadline, ls.bootDeadline))
	ls.armed = true
	ls.mu.Unlock()

	ctx := ls.context()
	err := ls.renew(ctx, ls.l.clk.now())
	interval := ls.lt.renew
	if err != nil {
		if ctx.Err() == nil && !errors.Is(err, ErrNotHeld) && ls.l.debug() {
			ls.l.log.Debug("fencedlock: renewal failed; retrying", "key", ls.grant.Key, "err", err)
		}
		// Retry sooner than a full interval: the deadline is near.
		interval = max(interval/4, time.Millisecond)
	}

	ls.mu.Lock()
	ls.renewing = false
	now = ls.l.clk.now()
	ls.next = now.mono.Add(interval)
	if ls.state == held {
		ls.rearmLocked(now)
	} else {
		ls.settleLocked()
	}
	ls.mu.Unlock()
}

// rearmLocked sets the timer to wake at the next renewal or the local
// deadline. If the timer has fired and its tick is about to run, that
// tick re-arms it instead. ls.mu must be held.
func (ls *Lease) rearmLocked(now stamp) {
	if ls.armed && !ls.timer.Stop() {
		return // fired: its tick, waiting for ls.mu, re-arms
	}
	ls.timer.Reset(ls.wakeLocked(now))
	ls.armed = true
}

// wakeLocked returns how long the watchdog timer should sleep from now:
// until the next renewal or the local deadline, whichever comes first.
// (A suspend stops the timer too, on Linux: its tick, late by the suspend,
// then finds the boot deadline passed.) ls.mu must be held.
func (ls *Lease) wakeLocked(now stamp) time.Duration {
	wake := untilDeadline(now, ls.deadline, ls.bootDeadline)
	if ls.renews() {
		wake = min(wake, ls.next.Sub(now.mono))
	}
	return max(wake, 0)
}

// untilDeadline is the time left at now before a local deadline kept on
// both clocks (deadline on the monotonic one, boot on the boot clock):
// the lesser of the two.
func untilDeadline(now stamp, deadline time.Time, boot int64) time.Duration {
	return min(deadline.Sub(now.mono), time.Duration(boot-now.boot))
}

// renews reports whether the watchdog itself sends renewals (no
// KeepAliver, no manual renewal).
func (ls *Lease) renews() bool { return ls.l.keeper == nil && !ls.lt.manual }

// end moves the lease from held to to (releasing or lost) with cause
// (ErrReleased or a *lostError): it cancels the lease's context with that
// cause, which aborts a watchdog renewal in flight, stops the timer and
// removes the lease from its Locker. It is the one place a lease ends. It
// reports false, changing nothing, if the lease had already ended.
func (ls *Lease) end(to leaseState, cause error) bool {
	ls.mu.Lock()
	if ls.state != held {
		ls.mu.Unlock()
		return false
	}
	ls.state, ls.err = to, cause
	// Cancelling under ls.mu: done (settleLocked) is never reached before
	// the context is cancelled. Nothing derived from ls.ctx takes ls.mu
	// while it is cancelled (context.AfterFunc runs its function on a
	// goroutine of its own). A context made later is made cancelled.
	ls.observeEnd(cause) // observe: released or lost (before Done closes; under ls.mu)
	if ls.cancel != nil {
		ls.cancel(cause)
	}
	if ls.armed && ls.timer.Stop() {
		ls.armed = false
	}
	ls.settleLocked()
	ls.mu.Unlock()
	ls.l.forget(ls)
	return true
}

// lose ends the lease as lost with reason. It does nothing if the lease
// already ended. It is the one place a loss is reported.
func (ls *Lease) lose(reason error) {
	if ls.end(lost, &lostError{key: ls.grant.Key, reason: reason}) {
		ls.l.log.Warn("fencedlock: lease lost", "key", ls.grant.Key, "fence", ls.grant.Fence, "holder", ls.Holder(), "reason", reason)
	}
}

// settleLocked moves an ended lease to done once the watchdog has
// stopped (invariant 6): it returns the lease's share of the Locker's
// WaitGroup and wakes a Release waiting in waitStopped. It is the one
// place that does either. ls.mu must be held.
func (ls *Lease) settleLocked() {
	if ls.state == held || ls.state == done || ls.armed || ls.renewing || ls.keepalive {
		return
	}
	ls.state = done
	if ls.stopped != nil {
		close(ls.stopped)
	}
	ls.l.wg.Done()
}

// renewed applies the outcome of a renewal (the watchdog's, a manual
// Renew, or a KeepAliver's) sent at sent: a success moves the local
// deadline to sent + ttl - margin (if later), a failure that the server
// reports as final (ErrNotHeld, ErrPermanent) loses the lease, any other
// failure is kept as the last error. It is the one place a renewal's
// result lands. If the lease had already ended, it changes nothing and
// returns the end's cause.
func (ls *Lease) renewed(sent stamp, ttl time.Duration, err error) (ended error) {
	ls.mu.Lock()
	if ls.state != held {
		ended = ls.err
		ls.mu.Unlock()
		return ended
	}
	switch {
	case err == nil:
		// A success that comes back after the local deadline, while
		// nobody has declared the lease lost yet (Err, the watchdog),
		// still proves the key was ours without a gap: the server
		// renewed it, and it renews only a key this owner holds.
		if d := sent.mono.Add(ttl - ls.lt.margin); d.After(ls.deadline) {
			ls.deadline = d
			// The timer sleeps until the old deadline at most; it
			// re-arms for the new one when it fires.
		}
		if d := sent.boot + int64(ttl-ls.lt.margin); d > ls.bootDeadline {
			ls.bootDeadline = d
		}
		ls.lastErr = nil
	case errors.Is(err, ErrNotHeld) || permanent(err):
		ls.mu.Unlock()
		ls.lose(err)
		return nil
	default:
		ls.lastErr = err
	}
	ls.mu.Unlock()
	return nil
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

// readKeepAlive feeds a KeepAliver's renewals into the lease until the
// backend closes the channel (after the lease's context ends, or when it
// can no longer keep the lease alive), then lets the watchdog settle.
func (ls *Lease) readKeepAlive(kc <-chan driver.Renewal) {
	for r := range kc {
		ls.observeRenew(context.Background(), r.Sent, true, r.Err) // observe: a KeepAliver's renewal
		// r.Sent is on the monotonic clock only: clk.at adds the
		// suspended time seen no later than it. The reading here sees a
		// suspend before this receipt, for the renewals sent after it.
		ls.l.clk.exact()
		ls.renewed(ls.l.clk.at(r.Sent), r.TTL, r.Err)
	}
	ls.mu.Lock()
	stoppedEarly := ls.state == held
	ls.mu.Unlock()
	if stoppedEarly {
		ls.lose(errors.New("keepalive stopped"))
	}
	ls.mu.Lock()
	ls.keepalive = false
	ls.settleLocked()
	ls.mu.Unlock()
}

// waitStopped waits until the watchdog has stopped (done), or ctx is
// done. A renewal in flight was cancelled by the end of the lease; a
// backend call that ignores its context is not waited for past ctx.
func (ls *Lease) waitStopped(ctx context.Context) {
	ls.mu.Lock()
	if ls.state == done {
		ls.mu.Unlock()
		return
	}
	if ls.stopped == nil {
		ls.stopped = make(chan struct{})
	}
	stopped := ls.stopped
	ls.mu.Unlock()
	select {
	case <-stopped:
	case <-ctx.Done():
	}
}
