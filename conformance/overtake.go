package conformance

// NoOvertake (WaitAcquirer backends): a plain Acquire does not take a key
// whose holder's lease expired while a waiter queued by AcquireWait still
// waits for it.

import (
	"context"
	"errors"
	"sync"
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
//
// A round in which the waiter was not seen queued (driver.NoteQueued)
// before the lease ended, while the suite was scheduled late, judges
// nothing (a PostgreSQL run at load average 15, lateness 166ms: the plain
// Acquire took the key 466ms after a 250ms lease began, the waiter
// perhaps not queued yet): it is run again, at most overtakeRounds times.
func testNoOvertake(t *testing.T, e *env) {
	if !implements[driver.WaitAcquirer](t, e) {
		return
	}
	for round := 1; !e.noOvertakeRound(t); round++ {
		if round == overtakeRounds {
			t.Fatalf("%d rounds in which the waiter was not seen queued before the lease ended while the suite was late: the machine is too loaded to judge", round)
		}
	}
}

// overtakeRounds bounds the rounds of testNoOvertake.
const overtakeRounds = 3

// queuedAt is a driver.QueueObserver that records when the waiter was
// first found queued.
type queuedAt struct {
	once sync.Once
	at   chan time.Time // holds the time once queued
}

func (q *queuedAt) Queued(context.Context) {
	q.once.Do(func() { q.at <- time.Now() })
}

// when returns when the waiter was found queued, or the zero time.
func (q *queuedAt) when() time.Time {
	select {
	case at := <-q.at:
		q.at <- at
		return at
	default:
		return time.Time{}
	}
}

// noOvertakeRound is one round of testNoOvertake; false: inconclusive.
func (e *env) noOvertakeRound(t *testing.T) bool {
	key := e.key("overtake")
	hb, wb, xb := e.backend(t), e.backend(t), e.backend(t)
	e.lag.StartWindow()
	start := time.Now()
	if _, err := hb.Acquire(e.ctx, driver.AcquireRequest{Key: key, Owner: owner(), TTL: e.ttl}); err != nil {
		t.Fatalf("holder's Acquire: %v", err)
	}
	obs := &queuedAt{at: make(chan time.Time, 1)}
	ctx, cancel := context.WithCancel(driver.WithQueueObserver(e.ctx, obs))
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
			return true
		default:
		}
		g, err := xb.Acquire(e.ctx, driver.AcquireRequest{Key: key, Owner: owner(), TTL: e.hold})
		tries++
		if err == nil {
			_ = xb.Release(e.ctx, g)
			at := obs.when()
			if late := e.lag.Window(); (at.IsZero() || !at.Before(start.Add(e.ttl))) && late >= e.ttl/10 {
				t.Logf("a plain Acquire was granted the key %v after its holder's lease of %v began, the waiter not seen queued before the lease ended (queued at %v) while the suite was %v late: not judged, trying again",
					time.Since(start).Round(time.Millisecond), e.ttl, at, late.Round(time.Millisecond))
				return false
			}
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
