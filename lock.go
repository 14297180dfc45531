package fencedlock

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/fencedlock/fencedlock/driver"
	"github.com/fencedlock/fencedlock/locktrace"
)

// Locker grants leases on named keys from one Backend. It is safe for
// concurrent use. Every Lease it grants has a watchdog, a timer that
// renews it (unless it is renewed by hand, or by a [driver.KeepAliver] backend)
// and reports it lost at its local deadline, until the lease is released
// or lost, or the Locker is closed.
//
// A Locker does not own its Backend: whoever created the Backend closes it,
// after closing every Locker on it (as database/sql does not close a driver
// connector it was given). Several Lockers may share one Backend. One
// Locker grants leases of several TTLs: see [WithTTL] and the other
// [LeaseOption]s.
type Locker struct {
	b      driver.Backend
	opts   Options
	log    *slog.Logger
	notify driver.Notifier
	waitq  driver.WaitAcquirer
	first  driver.TryFirstWaiter // waitq, when an Acquire may try once before waiting
	keeper driver.KeepAliver
	policy waitPolicy // how a waiting Acquire sleeps between attempts

	relClock releaseClock // the bounds of Lease.Release (releasectx.go)
	clk      *clock       // the clocks of validity (clock.go)

	tr      *locktrace.Trace // a copy of Options.Trace; nil: nothing traced (trace.go)
	backend string           // the backend's name: BackendName, and in events

	mu      sync.Mutex
	closed  bool
	closeCh chan struct{}
	leases  map[*Lease]struct{}
	held    map[string]*Lease // the held lease of each key (reentry.go)
	wg      sync.WaitGroup
}

// New returns a Locker on b. It validates opts (see [Options] for the
// ranges) and b: an invalid option or a nil backend is reported here, as
// an error wrapping [ErrInvalid], and no Locker is made. The caller keeps
// ownership of b: [Locker.Close] does not close it.
func New(b driver.Backend, opts Options) (*Locker, error) {
	if b == nil {
		return nil, invalidf("nil backend")
	}
	o, err := opts.resolve()
	if err != nil {
		return nil, err
	}
	l := &Locker{b: b, opts: o, log: o.Logger, closeCh: make(chan struct{}), leases: make(map[*Lease]struct{}), clk: newClock(bootClock, monoClock, unixNano)}
	l.notify, _ = b.(driver.Notifier)
	l.waitq, _ = b.(driver.WaitAcquirer)
	l.first, _ = b.(driver.TryFirstWaiter)
	l.keeper, _ = b.(driver.KeepAliver)
	l.relClock.timeout = o.ReleaseTimeout
	l.policy = waitPolicy{max: o.MaxRetryDelay, notifier: l.notify != nil, jitter: jitter}
	l.backend = driver.Name(b) // once: BackendName and every event read it
	if o.Trace != nil {
		tr := *o.Trace
		l.tr = &tr
	}
	return l, nil
}

// Options returns the options in effect, defaults filled in.
func (l *Locker) Options() Options { return l.opts }

// check refuses an invalid key and a closed Locker.
func (l *Locker) check(key string) error {
	if err := ValidateKey(key); err != nil {
		return err
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.closed {
		return fmt.Errorf("fencedlock: locker: %w", ErrClosed)
	}
	return nil
}

// start hands out the lease of g, granted by a request sent at sent
// (or g.Sent), and starts its watchdog; or, if the grant came back with
// less than the minimum validity left (see minLeft), refuses it: the grant
// is released (owner-checked, bounded by Options.ReleaseTimeout, detached
// from ctx's cancellation) and the error wraps ErrNotAcquired and
// ErrLateGrant. No other path makes a Lease.
func (l *Locker) start(ctx context.Context, g driver.Grant, sent stamp, lt leaseTiming) (*Lease, error) {
	ttl := g.TTL
	if ttl <= 0 {
		ttl = lt.ttl
	}
	if !g.Sent.IsZero() {
		sent = l.clk.at(g.Sent)
	}
	life := ttl - lt.margin
	deadline, bootDeadline := sent.mono.Add(life), sent.boot+int64(life)
	// The cheap reading, as Err's: it reads the kernel's clocks when the
	// wall clock moved against Go's monotonic one, which a suspend during
	// the reply does (clock.go). A system call per hand-out cost a tenth
	// of the concurrency-64 throughput (bench/README.md, issue 36).
	now := l.clk.now()
	if left := untilDeadline(now, deadline, bootDeadline); left < minLeft(lt) {
		took := max(now.mono.Sub(sent.mono), time.Duration(now.boot-sent.boot))
		return nil, l.refuseLate(ctx, g, took, left, minLeft(lt))
	}
	ls := &Lease{l: l, grant: g, lt: lt}
	ls.observeStart() // observe: the lease's start (before Close can see it)
	ls.deadline, ls.bootDeadline = deadline, bootDeadline
	ls.next = sent.mono.Add(lt.renew)
	ls.keepalive = ls.keptAlive()

	l.mu.Lock()
	if l.closed {
		l.mu.Unlock()
		rctx, cancel := context.WithTimeout(context.Background(), l.opts.ReleaseTimeout)
		defer cancel()
		_ = l.release(rctx, &ls.grant) // (not &g: g would escape on every call)
		return nil, fmt.Errorf("fencedlock: locker: %w", ErrClosed)
	}
	l.leases[ls] = struct{}{}
	l.holdLocked(ls)
	l.wg.Add(1) // the lease's watchdog: Done when it settles
	l.mu.Unlock()

	if l.debug() {
		l.log.Debug("fencedlock: acquired", "key", g.Key, "fence", g.Fence, "holder", ls.Holder(), "ttl", ttl)
	}
	ls.startWatchdog()
	return ls, nil
}

// minLeft is the least time a lease must have left before its local
// deadline when it is handed out: its safety margin. A grant whose reply
// took longer than TTL - 2*margin (measured from the send of the request
// that set the lease's expiry on the server) is refused: the server's
// expiry is then less than two margins away, too close for the first
// renewal's round trip, which likely takes as long as the late reply.
func minLeft(lt leaseTiming) time.Duration { return lt.margin }

// refuseLate releases a grant that came back too late to be handed out
// (took after its request was sent, left before its local deadline, less
// than min) and returns the error of the refused attempt: ErrNotAcquired
// and ErrLateGrant. The release is owner-checked, so it deletes nothing if
// the key already expired and another owner took it.
func (l *Locker) refuseLate(ctx context.Context, g driver.Grant, took, left, min time.Duration) error {
	rctx, cancel := context.WithTimeout(detached(ctx), l.opts.ReleaseTimeout)
	rerr := l.release(rctx, &g)
	cancel()
	if rerr != nil && !errors.Is(rerr, ErrNotHeld) {
		l.log.Warn("fencedlock: could not release a grant that came back too late; it expires with its TTL",
			"key", g.Key, "fence", g.Fence, "err", rerr)
	}
	when := fmt.Sprintf("%v before", left.Round(time.Microsecond))
	if left < 0 {
		when = fmt.Sprintf("%v after", -left.Round(time.Microsecond))
	}
	fate := "it was released"
	if rerr != nil && !errors.Is(rerr, ErrNotHeld) {
		fate = "its release failed; it expires with its TTL"
	}
	return fmt.Errorf("fencedlock: acquire %q: %w (%w): the grant came back %v after its request, %s its local deadline (the minimum left is %v); %s",
		g.Key, ErrNotAcquired, ErrLateGrant, took.Round(time.Microsecond), when, min, fate)
}

// Do acquires key (waiting as [Locker.Acquire] does), runs fn while holding
// it and releases it. fn's context is cancelled when ctx is done or when the
// lease ends early (lost, or released by the Locker's Close); fn should
// stop and not write after that. fn runs only on a lease with at least
// its safety margin left (a grant that came back later is refused and
// waited past, as in Acquire). If the lease was
// lost before fn returned (or before the release), Do's error wraps
// [ErrLeaseLost] whatever fn returned, joined with fn's error if any: the
// work may have run unprotected. Otherwise Do returns fn's error, or the
// release's. opts set the lease's TTL, renewal and safety margin in place
// of the Locker's (see [LeaseOption]).
func (l *Locker) Do(ctx context.Context, key string, fn func(context.Context, *Lease) error, opts ...LeaseOption) error {
	ls, err := l.Acquire(ctx, key, opts...)
	if err != nil {
		return err
	}
	octx, ostart := l.observeCritical(ctx, ls) // observe: the critical section's start
	fctx, cancel := context.WithCancelCause(withLease(octx, ls))
	defer cancel(nil)
	stop := context.AfterFunc(ls.Context(), func() { cancel(context.Cause(ls.Context())) })
	defer stop()
	ferr := fn(fctx, ls)
	l.observeCriticalEnd(octx, ls, ostart, ferr) // observe: the critical section's end
	rerr := ls.Release(context.WithoutCancel(ctx))
	lost := ls.Err() // after Release: ErrReleased, or the loss that came first
	if !errors.Is(lost, ErrLeaseLost) {
		lost = nil
	}
	switch {
	case lost != nil && ferr != nil && !errors.Is(ferr, ErrLeaseLost):
		return &lostWhileError{fn: ferr, lost: lost}
	case ferr != nil:
		return ferr
	case lost != nil:
		return lost
	case rerr != nil:
		return rerr
	}
	return nil
}

// Close releases every lease the Locker still holds, all at once, and
// waits for their watchdogs and for waiting Acquires to stop, within
// Options.ReleaseTimeout plus 20ms: a backend call that ignores its
// context is not waited for past that (Close then reports it; the call
// ends on its own).
// Waiting Acquires return at once with errors wrapping [ErrClosed], as do
// all calls after Close. Close does not close the Backend: whoever created
// it closes it, after the Lockers on it. Close is idempotent.
func (l *Locker) Close() error {
	l.mu.Lock()
	if l.closed {
		l.mu.Unlock()
		return nil
	}
	l.closed = true
	close(l.closeCh)
	held := make([]*Lease, 0, len(l.leases))
	for ls := range l.leases {
		held = append(held, ls)
	}
	l.mu.Unlock()

	// The leases are released together, and Close waits for them, their
	// watchdogs and the waiting Acquires, which all stop at once when the
	// backend honours cancellation; a backend call that does not is not
	// waited for past the bound (it ends on its own).
	deadline := time.Now().Add(l.opts.ReleaseTimeout)
	var mu sync.Mutex
	var errs []error
	stopped := make(chan struct{})
	go func() {
		defer close(stopped)
		var wg sync.WaitGroup
		for _, ls := range held {
			wg.Add(1)
			go func() {
				defer wg.Done()
				if err := ls.Release(context.Background()); err != nil && !errors.Is(err, ErrNotHeld) {
					mu.Lock()
					errs = append(errs, err)
					mu.Unlock()
				}
			}()
		}
		wg.Wait()
		l.wg.Wait()
	}()
	grace := time.NewTimer(max(time.Until(deadline), 0) + closeGrace)
	defer grace.Stop()
	select {
	case <-stopped:
	case <-grace.C:
		mu.Lock()
		errs = append(errs, fmt.Errorf("fencedlock: close: backend calls still running %v after Close began (the backend ignores cancellation)", l.opts.ReleaseTimeout+closeGrace))
		mu.Unlock()
	}
	mu.Lock()
	defer mu.Unlock()
	return errors.Join(errs...)
}

// closeGrace is how long Release and Close wait for a backend call to
// return after its context ended.
const closeGrace = 20 * time.Millisecond

// forget removes an ended lease from the leases Close releases.
func (l *Locker) forget(ls *Lease) {
	l.mu.Lock()
	delete(l.leases, ls)
	l.unholdLocked(ls) // reentry.go
	l.mu.Unlock()
}

// release sends the backend's Release of *g and returns when it does, or
// shortly after ctx ends even if the backend call has not returned: a
// client may block past its context (rueidis waits for a connection that
// another request is dialling, up to its dial timeout). An abandoned call
// ends on its own. *g must not change afterwards. It costs a goroutine
// hand-off, so the common path of Lease.Release does not use it.
func (l *Locker) release(ctx context.Context, g *driver.Grant) error {
	done := make(chan error, 1)
	b := l.b
	go func() { done <- b.Release(ctx, *g) }()
	select {
	case err := <-done:
		return err
	case <-ctx.Done():
	}
	t := time.NewTimer(closeGrace)
	defer t.Stop()
	select {
	case err := <-done:
		return err
	case <-t.C:
		return fmt.Errorf("fencedlock: release %q: backend did not return when its context ended: %w", g.Key, context.Cause(ctx))
	}
}

// detached returns ctx without its cancellation and deadline (as
// context.WithoutCancel), keeping its values: ctx itself when it has
// neither, which saves an allocation on the common path of Release.
func detached(ctx context.Context) context.Context {
	if _, ok := ctx.Deadline(); !ok && ctx.Done() == nil {
		return ctx
	}
	return context.WithoutCancel(ctx)
}
