// Package storetest is one program written against [fencedlock.Locker] and
// [fencing.Store] only, run by every backend's tests with nothing but the
// constructors changed: the promise of [fencing.Store] that a program runs
// unchanged on Redis, etcd or the in-memory store.
package storetest

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/fencedlock/fencedlock"
	"github.com/fencedlock/fencedlock/fencing"
)

// Run drives store under leases of locker: a holder writes under its fence
// (Set, Update), a second holder takes the lock over, the first holder's late
// Set and Update are rejected with a *[fencing.StaleError] and Get shows the
// newer record; a zero token is refused, an error from Update's fn writes
// nothing, and Update retries when a write comes between its read and its
// write (once by hand, then under contention). Keys carry a random suffix,
// so runs may share a server.
func Run(t *testing.T, locker *fencedlock.Locker, store fencing.Store) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	suffix := rand.Text()
	lockKey, key := "storetest-lock-"+suffix, "storetest/data-"+suffix

	if rec, err := store.Get(ctx, key); err != nil || rec != (fencing.Record{}) {
		t.Fatalf("Get of a key never written = %+v, %v; want the zero Record", rec, err)
	}
	a, err := locker.Acquire(ctx, lockKey)
	if err != nil {
		t.Fatal(err)
	}
	if err := store.Set(ctx, key, "a1", a.Fence(), a.Holder()); err != nil {
		t.Fatalf("Set under the lease's fence: %v", err)
	}
	want(ctx, t, store, key, fencing.Record{Value: "a1", Found: true, Fence: a.Fence(), Holder: a.Holder()})
	err = store.Update(ctx, key, a.Fence(), a.Holder(), func(cur fencing.Record) (string, error) { return cur.Value + "+a2", nil })
	if err != nil {
		t.Fatalf("Update under the lease's fence: %v", err)
	}
	want(ctx, t, store, key, fencing.Record{Value: "a1+a2", Found: true, Fence: a.Fence(), Holder: a.Holder()})

	zeroRefused(ctx, t, store, key, a.Holder())
	fnErrorWritesNothing(ctx, t, store, key, a)
	retriesAfterInterveningWrite(ctx, t, store, key, a)
	contended(ctx, t, store, key, a)

	if err := a.Release(ctx); err != nil {
		t.Fatal(err)
	}
	b, err := locker.Acquire(ctx, lockKey)
	if err != nil {
		t.Fatal(err)
	}
	defer b.Release(context.WithoutCancel(ctx))
	if b.Fence() <= a.Fence() {
		t.Fatalf("second holder's fence %d not above the first's %d", b.Fence(), a.Fence())
	}
	if err := store.Set(ctx, key, "b1", b.Fence(), b.Holder()); err != nil {
		t.Fatalf("second holder's Set: %v", err)
	}
	newer := fencing.Record{Value: "b1", Found: true, Fence: b.Fence(), Holder: b.Holder()}
	stale(t, "late Set", store.Set(ctx, key, "a-late", a.Fence(), a.Holder()), a, b)
	called := false
	err = store.Update(ctx, key, a.Fence(), a.Holder(), func(cur fencing.Record) (string, error) {
		called = true
		return "a-late", nil
	})
	stale(t, "late Update", err, a, b)
	if called {
		t.Errorf("late Update called fn though the store holds fence %d", b.Fence())
	}
	stale(t, "equal fence from another holder", store.Set(ctx, key, "x", b.Fence(), a.Holder()), a, b)
	want(ctx, t, store, key, newer)
}

// want fails t unless Get of key returns rec.
func want(ctx context.Context, t *testing.T, store fencing.Store, key string, rec fencing.Record) {
	t.Helper()
	if got, err := store.Get(ctx, key); err != nil || got != rec {
		t.Fatalf("Get(%q) = %+v, %v; want %+v", key, got, err, rec)
	}
}

// stale fails t unless err is a *fencing.StaleError that rejects a token
// of at most a's fence against b's record.
func stale(t *testing.T, what string, err error, a, b *fencedlock.Lease) {
	t.Helper()
	var se *fencing.StaleError
	if !errors.As(err, &se) || !errors.Is(err, fencing.ErrStale) {
		t.Fatalf("%s: %v, want a *fencing.StaleError", what, err)
	}
	if se.Accepted != b.Fence() || se.AcceptedFrom != b.Holder() || se.Token > b.Fence() {
		t.Fatalf("%s: %+v, want accepted %d from %s", what, se, b.Fence(), b.Holder())
	}
}

// zeroRefused checks that a zero token is refused by Set and Update with
// fencing.ErrInvalidToken, without calling fn or writing.
func zeroRefused(ctx context.Context, t *testing.T, store fencing.Store, key, holder string) {
	t.Helper()
	before, err := store.Get(ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	if err := store.Set(ctx, key, "zero", 0, holder); !errors.Is(err, fencing.ErrInvalidToken) {
		t.Errorf("Set with a zero token: %v, want ErrInvalidToken", err)
	}
	called := false
	err = store.Update(ctx, key, 0, holder, func(fencing.Record) (string, error) { called = true; return "zero", nil })
	if !errors.Is(err, fencing.ErrInvalidToken) || called {
		t.Errorf("Update with a zero token: %v (fn called: %v), want ErrInvalidToken and no call", err, called)
	}
	want(ctx, t, store, key, before)
}

// fnErrorWritesNothing checks that Update ends with fn's error and writes
// nothing.
func fnErrorWritesNothing(ctx context.Context, t *testing.T, store fencing.Store, key string, a *fencedlock.Lease) {
	t.Helper()
	before, err := store.Get(ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	boom := errors.New("storetest: refused by fn")
	err = store.Update(ctx, key, a.Fence(), a.Holder(), func(fencing.Record) (string, error) { return "never", boom })
	if !errors.Is(err, boom) {
		t.Errorf("Update whose fn fails: %v, want fn's error", err)
	}
	want(ctx, t, store, key, before)
}

// retriesAfterInterveningWrite makes a write come between Update's read and
// its write (from inside fn, the first time it runs): Update must not write
// over it, but read again and call fn again with the newer value.
func retriesAfterInterveningWrite(ctx context.Context, t *testing.T, store fencing.Store, key string, a *fencedlock.Lease) {
	t.Helper()
	var seen []string
	err := store.Update(ctx, key, a.Fence(), a.Holder(), func(cur fencing.Record) (string, error) {
		seen = append(seen, cur.Value)
		if len(seen) == 1 {
			if err := store.Set(ctx, key, "intervening", a.Fence(), a.Holder()); err != nil {
				return "", err
			}
		}
		return cur.Value + "+u", nil
	})
	if err != nil {
		t.Fatalf("Update with an intervening write: %v", err)
	}
	if len(seen) != 2 || seen[1] != "intervening" {
		t.Fatalf("Update's fn saw %q, want a first value then %q", seen, "intervening")
	}
	want(ctx, t, store, key, fencing.Record{Value: "intervening+u", Found: true, Fence: a.Fence(), Holder: a.Holder()})
}

// contended runs increments through Update from several goroutines at once
// and checks that none is lost.
func contended(ctx context.Context, t *testing.T, store fencing.Store, key string, a *fencedlock.Lease) {
	t.Helper()
	const workers, each = 4, 5
	if err := store.Set(ctx, key, "0", a.Fence(), a.Holder()); err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	errs := make(chan error, workers*each)
	for range workers {
		wg.Go(func() {
			for range each {
				errs <- store.Update(ctx, key, a.Fence(), a.Holder(), func(cur fencing.Record) (string, error) {
					var n int
					if _, err := fmt.Sscan(cur.Value, &n); err != nil {
						return "", err
					}
					return fmt.Sprint(n + 1), nil
				})
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatalf("contended Update: %v", err)
		}
	}
	want(ctx, t, store, key, fencing.Record{Value: fmt.Sprint(workers * each), Found: true, Fence: a.Fence(), Holder: a.Holder()})
}
