package fencedlock

import (
	"context"
	"errors"
	"fmt"

	"github.com/fencedlock/fencedlock/internal/leasectx"
)

// Reentrancy. A Locker is not reentrant: a Lease is the handle to a held
// key, and code that needs the key while holding it takes the Lease (or
// the context Do gave it), not a second acquire. A second acquire of a key
// the Locker holds can never succeed while the lease is held, so where
// that is certain it fails at once, with an error wrapping
// [ErrHeldByLocker] and [ErrNotAcquired], instead of saying "held by
// another owner" or waiting until its context ends:
//
//   - TryAcquire of a key the Locker holds, from any goroutine (it would
//     fail anyway; no request is sent);
//   - Acquire or Do on a context that comes from the lease holding the key
//     ([Lease.Context], or the context Do passed to fn, or one derived from
//     either): the nested Do, a self-deadlock for sure.
//
// Acquire and Do on a context of their own wait for the holder as any
// contender does, even when the holder is this Locker: goroutines that
// share a Locker (it is safe for concurrent use) take turns on a key that
// way. A second Acquire in the goroutine that holds the key, on a context
// unrelated to the lease, cannot be told from them and waits.

// ErrHeldByLocker is wrapped (with [ErrNotAcquired]) by the error of an
// acquire refused because the same Locker already holds the key: a
// TryAcquire, or an Acquire or Do whose context comes from the lease that
// holds it. Use that Lease instead; once it is released or lost the key can
// be acquired again.
var ErrHeldByLocker = errors.New("fencedlock: key already held by this Locker")

// heldError is the refusal of a re-acquire.
type heldByLockerError struct {
	key   string
	lease *Lease
}

func (e *heldByLockerError) Error() string {
	return fmt.Sprintf("fencedlock: %q is already held by this Locker (fence %d, holder %s): a Locker is not reentrant; use the Lease you hold", e.key, e.lease.Fence(), e.lease.Holder())
}

func (e *heldByLockerError) Unwrap() []error { return []error{ErrHeldByLocker, ErrNotAcquired} }

// withLease returns ctx marked as coming from ls (Lease.Context, Do's fn
// context), so that an acquire of ls's key on it is known to be nested.
// The key is internal/leasectx's, which rwlock reads too.
func withLease(ctx context.Context, ls *Lease) context.Context {
	return context.WithValue(ctx, leasectx.Key{}, ls)
}

// reentry refuses an acquire of key that can never succeed because this
// Locker holds it: any TryAcquire (wait false), and an Acquire (wait true)
// on a context that comes from the holding lease. It reads the Locker's
// index of held keys only; a lease it finds is still held (not ended).
func (l *Locker) reentry(ctx context.Context, key string, wait bool) error {
	l.mu.Lock()
	ls := l.held[key]
	l.mu.Unlock()
	if ls == nil {
		return nil
	}
	if wait {
		from, _ := ctx.Value(leasectx.Key{}).(*Lease)
		if from == nil || from.l != l || from.grant.Key != key {
			return nil // another goroutine's turn, or a lease on another key
		}
		// from may be an earlier lease on key than ls; it is ls that holds.
	}
	return &heldByLockerError{key: key, lease: ls}
}

// holdLocked records ls as the lease holding its key. l.mu must be held.
func (l *Locker) holdLocked(ls *Lease) {
	if l.held == nil {
		l.held = make(map[string]*Lease)
	}
	l.held[ls.grant.Key] = ls
}

// unholdLocked removes ls, which ended, from the index. l.mu must be held.
func (l *Locker) unholdLocked(ls *Lease) {
	if l.held[ls.grant.Key] == ls {
		delete(l.held, ls.grant.Key)
	}
}
