package multilock

import (
	"context"
	"fmt"

	"github.com/fencedlock/fencedlock"
)

// Reentrancy, as in package fencedlock (its reentry.go): a Locker is not
// reentrant, and an acquire that can never succeed because a lease of the
// same Locker holds a key of the set, and the acquire runs on a context
// that comes from that lease (Lease.Context, Do's fn context, or one
// derived from them: the nested Do), fails at once with an error wrapping
// fencedlock.ErrHeldByLocker and ErrNotAcquired instead of waiting for
// itself. The root Locker sees the set as one key, so it catches only the
// same set on Lease.Context; a set sharing a key with the holding one,
// and Do's context, are caught here.

// heldKey is the context key of the leases a context comes from.
type heldKey struct{}

// heldBy is the chain of leases a context comes from, innermost first.
type heldBy struct {
	ls   *Lease
	next *heldBy
}

// withHeld returns ctx marked as coming from ls too.
func withHeld(ctx context.Context, ls *Lease) context.Context {
	next, _ := ctx.Value(heldKey{}).(*heldBy)
	return context.WithValue(ctx, heldKey{}, &heldBy{ls: ls, next: next})
}

// reentry refuses an acquire of keys (sorted) on ctx that comes from a
// lease of m still held with a key in common.
func (m *Locker) reentry(ctx context.Context, keys []string) error {
	for h, _ := ctx.Value(heldKey{}).(*heldBy); h != nil; h = h.next {
		if h.ls.m != m || h.ls.Err() != nil {
			continue
		}
		if k, ok := common(h.ls.keys, keys); ok {
			return fmt.Errorf("multilock: acquire %q: key %q is held by this Locker's lease of %q, which this context comes from (a Locker is not reentrant: use that Lease): %w (%w)",
				keys, k, h.ls.keys, fencedlock.ErrHeldByLocker, fencedlock.ErrNotAcquired)
		}
	}
	return nil
}

// common returns the first key of a (sorted) also in b (sorted).
func common(a, b []string) (string, bool) {
	for i, j := 0, 0; i < len(a) && j < len(b); {
		switch {
		case a[i] == b[j]:
			return a[i], true
		case a[i] < b[j]:
			i++
		default:
			j++
		}
	}
	return "", false
}
