package fencedlock_test

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/fencedlock/fencedlock"
	"github.com/fencedlock/fencedlock/backend/memory"
)

// reentryBound is how long a refused re-acquire may take: it must not
// wait for anything, so a second is generous on a loaded machine and far
// shorter than the contexts below, which are what a wait would end on.
const reentryBound = time.Second

func newMemLocker(t *testing.T) *fencedlock.Locker {
	t.Helper()
	l, err := fencedlock.New(memory.New(), fencedlock.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	return l
}

// checkSelfHeld checks that err is the refusal of a re-acquire: it says
// this Locker holds the key, and is both ErrHeldByLocker and
// ErrNotAcquired.
func checkSelfHeld(t *testing.T, what string, err error, took time.Duration) {
	t.Helper()
	if !errors.Is(err, fencedlock.ErrHeldByLocker) || !errors.Is(err, fencedlock.ErrNotAcquired) {
		t.Fatalf("%s of a key this Locker holds: %v, want an error wrapping ErrHeldByLocker and ErrNotAcquired", what, err)
	}
	if !strings.Contains(err.Error(), "this Locker") {
		t.Errorf("%s: %q does not say that this Locker holds the key", what, err)
	}
	if took > reentryBound {
		t.Errorf("%s took %v: a refused re-acquire must return at once", what, took)
	}
}

// TestReacquireFailsFast: a Locker is not reentrant. A second TryAcquire
// of a key the Locker holds, and an Acquire or Do on a context of the
// lease that holds it (a nested Do), would otherwise say "held by another
// owner" or wait until their context ends: they fail at once with an error
// that says this Locker holds the key. Once the lease is released the key
// can be taken again.
func TestReacquireFailsFast(t *testing.T) {
	ctx := context.Background()
	l := newMemLocker(t)
	ls, err := l.TryAcquire(ctx, "k")
	if err != nil {
		t.Fatal(err)
	}

	start := time.Now()
	_, err = l.TryAcquire(ctx, "k")
	checkSelfHeld(t, "TryAcquire", err, time.Since(start))

	wctx, cancel := context.WithTimeout(ls.Context(), 5*time.Second)
	defer cancel()
	start = time.Now()
	_, err = l.Acquire(wctx, "k")
	checkSelfHeld(t, "Acquire on the lease's context", err, time.Since(start))

	// Another key on the same Locker, from the lease's context, is fine.
	other, err := l.Acquire(wctx, "other")
	if err != nil {
		t.Fatalf("Acquire of another key from the lease's context: %v", err)
	}
	if err := other.Release(ctx); err != nil {
		t.Fatal(err)
	}

	if err := ls.Release(ctx); err != nil {
		t.Fatal(err)
	}
	again, err := l.TryAcquire(ctx, "k")
	if err != nil {
		t.Fatalf("TryAcquire after the release: %v", err)
	}
	if err := again.Release(ctx); err != nil {
		t.Fatal(err)
	}
}

// TestNestedDoFailsFast: Do inside Do on the same key and Locker, with the
// context the outer Do gave fn, fails at once; the outer Do goes on and
// releases; then the key is free.
func TestNestedDoFailsFast(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	l := newMemLocker(t)
	var inner error
	var took time.Duration
	err := l.Do(ctx, "k", func(ctx context.Context, _ *fencedlock.Lease) error {
		start := time.Now()
		inner = l.Do(ctx, "k", func(context.Context, *fencedlock.Lease) error { return nil })
		took = time.Since(start)
		return nil
	})
	if err != nil {
		t.Fatalf("outer Do: %v", err)
	}
	checkSelfHeld(t, "nested Do", inner, took)
	ls, err := l.TryAcquire(context.Background(), "k")
	if err != nil {
		t.Fatalf("TryAcquire after the outer Do: %v", err)
	}
	_ = ls.Release(context.Background())
}

// TestSharedLockerGoroutinesTakeTurns: the refusal is for a context that
// comes from the holding lease (a self-deadlock for sure). Goroutines that
// share a Locker (it is safe for concurrent use) and Acquire one key on
// contexts of their own still take turns.
func TestSharedLockerGoroutinesTakeTurns(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	l := newMemLocker(t)
	var mu sync.Mutex
	inside, turns := 0, 0
	var wg sync.WaitGroup
	for range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range 5 {
				err := l.Do(ctx, "k", func(context.Context, *fencedlock.Lease) error {
					mu.Lock()
					inside++
					turns++
					if inside != 1 {
						t.Errorf("%d goroutines inside at once", inside)
					}
					mu.Unlock()
					time.Sleep(time.Millisecond)
					mu.Lock()
					inside--
					mu.Unlock()
					return nil
				})
				if err != nil {
					t.Errorf("Do: %v", err)
					return
				}
			}
		}()
	}
	wg.Wait()
	if turns != 20 {
		t.Fatalf("%d turns, want 20", turns)
	}
}
