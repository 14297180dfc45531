package driver

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"time"

	"github.com/fencedlock/fencedlock/fencing"
)

// Backend is the driver contract a lock store implements. Most code should
// use [fencedlock.Locker], which adds waiting, backoff, the renewal watchdog, input
// validation and lease-loss reporting on top of any Backend.
//
// A Backend makes exactly one attempt per call: no retries, no sleeping, no
// timers of its own (those live in the Locker), except where an optional
// interface below says otherwise. Its methods must be safe for concurrent
// use. The Locker validates keys and TTLs before calling a Backend, so a
// Backend may assume 1 <= len(key) <= [MaxKeyLen] and [MinTTL] <= ttl <=
// [MaxTTL].
//
// Every method must return promptly once its ctx is done, with an error
// wrapping ctx.Err(): the Locker cancels a renewal in flight when the lease
// is released, and bounds Release and Close by Options.ReleaseTimeout
// through the context.
//
// Errors other than those named below are reported as they are (wrapped
// with the backend's package name); the Locker treats them as transient
// and retries: an outcome the server may have applied is never reported as
// "not held" or "held by another". An error that no retry can fix (the
// store refuses the request until an operator acts: a key holding a value
// the backend did not write, missing permissions, failed authentication)
// must wrap [ErrPermanent]; the Locker then gives up at once instead of
// retrying until its context ends (an Acquire) or the local deadline (a
// renewal, which loses the lease). [ErrClosed] and [ErrInvalid] are
// permanent too. After a failed Acquire whose error is neither
// [ErrNotAcquired], [ErrInvalid] nor [ErrClosed], the Locker assumes the
// server may have applied it and sends a Release of Key and Owner.
//
// A Backend is owned by whoever created it: [fencedlock.Locker.Close] does not close
// it, so several Lockers may share one Backend.
//
// Optional capabilities are separate interfaces found by type assertion:
// [Notifier] (wake waiters on release), [WaitAcquirer] (a server-side fair
// queue), [KeepAliver] (server-driven renewal) and [Inspector] (read-only
// state for tools). The package conformance checks a Backend against this
// contract.
type Backend interface {
	// Acquire makes one attempt to take req.Key for req.Owner with a lease
	// of req.TTL on the server. On success it returns a Grant whose Fence is
	// strictly greater than every fence granted before on that key by any
	// backend sharing the store, and whose TTL is the lease the server
	// applied (it may round req.TTL up, never down below what it enforces).
	// If another owner holds the key it must return an error wrapping
	// [ErrNotAcquired], preferably a *[HeldError] carrying the holder's
	// remaining TTL. It must never leave a key without a TTL on the server.
	Acquire(ctx context.Context, req AcquireRequest) (Grant, error)

	// Renew extends g's lease to ttl from now if, and only if, g.Owner still
	// holds g.Key. It returns the TTL the server applied. If the key is
	// absent or held by another owner it must change nothing and return an
	// error wrapping [ErrNotHeld].
	Renew(ctx context.Context, g Grant, ttl time.Duration) (time.Duration, error)

	// Release deletes g.Key if, and only if, g.Owner still holds it. If not,
	// it must delete nothing and return an error wrapping [ErrNotHeld].
	// Release must also work on a Grant carrying only Key and Owner (no
	// Fence, TTL or Data): the Locker sends one to clean up after an
	// Acquire whose outcome is unknown (its context ended mid-request, or
	// the reply was lost after the server applied it). The fence history
	// of the key must survive Release: the next Grant on the key still
	// carries a greater fence.
	Release(ctx context.Context, g Grant) error

	// Close releases the backend's own resources (subscriptions, sessions).
	// It does not close a client the caller passed to the backend's
	// constructor. It must be idempotent; calls after Close must return
	// errors wrapping [ErrClosed].
	Close() error
}

// AcquireRequest is the input of [Backend.Acquire]. Printing one (fmt,
// slog, JSON) shows its owner token as redacted.
type AcquireRequest struct {
	Key   string        // the lock name, validated by the Locker
	Owner string        // a 128-bit random owner token: a secret, never printed (see Format)
	TTL   time.Duration // the lease to apply on the server
	// RenewInterval is how often a [KeepAliver] renews the lease it grants
	// (and a WaitAcquirer a waiter's lease), the Locker's RenewInterval
	// for the call, shorter than TTL. Zero means TTL/3. Backends without
	// their own keepalive ignore it: the Locker renews their leases.
	RenewInterval time.Duration
}

// Grant describes a lease a backend granted. The Locker passes it back
// unchanged to Renew and Release. Printing a Grant (fmt, slog, JSON) shows
// its owner token as redacted.
type Grant struct {
	Key   string
	Owner string        // the owner token of the request: a secret
	Fence fencing.Token // greater than every fence granted before on Key
	TTL   time.Duration // the lease the server applied, from Sent
	// Sent is when the request that last set the lease's expiry on the
	// server was sent (monotonic clock). Zero means "the Acquire call that
	// returned this Grant", which is right for a one-attempt Acquire; a
	// WaitAcquirer whose lease was granted and kept alive while it waited
	// sets it to the send time of its last confirmed renewal.
	Sent time.Time
	// Data is private to the backend that made the Grant (an etcd lease ID
	// and revision, for instance).
	Data any
}

// Notifier is implemented by backends that can wake waiters when a key is
// released, so that a contended hand-off does not wait for a poll.
type Notifier interface {
	// Watch starts watching key for releases and returns a channel that
	// receives a value (sent without blocking, so a buffer of one holds a
	// pending wake-up) each time key may have become free, and a stop
	// function that ends the watch and must be called exactly once. The
	// watch must be in effect when Watch returns: a release after that
	// moment is delivered. Expiry need not be delivered; the Locker falls
	// back to the RetryAfter hint of [HeldError].
	Watch(ctx context.Context, key string) (notify <-chan struct{}, stop func(), err error)
}

// WaitAcquirer is implemented by backends that keep a fair queue of waiters
// on the server (the Backends of backend/redis, backend/goredis and
// backend/etcd, and backend/postgres's Fair). When a backend
// implements it, [fencedlock.Locker.Acquire] calls AcquireWait instead of
// its own retry loop.
type WaitAcquirer interface {
	// AcquireWait blocks until req.Key is granted to req.Owner or ctx is
	// done. When ctx ends first it must remove every trace of the waiter
	// from the server before returning an error wrapping ctx.Err(), and it
	// must never grant the key to a waiter whose lease expired while it
	// waited. A holder's expiry need not be announced, but a waiter first
	// in line behind a holder whose lease runs out unreleased (a crashed
	// holder) must be granted within that lease's end and the store's
	// expiry slack, whatever the waiter's own TTL: it looks again by the
	// holder's remaining lease, not by a period of its own (conformance
	// property WaiterAfterCrash).
	AcquireWait(ctx context.Context, req AcquireRequest) (Grant, error)
}

// KeepAliver is implemented by backends whose client keeps leases alive on
// its own (etcd's KeepAlive). The Locker then runs no renew loop for grants
// of this backend; it keeps enforcing the local deadline from the Renewals
// it receives.
type KeepAliver interface {
	// KeepAlive keeps g alive until ctx is done, renewing it every
	// RenewInterval of the request that granted it (TTL/3 if zero). It
	// sends a Renewal after each renewal the server confirmed, and a
	// Renewal whose Err wraps [ErrNotHeld] when the server reports the
	// lease or key gone. It closes the channel when it stops; a channel
	// closed before ctx is done means the lease can no longer be kept
	// alive.
	KeepAlive(ctx context.Context, g Grant) <-chan Renewal
}

// KeepAliveStopper is implemented by a [KeepAliver] whose keepalive can be
// stopped on the caller's goroutine. The Locker's Release then stops the
// lease's keepalive itself, after the lease's context ended, and sends the
// release at once, instead of waiting for the backend to see the context
// end and close the channel (a goroutine hand-off or two on every
// release).
type KeepAliveStopper interface {
	KeepAliver

	// KeepAliveStop is KeepAlive that also returns stop, which ends the
	// keepalive as the end of ctx does, but before it returns: once stop
	// has returned the backend sends no renewal request for g, and it has
	// closed the channel (a Renewal already in the channel may still be
	// received). stop may be called more than once, and concurrently with
	// the end of ctx.
	KeepAliveStop(ctx context.Context, g Grant) (<-chan Renewal, func())
}

// Renewal reports one outcome of a [KeepAliver]'s renewal.
type Renewal struct {
	Sent time.Time     // when the renewal request was sent (monotonic)
	TTL  time.Duration // the lease the server confirmed, from Sent
	Err  error         // non-nil if the renewal failed
}

// Inspector is implemented by backends that can describe a key without
// changing it, for tools such as `fencedlock inspect`.
type Inspector interface {
	// Inspect reports the state of key. It must not return the owner token.
	Inspect(ctx context.Context, key string) (Info, error)
}

// Info is the state of a key as an [Inspector] sees it.
type Info struct {
	Held   bool          // whether some owner holds the key now
	TTL    time.Duration // the holder's remaining lease, if Held
	Fence  fencing.Token // the holder's fence if Held; once free, the last fence granted where the backend keeps it (Redis, memory), else 0 (etcd)
	Holder string        // the holder id of the current owner, if Held (see [HolderID])
}

// HolderID derives the non-secret holder id of an owner token: the first 16
// hex digits of its SHA-256. Fencing guards use it to tell holders apart
// when tokens are equal; it cannot be turned back into the owner token.
func HolderID(owner string) string {
	sum := sha256.Sum256([]byte(owner))
	return hex.EncodeToString(sum[:8])
}
