package multilocktest

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/fencedlock/fencedlock"
	"github.com/fencedlock/fencedlock/multilock"
)

// NestedRefused: a Locker is not reentrant, and an Acquire or Do of a set
// on a context that comes from a lease of the same Locker holding a key
// of that set (Lease.Context, or the context Do passed to fn) can never
// succeed while the lease is held: it fails at once with an error wrapping
// fencedlock.ErrHeldByLocker and ErrNotAcquired, as the root Locker's
// nested Do does, instead of waiting for itself until its context ends.
// The same set in another order, and a set sharing one key, are refused
// alike; a set sharing no key is taken.
func NestedRefused(t *testing.T, s Setup) {
	m := newLocker(t, s.New(t))
	ks := keys(t, 5)
	outer, overlap, disjoint := ks[:2], []string{ks[2], ks[1]}, ks[2:4]
	const wait = 5 * time.Second // far above a refusal made at once
	nested := func(t *testing.T, ctx context.Context, how string) {
		t.Helper()
		for _, set := range [][]string{outer, {outer[1], outer[0]}, overlap} {
			cctx, cancel := context.WithTimeout(ctx, wait)
			start := time.Now()
			_, err := m.Acquire(cctx, set)
			if err == nil {
				err = m.Do(cctx, set, func(context.Context, *multilock.Lease) error { return nil })
			}
			cancel()
			if !errors.Is(err, fencedlock.ErrHeldByLocker) || !errors.Is(err, fencedlock.ErrNotAcquired) {
				t.Errorf("%s: Acquire of %q inside the lease of %q: %v after %v, want ErrHeldByLocker at once", how, set, outer, err, time.Since(start).Round(time.Millisecond))
			}
			cctx, cancel = context.WithTimeout(ctx, wait)
			start = time.Now()
			err = m.Do(cctx, set, func(context.Context, *multilock.Lease) error { return nil })
			cancel()
			if !errors.Is(err, fencedlock.ErrHeldByLocker) || !errors.Is(err, fencedlock.ErrNotAcquired) {
				t.Errorf("%s: Do of %q inside the lease of %q: %v after %v, want ErrHeldByLocker at once", how, set, outer, err, time.Since(start).Round(time.Millisecond))
			}
		}
		cctx, cancel := context.WithTimeout(ctx, wait)
		defer cancel()
		// Nested twice: the outer lease still counts.
		err := m.Do(cctx, disjoint, func(ctx context.Context, _ *multilock.Lease) error {
			start := time.Now()
			_, err := m.Acquire(ctx, []string{ks[4], outer[0]})
			if !errors.Is(err, fencedlock.ErrHeldByLocker) {
				t.Errorf("%s, then Do of %q: Acquire of a set sharing %q with the outer lease: %v after %v, want ErrHeldByLocker at once", how, disjoint, outer[0], err, time.Since(start).Round(time.Millisecond))
			}
			return nil
		})
		if err != nil {
			t.Errorf("%s: Do of %q, no key in common with %q: %v", how, disjoint, outer, err)
		}
	}
	err := m.Do(context.Background(), outer, func(ctx context.Context, ls *multilock.Lease) error {
		nested(t, ctx, "Do's context")
		nested(t, ls.Context(), "Lease.Context")
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	// Released: the same context no longer holds anything.
	ls, err := m.TryAcquire(context.Background(), outer)
	if err != nil {
		t.Fatal(err)
	}
	ls.Release(context.Background())
}
