package fencedlock

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"log/slog"
	mrand "math/rand/v2"
	"sync"
	"time"

	"github.com/fencedlock/fencedlock/fencing"
)

// Limits and defaults. A zero field of [Options] takes the default below.
const (
	// MaxKeyLen is the longest key, in bytes, a Locker accepts.
	MaxKeyLen = 1024
	// MinTTL is the shortest lease a Locker accepts. Shorter leases leave
	// no room for a renewal round trip and the safety margin.
	MinTTL = 50 * time.Millisecond
	// MaxTTL is the longest lease a Locker accepts. A crashed holder keeps a
	// key for up to its TTL, so longer leases are almost always mistakes.
	MaxTTL = 24 * time.Hour

	// DefaultTTL is the lease used when Options.TTL is zero.
	DefaultTTL = 10 * time.Second
	// DefaultRenewDivisor sets the default renew interval: TTL/3.
	DefaultRenewDivisor = 3
	// DefaultSafetyDivisor sets the default safety margin: TTL/10 (plus 1ms).
	DefaultSafetyDivisor = 10
	// DefaultMinRetryDelay is the first backoff of a waiting Acquire.
	DefaultMinRetryDelay = 5 * time.Millisecond
	// DefaultMaxRetryDelay caps the backoff of a waiting Acquire.
	DefaultMaxRetryDelay = time.Second
	// DefaultReleaseTimeout bounds a Release, which runs detached from the
	// caller's cancellation.
	DefaultReleaseTimeout = 5 * time.Second
)

// Options configures a [Locker]. The zero value means the documented
// defaults.
type Options struct {
	// TTL is the lease the server applies on acquire and on every renewal.
	// Default DefaultTTL; it must lie within [MinTTL, MaxTTL].
	TTL time.Duration
	// RenewInterval is how often the watchdog renews a held lease.
	// Default TTL/3. It must be shorter than TTL minus SafetyMargin.
	RenewInterval time.Duration
	// SafetyMargin is subtracted from every lease to form the holder's local
	// deadline: the lease is reported lost that long before the server could
	// expire it, to absorb clock drift and delivery delays. Default
	// TTL/10 + 1ms. It must be shorter than TTL/2.
	SafetyMargin time.Duration
	// MinRetryDelay and MaxRetryDelay bound the exponential backoff (with
	// full jitter) of a waiting Acquire when the backend gives no better
	// signal. Defaults DefaultMinRetryDelay and DefaultMaxRetryDelay.
	MinRetryDelay time.Duration
	MaxRetryDelay time.Duration
	// ReleaseTimeout bounds Release and Close. Default DefaultReleaseTimeout.
	ReleaseTimeout time.Duration
	// ManualRenew turns the watchdog's renewals off: leases are renewed only
	// by Lease.Renew. The local deadline is still enforced.
	ManualRenew bool
	// Logger receives debug and warning records (keys, fences and holder ids;
	// never owner tokens). Default: no logging.
	Logger *slog.Logger
}

func (o Options) resolve() (Options, error) {
	if o.TTL == 0 {
		o.TTL = DefaultTTL
	}
	if o.TTL < MinTTL || o.TTL > MaxTTL {
		return o, invalidf("TTL %v out of range [%v, %v]", o.TTL, MinTTL, MaxTTL)
	}
	if o.SafetyMargin == 0 {
		o.SafetyMargin = o.TTL/DefaultSafetyDivisor + time.Millisecond
	}
	if o.SafetyMargin < 0 || o.SafetyMargin >= o.TTL/2 {
		return o, invalidf("SafetyMargin %v out of range [0, TTL/2)", o.SafetyMargin)
	}
	if o.RenewInterval == 0 {
		o.RenewInterval = o.TTL / DefaultRenewDivisor
	}
	if o.RenewInterval < 0 || o.RenewInterval >= o.TTL-o.SafetyMargin {
		return o, invalidf("RenewInterval %v out of range (0, TTL-SafetyMargin)", o.RenewInterval)
	}
	if o.MinRetryDelay == 0 {
		o.MinRetryDelay = DefaultMinRetryDelay
	}
	if o.MaxRetryDelay == 0 {
		o.MaxRetryDelay = DefaultMaxRetryDelay
	}
	if o.MinRetryDelay < 0 || o.MaxRetryDelay < o.MinRetryDelay {
		return o, invalidf("retry delays [%v, %v] invalid", o.MinRetryDelay, o.MaxRetryDelay)
	}
	if o.ReleaseTimeout == 0 {
		o.ReleaseTimeout = DefaultReleaseTimeout
	}
	if o.ReleaseTimeout < 0 {
		return o, invalidf("ReleaseTimeout %v negative", o.ReleaseTimeout)
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	return o, nil
}

// ValidateKey reports whether key is acceptable as a lock name: 1 to
// [MaxKeyLen] bytes. Any bytes are allowed, including slashes, braces,
// spaces and invalid UTF-8.
func ValidateKey(key string) error {
	if key == "" {
		return invalidf("empty key")
	}
	if len(key) > MaxKeyLen {
		return invalidf("key of %d bytes exceeds MaxKeyLen %d", len(key), MaxKeyLen)
	}
	return nil
}

// Locker grants leases on named keys from one Backend. It is safe for
// concurrent use. Every Lease it grants is renewed by a watchdog goroutine
// that ends when the lease is released or lost, or when the Locker is
// closed.
type Locker struct {
	b      Backend
	opts   Options
	err    error // configuration error, returned by every call
	log    *slog.Logger
	notify Notifier
	waitq  WaitAcquirer
	keeper KeepAliver

	mu      sync.Mutex
	closed  bool
	closeCh chan struct{}
	leases  map[*Lease]struct{}
	wg      sync.WaitGroup
}

// New returns a Locker on b. Invalid options or a nil backend are not
// reported here: every call on the Locker then returns an error wrapping
// [ErrInvalid] and nothing is sent to the backend.
func New(b Backend, opts Options) *Locker {
	l := &Locker{b: b, closeCh: make(chan struct{}), leases: make(map[*Lease]struct{})}
	l.opts, l.err = opts.resolve()
	l.log = l.opts.Logger
	if l.log == nil {
		l.log = slog.New(slog.DiscardHandler)
	}
	if b == nil && l.err == nil {
		l.err = invalidf("nil backend")
	}
	if b != nil {
		l.notify, _ = b.(Notifier)
		l.waitq, _ = b.(WaitAcquirer)
		l.keeper, _ = b.(KeepAliver)
	}
	return l
}

// Options returns the options in effect, defaults filled in.
func (l *Locker) Options() Options { return l.opts }

func (l *Locker) check(key string) error {
	if l.err != nil {
		return l.err
	}
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

func newOwner() string { return rand.Text() }

// TryAcquire makes one attempt to take key. If another owner holds it, the
// error wraps [ErrNotAcquired] (and is a *[HeldError] when the backend
// reports the remaining TTL). ctx bounds the attempt only; the lease
// outlives it.
func (l *Locker) TryAcquire(ctx context.Context, key string) (*Lease, error) {
	if err := l.check(key); err != nil {
		return nil, err
	}
	req := AcquireRequest{Key: key, Owner: newOwner(), TTL: l.opts.TTL}
	sent := time.Now()
	g, err := l.b.Acquire(ctx, req)
	if err != nil {
		l.cleanupAfter(ctx, req, err)
		return nil, err
	}
	return l.start(g, sent)
}

// Acquire blocks until key is held or ctx is done. While another owner
// holds the key it waits for the backend's release notification (see
// [Notifier]) or the holder's remaining TTL, and otherwise backs off
// exponentially with jitter between Options.MinRetryDelay and MaxRetryDelay.
// When ctx ends first, the error is both [ErrNotAcquired] and ctx.Err(), and
// no trace of the attempt is left on the server. ctx bounds only the wait:
// the returned Lease lives until released or lost.
func (l *Locker) Acquire(ctx context.Context, key string) (*Lease, error) {
	if err := l.check(key); err != nil {
		return nil, err
	}
	req := AcquireRequest{Key: key, Owner: newOwner(), TTL: l.opts.TTL}

	// The uncontended path: one attempt on the caller's context, nothing
	// set up for waiting.
	var first error
	if l.waitq == nil {
		sent := time.Now()
		g, err := l.b.Acquire(ctx, req)
		if err == nil {
			return l.start(g, sent)
		}
		if ctx.Err() != nil {
			l.cleanupAfter(ctx, req, err)
			return nil, l.waitErr(ctx, key, err)
		}
		if errors.Is(err, ErrClosed) || errors.Is(err, ErrInvalid) {
			return nil, err
		}
		first = err
	}

	// Waiting: Close must end the wait too.
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	go func() {
		select {
		case <-l.closeCh:
			cancel(ErrClosed)
		case <-ctx.Done():
		}
	}()

	if l.waitq != nil {
		sent := time.Now()
		g, err := l.waitq.AcquireWait(ctx, req)
		if err != nil {
			return nil, l.waitErr(ctx, key, err)
		}
		return l.start(g, sent)
	}

	var (
		notify  <-chan struct{}
		stop    func()
		backoff = l.opts.MinRetryDelay
		timer   *time.Timer
	)
	defer func() {
		if stop != nil {
			stop()
		}
		if timer != nil {
			timer.Stop()
		}
	}()
	for {
		err := first
		first = nil
		if err == nil {
			sent := time.Now()
			var g Grant
			g, err = l.b.Acquire(ctx, req)
			if err == nil {
				return l.start(g, sent)
			}
			if ctx.Err() != nil {
				l.cleanupAfter(ctx, req, err)
				return nil, l.waitErr(ctx, key, err)
			}
		}
		var hint time.Duration
		held := errors.Is(err, ErrNotAcquired)
		if held {
			var he *HeldError
			if errors.As(err, &he) {
				hint = he.RetryAfter
			}
			if notify == nil && l.notify != nil {
				// Watch, then try once more at once: a release between
				// the failed attempt and the watch is not missed.
				if n, s, werr := l.notify.Watch(ctx, key); werr == nil {
					notify, stop = n, s
					continue
				} else if l.debug() {
					l.log.Debug("fencedlock: watch failed; polling", "key", key, "err", werr)
				}
			}
		} else {
			if errors.Is(err, ErrClosed) || errors.Is(err, ErrInvalid) {
				return nil, err
			}
			l.log.Warn("fencedlock: acquire attempt failed; retrying", "key", key, "err", err)
		}
		wait := jitter(backoff)
		backoff = min(2*backoff, l.opts.MaxRetryDelay)
		if held && notify != nil && hint > 0 {
			// A release is announced; an expiry is not, so wake when the
			// holder's lease ends at the latest. Notifications are
			// at-most-once (a pub/sub message is lost with its connection),
			// so look again after MaxRetryDelay at the latest.
			wait = min(hint+time.Millisecond, l.opts.MaxRetryDelay)
		} else if held && hint > 0 && hint < wait {
			wait = hint + time.Millisecond
		}
		if timer == nil {
			timer = time.NewTimer(wait)
		} else {
			timer.Reset(wait)
		}
		select {
		case <-ctx.Done():
			return nil, l.waitErr(ctx, key, nil)
		case <-notify:
		case <-timer.C:
		}
	}
}

// debug reports whether debug records are wanted, so that the hot path
// does not box log arguments for a handler that drops them.
func (l *Locker) debug() bool { return l.log.Enabled(context.Background(), slog.LevelDebug) }

func (l *Locker) waitErr(ctx context.Context, key string, err error) error {
	cause := context.Cause(ctx)
	if errors.Is(cause, ErrClosed) {
		return fmt.Errorf("fencedlock: acquire %q: %w", key, ErrClosed)
	}
	if ctx.Err() == nil {
		return err // the backend failed for its own reasons
	}
	return &waitError{key: key, cause: cause}
}

// cleanupAfter removes a lock an attempt may have taken although it reported
// an error (the request was cancelled after the server applied it). The
// release is token-checked, so it can delete nothing but our own key.
func (l *Locker) cleanupAfter(ctx context.Context, req AcquireRequest, err error) {
	if errors.Is(err, ErrNotAcquired) || errors.Is(err, ErrInvalid) || errors.Is(err, ErrClosed) {
		return
	}
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), l.opts.ReleaseTimeout)
	defer cancel()
	if rerr := l.b.Release(rctx, Grant{Key: req.Key, Owner: req.Owner}); rerr == nil && l.debug() {
		l.log.Debug("fencedlock: removed lock taken by a failed attempt", "key", req.Key)
	}
}

func jitter(d time.Duration) time.Duration {
	if d <= 0 {
		return 0
	}
	return d/2 + mrand.N(d/2+1)
}

func (l *Locker) start(g Grant, sent time.Time) (*Lease, error) {
	ls := &Lease{l: l, grant: g, holder: HolderID(g.Owner)}
	ttl := g.TTL
	if ttl <= 0 {
		ttl = l.opts.TTL
	}
	if !g.Sent.IsZero() {
		sent = g.Sent
	}
	ls.deadline = sent.Add(ttl - l.opts.SafetyMargin)
	ls.next = sent.Add(l.opts.RenewInterval)
	ls.ctx, ls.cancel = context.WithCancelCause(context.Background())

	l.mu.Lock()
	if l.closed {
		l.mu.Unlock()
		ls.cancel(ErrClosed)
		rctx, cancel := context.WithTimeout(context.Background(), l.opts.ReleaseTimeout)
		defer cancel()
		_ = l.b.Release(rctx, g)
		return nil, fmt.Errorf("fencedlock: locker: %w", ErrClosed)
	}
	l.leases[ls] = struct{}{}
	l.wg.Add(1) // the watchdog timer: Done in finish
	if l.keeper != nil && !l.opts.ManualRenew {
		l.wg.Add(1) // the keepalive reader: Done when it returns
		ls.kaDone = make(chan struct{})
	}
	l.mu.Unlock()

	if l.debug() {
		l.log.Debug("fencedlock: acquired", "key", g.Key, "fence", g.Fence, "holder", ls.holder, "ttl", ttl)
	}
	if ls.kaDone != nil {
		go ls.readKeepAlive(l.keeper.KeepAlive(ls.ctx, g))
	}
	ls.mu.Lock()
	ls.timer = time.AfterFunc(ls.wakeLocked(time.Now()), ls.tick)
	ls.mu.Unlock()
	return ls, nil
}

// Do acquires key (waiting as [Locker.Acquire] does), runs fn while holding
// it and releases it. fn's context is cancelled when ctx is done or when the
// lease is lost; fn should stop and not write after that. Do returns fn's
// error, or, if fn succeeded but the lease was lost before fn returned, an
// error wrapping [ErrLeaseLost]: the work may have run unprotected.
func (l *Locker) Do(ctx context.Context, key string, fn func(context.Context, *Lease) error) error {
	ls, err := l.Acquire(ctx, key)
	if err != nil {
		return err
	}
	fctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	stop := context.AfterFunc(ls.Context(), func() { cancel(context.Cause(ls.Context())) })
	defer stop()
	ferr := fn(fctx, ls)
	lost := ls.Err() // nil while held
	rerr := ls.Release(context.WithoutCancel(ctx))
	switch {
	case ferr != nil:
		return ferr
	case lost != nil:
		return lost
	case rerr != nil:
		return rerr
	}
	return nil
}

// Close releases every lease the Locker still holds (each bounded by
// Options.ReleaseTimeout), waits for their watchdogs to stop, and closes
// the backend. Calls after Close return errors wrapping [ErrClosed]; waiting
// Acquires return at once. Close is idempotent.
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

	var errs []error
	for _, ls := range held {
		if err := ls.Release(context.Background()); err != nil && !errors.Is(err, ErrNotHeld) {
			errs = append(errs, err)
		}
	}
	l.wg.Wait()
	if l.b != nil {
		if err := l.b.Close(); err != nil && !errors.Is(err, ErrClosed) {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

func (l *Locker) forget(ls *Lease) {
	l.mu.Lock()
	delete(l.leases, ls)
	l.mu.Unlock()
}

// Lease is a held lock. Its watchdog renews it until Release, loss, or the
// Locker's Close. All methods are safe for concurrent use.
type Lease struct {
	l      *Locker
	grant  Grant
	holder string

	// ctx is cancelled when the lease ends (cause: released or lost); it
	// also cancels renewals in flight.
	ctx    context.Context
	cancel context.CancelCauseFunc

	// The watchdog is a timer, not a goroutine: tick runs when the next
	// renewal or the local deadline is due. tickMu is held while a tick
	// runs, so Release can wait for one in flight.
	tickMu     sync.Mutex
	finishOnce sync.Once
	kaDone     chan struct{} // closed when the keepalive reader returned (KeepAliver only)

	mu       sync.Mutex
	timer    *time.Timer
	deadline time.Time // local deadline (monotonic)
	next     time.Time // next renewal due (watchdog renewals only)
	lastErr  error     // last renewal failure
	err      error     // nil while held; lost or released cause after
	released bool
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
// [ErrLeaseLost] (and the reason) or [ErrReleased].
func (ls *Lease) Err() error {
	ls.mu.Lock()
	defer ls.mu.Unlock()
	return ls.err
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

// Renew renews the lease now. The watchdog does this on its own unless
// Options.ManualRenew is set. If the server no longer holds the lease for
// this owner, the lease is lost and the error wraps [ErrNotHeld].
func (ls *Lease) Renew(ctx context.Context) error {
	if err := ls.Err(); err != nil {
		return fmt.Errorf("fencedlock: renew %q: %w: %w", ls.grant.Key, ErrNotHeld, err)
	}
	return ls.renew(ctx)
}

func (ls *Lease) renew(ctx context.Context) error {
	sent := time.Now()
	ttl, err := ls.l.b.Renew(ctx, ls.grant, ls.l.opts.TTL)
	if err == nil {
		if ttl <= 0 {
			ttl = ls.l.opts.TTL
		}
		ls.mu.Lock()
		if d := sent.Add(ttl - ls.l.opts.SafetyMargin); d.After(ls.deadline) && ls.err == nil {
			ls.deadline = d
		}
		ls.lastErr = nil
		ls.mu.Unlock()
		return nil
	}
	if errors.Is(err, ErrNotHeld) {
		ls.lose(err)
		return err
	}
	ls.mu.Lock()
	ls.lastErr = err
	ls.mu.Unlock()
	return err
}

// lose marks the lease lost with reason and cancels its context. It does
// nothing if the lease already ended.
func (ls *Lease) lose(reason error) {
	ls.mu.Lock()
	if ls.err != nil {
		ls.mu.Unlock()
		return
	}
	ls.err = &lostError{key: ls.grant.Key, reason: reason}
	err := ls.err
	stopped := ls.timer != nil && ls.timer.Stop()
	ls.mu.Unlock()
	if stopped {
		ls.finish() // no tick pending; one running finishes itself
	}
	ls.cancel(err)
	ls.l.forget(ls)
	ls.l.log.Warn("fencedlock: lease lost", "key", ls.grant.Key, "fence", ls.grant.Fence, "holder", ls.holder, "reason", reason)
}

// finish ends the watchdog's share of the Locker's wait group, once.
func (ls *Lease) finish() { ls.finishOnce.Do(ls.l.wg.Done) }

var errDeadline = errors.New("no renewal succeeded before the local deadline")

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
func (ls *Lease) renews() bool { return ls.l.keeper == nil && !ls.l.opts.ManualRenew }

// tick is the watchdog: it renews when a renewal is due and reports the
// lease lost at the local deadline. It runs on the timer's goroutine and
// re-arms the timer until the lease ends.
func (ls *Lease) tick() {
	ls.tickMu.Lock()
	defer ls.tickMu.Unlock()

	ls.mu.Lock()
	deadline, next, lastErr, ended := ls.deadline, ls.next, ls.lastErr, ls.err != nil
	ls.mu.Unlock()
	if ended {
		ls.finish()
		return
	}
	if now := time.Now(); !now.Before(deadline) {
		reason := errDeadline
		if lastErr != nil {
			reason = fmt.Errorf("%w: last renewal: %w", errDeadline, lastErr)
		}
		ls.lose(reason)
		ls.finish()
		return
	} else if ls.renews() && !now.Before(next) {
		// A renewal in flight must not outlive the deadline: the
		// deadline is checked only between ticks.
		rctx, cancel := context.WithDeadline(ls.ctx, deadline)
		err := ls.renew(rctx)
		cancel()
		interval := ls.l.opts.RenewInterval
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
	defer ls.mu.Unlock()
	if ls.err != nil {
		ls.finish()
		return
	}
	ls.timer.Reset(ls.wakeLocked(time.Now()))
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
	if r.Err != nil {
		if errors.Is(r.Err, ErrNotHeld) {
			ls.lose(r.Err)
			return
		}
		ls.mu.Lock()
		ls.lastErr = r.Err
		ls.mu.Unlock()
		return
	}
	ls.mu.Lock()
	if d := r.Sent.Add(r.TTL - ls.l.opts.SafetyMargin); d.After(ls.deadline) && ls.err == nil {
		ls.deadline = d
		// The timer sleeps until the old deadline at most; it re-arms
		// for the new one when it fires.
	}
	ls.lastErr = nil
	ls.mu.Unlock()
}

// Release stops the watchdog, cancels the lease's context (cause
// [ErrReleased]) and deletes the key on the server if this owner still holds
// it. It runs detached from ctx's cancellation, bounded by
// Options.ReleaseTimeout, so a caller whose context is already cancelled
// still releases. If the lease was lost, or Release was already called, it
// deletes nothing and returns an error wrapping [ErrNotHeld].
func (ls *Lease) Release(ctx context.Context) error {
	ls.mu.Lock()
	if ls.released {
		ls.mu.Unlock()
		return fmt.Errorf("fencedlock: release %q: %w: %w", ls.grant.Key, ErrNotHeld, ErrReleased)
	}
	ls.released = true
	lost := ls.err
	if lost == nil {
		ls.err = ErrReleased
	}
	ls.mu.Unlock()

	ls.cancel(ErrReleased) // no effect if already lost; aborts a renewal in flight
	ls.mu.Lock()
	stopped := ls.timer.Stop()
	ls.mu.Unlock()
	if stopped {
		ls.finish()
	}
	// Wait for a tick in flight: after this no renewal can start (a tick
	// that runs later finds the lease ended).
	ls.tickMu.Lock()
	ls.tickMu.Unlock() //nolint:staticcheck // an empty critical section is the point
	if ls.kaDone != nil {
		<-ls.kaDone // the backend's keepalive has stopped
	}
	ls.l.forget(ls)

	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), ls.l.opts.ReleaseTimeout)
	defer cancel()
	err := ls.l.b.Release(rctx, ls.grant)
	if lost != nil {
		// Tell the server anyway: if the loss was local (no renewal in time)
		// the key may still be ours, and freeing it early is harmless.
		return fmt.Errorf("fencedlock: release %q: %w: %w", ls.grant.Key, ErrNotHeld, lost)
	}
	if err != nil {
		return fmt.Errorf("fencedlock: release %q: %w", ls.grant.Key, err)
	}
	if ls.l.debug() {
		ls.l.log.Debug("fencedlock: released", "key", ls.grant.Key, "fence", ls.grant.Fence)
	}
	return nil
}
