package fencedlock

import (
	"context"
	"errors"
	"time"

	"github.com/fencedlock/fencedlock/driver"
	"github.com/fencedlock/fencedlock/locktrace"
)

// This file reports a Locker's events to its Options.Trace (package
// locktrace). Every hook checks its field first: without a Trace, or
// without the field, it returns at once and allocates nothing.

// BackendName returns the name events carry for the Locker's backend
// ([driver.Name]): the last element of its package path ("redis",
// "goredis", "etcd", "memory"), or, for a view of another backend (the
// Lockers of packages rwlock, semaphore and multilock), that backend's.
// The name is computed once, by New.
func (l *Locker) BackendName() string { return l.backend }

// acquireKey is the context key of an observed Acquire's state.
type acquireKey struct{}

// acquireState is an observed Acquire in flight, carried by its context.
type acquireState struct {
	tr       *locktrace.Trace
	backend  string
	key      string
	blocking bool
	start    time.Time
	waitFrom time.Time // first sign of contention; zero if none
	notified bool      // woken by a notification, and no attempt failed since
	queued   bool
}

// Queued reports a locktrace.WaitQueued event (see [driver.NoteQueued]).
func (st *acquireState) Queued(ctx context.Context) { st.wait(ctx, locktrace.WaitQueued, nil) }

func (st *acquireState) wait(ctx context.Context, kind locktrace.WaitKind, err error) {
	now := time.Now()
	switch kind {
	case locktrace.WaitHeld, locktrace.WaitQueued:
		if st.waitFrom.IsZero() {
			st.waitFrom = now
		}
	}
	st.notified = kind == locktrace.WaitNotified
	st.queued = st.queued || kind == locktrace.WaitQueued
	e := locktrace.AcquireWaitEvent{Backend: st.backend, Key: st.key, Kind: kind}
	if kind == locktrace.WaitRetry {
		e.Err = err
	}
	var he *HeldError
	if kind == locktrace.WaitHeld && errors.As(err, &he) {
		e.RetryAfter = he.RetryAfter
	}
	if st.tr.AcquireWait != nil {
		st.tr.AcquireWait(ctx, e)
	}
}

// acquireObs is the observation of one Acquire (zero when the Trace
// reports neither its waits nor its end).
type acquireObs struct {
	st  *acquireState
	ctx context.Context
}

// observeAcquire starts observing an Acquire: it returns the context to
// use for it (ctx itself without a Trace).
func (l *Locker) observeAcquire(ctx context.Context, key string, blocking bool) (context.Context, acquireObs) {
	tr := l.tr
	if tr == nil {
		return ctx, acquireObs{}
	}
	if tr.AcquireStart != nil {
		ctx = tr.AcquireStart(ctx, locktrace.AcquireStartEvent{Backend: l.backend, Key: key, Blocking: blocking})
	}
	if tr.AcquireWait == nil && tr.AcquireEnd == nil {
		return ctx, acquireObs{}
	}
	st := &acquireState{tr: tr, backend: l.backend, key: key, blocking: blocking, start: time.Now()}
	octx := driver.WithQueueObserver(context.WithValue(ctx, acquireKey{}, st), st)
	return octx, acquireObs{st: st, ctx: octx}
}

// end reports the Acquire's result (*ls, *err).
func (ao acquireObs) end(ls **Lease, err *error) {
	st := ao.st
	if st == nil || st.tr.AcquireEnd == nil {
		return
	}
	now := time.Now()
	e := locktrace.AcquireEndEvent{
		LeaseInfo: locktrace.LeaseInfo{Backend: st.backend, Key: st.key},
		Blocking:  st.blocking,
		Duration:  now.Sub(st.start),
		Err:       *err,
	}
	if !st.waitFrom.IsZero() {
		e.Waited = now.Sub(st.waitFrom)
	}
	switch {
	case *err == nil && *ls != nil:
		e.Outcome = locktrace.Acquired
		e.LeaseInfo = (*ls).info()
		e.HandOff = st.blocking && (st.notified || st.queued)
	case errors.Is(*err, ErrNotAcquired):
		e.Outcome = locktrace.NotAcquired
	default:
		e.Outcome = locktrace.AcquireErr
	}
	st.tr.AcquireEnd(ao.ctx, e)
}

// observeWait reports a wait of a blocking Acquire whose context is ctx:
// after a failed attempt (err, held or not), or a notification (err nil).
func (l *Locker) observeWait(ctx context.Context, err error) {
	if l.tr == nil {
		return
	}
	st, _ := ctx.Value(acquireKey{}).(*acquireState)
	if st == nil {
		return
	}
	switch {
	case err == nil:
		st.wait(ctx, locktrace.WaitNotified, nil)
	case errors.Is(err, ErrNotAcquired):
		st.wait(ctx, locktrace.WaitHeld, err)
	default:
		st.wait(ctx, locktrace.WaitRetry, err)
	}
}

func (ls *Lease) info() locktrace.LeaseInfo {
	return locktrace.LeaseInfo{Backend: ls.l.backend, Key: ls.grant.Key, Fence: ls.grant.Fence, Holder: ls.Holder(), TTL: ls.grant.TTL}
}

// obsEpoch is the origin of Lease.since: a monotonic offset in 8 bytes
// (a time.Time would take 24 and push every Lease into a larger size
// class, observed or not).
var obsEpoch = time.Now()

// observeStart notes when a lease whose end is traced was granted.
func (ls *Lease) observeStart() {
	if tr := ls.l.tr; tr != nil && tr.LeaseEnd != nil {
		ls.since = time.Since(obsEpoch)
	}
}

// observeRenew reports a renewal sent at sent with outcome err. A renewal
// that failed because the lease ended meanwhile (Release cancels it) is no
// renewal failure and is not reported.
func (ls *Lease) observeRenew(ctx context.Context, sent time.Time, keepAlive bool, err error) {
	tr := ls.l.tr
	if tr == nil || tr.Renewed == nil || err != nil && ls.ended() {
		return
	}
	e := locktrace.RenewEvent{LeaseInfo: ls.info(), KeepAlive: keepAlive, Err: err}
	if !sent.IsZero() {
		e.Duration = time.Since(sent)
	}
	tr.Renewed(ctx, e)
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
	tr := ls.l.tr
	if tr == nil || tr.LeaseEnd == nil {
		return
	}
	e := locktrace.LeaseEndEvent{LeaseInfo: ls.info(), Held: time.Since(obsEpoch) - ls.since, Cause: locktrace.EndReleased}
	if le, ok := cause.(*lostError); ok { // end's cause: ErrReleased or a *lostError
		e.Err = le.reason
		switch {
		case errors.Is(le.reason, errDeadline):
			e.Cause = locktrace.EndDeadline
		case errors.Is(le.reason, ErrNotHeld):
			e.Cause = locktrace.EndNotHeld
		default:
			e.Cause = locktrace.EndInvalidated
		}
	}
	tr.LeaseEnd(e)
}

// observeCritical starts observing Do's function on ls: it returns the
// context to derive the function's from (ctx without a Trace) and the
// start time.
func (l *Locker) observeCritical(ctx context.Context, ls *Lease) (context.Context, time.Time) {
	tr := l.tr
	if tr == nil {
		return ctx, time.Time{}
	}
	if tr.CriticalStart != nil {
		ctx = tr.CriticalStart(ctx, ls.info())
	}
	return ctx, time.Now()
}

// observeCriticalEnd reports the end of Do's function (error ferr).
func (l *Locker) observeCriticalEnd(ctx context.Context, ls *Lease, start time.Time, ferr error) {
	tr := l.tr
	if tr == nil || tr.CriticalEnd == nil {
		return
	}
	tr.CriticalEnd(ctx, locktrace.CriticalEndEvent{LeaseInfo: ls.info(), Duration: time.Since(start), Err: ferr, Lost: errors.Is(ls.Err(), ErrLeaseLost)})
}

// releaseObs is the observation of one Release (zero when the Trace does
// not report its end).
type releaseObs struct {
	ls    *Lease
	ctx   context.Context
	start time.Time
}

// observeRelease starts observing ls's Release; it returns the context to
// use for it (ctx itself without a Trace).
func (ls *Lease) observeRelease(ctx context.Context) (context.Context, releaseObs) {
	tr := ls.l.tr
	if tr == nil {
		return ctx, releaseObs{}
	}
	if tr.ReleaseStart != nil {
		ctx = tr.ReleaseStart(ctx, ls.info())
	}
	if tr.ReleaseEnd == nil {
		return ctx, releaseObs{}
	}
	return ctx, releaseObs{ls: ls, ctx: ctx, start: time.Now()}
}

// end reports the Release's result *err.
func (ro releaseObs) end(err *error) {
	if ro.ls == nil {
		return
	}
	e := locktrace.ReleaseEndEvent{LeaseInfo: ro.ls.info(), Duration: time.Since(ro.start), Outcome: locktrace.Released, Err: *err}
	switch {
	case *err == nil:
	case errors.Is(*err, ErrNotHeld):
		e.Outcome = locktrace.ReleaseNotHeld
	default:
		e.Outcome = locktrace.ReleaseErr
	}
	ro.ls.l.tr.ReleaseEnd(ro.ctx, e)
}
