package semaphore

import (
	"context"
	"errors"
	mrand "math/rand/v2"
	"time"

	"github.com/fencedlock/fencedlock"
	"github.com/fencedlock/fencedlock/driver"
	"github.com/fencedlock/fencedlock/internal/wakeset"
)

// waiter is the wait of one Acquire between its sweeps: the release
// watches of its slots, or without them the poll's backoff.
type waiter struct {
	wake      <-chan struct{} // a wake-up from any watched slot; nil: polling
	stopWatch func()          // ends the watches; nil: none
	backoff   time.Duration   // next poll's delay; unused while watching
	max       time.Duration
}

func (s *Semaphore) newWaiter() *waiter {
	return &waiter{backoff: s.opts.MinRetryDelay, max: s.opts.MaxRetryDelay}
}

// watch starts watching every slot of name for releases, if n is a
// Notifier, and reports whether a watch is in effect (the caller then
// sweeps again at once: a release before the watches began is not missed).
// A slot whose watch fails is covered by the timed retry of wait. The
// watches end when closed is closed, as does their setup (one watch per
// slot, each a round trip on a remote server): Close ends a waiting
// Acquire at once.
func (w *waiter) watch(ctx context.Context, closed <-chan struct{}, n driver.Notifier, name string, limit int) bool {
	if n == nil {
		return false
	}
	keys := make([]string, limit)
	for slot := range keys {
		keys[slot] = SlotKey(name, slot)
	}
	wctx, cancel := context.WithCancel(ctx)
	go func() {
		select {
		case <-closed:
			cancel()
		case <-wctx.Done():
		}
	}()
	wake, stop, err := wakeset.Watch(wctx, n, keys)
	if err != nil {
		cancel()
		return false
	}
	w.wake, w.stopWatch = wake, func() { stop(); cancel() }
	return true
}

// stop ends the watches.
func (w *waiter) stop() {
	if w.stopWatch != nil {
		w.stopWatch()
	}
}

// wait sleeps until a watched slot may have been released, the holders'
// shortest remaining TTL (hint, if any) ran out (1ms after it: Redis
// reports whole milliseconds, rounded down, and an expiry is not
// announced), or the delay: with watches, MaxRetryDelay at the latest (a
// notification may be lost), unless a slot may come free unannounced at
// an unknown time (unknown, see sweep); without watches, or then, the
// exponential backoff with equal jitter, as a Locker's waiter. It returns an error
// wrapping ErrNotAcquired and ctx's error if ctx ends first, or wrapping
// ErrClosed if closed is closed first.
func (w *waiter) wait(ctx context.Context, closed <-chan struct{}, hint time.Duration, unknown bool) error {
	d := w.max
	if w.wake == nil || unknown {
		d = w.backoff/2 + mrand.N(w.backoff/2+1)
		w.backoff = min(2*w.backoff, w.max)
	}
	if hint > 0 {
		d = min(d, hint+time.Millisecond)
	}
	timer := time.NewTimer(d)
	defer timer.Stop()
	select {
	case <-ctx.Done():
		return errors.Join(fencedlock.ErrNotAcquired, ctx.Err())
	case <-closed:
		return fencedlock.ErrClosed
	case <-w.wake:
	case <-timer.C:
	}
	return nil
}
