package fencedlock

import (
	"context"
	"sync"
	"sync/atomic"
	"time"
)

// Release's bounded context without a timer of its own: a
// context.WithTimeout per Release cost 4 allocations (the context, its
// timer, the timer's function, the cancel function) on every
// acquire+release. Releases that start within a slot (ReleaseTimeout/32)
// of each other share one deadline, a context.WithDeadline made by the
// first of them, so that each Release is bounded by at least 31/32 of
// ReleaseTimeout and never by more. The shared context is never cancelled
// early: it ends at its deadline (its timer then frees it).

// releaseSlots is how many slots ReleaseTimeout is cut into.
const releaseSlots = 32

// releaseClock hands out the shared deadline contexts of one Locker.
type releaseClock struct {
	timeout time.Duration // Options.ReleaseTimeout
	cur     atomic.Pointer[releaseDeadline]
	mu      sync.Mutex // serialises making a new one
}

// releaseDeadline is one shared deadline context.
type releaseDeadline struct {
	ctx    context.Context
	at     time.Time          // ctx's deadline
	cancel context.CancelFunc // not called: ctx ends at its deadline, shared by Releases still running
}

// bound returns a context that ends between timeout*(1-1/releaseSlots)
// and timeout after now, without values.
func (c *releaseClock) bound(now time.Time) context.Context {
	latest := now.Add(c.timeout)
	earliest := latest.Add(-c.timeout / releaseSlots)
	if d := c.cur.Load(); d != nil && !d.at.After(latest) && d.at.After(earliest) {
		return d.ctx
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if d := c.cur.Load(); d != nil && !d.at.After(latest) && d.at.After(earliest) {
		return d.ctx
	}
	d := &releaseDeadline{at: latest}
	d.ctx, d.cancel = context.WithDeadline(context.Background(), latest)
	if cur := c.cur.Load(); cur == nil || cur.at.Before(latest) {
		c.cur.Store(d) // (a caller whose clock read came late does not move it back)
	}
	return d.ctx
}

// releaseCtx is the context of one Release: the caller's values (parent,
// detached from its cancellation) and a deadline shared with other
// Releases (bound, from releaseClock). It lives in the Lease: Release
// allocates nothing for it. It implements the AfterFunc method the
// context package looks for, so that a context derived from it (a client
// deriving one per request) costs no goroutine.
type releaseCtx struct {
	parent context.Context
	bound  context.Context
}

func (c *releaseCtx) Deadline() (time.Time, bool) { return c.bound.Deadline() }
func (c *releaseCtx) Done() <-chan struct{}       { return c.bound.Done() }
func (c *releaseCtx) Err() error                  { return c.bound.Err() }
func (c *releaseCtx) Value(key any) any           { return c.parent.Value(key) }

// AfterFunc arranges to call f once the context is done (see
// context.AfterFunc).
func (c *releaseCtx) AfterFunc(f func()) (stop func() bool) { return context.AfterFunc(c.bound, f) }

// String names the context (fmt, panics), as the context package's own do.
func (c *releaseCtx) String() string { return "fencedlock.releaseCtx" }
