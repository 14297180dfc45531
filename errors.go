package fencedlock

import (
	"errors"
	"fmt"
	"time"
)

// Sentinel errors. Check them with [errors.Is]; the errors returned by this
// package and by the backends wrap them together with the underlying cause.
var (
	// ErrNotAcquired means the lock is held by another owner. A wait ended
	// by its context returns an error that is both ErrNotAcquired and the
	// context's error.
	ErrNotAcquired = errors.New("fencedlock: not acquired")
	// ErrLeaseLost is the cause of a lease's context when the lease was lost:
	// the server reported another owner or no lock, or no renewal succeeded
	// before the local deadline. It wraps the reason.
	ErrLeaseLost = errors.New("fencedlock: lease lost")
	// ErrReleased is the cause of a lease's context after Release.
	ErrReleased = errors.New("fencedlock: lease released")
	// ErrNotHeld is returned by Renew and Release when the caller's owner
	// token no longer holds the key. Nothing was changed on the server.
	ErrNotHeld = errors.New("fencedlock: not held")
	// ErrClosed is returned by every call on a closed Locker or backend.
	ErrClosed = errors.New("fencedlock: closed")
	// ErrInvalid is wrapped by every error about invalid input: keys, TTLs,
	// options. Nothing was sent to the backend.
	ErrInvalid = errors.New("fencedlock: invalid argument")
)

// HeldError is returned by a backend's Acquire when another owner holds the
// key. It wraps [ErrNotAcquired]. RetryAfter is the holder's remaining TTL as
// the server reported it (zero if unknown): a waiter that gets no release
// notification can try again after that long without missing an expiry.
type HeldError struct {
	Key        string
	RetryAfter time.Duration
}

func (e *HeldError) Error() string {
	if e.RetryAfter > 0 {
		return fmt.Sprintf("fencedlock: %q is held by another owner (expires in at most %v)", e.Key, e.RetryAfter)
	}
	return fmt.Sprintf("fencedlock: %q is held by another owner", e.Key)
}

// Unwrap returns [ErrNotAcquired].
func (e *HeldError) Unwrap() error { return ErrNotAcquired }

// waitError is returned when Acquire's context ends before the lock is held.
// It is both ErrNotAcquired and the context's error (and its cause).
type waitError struct {
	key   string
	cause error
}

func (e *waitError) Error() string {
	return fmt.Sprintf("fencedlock: %q not acquired: %v", e.key, e.cause)
}

func (e *waitError) Unwrap() []error { return []error{ErrNotAcquired, e.cause} }

// lostError is the cause of a lost lease: ErrLeaseLost and the reason.
type lostError struct {
	key    string
	reason error
}

func (e *lostError) Error() string {
	return fmt.Sprintf("fencedlock: lease on %q lost: %v", e.key, e.reason)
}

func (e *lostError) Unwrap() []error { return []error{ErrLeaseLost, e.reason} }

func invalidf(format string, args ...any) error {
	return fmt.Errorf("fencedlock: "+format+": %w", append(args, ErrInvalid)...)
}
