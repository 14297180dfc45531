package fencedlock_test

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/fencedlock/fencedlock"
	"github.com/fencedlock/fencedlock/backend/memory"
	"github.com/fencedlock/fencedlock/driver"
)

// lingering is a backend whose Renew blocks until its context ends and
// then takes linger more to return (a client tearing down the request), as
// the driver contract allows ("return promptly"). It records when each
// renewal saw its context end and when it returned.
type lingering struct {
	*memory.Backend
	linger    time.Duration
	inFlight  atomic.Int32
	mu        sync.Mutex
	cancelled time.Time
	returned  time.Time
}

func (b *lingering) Renew(ctx context.Context, g driver.Grant, ttl time.Duration) (time.Duration, error) {
	b.inFlight.Add(1)
	defer b.inFlight.Add(-1)
	<-ctx.Done()
	b.mu.Lock()
	b.cancelled = time.Now()
	b.mu.Unlock()
	time.Sleep(b.linger)
	b.mu.Lock()
	b.returned = time.Now()
	b.mu.Unlock()
	return 0, ctx.Err()
}

// TestReleaseWaitsForRenewal: Release (and Close) cancel the watchdog's
// renewal in flight and return only after it has returned, so that no
// renewal outlives the release: when Release returns, no backend call of
// the lease is running. The key is released on the server at once, not
// after the renewal.
func TestReleaseWaitsForRenewal(t *testing.T) {
	for _, via := range []string{"Release", "Close"} {
		t.Run(via, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				b := &lingering{Backend: memory.New(), linger: 100 * time.Millisecond}
				l, ls, start := acquire3s(t, b)
				time.Sleep(1500 * time.Millisecond) // the renewal sent at 1s blocks
				synctest.Wait()
				if n := b.inFlight.Load(); n != 1 {
					t.Fatalf("%d renewals in flight at 1.5s, want 1", n)
				}
				released := time.Now()
				var err error
				if via == "Release" {
					err = ls.Release(t.Context())
				} else {
					err = l.Close()
				}
				if err != nil {
					t.Fatal(err)
				}
				returned := time.Now()
				if n := b.inFlight.Load(); n != 0 {
					t.Fatalf("%s returned with %d renewal(s) still in flight", via, n)
				}
				b.mu.Lock()
				cancelled, renewReturned := b.cancelled, b.returned
				b.mu.Unlock()
				if !cancelled.Equal(released) {
					t.Fatalf("renewal cancelled at %v, want at %s (%v)", cancelled.Sub(start), via, released.Sub(start))
				}
				if renewReturned.IsZero() || returned.Before(renewReturned) {
					t.Fatalf("%s returned at %v, before the renewal returned (%v)", via, returned.Sub(start), renewReturned.Sub(start))
				}
				if got, want := returned.Sub(released), b.linger; got != want {
					t.Fatalf("%s took %v, want the renewal's %v", via, got, want)
				}
				if info, _ := b.Backend.Inspect(t.Context(), "k"); info.Held {
					t.Fatal("key still held after release")
				}
			})
		})
	}
}

// keeper is a KeepAliver whose renewals the test sends by hand. Its
// keepalive closes the channel linger after the lease's context ends.
type keeper struct {
	*memory.Backend
	linger time.Duration
	ch     chan driver.Renewal
	closed chan time.Time // when the keepalive channel was closed
}

func newKeeper(linger time.Duration) *keeper {
	return &keeper{Backend: memory.New(), linger: linger, ch: make(chan driver.Renewal), closed: make(chan time.Time, 1)}
}

// keptLease acquires "k" on a Locker (TTL 3s) over a new keeper, and
// returns them with the time of the acquire. The Locker is closed at the
// end of the test.
func keptLease(t *testing.T, linger time.Duration) (*keeper, *fencedlock.Locker, *fencedlock.Lease, time.Time) {
	t.Helper()
	k := newKeeper(linger)
	l, ls, start := acquire3s(t, k)
	return k, l, ls, start
}

func (k *keeper) KeepAlive(ctx context.Context, g driver.Grant) <-chan driver.Renewal {
	out := make(chan driver.Renewal)
	go func() {
		defer func() { k.closed <- time.Now(); close(out) }()
		for {
			select {
			case r, ok := <-k.ch:
				if !ok {
					return // the keepalive stops on its own
				}
				select {
				case out <- r:
				case <-ctx.Done():
				}
			case <-ctx.Done():
				time.Sleep(k.linger)
				return
			}
		}
	}()
	return out
}

// TestKeepAliverLease: with a KeepAliver the watchdog sends no renewal; the
// backend's Renewals move the local deadline (from their send time), a
// transient failure is kept as the reason of a later loss, ErrNotHeld
// loses the lease at once, a keepalive that stops on its own loses it,
// and Release returns after the keepalive has stopped.
func TestKeepAliverLease(t *testing.T) {
	const ttl = 3 * time.Second // keptLease's
	t.Run("deadline", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			k, l, ls, start := keptLease(t, 0)
			margin := l.Options().SafetyMargin
			time.Sleep(2 * time.Second)
			k.ch <- driver.Renewal{Sent: start.Add(time.Second), TTL: ttl}
			synctest.Wait()
			if got, want := ls.Deadline().Sub(start), time.Second+ttl-margin; got != want {
				t.Fatalf("deadline %v after a renewal sent at 1s, want %v", got, want)
			}
			errDown := errors.New("connection refused")
			k.ch <- driver.Renewal{Sent: time.Now(), Err: errDown}
			<-ls.Done()
			if got, want := time.Since(start), time.Second+ttl-margin; got != want {
				t.Fatalf("lost after %v, want at the moved deadline %v", got, want)
			}
			if err := ls.Err(); !errors.Is(err, fencedlock.ErrLeaseLost) || !errors.Is(err, errDown) {
				t.Fatalf("Err %v: want ErrLeaseLost and the last renewal's error", err)
			}
			if at := <-k.closed; !at.Equal(time.Now()) {
				t.Fatalf("keepalive closed at %v", at.Sub(start))
			}
		})
	})
	t.Run("not held", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			k, _, ls, _ := keptLease(t, 0)
			time.Sleep(time.Second)
			k.ch <- driver.Renewal{Sent: time.Now(), Err: fencedlock.ErrNotHeld}
			synctest.Wait()
			if err := ls.Err(); !errors.Is(err, fencedlock.ErrLeaseLost) || !errors.Is(err, fencedlock.ErrNotHeld) {
				t.Fatalf("Err %v at once after ErrNotHeld", err)
			}
			<-k.closed
		})
	})
	t.Run("stopped", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			k, _, ls, _ := keptLease(t, 0)
			time.Sleep(time.Second)
			close(k.ch)
			synctest.Wait()
			if err := ls.Err(); !errors.Is(err, fencedlock.ErrLeaseLost) {
				t.Fatalf("Err %v after the keepalive stopped, want ErrLeaseLost", err)
			}
		})
	})
	t.Run("release", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			k, _, ls, _ := keptLease(t, 50*time.Millisecond)
			time.Sleep(time.Second)
			released := time.Now()
			if err := ls.Release(t.Context()); err != nil {
				t.Fatal(err)
			}
			closedAt := <-k.closed
			if got := time.Since(released); got != k.linger || !closedAt.Equal(time.Now()) {
				t.Fatalf("Release took %v (keepalive closed after %v), want both %v", got, closedAt.Sub(released), k.linger)
			}
			if info, _ := k.Backend.Inspect(t.Context(), "k"); info.Held {
				t.Fatal("key still held after Release")
			}
		})
	})
}

// TestRenewalAnsweredNearDeadline: a watchdog renewal whose success comes
// back just before the local deadline keeps the lease: the deadline moves
// from the renewal's send time, and the watchdog, which kept the old
// deadline while the renewal was in flight, renews on from there.
func TestRenewalAnsweredNearDeadline(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newFake()
		var n atomic.Int32
		margin := 301 * time.Millisecond // TTL/10 + 1ms
		f.renewFn = func(ctx context.Context, g driver.Grant, ttl time.Duration) (time.Duration, error) {
			if n.Add(1) == 1 {
				// Sent at 1s, answered 1ms before the deadline (2.699s).
				time.Sleep(2*time.Second - margin - time.Millisecond)
			}
			return f.Backend.Renew(ctx, g, ttl)
		}
		_, ls, start := acquire3s(t, f)
		time.Sleep(3 * time.Second)
		synctest.Wait()
		if err := ls.Err(); err != nil {
			t.Fatalf("lease lost although a renewal succeeded before the deadline: %v", err)
		}
		if got, want := ls.Deadline().Sub(start), 4*time.Second-margin; got != want {
			t.Fatalf("deadline %v, want the renewal sent at 1s + TTL - margin = %v", got, want)
		}
		time.Sleep(10 * time.Second)
		if err := ls.Err(); err != nil {
			t.Fatalf("lease lost later: %v", err)
		}
		// Renewals at 1s (answered at 2.698s), then every second from
		// there: 3.698s, 4.698s, ..., 12.698s.
		renews := f.renewTimes()
		if len(renews) != 11 {
			t.Fatalf("%d renewals in 13s, want 11", len(renews))
		}
		if got, want := renews[1].Sub(start), 3698*time.Millisecond; got != want {
			t.Fatalf("second renewal at %v, want %v", got, want)
		}
		if err := ls.Release(t.Context()); err != nil {
			t.Fatal(err)
		}
	})
}

// TestContextMadeAfterEnd: the lease's context, made on first use, is
// cancelled with the lease's end as its cause when it is first asked for
// after the end (released, or lost), and is the same context on every call.
func TestContextMadeAfterEnd(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		l := mustLocker(t, memory.New(), fencedlock.Options{TTL: 3 * time.Second})
		defer l.Close()
		released, err := l.TryAcquire(t.Context(), "a")
		if err != nil {
			t.Fatal(err)
		}
		if err := released.Release(t.Context()); err != nil {
			t.Fatal(err)
		}
		if ctx := released.Context(); ctx.Err() == nil || !errors.Is(context.Cause(ctx), fencedlock.ErrReleased) || ctx != released.Context() {
			t.Fatalf("context after Release: err %v, cause %v", ctx.Err(), context.Cause(ctx))
		}
		// Renewed by hand (no renewal: nothing asks for the context before
		// the end), lost at its local deadline.
		lost, err := l.TryAcquire(t.Context(), "b", fencedlock.WithManualRenew(true))
		if err != nil {
			t.Fatal(err)
		}
		time.Sleep(3 * time.Second)
		synctest.Wait()
		select {
		case <-lost.Done():
		default:
			t.Fatal("Done not closed after the loss")
		}
		if cause := context.Cause(lost.Context()); !errors.Is(cause, fencedlock.ErrLeaseLost) {
			t.Fatalf("cause %v, want ErrLeaseLost", cause)
		}
		if h := lost.Holder(); len(h) != 16 || h != lost.Holder() || h == released.Holder() {
			t.Fatalf("holder ids %q, %q", h, released.Holder())
		}
	})
}
