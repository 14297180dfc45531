package driver

import (
	"context"

	"github.com/fencedlock/fencedlock/fencing"
)

// ForceReleaser is implemented by backends that let an operator break a
// lock whoever holds it, fenced (for tools such as `fencedlock release
// --force`). It is not for programs that hold locks: a holder releases its
// own lease with [fencedlock.Lease.Release].
type ForceReleaser interface {
	// ForceRelease deletes the lock key whoever holds it and advances its
	// fence, in one atomic step, and reports what it broke. Afterwards:
	//
	//   - the old holder's Renew and Release return an error wrapping
	//     [ErrNotHeld], so its Locker reports the lease lost at its next
	//     renewal (a [KeepAliver] at its next keep-alive);
	//   - every lease granted on key from then on has a fence greater than
	//     ForceResult.After, itself greater than ForceResult.Before: After
	//     is granted to no one, so an operator may write it to the
	//     resources the lock guards as a fence barrier, which rejects the
	//     old holder's next guarded write and accepts every later holder's.
	//
	// Waiters queued on the server (a [WaitAcquirer]) are dequeued too and
	// start over; a waiter is never granted a fence at or below After. A
	// free key is not an error: Held is false and the fence still
	// advances. The owner token of the broken lease is never returned.
	ForceRelease(ctx context.Context, key string) (ForceResult, error)
}

// ForceResult is what a [ForceReleaser.ForceRelease] did.
type ForceResult struct {
	// Held reports whether key was held when it was broken.
	Held bool
	// Holder is the holder id ([HolderID]) of the broken lease ("" if the
	// key was free or the backend cannot tell). Never the owner token.
	Holder string
	// Before is the fence of the broken lease if Held, otherwise the last
	// fence granted on key as the backend knows it (0 if none or unknown).
	Before fencing.Token
	// After is the fence the forced release consumed: greater than Before,
	// held by no lease, and smaller than the fence of any lease granted
	// later.
	After fencing.Token
}
