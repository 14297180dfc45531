// Package locktrace defines the hooks through which a fencedlock Locker
// reports the events of its leases, for metrics and traces: a [Trace] is a
// struct of functions, one per event, set in fencedlock.Options.Trace (the
// module github.com/fencedlock/fencedlock/otel fills one from
// OpenTelemetry). A nil Trace, or a nil field, turns the event off: a
// Locker without a Trace calls nothing and allocates nothing for it, the
// way net/http/httptrace's ClientTrace works for an HTTP request.
//
// Events carry the backend's name, the key, the fence and the holder id,
// never the owner token.
package locktrace

import (
	"context"
	"time"

	"github.com/fencedlock/fencedlock/fencing"
)

// Trace is a set of hooks a Locker calls on the events of its leases. Any
// field may be nil: that event is not reported. A Trace must not be
// changed once given to fencedlock.New.
//
// Hooks are called synchronously on the goroutine of the event (the
// caller's, or the watchdog's for renewals and losses) and must return
// quickly; they may be called concurrently. A hook named ...Start returns
// the context that the Locker then uses for the operation and passes to
// the matching ...End (and, for an Acquire, to AcquireWait): return ctx
// itself, or a context derived from it that carries the hook's state (a
// span, for instance).
type Trace struct {
	// AcquireStart is called when Locker.Acquire, TryAcquire or Do begins.
	AcquireStart func(ctx context.Context, e AcquireStartEvent) context.Context
	// AcquireWait is called, with AcquireStart's context, each time a
	// blocking Acquire has to wait: an attempt found the key held or
	// failed, a release notification woke it, or a WaitAcquirer reported
	// it queued behind a holder (see driver.NoteQueued).
	AcquireWait func(ctx context.Context, e AcquireWaitEvent)
	// AcquireEnd is called when the Acquire returns, with AcquireStart's
	// context.
	AcquireEnd func(ctx context.Context, e AcquireEndEvent)
	// Renewed is called after each renewal of a lease: by the watchdog, by
	// Lease.Renew, or confirmed by a driver.KeepAliver. ctx is the
	// renewal's context.
	Renewed func(ctx context.Context, e RenewEvent)
	// LeaseEnd is called once per lease, when it is released or lost,
	// before the lease's context is cancelled. It is called with the
	// lease's internal lock held: it must not block.
	LeaseEnd func(e LeaseEndEvent)
	// CriticalStart is called by Locker.Do after the lease was acquired,
	// before its function runs; the function's context derives from the
	// context it returns.
	CriticalStart func(ctx context.Context, e LeaseInfo) context.Context
	// CriticalEnd is called when Do's function has returned, with
	// CriticalStart's context.
	CriticalEnd func(ctx context.Context, e CriticalEndEvent)
	// ReleaseStart is called when Lease.Release begins (also for the
	// releases of Do and Locker.Close).
	ReleaseStart func(ctx context.Context, e LeaseInfo) context.Context
	// ReleaseEnd is called when Lease.Release returns, with ReleaseStart's
	// context.
	ReleaseEnd func(ctx context.Context, e ReleaseEndEvent)
}

// LeaseInfo names a lease in events: never its owner token.
type LeaseInfo struct {
	Backend string        // the backend's name (see Locker.BackendName)
	Key     string        // the lock name
	Fence   fencing.Token // the lease's fence (0 before it is acquired)
	Holder  string        // the holder id (see driver.HolderID); empty before it is acquired
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
	NotAcquired AcquireOutcome = "not_acquired" // held by another owner, or the wait's context ended (fencedlock.ErrNotAcquired)
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
// error wraps fencedlock.ErrLeaseLost).
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
