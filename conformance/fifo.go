package conformance

// The order checks of WaitAcquirer (testWaitAcquirer in optional.go):
// waiters granted in the order they queued, and a waiter that leaves the
// queue taking only its own place.

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/fencedlock/fencedlock"
	"github.com/fencedlock/fencedlock/driver"
)

// waitFIFO checks that waiters are granted in the order they queued. The
// suite cannot see when a waiter is queued, so it starts them QueueDelay
// apart; if the order is wrong it tries once more with 4x the delay, and
// fails only if the order is wrong again (an unfair queue is unfair both
// times; a slow registration is unlikely to be that slow twice).
func (e *env) waitFIFO(t *testing.T, holder *fencedlock.Locker, req func() driver.AcquireRequest) {
	t.Helper()
	e.inOrder(t, "", "", func(delay time.Duration) []int { return e.fifoRound(t, holder, req, delay) })
}

// inOrder runs round with waiters started QueueDelay apart and requires
// the order it returns to be sorted; if it is not, it runs round once
// more with 4x the delay and fails if the order is wrong again. A wrong
// order in a round during which the suite was late by half the delay or
// more (the lag monitor) decides nothing: a waiter started late may have
// queued after the next one. Such a round is run again, at most
// maxLateRounds times, with a delay of at least 4x that lateness. after
// names what happened before the waiters were granted, for the log;
// want what a wrong order means, for the failure.
func (e *env) inOrder(t *testing.T, after, want string, round func(delay time.Duration) []int) {
	t.Helper()
	const maxLateRounds = 3
	delay := e.cfg.QueueDelay
	lateRounds := 0
	for attempt := 1; ; attempt++ {
		e.lag.StartWindow()
		order := round(delay)
		if slices.IsSorted(order) {
			t.Logf("%s%d waiters granted in FIFO order %v (started %v apart)", after, len(order), order, delay)
			return
		}
		if late := e.lag.Window(); late >= delay/2 && lateRounds < maxLateRounds {
			lateRounds++
			attempt--
			t.Logf("%swaiters granted in order %v with starts %v apart, while the suite was %v late: trying again with %v", after, order, delay, late.Round(time.Millisecond), max(delay, 4*late))
			delay = max(delay, 4*late)
			continue
		}
		if attempt == 2 {
			t.Fatalf("%swaiters granted in order %v, want FIFO%s (waiters started %v apart, after a first round with %v)", after, order, want, delay, e.cfg.QueueDelay)
		}
		t.Logf("%swaiters granted in order %v with starts %v apart; trying again with %v", after, order, delay, 4*delay)
		delay *= 4
	}
}

// fifoRound holds the key with holder, starts 4 waiters (each on its own
// backend) delay apart, releases the key and returns the order in which
// the waiters were granted it.
func (e *env) fifoRound(t *testing.T, holder *fencedlock.Locker, req func() driver.AcquireRequest, delay time.Duration) []int {
	t.Helper()
	return e.orderRound(t, holder, req().Key, func(ctx context.Context, o *grantOrder) {
		for i := range 4 {
			o.start(ctx, e.backend(t), req(), i)
			time.Sleep(delay)
		}
	})
}

// orderRound holds key with holder, runs queue, which starts waiters
// recorded in o under ctx (ended, and the waiters waited for, when the
// round ends), releases the key and returns the order in which the
// waiters were granted it.
func (e *env) orderRound(t *testing.T, holder *fencedlock.Locker, key string, queue func(ctx context.Context, o *grantOrder)) []int {
	t.Helper()
	h := e.mustTryAcquire(t, holder, key)
	var o grantOrder
	defer o.wg.Wait() // after cancel below: the waiters end before the test
	ctx, cancel := context.WithCancel(e.ctx)
	defer cancel()
	queue(ctx, &o)
	if err := h.Release(e.ctx); err != nil {
		t.Fatalf("Release: %v", err)
	}
	return o.result(t)
}

// grantOrder records the order in which waiters are granted a key.
type grantOrder struct {
	mu    sync.Mutex
	order []int
	errs  []error
	wg    sync.WaitGroup
}

// start starts waiter i: AcquireWait of req on b (a WaitAcquirer), then,
// holding the key, records i and releases it.
func (o *grantOrder) start(ctx context.Context, b driver.Backend, req driver.AcquireRequest, i int) {
	w := b.(driver.WaitAcquirer)
	o.wg.Go(func() {
		g, err := w.AcquireWait(ctx, req)
		if err == nil {
			// Recorded while holding the key, before the release
			// hands it on: recorded after it, a waiter raced the
			// next one (granted FIFO, reported [1 0 3 2] under load).
			o.mu.Lock()
			o.order = append(o.order, i)
			o.mu.Unlock()
			err = b.Release(ctx, g)
		}
		if err != nil {
			o.mu.Lock()
			o.errs = append(o.errs, fmt.Errorf("waiter %d: %w", i, err))
			o.mu.Unlock()
		}
	})
}

// result waits for the waiters and returns the order they were granted
// the key in; it fails t if any of them failed.
func (o *grantOrder) result(t *testing.T) []int {
	t.Helper()
	o.wg.Wait()
	if err := errors.Join(o.errs...); err != nil {
		t.Fatal(err)
	}
	return o.order
}

// waitLeaveFIFO checks that a waiter that leaves the queue (its context
// ended) takes only its own place with it: the waiters queued behind it
// are granted in their order, and a waiter that queued after it left
// comes after them (found by mutation testing of backend/redis: a
// clean-up that removed every waiter's entry let the late waiter go
// first). As waitFIFO, a wrong order is tried once more with 4x the delay.
func (e *env) waitLeaveFIFO(t *testing.T, holder *fencedlock.Locker, req func() driver.AcquireRequest) {
	t.Helper()
	e.inOrder(t, "after the first of 4 queued waiters left (its context ended), ",
		" [1 2 3 4]: the 3 others, then a 4th that queued after it left; the waiter that left took others' places",
		func(delay time.Duration) []int { return e.leaveRound(t, holder, req, delay) })
}

// leaveRound holds the key with holder, starts 4 waiters (each on its own
// backend) delay apart, ends the first one's context and waits for it to
// return, starts a 5th waiter, releases the key and returns the order in
// which waiters 1 to 4 were granted it.
func (e *env) leaveRound(t *testing.T, holder *fencedlock.Locker, req func() driver.AcquireRequest, delay time.Duration) []int {
	t.Helper()
	return e.orderRound(t, holder, req().Key, func(ctx context.Context, o *grantOrder) {
		leaveCtx, leave := context.WithCancel(ctx)
		defer leave()
		left := make(chan waited, 1)
		start := func(i int) {
			b := e.backend(t)
			if i == 0 {
				go func() {
					g, err := b.(driver.WaitAcquirer).AcquireWait(leaveCtx, req())
					left <- waited{g, err, time.Now()}
				}()
				return
			}
			o.start(ctx, b, req(), i)
		}
		for i := range 4 {
			start(i)
			time.Sleep(delay)
		}
		leave()
		select {
		case r := <-left:
			if r.err == nil {
				t.Fatalf("the first waiter was granted the key (fence %v) while its holder held it", r.g.Fence)
			}
			if !errors.Is(r.err, context.Canceled) {
				t.Fatalf("the first waiter, whose context was cancelled: %v, want an error wrapping context.Canceled", r.err)
			}
		case <-time.After(e.ttl + e.schedAllowance()):
			t.Fatalf("the first waiter still waiting %v after its context was cancelled", e.ttl+e.schedAllowance())
		}
		start(4)
		time.Sleep(delay)
	})
}
