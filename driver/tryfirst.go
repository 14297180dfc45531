package driver

import "context"

// TryFirstWaiter is implemented by a [WaitAcquirer] whose wait may begin
// with a plain [Backend.Acquire]: on a free key that attempt grants what
// AcquireWait would, at the cost of one Acquire. [fencedlock.Locker.Acquire]
// then makes that attempt itself, on the caller's context and with nothing
// set up for waiting (no cancellable context, no goroutine watching the
// Locker's Close), when TryFirst says so, and calls AcquireWaitHeld only if
// the attempt did not take the key. A WaitAcquirer that does not implement
// it (etcd: an Acquire that finds the key held costs a round trip the wait
// would not make) is always asked through AcquireWait.
type TryFirstWaiter interface {
	WaitAcquirer

	// TryFirst reports whether an Acquire of key is worth making before
	// waiting: false when the backend knows waiters of key to be queued
	// (the attempt would most likely find the key held, and costs a round
	// trip). It must not block.
	TryFirst(key string) bool

	// AcquireWaitHeld is AcquireWait for a request whose Acquire, made
	// just before with the same req, did not take the key: it found it
	// held, or failed in a way no retry is excluded for (the Locker does
	// not call it after an error wrapping [ErrPermanent], [ErrInvalid] or
	// [ErrClosed], nor once ctx is done). It does not repeat that plain
	// attempt, and must take into account that the attempt may have been
	// applied (its reply lost): the key may already be held by req.Owner.
	// Its contract is otherwise AcquireWait's, cancellation included.
	AcquireWaitHeld(ctx context.Context, req AcquireRequest) (Grant, error)
}
