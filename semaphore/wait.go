package semaphore

import (
	"context"
	"errors"
	mrand "math/rand/v2"
	"sync"
	"time"

	"github.com/fencedlock/fencedlock"
	"github.com/fencedlock/fencedlock/driver"
)

// waiter is the wait of one Acquire between its sweeps: the release
// watches of its slots, or without them the poll's backoff.
type waiter struct {
	wake    chan struct{} // a pending wake-up from any watched slot; nil: polling
	stops   []func()
	wg      sync.WaitGroup
	cancel  context.CancelFunc
	backoff time.Duration // next poll's delay; unused while watching
	max     time.Duration
}

func (s *Semaphore) newWaiter() *waiter {
	return &waiter{backoff: s.opts.MinRetryDelay, max: s.opts.MaxRetryDelay}
}

// watch starts watching every slot of name for releases, if n is a
// Notifier, and reports whether a watch is in effect (the caller then
// sweeps again at once: a release before the watches began is not missed).
// A slot whose watch fails is covered by the timed retry of wait.
func (w *waiter) watch(ctx context.Context, n driver.Notifier, name string, limit int) bool {
	if n == nil {
		return false
	}
	wake := make(chan struct{}, 1)
	wctx, cancel := context.WithCancel(ctx)
	w.cancel = cancel
	for slot := range limit {
		ch, stop, err := n.Watch(wctx, SlotKey(name, slot))
		if err != nil {
			continue
		}
		w.stops = append(w.stops, stop)
		w.wg.Go(func() { forward(wctx, ch, wake) })
	}
	if len(w.stops) > 0 {
		w.wake = wake
	}
	return w.wake != nil
}

// forward passes the wake-ups of one slot's watch on to wake.
func forward(ctx context.Context, ch <-chan struct{}, wake chan<- struct{}) {
	for {
		select {
		case <-ctx.Done():
			return
		case _, ok := <-ch:
			if !ok {
				return
			}
			select {
			case wake <- struct{}{}:
			default:
			}
		}
	}
}

// stop ends the watches.
func (w *waiter) stop() {
	if w.cancel == nil {
		return
	}
	w.cancel()
	w.wg.Wait()
	for _, stop := range w.stops {
		stop()
	}
}

// wait sleeps until a watched slot may have been released, the holders'
// shortest remaining TTL (hint, if any) ran out, or the delay: with
// watches, MaxRetryDelay at the latest (a notification may be lost);
// without, the exponential backoff with equal jitter. It returns an error
// wrapping ErrNotAcquired and ctx's error if ctx ends first, or wrapping
// ErrClosed if closed is closed first.
func (w *waiter) wait(ctx context.Context, closed <-chan struct{}, hint time.Duration) error {
	d := w.max
	if w.wake == nil {
		d = w.backoff/2 + mrand.N(w.backoff/2+1)
		w.backoff = min(2*w.backoff, w.max)
	}
	if hint > 0 && hint < d {
		d = hint
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
