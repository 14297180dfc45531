package fencedlock

import (
	"errors"
	"fmt"

	"github.com/fencedlock/fencedlock/driver"
)

// Sentinel errors. Check them with [errors.Is]; the errors returned by this
// package and by the backends wrap them together with the underlying cause.
var (
	// ErrNotAcquired means the lock is held by another owner. A wait ended
	// by its context returns an error that is both ErrNotAcquired and the
	// context's error.
	ErrNotAcquired = driver.ErrNotAcquired
	// ErrLeaseLost is the cause of a lease's context when the lease was lost:
	// the server reported another owner or no lock, a renewal failed with
	// [ErrPermanent], a backend's keepalive stopped, or no renewal
	// succeeded before the local deadline. It wraps the reason.
	ErrLeaseLost = errors.New("fencedlock: lease lost")
	// ErrReleased is the cause of a lease's context after Release.
	ErrReleased = errors.New("fencedlock: lease released")
	// ErrNotHeld is returned by Renew and Release when the caller's owner
	// token no longer holds the key. Nothing was changed on the server.
	ErrNotHeld = driver.ErrNotHeld
	// ErrClosed is returned by every call on a closed Locker or backend.
	ErrClosed = driver.ErrClosed
	// ErrInvalid is wrapped by every error about invalid input: keys, TTLs,
	// options. Nothing was sent to the backend.
	ErrInvalid = driver.ErrInvalid
	// ErrPermanent is wrapped by backend errors that no retry can fix: the
	// store refused the request for a reason that lasts until an operator
	// acts (a key holding a value fencedlock did not write, a lock without
	// a TTL, missing permissions, failed authentication). [Locker.Acquire]
	// returns such an error at once instead of retrying it, and a renewal
	// failing with it reports the lease lost at once.
	ErrPermanent = driver.ErrPermanent
	// ErrLateGrant means the server granted the key but the grant came
	// back too late to be handed out: less than the lease's safety margin
	// was left before its local deadline (see [Locker.TryAcquire]). The
	// grant was released (owner-checked). Errors that wrap it also wrap
	// [ErrNotAcquired].
	ErrLateGrant = errors.New("fencedlock: grant came back too late")
)

// HeldError is returned by a backend's Acquire when another owner holds the
// key. It wraps [ErrNotAcquired]. RetryAfter is the holder's remaining TTL as
// the server reported it (zero if unknown): a waiter that gets no release
// notification can try again after that long without missing an expiry.
type HeldError = driver.HeldError

// waitError is returned when Acquire's context ends before the lock is held.
// It is both ErrNotAcquired and the context's error (and its cause), and,
// if the last attempt failed for another reason than a holder, that
// attempt's error: the operator sees why the wait did not succeed.
type waitError struct {
	key   string
	cause error
	last  error // the last attempt's failure, nil if the key was held
}

func (e *waitError) Error() string {
	if e.last != nil {
		return fmt.Sprintf("fencedlock: %q not acquired: %v; last attempt: %v", e.key, e.cause, e.last)
	}
	return fmt.Sprintf("fencedlock: %q not acquired: %v", e.key, e.cause)
}

func (e *waitError) Unwrap() []error {
	if e.last != nil {
		return []error{ErrNotAcquired, e.cause, e.last}
	}
	return []error{ErrNotAcquired, e.cause}
}

// lostError is the cause of a lost lease: ErrLeaseLost and the reason.
type lostError struct {
	key    string
	reason error
}

func (e *lostError) Error() string {
	return fmt.Sprintf("fencedlock: lease on %q lost: %v", e.key, e.reason)
}

func (e *lostError) Unwrap() []error { return []error{ErrLeaseLost, e.reason} }

// lostWhileError is Do's error when fn failed and the lease was lost: both
// errors, for errors.Is and errors.As, printed on one line ("fn's error;
// the loss") where errors.Join would print two, which breaks one-line log
// parsing.
type lostWhileError struct{ fn, lost error }

func (e *lostWhileError) Error() string { return e.fn.Error() + "; " + e.lost.Error() }

func (e *lostWhileError) Unwrap() []error { return []error{e.fn, e.lost} }

func invalidf(format string, args ...any) error {
	return fmt.Errorf("fencedlock: "+format+": %w", append(args, ErrInvalid)...)
}
