package redis

import (
	"context"

	"github.com/fencedlock/fencedlock/driver"
	"github.com/redis/rueidis"
)

// FairBackend is [Backend], whose waiters queue on the server.
//
// Deprecated: [New] returns a Backend that queues its waiters (the
// one-waiter hand-off is the only mode); use Backend.
type FairBackend = Backend

var (
	_ driver.WaitAcquirer   = (*Backend)(nil)
	_ driver.TryFirstWaiter = (*Backend)(nil)
)

// NewFair is [New].
//
// Deprecated: New returns a Backend that queues its waiters; use New.
func NewFair(client rueidis.Client, opts Options) (*Backend, error) {
	return New(client, opts)
}

// AcquireWait blocks until req.Key is granted to req.Owner, in FIFO order of
// arrival, or until ctx is done.
//
// A waiter first makes one attempt ([Backend.Acquire]), unless the key's
// channel is still subscribed from a recent wait of this backend.
// Then it subscribes to the key's channel and runs
// internal/redisscript/wait.lua, which takes the lock if it is free and no
// live waiter is ahead, and otherwise appends an entry to the key's queue
// (lock key + ":queue", a list in the same hash slot) valid for req.TTL of
// server time, and at least 2 s. The waiter runs wait.lua again every
// req.TTL/3 to keep its entry alive (and when the holder's lease should
// have ended, or a message that is not its own hand-off arrives), so the
// entry of a waiter that crashed or was cut off expires within max(req.TTL,
// 2 s) and is skipped.
// release.lua hands the lock to the first live entry: the waiter's owner
// token with req.TTL from the hand-off, the next fence, and a message
// naming the waiter.
//
// The returned Grant's Sent is the send time of the last request that
// found the waiter still queued, before the hand-off; its lease on the
// server started later, so the Locker's local deadline ends first.
//
// When ctx ends first, or on a permanent error, AcquireWait removes the
// waiter from the queue and releases the lock if it was handed over
// meanwhile (release.lua's clean-up: it also records the owner, so that a
// wait.lua still on its way refuses to run), then returns an error
// wrapping [driver.ErrNotAcquired] and ctx.Err(). A transient error
// (connection lost, timeout) is retried after a backoff of 50 ms doubling
// up to 1 s, for as long as ctx allows: wait.lua is idempotent (a waiter
// already queued keeps its place).
func (b *Backend) AcquireWait(ctx context.Context, req driver.AcquireRequest) (driver.Grant, error) {
	return b.core.AcquireWait(ctx, req, b.TryFirst(req.Key))
}

// TryFirst implements [driver.TryFirstWaiter]: it reports whether an
// Acquire of key is worth making before waiting in the queue, which is
// what AcquireWait itself does first: yes unless the key's channel is
// still subscribed from a recent wait of this backend (waiters of key are
// likely queued: the attempt would find the lock handed over, never free).
// It allocates nothing.
func (b *Backend) TryFirst(key string) bool { return b.core.TryFirst(key) }

// AcquireWaitHeld implements [driver.TryFirstWaiter]: AcquireWait after
// an Acquire of req (made by the Locker on the caller's context) did not
// take the key. It goes straight to the queue (wait.lua, which also grants
// the lock if that Acquire was applied after all and its reply lost).
func (b *Backend) AcquireWaitHeld(ctx context.Context, req driver.AcquireRequest) (driver.Grant, error) {
	return b.core.AcquireWait(ctx, req, false)
}
