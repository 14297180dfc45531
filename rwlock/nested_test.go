package rwlock_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/fencedlock/fencedlock"
	"github.com/fencedlock/fencedlock/backend/memory"
	"github.com/fencedlock/fencedlock/internal/locktest"
	"github.com/fencedlock/fencedlock/rwlock"
)

// TestNestedLockRefused: a Lock of a name on the context of a lease of it
// from the same RWLock (an upgrade of a read lease, or a second write
// lease), and an RLock on the context of its write lease, wait for that
// lease to end: a self-deadlock, in which the waiting writer's intent also
// keeps every other reader out (found by the rw-review: Lock on a read
// lease's context waited until its context ended). An RLock on a read
// lease's context waits for it whenever a writer waits. They fail at once
// with an error wrapping fencedlock.ErrHeldByLocker and ErrNotAcquired,
// the Try forms too, and leave no intent: another RWLock's reader still
// gets in. A lock of another name, or one on the context of another
// RWLock's lease, is not refused.
func TestNestedLockRefused(t *testing.T) {
	st := memory.NewStore()
	r := locktest.Open(t, st.Backend(), fencedlock.Options{TTL: time.Second}, rwlock.New)
	other := locktest.Open(t, st.Backend(), fencedlock.Options{TTL: time.Second}, rwlock.New)
	type call func(*rwlock.RWLock, context.Context, string, ...fencedlock.LeaseOption) (*rwlock.Lease, error)
	for _, c := range []struct {
		held  rwlock.Mode
		name  string
		inner call
	}{
		{rwlock.Read, "Lock", (*rwlock.RWLock).Lock},
		{rwlock.Read, "RLock", (*rwlock.RWLock).RLock},
		{rwlock.Read, "TryLock", (*rwlock.RWLock).TryLock},
		{rwlock.Write, "Lock", (*rwlock.RWLock).Lock},
		{rwlock.Write, "RLock", (*rwlock.RWLock).RLock},
		{rwlock.Write, "TryRLock", (*rwlock.RWLock).TryRLock},
	} {
		// The lease's Context, and that of the fencedlock.Lease it
		// embeds (an RLock on a write lease's lease.Lease.Context() and a
		// Lock on a read lease's waited for it until their context ended:
		// only the first was recognised).
		for _, from := range []struct {
			name string
			ctx  func(*rwlock.Lease) context.Context
		}{
			{"Context", (*rwlock.Lease).Context},
			{"Lease.Context", func(l *rwlock.Lease) context.Context { return l.Lease.Context() }},
		} {
			t.Run(c.held.String()+"/"+c.name+"/"+from.name, func(t *testing.T) {
				outer := lease(t, r, c.held, "cfg")
				ctx, cancel := context.WithTimeout(from.ctx(outer), 2*time.Second)
				defer cancel()
				start := time.Now()
				l, err := c.inner(r, ctx, "cfg")
				if !errors.Is(err, fencedlock.ErrHeldByLocker) || !errors.Is(err, fencedlock.ErrNotAcquired) {
					t.Fatalf("%s of %q on the %s of its %v lease: %v, %v after %v; want ErrHeldByLocker at once",
						c.name, "cfg", from.name, c.held, l, err, time.Since(start).Round(time.Millisecond))
				}
				t.Logf("%v", err)
				if c.held == rwlock.Read { // no intent left: another reader gets in
					rl, err := other.TryRLock(t.Context(), "cfg")
					if err != nil {
						t.Fatalf("another RWLock's TryRLock after the refused %s: %v", c.name, err)
					}
					_ = rl.Release(t.Context())
				}
			})
		}
	}
	t.Run("not refused", func(t *testing.T) {
		outer := lease(t, r, rwlock.Read, "cfg")
		for _, try := range []struct {
			what string
			take func() (*rwlock.Lease, error)
		}{
			{"Lock of another name", func() (*rwlock.Lease, error) { return r.Lock(outer.Context(), "other") }},
		} {
			l, err := try.take()
			if err != nil {
				t.Fatalf("%s on a read lease's context: %v", try.what, err)
			}
			_ = l.Release(t.Context())
		}
		mine := lease(t, other, rwlock.Read, "shared")
		for _, from := range []context.Context{mine.Context(), mine.Lease.Context()} {
			ctx, cancel := context.WithTimeout(from, 100*time.Millisecond)
			_, err := r.Lock(ctx, "shared")
			cancel()
			if errors.Is(err, fencedlock.ErrHeldByLocker) || !errors.Is(err, context.DeadlineExceeded) {
				t.Fatalf("Lock on the context of another RWLock's read lease: %v, want it to wait (context deadline exceeded)", err)
			}
		}
		// A released lease's context is no longer its: a Lock on it is
		// granted.
		gone := lease(t, r, rwlock.Read, "released")
		if err := gone.Release(t.Context()); err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithTimeout(context.WithoutCancel(gone.Lease.Context()), 2*time.Second)
		defer cancel()
		l, err := r.Lock(ctx, "released")
		if err != nil {
			t.Fatalf("Lock on the context of a released read lease: %v, want granted", err)
		}
		_ = l.Release(t.Context())
	})
}

// lease takes a lease of name in mode m from r (within 5s), released
// when the test ends.
func lease(t *testing.T, r *rwlock.RWLock, m rwlock.Mode, name string) *rwlock.Lease {
	t.Helper()
	take := r.RLock
	if m == rwlock.Write {
		take = r.Lock
	}
	ctx, cancel := context.WithTimeout(t.Context(), 5*time.Second)
	defer cancel()
	l, err := take(ctx, name)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = l.Release(context.Background()) })
	return l
}
