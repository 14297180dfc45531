package fencedlock

import (
	"context"
	"errors"
	"path"
	"reflect"
	"time"

	"github.com/fencedlock/fencedlock/driver"
	"github.com/fencedlock/fencedlock/fencing"
)

// Observer receives the events of a [Locker]'s leases, for metrics and
// traces (the module github.com/fencedlock/fencedlock/otel implements it on
// OpenTelemetry). Set it in Options.Observer; a Locker without one calls
// nothing and allocates nothing for it.
//
// Events carry the backend's name, the key, the fence and the holder id,
// never the owner token. Methods are called synchronously on the
// goroutine of the event (the caller's, or the watchdog's for renewals and
// losses) and must return quickly; they may be called concurrently. A
// method named ...Start returns the context that the Locker then uses for
// the operation and passes to the matching ...End (and, for an Acquire, to
// AcquireWait): return ctx itself, or a context derived from it that
// carries the implementation's state (a span, for instance). Embed
// [NopObserver] to implement only some methods and to stay compatible
// when methods are added.
type Observer interface {
	// AcquireStart is called when Locker.Acquire, TryAcquire or Do begins.
	AcquireStart(ctx context.Context, e AcquireStartEvent) context.Context
	// AcquireWait is called, with AcquireStart's context, each time a
	// blocking Acquire has to wait: an attempt found the key held or
	// failed, a release notification woke it, or a WaitAcquirer reported
	// it queued behind a holder (see [driver.NoteQueued]).
	AcquireWait(ctx context.Context, e AcquireWaitEvent)
	// AcquireEnd is called when the Acquire returns, with AcquireStart's
	// context.
	AcquireEnd(ctx context.Context, e AcquireEndEvent)
	// Renewed is called after each renewal of a lease: by the watchdog, by
	// Lease.Renew, or confirmed by a [driver.KeepAliver]. ctx is the renewal's
	// context.
	Renewed(ctx context.Context, e RenewEvent)
	// LeaseEnd is called once per lease, when it is released or lost,
	// before the lease's context is cancelled. It is called with the
	// lease's internal lock held: it must not block.
	LeaseEnd(e LeaseEndEvent)
	// CriticalStart is called by Locker.Do after the lease was acquired,
	// before its function runs; the function's context derives from the
	// context it returns.
	CriticalStart(ctx context.Context, e LeaseInfo) context.Context
	// CriticalEnd is called when Do's function has returned, with
	// CriticalStart's context.
	CriticalEnd(ctx context.Context, e CriticalEndEvent)
	// ReleaseStart is called when Lease.Release begins (also for the
	// releases of Do and Locker.Close).
	ReleaseStart(ctx context.Context, e LeaseInfo) context.Context
	// ReleaseEnd is called when Lease.Release returns, with ReleaseStart's
	// context.
	ReleaseEnd(ctx context.Context, e ReleaseEndEvent)
}

// NopObserver implements [Observer] with methods that do nothing. Embed it
// in an Observer that handles only some events.
type NopObserver struct{}

// AcquireStart returns ctx.
func (NopObserver) AcquireStart(ctx context.Context, _ AcquireStartEvent) context.Context {
	return ctx
}

// AcquireWait does nothing.
func (NopObserver) AcquireWait(context.Context, AcquireWaitEvent) {}

// AcquireEnd does nothing.
func (NopObserver) AcquireEnd(context.Context, AcquireEndEvent) {}

// Renewed does nothing.
func (NopObserver) Renewed(context.Context, RenewEvent) {}

// LeaseEnd does nothing.
func (NopObserver) LeaseEnd(LeaseEndEvent) {}

// CriticalStart returns ctx.
func (NopObserver) CriticalStart(ctx context.Context, _ LeaseInfo) context.Context { return ctx }

// CriticalEnd does nothing.
func (NopObserver) CriticalEnd(context.Context, CriticalEndEvent) {}

// ReleaseStart returns ctx.
func (NopObserver) ReleaseStart(ctx context.Context, _ LeaseInfo) context.Context { return ctx }

// ReleaseEnd does nothing.
func (NopObserver) ReleaseEnd(context.Context, ReleaseEndEvent) {}

// LeaseInfo names a lease in events: never its owner token.
type LeaseInfo struct {
	Backend string        // the backend's name (see Locker.BackendName)
	Key     string        // the lock name
	Fence   fencing.Token // the lease's fence (0 before it is acquired)
	Holder  string        // the holder id (see [driver.HolderID]); empty before it is acquired
	TTL     time.Duration // the lease the server granted
}

// AcquireStartEvent begins an Acquire, TryAcquire or Do.
type AcquireStartEvent struct {
	Backend  string
	Key      string
	Blocking bool // Acquire or Do (waits); false for TryAcquire
}

// AcquireOutcome is how an Acquire ended.
type AcquireOutcome string

// Acquire outcomes.
const (
	Acquired    AcquireOutcome = "acquired"     // the lease is held
	NotAcquired AcquireOutcome = "not_acquired" // held by another owner, or the wait's context ended (ErrNotAcquired)
	AcquireErr  AcquireOutcome = "error"        // any other error
)

// WaitKind says why a blocking Acquire waits, in an [AcquireWaitEvent].
type WaitKind string

// Wait kinds.
const (
	WaitHeld     WaitKind = "held"     // an attempt found the key held by another owner
	WaitRetry    WaitKind = "retry"    // an attempt failed with a transient error (Err)
	WaitNotified WaitKind = "notified" // a release notification woke the waiter
	WaitQueued   WaitKind = "queued"   // a WaitAcquirer queued the request behind a holder
)

// AcquireWaitEvent is one wait of a blocking Acquire.
type AcquireWaitEvent struct {
	Backend    string
	Key        string
	Kind       WaitKind
	RetryAfter time.Duration // the holder's remaining TTL, if the backend reported it (WaitHeld)
	Err        error         // the attempt's error (WaitRetry)
}

// AcquireEndEvent ends an Acquire, TryAcquire or Do's acquire. LeaseInfo's
// Fence, Holder and TTL are set when Outcome is Acquired.
type AcquireEndEvent struct {
	LeaseInfo
	Blocking bool
	Outcome  AcquireOutcome
	Duration time.Duration // the whole call
	// Waited is the time from the first sign of contention (the key found
	// held, or queued behind a holder) to the end; zero for an Acquire
	// that did not wait.
	Waited time.Duration
	// HandOff reports a blocking Acquire satisfied by the attempt that
	// followed a release notification, or granted after a WaitAcquirer
	// queued it behind a holder.
	HandOff bool
	Err     error
}

// RenewEvent is one renewal's outcome.
type RenewEvent struct {
	LeaseInfo
	Duration  time.Duration // the round trip (for a KeepAliver: from the request's send time to its report)
	KeepAlive bool          // confirmed by a KeepAliver's own renewal
	Err       error         // nil if the server renewed the lease
}

// EndCause is why a lease ended, in a [LeaseEndEvent].
type EndCause string

// Lease end causes. Every cause but EndReleased is a loss (the lease's
// error wraps [ErrLeaseLost]).
const (
	EndReleased    EndCause = "released"    // Release, Do's release or Locker.Close
	EndNotHeld     EndCause = "not_held"    // the server said the owner no longer holds the key
	EndDeadline    EndCause = "deadline"    // no renewal succeeded before the local deadline
	EndInvalidated EndCause = "invalidated" // a permanent renewal failure, or the backend stopped keeping it alive
)

// LeaseEndEvent ends a lease.
type LeaseEndEvent struct {
	LeaseInfo
	Held  time.Duration // from the grant to the end
	Cause EndCause
	Err   error // the loss's reason; nil when released
}

// CriticalEndEvent ends Do's function.
type CriticalEndEvent struct {
	LeaseInfo
	Duration time.Duration
	Err      error // the function's error
	Lost     bool  // the lease was lost before the function returned
}

// ReleaseOutcome is how a Release ended.
type ReleaseOutcome string

// Release outcomes.
const (
	Released       ReleaseOutcome = "released" // the server deleted the key
	ReleaseNotHeld ReleaseOutcome = "not_held" // the lease was lost or released before, or the server no longer held it
	ReleaseErr     ReleaseOutcome = "error"    // the release failed; the key expires with its TTL
)

// ReleaseEndEvent ends a Release.
type ReleaseEndEvent struct {
	LeaseInfo
	Duration time.Duration
	Outcome  ReleaseOutcome
	Err      error
}

// BackendName returns the name events carry for the Locker's backend: the
// last element of its package path ("redis", "goredis", "etcd",
// "memory").
func (l *Locker) BackendName() string { return backendName(l.b) }

func backendName(b driver.Backend) string {
	t := reflect.TypeOf(b)
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	if p := t.PkgPath(); p != "" {
		return path.Base(p)
	}
	return t.String()
}

// acquireKey is the context key of an observed Acquire's state.
type acquireKey struct{}

// acquireState is an observed Acquire in flight, carried by its context.
type acquireState struct {
	obs      Observer
	backend  string
	key      string
	blocking bool
	start    time.Time
	waitFrom time.Time // first sign of contention; zero if none
	notified bool      // woken by a notification, and no attempt failed since
	queued   bool
}

// Queued reports a WaitQueued event (see [driver.NoteQueued]).
func (st *acquireState) Queued(ctx context.Context) { st.wait(ctx, WaitQueued, nil) }

func (st *acquireState) wait(ctx context.Context, kind WaitKind, err error) {
	now := time.Now()
	switch kind {
	case WaitHeld, WaitQueued:
		if st.waitFrom.IsZero() {
			st.waitFrom = now
		}
	}
	st.notified = kind == WaitNotified
	st.queued = st.queued || kind == WaitQueued
	e := AcquireWaitEvent{Backend: st.backend, Key: st.key, Kind: kind}
	if kind == WaitRetry {
		e.Err = err
	}
	var he *HeldError
	if kind == WaitHeld && errors.As(err, &he) {
		e.RetryAfter = he.RetryAfter
	}
	st.obs.AcquireWait(ctx, e)
}

// acquireObs is the observation of one Acquire (zero without an Observer).
type acquireObs struct {
	st  *acquireState
	ctx context.Context
}

// observeAcquire starts observing an Acquire: it returns the context to
// use for it (ctx itself without an Observer).
func (l *Locker) observeAcquire(ctx context.Context, key string, blocking bool) (context.Context, acquireObs) {
	if l.obs == nil {
		return ctx, acquireObs{}
	}
	st := &acquireState{obs: l.obs, backend: l.backend, key: key, blocking: blocking, start: time.Now()}
	octx := l.obs.AcquireStart(ctx, AcquireStartEvent{Backend: l.backend, Key: key, Blocking: blocking})
	octx = driver.WithQueueObserver(context.WithValue(octx, acquireKey{}, st), st)
	return octx, acquireObs{st: st, ctx: octx}
}

// end reports the Acquire's result (*ls, *err).
func (ao acquireObs) end(ls **Lease, err *error) {
	st := ao.st
	if st == nil {
		return
	}
	now := time.Now()
	e := AcquireEndEvent{
		LeaseInfo: LeaseInfo{Backend: st.backend, Key: st.key},
		Blocking:  st.blocking,
		Duration:  now.Sub(st.start),
		Err:       *err,
	}
	if !st.waitFrom.IsZero() {
		e.Waited = now.Sub(st.waitFrom)
	}
	switch {
	case *err == nil && *ls != nil:
		e.Outcome = Acquired
		e.LeaseInfo = (*ls).info()
		e.HandOff = st.blocking && (st.notified || st.queued)
	case errors.Is(*err, ErrNotAcquired):
		e.Outcome = NotAcquired
	default:
		e.Outcome = AcquireErr
	}
	st.obs.AcquireEnd(ao.ctx, e)
}

// observeWait reports a wait of a blocking Acquire whose context is ctx:
// after a failed attempt (err, held or not), or a notification (err nil).
func (l *Locker) observeWait(ctx context.Context, err error) {
	if l.obs == nil {
		return
	}
	st, _ := ctx.Value(acquireKey{}).(*acquireState)
	if st == nil {
		return
	}
	switch {
	case err == nil:
		st.wait(ctx, WaitNotified, nil)
	case errors.Is(err, ErrNotAcquired):
		st.wait(ctx, WaitHeld, err)
	default:
		st.wait(ctx, WaitRetry, err)
	}
}

func (ls *Lease) info() LeaseInfo {
	return LeaseInfo{Backend: ls.l.backend, Key: ls.grant.Key, Fence: ls.grant.Fence, Holder: ls.Holder(), TTL: ls.grant.TTL}
}

// obsEpoch is the origin of Lease.since: a monotonic offset in 8 bytes
// (a time.Time would take 24 and push every Lease into a larger size
// class, observed or not).
var obsEpoch = time.Now()

// observeStart notes when an observed lease was granted.
func (ls *Lease) observeStart() {
	if ls.l.obs != nil {
		ls.since = time.Since(obsEpoch)
	}
}

// observeRenew reports a renewal sent at sent with outcome err. A renewal
// that failed because the lease ended meanwhile (Release cancels it) is no
// renewal failure and is not reported.
func (ls *Lease) observeRenew(ctx context.Context, sent time.Time, keepAlive bool, err error) {
	if ls.l.obs == nil || err != nil && ls.ended() {
		return
	}
	e := RenewEvent{LeaseInfo: ls.info(), KeepAlive: keepAlive, Err: err}
	if !sent.IsZero() {
		e.Duration = time.Since(sent)
	}
	ls.l.obs.Renewed(ctx, e)
}

// ended reports whether the lease has ended.
func (ls *Lease) ended() bool {
	ls.mu.Lock()
	defer ls.mu.Unlock()
	return ls.state != held
}

// observeEnd reports the end of the lease with cause (ErrReleased or a
// *lostError).
func (ls *Lease) observeEnd(cause error) {
	if ls.l.obs == nil {
		return
	}
	e := LeaseEndEvent{LeaseInfo: ls.info(), Held: time.Since(obsEpoch) - ls.since, Cause: EndReleased}
	if le, ok := cause.(*lostError); ok { // end's cause: ErrReleased or a *lostError
		e.Err = le.reason
		switch {
		case errors.Is(le.reason, errDeadline):
			e.Cause = EndDeadline
		case errors.Is(le.reason, ErrNotHeld):
			e.Cause = EndNotHeld
		default:
			e.Cause = EndInvalidated
		}
	}
	ls.l.obs.LeaseEnd(e)
}

// observeCritical starts observing Do's function on ls: it returns the
// context to derive the function's from (ctx without an Observer) and the
// start time.
func (l *Locker) observeCritical(ctx context.Context, ls *Lease) (context.Context, time.Time) {
	if l.obs == nil {
		return ctx, time.Time{}
	}
	return l.obs.CriticalStart(ctx, ls.info()), time.Now()
}

// observeCriticalEnd reports the end of Do's function (error ferr).
func (l *Locker) observeCriticalEnd(ctx context.Context, ls *Lease, start time.Time, ferr error) {
	if l.obs == nil {
		return
	}
	l.obs.CriticalEnd(ctx, CriticalEndEvent{LeaseInfo: ls.info(), Duration: time.Since(start), Err: ferr, Lost: errors.Is(ls.Err(), ErrLeaseLost)})
}

// releaseObs is the observation of one Release (zero without an Observer).
type releaseObs struct {
	ls    *Lease
	ctx   context.Context
	start time.Time
}

// observeRelease starts observing ls's Release; it returns the context to
// use for it (ctx itself without an Observer).
func (ls *Lease) observeRelease(ctx context.Context) (context.Context, releaseObs) {
	if ls.l.obs == nil {
		return ctx, releaseObs{}
	}
	octx := ls.l.obs.ReleaseStart(ctx, ls.info())
	return octx, releaseObs{ls: ls, ctx: octx, start: time.Now()}
}

// end reports the Release's result *err.
func (ro releaseObs) end(err *error) {
	if ro.ls == nil {
		return
	}
	e := ReleaseEndEvent{LeaseInfo: ro.ls.info(), Duration: time.Since(ro.start), Outcome: Released, Err: *err}
	switch {
	case *err == nil:
	case errors.Is(*err, ErrNotHeld):
		e.Outcome = ReleaseNotHeld
	default:
		e.Outcome = ReleaseErr
	}
	ro.ls.l.obs.ReleaseEnd(ro.ctx, e)
}
