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
	// ReleaseTimeout bounds Release, Close and the cleanup after a failed
	// Acquire (see Lease.Release and Locker.Close for calls a backend does
	// not abort when their context ends). Default DefaultReleaseTimeout.
	ReleaseTimeout time.Duration
	// ManualRenew turns the watchdog's renewals off: leases are renewed only
	// by Lease.Renew. The local deadline is still enforced.
	ManualRenew bool
	// Logger receives debug and warning records (keys, fences and holder ids;
	// never owner tokens). Default: no logging.
	Logger *slog.Logger
	// Observer receives the events of acquires, renewals, releases and
	// losses, for metrics and traces (see [Observer]). Default: none, at no
	// cost.
	Observer Observer
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
// concurrent use. Every Lease it grants is renewed by a watchdog that ends
// when the lease is released or lost, or when the Locker is closed.
//
// A Locker does not own its Backend: whoever created the Backend closes it,
// after closing every Locker on it (as database/sql does not close a driver
// connector it was given). Several Lockers may share one Backend. One
// Locker grants leases of several TTLs: see [WithTTL] and the other
// [LeaseOption]s.
type Locker struct {
	b      Backend
	opts   Options
	log    *slog.Logger
	notify Notifier
	waitq  WaitAcquirer
	keeper KeepAliver

	obs     Observer // Options.Observer; nil: nothing observed
	backend string   // the backend's name in events (set with obs only)

	mu      sync.Mutex
	closed  bool
	closeCh chan struct{}
	leases  map[*Lease]struct{}
	wg      sync.WaitGroup
}

// New returns a Locker on b. It validates opts (see [Options] for the
// ranges) and b: an invalid option or a nil backend is reported here, as
// an error wrapping [ErrInvalid], and no Locker is made. The caller keeps
// ownership of b: [Locker.Close] does not close it.
func New(b Backend, opts Options) (*Locker, error) {
	if b == nil {
		return nil, invalidf("nil backend")
	}
	o, err := opts.resolve()
	if err != nil {
		return nil, err
	}
	l := &Locker{b: b, opts: o, log: o.Logger, closeCh: make(chan struct{}), leases: make(map[*Lease]struct{})}
	l.notify, _ = b.(Notifier)
	l.waitq, _ = b.(WaitAcquirer)
	l.keeper, _ = b.(KeepAliver)
	if o.Observer != nil { // observe: events carry the backend's name
		l.obs, l.backend = o.Observer, backendName(b)
	}
	return l, nil
}

// Options returns the options in effect, defaults filled in.
func (l *Locker) Options() Options { return l.opts }

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

func newOwner() string { return rand.Text() }

// TryAcquire makes one attempt to take key. If another owner holds it, the
// error wraps [ErrNotAcquired] (and is a *[HeldError] when the backend
// reports the remaining TTL). ctx bounds the attempt only; the lease
// outlives it. If the attempt fails in a way the server may have applied,
// TryAcquire deletes what it may have taken (owner-checked) before it
// returns.
//
// opts set this lease's TTL, renewal and safety margin in place of the
// Locker's (see [LeaseOption]).
func (l *Locker) TryAcquire(ctx context.Context, key string, opts ...LeaseOption) (ls *Lease, err error) {
	// observe: acquire start and end
	ctx, ao := l.observeAcquire(ctx, key, false)
	defer ao.end(&ls, &err)
	if err := l.check(key); err != nil {
		return nil, err
	}
	lt, err := l.timing(opts)
	if err != nil {
		return nil, err
	}
	req := AcquireRequest{Key: key, Owner: newOwner(), TTL: lt.ttl}
	sent := time.Now()
	g, err := l.b.Acquire(ctx, req)
	if err != nil {
		if mayHaveApplied(err) {
			l.cleanup(ctx, req)
		}
		return nil, err
	}
	return l.start(g, sent, lt)
}

// Acquire blocks until key is held or ctx is done. While another owner
// holds the key it waits for the backend's release notification (see
// [Notifier]) or the holder's remaining TTL, and otherwise backs off
// exponentially with jitter between Options.MinRetryDelay and MaxRetryDelay.
//
// When ctx ends first, the error is both [ErrNotAcquired] and ctx.Err(), and
// also the last attempt's error if that attempt failed for another reason
// than a holder. An error no retry can fix ([ErrPermanent], [ErrInvalid],
// [ErrClosed]) ends the wait at once and is returned as the backend
// reported it. Whichever way Acquire fails, no lock of its attempts is
// left on the server: an attempt whose outcome is unknown is followed by
// an owner-checked release (bounded by Options.ReleaseTimeout) before
// Acquire returns. ctx bounds only the wait: the returned Lease lives until
// released or lost. opts set this lease's TTL, renewal and safety margin in
// place of the Locker's (see [LeaseOption]).
func (l *Locker) Acquire(ctx context.Context, key string, opts ...LeaseOption) (ls *Lease, err error) {
	// observe: acquire start and end
	ctx, ao := l.observeAcquire(ctx, key, true)
	defer ao.end(&ls, &err)
	if err := l.check(key); err != nil {
		return nil, err
	}
	lt, err := l.timing(opts)
	if err != nil {
		return nil, err
	}
	req := AcquireRequest{Key: key, Owner: newOwner(), TTL: lt.ttl}

	// The uncontended path: one attempt on the caller's context, nothing
	// set up for waiting.
	var first error
	if l.waitq == nil {
		sent := time.Now()
		g, err := l.b.Acquire(ctx, req)
		if err == nil {
			return l.start(g, sent, lt)
		}
		first = err
	}
	return l.wait(ctx, req, lt, first)
}

// wait is Acquire after a failed first attempt (first; nil for a
// WaitAcquirer, which waits on the server). It is the only place that
// decides between retrying and giving up, and every way out of it after an
// attempt of unknown outcome sends the cleanup release.
func (l *Locker) wait(ctx context.Context, req AcquireRequest, lt leaseTiming, first error) (ls *Lease, err error) {
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

	// unknown is set once an attempt failed in a way the server may have
	// applied: our owner token may hold the key, so every failure exit
	// releases it (owner-checked: it can delete nothing else).
	unknown := false
	defer func() {
		if err != nil && unknown {
			l.cleanup(ctx, req)
		}
	}()

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
		sent := time.Now()
		g, err := l.waitq.AcquireWait(wctx, req)
		if err != nil {
			return nil, l.waitErr(wctx, req.Key, err)
		}
		return l.start(g, sent, lt)
	}

	var (
		notify  <-chan struct{}
		stop    func()
		backoff = l.opts.MinRetryDelay
		timer   *time.Timer
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
	for {
		err := first
		first = nil
		if err == nil {
			sent := time.Now()
			var g Grant
			g, err = l.b.Acquire(wctx, req)
			if err == nil {
				return l.start(g, sent, lt)
			}
		}
		held := errors.Is(err, ErrNotAcquired)
		l.observeWait(wctx, err) // observe: a wait (held, or a failed attempt)
		if held {
			last = nil
		} else {
			last = err
			unknown = unknown || mayHaveApplied(err)
		}
		if wctx.Err() != nil {
			return nil, l.waitErr(wctx, req.Key, last)
		}
		if !held && permanent(err) {
			return nil, err
		}
		var hint time.Duration
		if held {
			var he *HeldError
			if errors.As(err, &he) {
				hint = he.RetryAfter
			}
			if notify == nil && l.notify != nil {
				// Watch, then try once more at once: a release between
				// the failed attempt and the watch is not missed.
				if n, s, werr := l.notify.Watch(wctx, req.Key); werr == nil {
					notify, stop = n, s
					continue
				} else if l.debug() {
					l.log.Debug("fencedlock: watch failed; polling", "key", req.Key, "err", werr)
				}
			}
		} else {
			l.log.Warn("fencedlock: acquire attempt failed; retrying", "key", req.Key, "err", err)
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
		case <-wctx.Done():
			return nil, l.waitErr(wctx, req.Key, last)
		case <-notify:
			l.observeWait(wctx, nil) // observe: woken by a release notification
		case <-timer.C:
		}
	}
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
func (l *Locker) cleanup(ctx context.Context, req AcquireRequest) {
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), l.opts.ReleaseTimeout)
	defer cancel()
	err := l.release(rctx, &Grant{Key: req.Key, Owner: req.Owner})
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

func jitter(d time.Duration) time.Duration {
	if d <= 0 {
		return 0
	}
	return d/2 + mrand.N(d/2+1)
}

func (l *Locker) start(g Grant, sent time.Time, lt leaseTiming) (*Lease, error) {
	ls := &Lease{l: l, grant: g, holder: HolderID(g.Owner), lt: lt}
	ls.observeStart() // observe: the lease's start (before Close can see it)
	ttl := g.TTL
	if ttl <= 0 {
		ttl = lt.ttl
	}
	if !g.Sent.IsZero() {
		sent = g.Sent
	}
	ls.deadline = sent.Add(ttl - lt.margin)
	ls.next = sent.Add(lt.renew)
	ls.ctx, ls.cancel = context.WithCancelCause(context.Background())

	l.mu.Lock()
	if l.closed {
		l.mu.Unlock()
		ls.cancel(ErrClosed)
		rctx, cancel := context.WithTimeout(context.Background(), l.opts.ReleaseTimeout)
		defer cancel()
		_ = l.release(rctx, &g)
		return nil, fmt.Errorf("fencedlock: locker: %w", ErrClosed)
	}
	l.leases[ls] = struct{}{}
	l.wg.Add(1) // the watchdog timer: Done in finish
	if l.keeper != nil && !lt.manual {
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
// lease is lost; fn should stop and not write after that. If the lease was
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
	fctx, cancel := context.WithCancelCause(octx)
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
		return errors.Join(ferr, lost)
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
// Options.ReleaseTimeout: a backend call that ignores its context is not
// waited for past it (Close then reports it; the call ends on its own).
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

func (l *Locker) forget(ls *Lease) {
	l.mu.Lock()
	delete(l.leases, ls)
	l.mu.Unlock()
}

// release sends the backend's Release of *g and returns when it does, or
// shortly after ctx ends even if the backend call has not returned: a
// client may block past its context (rueidis waits for a connection that
// another request is dialling, up to its dial timeout). An abandoned call
// ends on its own. *g must not change afterwards. It costs a goroutine
// hand-off, so the common path of Lease.Release does not use it.
func (l *Locker) release(ctx context.Context, g *Grant) error {
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
