package goredis

import (
	"context"

	"github.com/fencedlock/fencedlock/driver"
	"github.com/redis/go-redis/v9"
)

// FairBackend is [Backend], whose waiters queue on the server.
//
// Deprecated: [New] returns a Backend that queues its waiters (the
// one-waiter hand-off is the only mode); use Backend.
type FairBackend = Backend

// NewFair is [New].
//
// Deprecated: New returns a Backend that queues its waiters; use New.
func NewFair(client redis.UniversalClient, opts Options) (*Backend, error) {
	return New(client, opts)
}

// AcquireWait blocks until req.Key is granted to req.Owner, in FIFO order
// of arrival, or until ctx is done: see backend/redis's
// Backend.AcquireWait (the queue entry and its refresh, the hand-off
// woken by a message naming the waiter, the clean-up when ctx ends first).
func (b *Backend) AcquireWait(ctx context.Context, req driver.AcquireRequest) (driver.Grant, error) {
	return b.core.AcquireWait(ctx, req, b.core.TryFirst(req.Key))
}

// TryFirst implements [driver.TryFirstWaiter]: false while the key's
// channel is still subscribed from a recent wait of this backend (a first
// Acquire would find the lock handed over, never free).
func (b *Backend) TryFirst(key string) bool { return b.core.TryFirst(key) }

// AcquireWaitHeld implements [driver.TryFirstWaiter]: AcquireWait without
// its first Acquire, which the Locker made.
func (b *Backend) AcquireWaitHeld(ctx context.Context, req driver.AcquireRequest) (driver.Grant, error) {
	return b.core.AcquireWait(ctx, req, false)
}

// Backend queues its waiters (AcquireWait) and tells the Locker when a
// first Acquire is worth making (TryFirst, AcquireWaitHeld).
var _ interface {
	driver.WaitAcquirer
	driver.TryFirstWaiter
} = (*Backend)(nil)
