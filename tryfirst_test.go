package fencedlock_test

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/fencedlock/fencedlock"
	"github.com/fencedlock/fencedlock/backend/memory"
	"github.com/fencedlock/fencedlock/driver"
)

// firstWaiter is a driver.TryFirstWaiter on the memory backend: its wait
// polls Acquire every millisecond. It counts how the Locker called it.
type firstWaiter struct {
	*memory.Backend
	first      bool         // TryFirst's answer
	waits      atomic.Int32 // AcquireWait calls
	heldWaits  atomic.Int32 // AcquireWaitHeld calls
	triedFirst atomic.Int32 // TryFirst calls
}

var _ driver.TryFirstWaiter = (*firstWaiter)(nil)

func (f *firstWaiter) TryFirst(string) bool { f.triedFirst.Add(1); return f.first }

func (f *firstWaiter) AcquireWait(ctx context.Context, req driver.AcquireRequest) (driver.Grant, error) {
	f.waits.Add(1)
	return f.poll(ctx, req)
}

func (f *firstWaiter) AcquireWaitHeld(ctx context.Context, req driver.AcquireRequest) (driver.Grant, error) {
	f.heldWaits.Add(1)
	return f.poll(ctx, req)
}

func (f *firstWaiter) poll(ctx context.Context, req driver.AcquireRequest) (driver.Grant, error) {
	t := time.NewTicker(time.Millisecond)
	defer t.Stop()
	for {
		g, err := f.Backend.Acquire(ctx, req)
		if err == nil || !errors.Is(err, driver.ErrNotAcquired) {
			return g, err
		}
		select {
		case <-ctx.Done():
			return driver.Grant{}, errors.Join(err, ctx.Err())
		case <-t.C:
		}
	}
}

// TestTryFirstWaiterUncontendedAllocs: an uncontended Acquire+Release on a
// WaitAcquirer that may try first costs what it costs on the plain
// backend: one attempt on the caller's context, no waiting set-up (a
// cancellable context and a goroutine watching Close). Before the Locker
// asked TryFirst: 15 allocations against 8 (without -race; the fake's
// wait polls with a ticker).
func TestTryFirstWaiterUncontendedAllocs(t *testing.T) {
	ctx := context.Background()
	allocs := func(b driver.Backend) float64 {
		l := mustLocker(t, b, fencedlock.Options{TTL: time.Minute})
		defer l.Close()
		return testing.AllocsPerRun(200, func() {
			ls, err := l.Acquire(ctx, "k")
			if err != nil {
				t.Fatal(err)
			}
			if err := ls.Release(ctx); err != nil {
				t.Fatal(err)
			}
		})
	}
	plain := allocs(memory.New())
	f := &firstWaiter{Backend: memory.New(), first: true}
	waiter := allocs(f)
	t.Logf("allocations per Acquire+Release: %v on memory, %v on a TryFirstWaiter on memory", plain, waiter)
	if waiter > plain {
		t.Errorf("%v allocations per uncontended Acquire+Release on a TryFirstWaiter, want at most the plain backend's %v", waiter, plain)
	}
	if n := f.waits.Load() + f.heldWaits.Load(); n != 0 {
		t.Errorf("uncontended Acquires waited %d times", n)
	}
}

// TestTryFirstWaiterHeld: a held key is waited for through AcquireWaitHeld
// after the one attempt (not AcquireWait, which would repeat it); with
// TryFirst false the Locker waits through AcquireWait at once, as for a
// WaitAcquirer; a permanent error of the first attempt is returned without
// waiting.
func TestTryFirstWaiterHeld(t *testing.T) {
	for _, first := range []bool{true, false} {
		f := &firstWaiter{Backend: memory.New(), first: first}
		l := mustLocker(t, f, fencedlock.Options{TTL: time.Minute})
		holder, err := l.TryAcquire(t.Context(), "k")
		if err != nil {
			t.Fatal(err)
		}
		got := make(chan error, 1)
		go func() {
			ls, err := l.Acquire(t.Context(), "k")
			if err == nil {
				err = ls.Release(t.Context())
			}
			got <- err
		}()
		deadline := time.Now().Add(10 * time.Second)
		for f.waits.Load()+f.heldWaits.Load() == 0 && time.Now().Before(deadline) {
			time.Sleep(time.Millisecond)
		}
		if err := holder.Release(t.Context()); err != nil {
			t.Fatal(err)
		}
		if err := <-got; err != nil {
			t.Fatalf("TryFirst %v: Acquire of a released key: %v", first, err)
		}
		want := [2]int32{0, 1} // AcquireWait, AcquireWaitHeld
		if !first {
			want = [2]int32{1, 0}
		}
		if w := [2]int32{f.waits.Load(), f.heldWaits.Load()}; w != want {
			t.Errorf("TryFirst %v: AcquireWait called %d times, AcquireWaitHeld %d, want %d and %d", first, w[0], w[1], want[0], want[1])
		}
		if n := f.triedFirst.Load(); n != 1 {
			t.Errorf("TryFirst %v: asked %d times, want once (TryAcquire does not ask)", first, n)
		}
		if err := l.Close(); err != nil {
			t.Fatal(err)
		}
	}

	// A permanent error of the first attempt (here: a closed backend) ends
	// the Acquire at once, without a wait.
	f := &firstWaiter{Backend: memory.New(), first: true}
	l := mustLocker(t, f, fencedlock.Options{TTL: time.Minute})
	defer l.Close()
	f.Backend.Close()
	if _, err := l.Acquire(t.Context(), "k"); !errors.Is(err, fencedlock.ErrClosed) {
		t.Fatalf("Acquire on a closed TryFirstWaiter: %v, want ErrClosed", err)
	}
	if n := f.waits.Load() + f.heldWaits.Load(); n != 0 {
		t.Errorf("a permanent first error was followed by %d waits", n)
	}
}

// TestTryFirstWaiterCancelledFirst: a context that ends during the first
// attempt ends the Acquire with ErrNotAcquired and the context's error,
// without a wait.
func TestTryFirstWaiterCancelledFirst(t *testing.T) {
	f := &firstWaiter{Backend: memory.New(), first: true}
	l := mustLocker(t, f, fencedlock.Options{TTL: time.Minute})
	defer l.Close()
	holder, err := l.TryAcquire(t.Context(), "k")
	if err != nil {
		t.Fatal(err)
	}
	defer holder.Release(t.Context())
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	_, err = l.Acquire(ctx, "k")
	if !errors.Is(err, fencedlock.ErrNotAcquired) || !errors.Is(err, context.Canceled) {
		t.Fatalf("Acquire with a cancelled context of a held key: %v, want ErrNotAcquired and context.Canceled", err)
	}
	if n := f.waits.Load() + f.heldWaits.Load(); n != 0 {
		t.Errorf("a cancelled first attempt was followed by %d waits", n)
	}
}
