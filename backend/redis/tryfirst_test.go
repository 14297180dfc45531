package redis

import (
	"context"
	"testing"
	"time"

	"github.com/fencedlock/fencedlock"
	"github.com/fencedlock/fencedlock/driver"
	"github.com/fencedlock/fencedlock/internal/redistest"
)

// TestLockerFairUncontendedAllocs: an uncontended Locker.Acquire+Release
// on a FairBackend allocates no more than on the plain Backend (real
// redis-server): the Locker tries once on the caller's context before it
// sets up a wait (TryFirst). Before: 20 allocations against 13.
func TestLockerFairUncontendedAllocs(t *testing.T) {
	srv := redistest.Start(t)
	ctx := context.Background()
	allocs := func(b driver.Backend, key string) float64 {
		l := mustLocker(t, b, fencedlock.Options{TTL: 10 * time.Second})
		defer l.Close()
		return minAllocs(func() {
			ls, err := l.Acquire(ctx, key)
			if err != nil {
				t.Fatal(err)
			}
			if err := ls.Release(ctx); err != nil {
				t.Fatal(err)
			}
		})
	}
	b, _ := newBackend(t, srv, Options{})
	fb, _ := newBackend(t, srv, Options{})
	plain := allocs(b, "plain")
	fair := allocs(&FairBackend{fb}, "fair")
	t.Logf("allocations per Locker.Acquire+Release: %v on Backend, %v on FairBackend", plain, fair)
	slack := 0.0
	if raceEnabled {
		slack = 1 // pooled commands dropped at random: the floors of two averages
	}
	if fair > plain+slack {
		t.Fatalf("%v allocations per uncontended Locker.Acquire+Release on FairBackend, want at most Backend's %v", fair, plain)
	}
}

// TestLockerFairHeldAttemptsOnce: a Locker.Acquire on a FairBackend that
// finds the key held makes one plain attempt (acquire.lua's SET NX), then
// queues (wait.lua) without repeating it, and is handed the lock by the
// holder's release: 2 SETs in all (the attempt's, refused, and the
// hand-off's), 3 if AcquireWait repeated the attempt.
func TestLockerFairHeldAttemptsOnce(t *testing.T) {
	srv := redistest.Start(t)
	b, c := newBackend(t, srv, Options{})
	fb, _ := newBackend(t, srv, Options{})
	f := &FairBackend{fb}
	l := mustLocker(t, f, fencedlock.Options{TTL: 10 * time.Second})
	defer l.Close()
	ctx := t.Context()
	holder := acquire(t, b, "k", 10*time.Second)
	do(t, c, "CONFIG", "RESETSTAT")
	got := make(chan error, 1)
	go func() {
		ls, err := l.Acquire(ctx, "k")
		if err == nil {
			if ls.Fence() != holder.Fence+1 {
				t.Errorf("waiter granted fence %d, want %d", ls.Fence(), holder.Fence+1)
			}
			err = ls.Release(ctx)
		}
		got <- err
	}()
	queue := fairKeys(b, "k")[3]
	waitFor(t, 10*time.Second, "the waiter to queue", func() bool { return num(t, c, "LLEN", queue) == 1 })
	if err := b.Release(ctx, holder); err != nil {
		t.Fatal(err)
	}
	if err := <-got; err != nil {
		t.Fatal(err)
	}
	if n := commandStats(t, c)["set"]; n != 2 {
		t.Fatalf("%d SETs for one queued acquisition, want 2 (one attempt, one hand-off)", n)
	}
}
