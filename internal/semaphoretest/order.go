package semaphoretest

import (
	"context"
	"testing"
	"time"

	"github.com/fencedlock/fencedlock"
	"github.com/fencedlock/fencedlock/locktrace"
	"github.com/fencedlock/fencedlock/semaphore"
)

// WaitersInOrder: where the backend's lock serves its waiters in order
// (Setup.FIFO), the waiters of a semaphore get its permits in the order
// they began to wait. Behind a holder of the one permit, n waiters start
// one after the other, each once the one before has its place in the
// queue (its turn, [semaphore.QueueKey], granted or queued on the server,
// seen through the Locker's trace, so that the order tested is the
// server's and not the scheduler's); then the holder releases, and each
// waiter holds its permit 20ms and releases it.
func WaitersInOrder(t *testing.T, s Setup, n int) {
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	nm := name("fifo")
	p, err := s.New(t, fencedlock.Options{}).Acquire(ctx, nm, 1)
	if err != nil {
		t.Fatal(err)
	}
	order := make(chan int, n)
	failed := make(chan error, n)   // a waiter's Acquire failed
	released := make(chan error, n) // a waiter's Release returned
	for i := range n {
		queued := make(chan struct{}, 1)
		mark := func(key string) {
			if key != semaphore.QueueKey(nm) {
				return
			}
			select {
			case queued <- struct{}{}:
			default:
			}
		}
		trace := &locktrace.Trace{
			AcquireWait: func(_ context.Context, e locktrace.AcquireWaitEvent) {
				if e.Kind == locktrace.WaitQueued {
					mark(e.Key)
				}
			},
			AcquireEnd: func(_ context.Context, e locktrace.AcquireEndEvent) {
				if e.Outcome == locktrace.Acquired {
					mark(e.Key)
				}
			},
		}
		waiter := s.New(t, fencedlock.Options{Trace: trace})
		go func() {
			q, err := waiter.Acquire(ctx, nm, 1)
			if err != nil {
				failed <- err
				return
			}
			order <- i
			time.Sleep(20 * time.Millisecond)
			released <- q.Release(ctx)
		}()
		select {
		case <-queued:
		case err := <-failed:
			t.Fatalf("waiter %d: %v", i, err)
		case <-time.After(20 * time.Second):
			t.Fatalf("waiter %d had no place in the queue after 20s", i)
		}
	}
	if err := p.Release(ctx); err != nil {
		t.Fatal(err)
	}
	for want := range n {
		select {
		case got := <-order:
			if got != want {
				t.Fatalf("permit %d went to waiter %d: waiters served out of order", want, got)
			}
		case err := <-failed:
			t.Fatalf("a waiter failed before permit %d: %v", want, err)
		case <-ctx.Done():
			t.Fatalf("permit %d: %v", want, ctx.Err())
		}
	}
	for range n {
		if err := <-released; err != nil {
			t.Fatal(err)
		}
	}
}
