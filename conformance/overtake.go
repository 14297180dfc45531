package conformance

// NoOvertake (WaitAcquirer backends): a plain Acquire does not take a key
// whose holder's lease expired while a waiter queued by AcquireWait still
// waits for it.

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/fencedlock/fencedlock"
	"github.com/fencedlock/fencedlock/driver"
)

// waitOutcome is the outcome of an AcquireWait run in a goroutine.
type waitOutcome struct {
	g   driver.Grant
	err error
}

// testNoOvertake holds a key with a short lease it does not renew, queues
// a waiter with AcquireWait behind it, and from just before the lease
// ends tries a plain Acquire of the key every 2 ms until the waiter is
// granted: every such Acquire must be refused (ErrNotAcquired). The
// waiter was first; a backend whose key becomes free for anyone when a
// lease expires (not only when it is released) must keep it for its
// queued waiters, or its FIFO order holds only for released keys.
func testNoOvertake(t *testing.T, e *env) {
	if !implements[driver.WaitAcquirer](t, e) {
		return
	}
	key := e.key("overtake")
	hb, wb, xb := e.backend(t), e.backend(t), e.backend(t)
	start := time.Now()
	if _, err := hb.Acquire(e.ctx, driver.AcquireRequest{Key: key, Owner: owner(), TTL: e.ttl}); err != nil {
		t.Fatalf("holder's Acquire: %v", err)
	}
	ctx, cancel := context.WithCancel(e.ctx)
	done := make(chan waitOutcome, 1)
	go func() {
		g, err := wb.(driver.WaitAcquirer).AcquireWait(ctx, driver.AcquireRequest{Key: key, Owner: owner(), TTL: e.hold})
		done <- waitOutcome{g, err}
	}()
	defer func() {
		cancel()
		if r := <-done; r.err == nil {
			_ = wb.Release(e.ctx, r.g)
		}
	}()
	time.Sleep(max(e.cfg.QueueDelay, time.Until(start.Add(e.ttl*9/10))))
	deadline := start.Add(3*e.ttl + e.cfg.ExpirySlack + 5*time.Second)
	tries := 0
	for {
		select {
		case r := <-done:
			done <- r // for the deferred clean-up
			if r.err != nil {
				t.Fatalf("the queued waiter's AcquireWait: %v", r.err)
			}
			t.Logf("after the holder's lease expired, %d plain Acquires were refused until the queued waiter was granted (fence %d)", tries, r.g.Fence)
			return
		default:
		}
		g, err := xb.Acquire(e.ctx, driver.AcquireRequest{Key: key, Owner: owner(), TTL: e.hold})
		tries++
		if err == nil {
			_ = xb.Release(e.ctx, g)
			t.Fatalf("a plain Acquire was granted the key (fence %d) %v after its holder's unrenewed lease of %v began, while a waiter queued by AcquireWait before the lease ended still waited: it overtook the queue", g.Fence, time.Since(start).Round(time.Millisecond), e.ttl)
		}
		if !errors.Is(err, fencedlock.ErrNotAcquired) {
			t.Fatalf("plain Acquire while a waiter is queued: %v, want ErrNotAcquired", err)
		}
		if time.Now().After(deadline) {
			t.Fatalf("the queued waiter was not granted the key %v after its holder's unrenewed lease of %v began", time.Since(start).Round(time.Millisecond), e.ttl)
		}
		time.Sleep(2 * time.Millisecond)
	}
}
