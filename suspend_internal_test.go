package fencedlock

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/fencedlock/fencedlock/backend/memory"
	"github.com/fencedlock/fencedlock/driver"
)

// jumpClock is a kernel's pair of clocks for tests: mono is Go's
// monotonic clock (synctest's fake one in a bubble), boot the same plus
// the time "suspended" so far. A suspend moves boot and not mono, as
// CLOCK_BOOTTIME and CLOCK_MONOTONIC after a system suspend on Linux.
type jumpClock struct {
	base      time.Time
	suspended atomic.Int64
	wallStep  atomic.Int64 // the wall clock's steps, on top of the suspends
}

func (j *jumpClock) mono() int64             { return int64(time.Since(j.base)) }
func (j *jumpClock) read() int64             { return int64(time.Since(j.base)) + j.suspended.Load() }
func (j *jumpClock) suspend(d time.Duration) { j.suspended.Add(int64(d)) }

// wall is the wall clock of a time.Now reading m: it moves on with a
// suspend (the kernel adds the suspended time to it), and with a step.
func (j *jumpClock) wall(m time.Time) int64 {
	return m.UnixNano() + j.suspended.Load() + j.wallStep.Load()
}

// countingBackend is a memory backend that counts renewals, and may run
// hook inside Acquire after the store applied it (before the reply).
type countingBackend struct {
	*memory.Backend
	renews atomic.Int64
	hook   func()
}

func (b *countingBackend) Acquire(ctx context.Context, req driver.AcquireRequest) (driver.Grant, error) {
	g, err := b.Backend.Acquire(ctx, req)
	if b.hook != nil {
		b.hook()
	}
	return g, err
}

func (b *countingBackend) Renew(ctx context.Context, g driver.Grant, ttl time.Duration) (time.Duration, error) {
	b.renews.Add(1)
	return b.Backend.Renew(ctx, g, ttl)
}

// suspendLocker returns a Locker (TTL 10s: renewals every 3.33s, local
// deadline 8.999s after the send) on b whose boot clock is a jumpClock.
func suspendLocker(t *testing.T, b driver.Backend) (*Locker, *jumpClock) {
	t.Helper()
	l, err := New(b, Options{TTL: 10 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	j := &jumpClock{base: time.Now()}
	l.clk = newClock(j.read, j.mono, j.wall)
	return l, j
}

// heldThenSuspended acquires "k" on a suspendLocker of a countingBackend,
// holds it for 1s and suspends the machine for d. It returns the backend,
// the clocks, the lease and the time of the acquire.
func heldThenSuspended(t *testing.T, d time.Duration) (*countingBackend, *jumpClock, *Lease, time.Time) {
	t.Helper()
	b := &countingBackend{Backend: memory.New()}
	l, j := suspendLocker(t, b)
	start := time.Now()
	ls, err := l.TryAcquire(t.Context(), "k")
	if err != nil {
		t.Fatal(err)
	}
	time.Sleep(time.Second)
	j.suspend(d)
	return b, j, ls, start
}

// endedAtFirstTick fails unless the watchdog ended the lease acquired at
// start at its first tick (3.33s later, Done closed by now) without a
// renewal.
func endedAtFirstTick(t *testing.T, b *countingBackend, start time.Time) {
	t.Helper()
	if d := time.Since(start); d > 10*time.Second/3+time.Millisecond {
		t.Fatalf("Done closed %v after the acquire, want at the first tick (3.33s)", d)
	}
	if n := b.renews.Load(); n != 0 {
		t.Fatalf("%d renewals of a lease whose deadline passed during a suspend", n)
	}
}

// TestSuspendEndsLease (issue 28 item 6): after a system suspend longer
// than the lease's remaining time (the boot clock jumps, the monotonic
// clock does not), Err reports the lease lost at once, and the watchdog
// ends it (Done) at its next tick without renewing it; a shorter suspend
// only brings the deadline closer, and the lease lives on through its
// renewals.
func TestSuspendEndsLease(t *testing.T) {
	t.Run("Err", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			_, _, ls, _ := heldThenSuspended(t, 20*time.Second)
			if err := ls.Err(); !errors.Is(err, ErrLeaseLost) || !errors.Is(err, errDeadline) {
				t.Fatalf("Err after a 20s suspend (7.999s were left): %v, want the loss at the deadline", err)
			}
			select {
			case <-ls.Done():
			default:
				t.Fatal("Done not closed after Err reported the loss")
			}
		})
	})
	t.Run("Done", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			b, _, ls, start := heldThenSuspended(t, 20*time.Second)
			select {
			case <-ls.Done():
			case <-time.After(10 * time.Second):
				t.Fatalf("Done not closed 10s after a 20s suspend (Err %v, %d renewals)", ls.Err(), b.renews.Load())
			}
			endedAtFirstTick(t, b, start)
			if !errors.Is(context.Cause(ls.Context()), errDeadline) {
				t.Fatalf("cause %v, want the loss at the deadline", context.Cause(ls.Context()))
			}
		})
	})
	t.Run("wall clock stepped back", func(t *testing.T) {
		// A wall-clock step back as long as the suspend hides it from
		// Err's cheap reading; the watchdog's tick reads the kernel's
		// clocks and ends the lease, without renewing it.
		synctest.Test(t, func(t *testing.T) {
			b, j, ls, start := heldThenSuspended(t, 20*time.Second)
			j.wallStep.Add(-int64(20 * time.Second))
			<-ls.Done()
			endedAtFirstTick(t, b, start)
		})
	})
	t.Run("short suspend", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			b, _, ls, start := heldThenSuspended(t, 2*time.Second)
			if err := ls.Err(); err != nil {
				t.Fatalf("Err after a 2s suspend (7.999s were left): %v", err)
			}
			// The deadline lies 2s closer, on the monotonic clock.
			if d := ls.Deadline().Sub(start); d != 6999*time.Millisecond {
				t.Fatalf("Deadline %v after the acquire, want 6.999s (8.999s less the 2s suspend)", d)
			}
			time.Sleep(time.Minute)
			if err := ls.Err(); err != nil {
				t.Fatalf("Err a minute after a 2s suspend: %v (%d renewals)", err, b.renews.Load())
			}
			if d := time.Until(ls.Deadline()); d < 5*time.Second {
				t.Fatalf("%v left after a minute of renewals, want more than 5s", d)
			}
		})
	})
	t.Run("KeepAliver", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			k := &manualKeeper{Backend: memory.New(), ch: make(chan driver.Renewal)}
			l, j := suspendLocker(t, k)
			ls, err := l.TryAcquire(t.Context(), "k")
			if err != nil {
				t.Fatal(err)
			}
			// Renewals every 3s; a 2s suspend between two of them
			// leaves the lease held.
			for i := range 10 {
				time.Sleep(3 * time.Second)
				if i == 3 {
					j.suspend(2 * time.Second)
				}
				k.ch <- driver.Renewal{Sent: time.Now(), TTL: 10 * time.Second}
				synctest.Wait()
				if err := ls.Err(); err != nil {
					t.Fatalf("after renewal %d (a 2s suspend before the 4th): %v", i, err)
				}
			}
			// Then a suspend longer than what is left.
			time.Sleep(time.Second)
			j.suspend(20 * time.Second)
			if err := ls.Err(); !errors.Is(err, errDeadline) {
				t.Fatalf("Err after a 20s suspend: %v, want the loss at the deadline", err)
			}
		})
	})
	t.Run("grant", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			b := &countingBackend{Backend: memory.New()}
			l, j := suspendLocker(t, b)
			// Suspended for 9s while the reply was on its way.
			b.hook = func() { j.suspend(9 * time.Second) }
			ls, err := l.TryAcquire(t.Context(), "k")
			if !errors.Is(err, ErrLateGrant) {
				t.Fatalf("TryAcquire across a 9s suspend (TTL 10s): lease %v, err %v; want ErrLateGrant", ls, err)
			}
		})
	})
	t.Run("grant, wall clock stepped back", func(t *testing.T) {
		// The hand-out reads the cheap stamp, as Err does: a wall-clock
		// step back as long as the suspend hides it, and the grant is
		// handed out; the watchdog's first tick reads the kernel's clocks
		// and ends the lease without renewing it (the blind spot the
		// package documentation states).
		synctest.Test(t, func(t *testing.T) {
			b := &countingBackend{Backend: memory.New()}
			l, j := suspendLocker(t, b)
			b.hook = func() {
				j.suspend(9 * time.Second)
				j.wallStep.Add(-int64(9 * time.Second))
			}
			start := time.Now()
			ls, err := l.TryAcquire(t.Context(), "k")
			if err != nil {
				t.Fatalf("TryAcquire across a 9s suspend hidden by a wall-clock step: %v; want the lease (the cheap reading cannot see it)", err)
			}
			<-ls.Done()
			endedAtFirstTick(t, b, start)
			if !errors.Is(context.Cause(ls.Context()), errDeadline) {
				t.Fatalf("cause %v, want the loss at the deadline", context.Cause(ls.Context()))
			}
		})
	})
}

// manualKeeper is a KeepAliver whose renewals the test sends.
type manualKeeper struct {
	*memory.Backend
	ch chan driver.Renewal
}

func (k *manualKeeper) KeepAlive(ctx context.Context, g driver.Grant) <-chan driver.Renewal {
	out := make(chan driver.Renewal)
	go func() {
		defer close(out)
		for {
			select {
			case r := <-k.ch:
				select {
				case out <- r:
				case <-ctx.Done():
					return
				}
			case <-ctx.Done():
				return
			}
		}
	}()
	return out
}

// BenchmarkClock is the cost of a stamp: the cheap one (Lease.Err's:
// time.Now; Lease.Err's and a grant's hand-out) and the exact one (the
// watchdog's tick, once per renewal: CLOCK_BOOTTIME, and CLOCK_MONOTONIC
// too when a suspend shows, system calls on Linux).
func BenchmarkClock(b *testing.B) {
	c := newClock(bootClock, monoClock, unixNano)
	b.Run("now", func(b *testing.B) {
		for b.Loop() {
			c.now()
		}
	})
	b.Run("exact", func(b *testing.B) {
		for b.Loop() {
			c.exact()
		}
	})
}
