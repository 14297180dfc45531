package driver

import (
	"errors"
	"fmt"
	"time"
)

var (
	// ErrNotAcquired means the lock is held by another owner. A wait ended
	// by its context returns an error that is both ErrNotAcquired and the
	// context's error.
	ErrNotAcquired = errors.New("fencedlock: not acquired")

	// ErrNotHeld is returned by Renew and Release when the caller's owner
	// token no longer holds the key. Nothing was changed on the server.
	ErrNotHeld = errors.New("fencedlock: not held")

	// ErrClosed is returned by every call on a closed Locker or backend.
	ErrClosed = errors.New("fencedlock: closed")

	// ErrInvalid is wrapped by every error about invalid input: keys, TTLs,
	// options. Nothing was sent to the backend.
	ErrInvalid = errors.New("fencedlock: invalid argument")

	// ErrPermanent is wrapped by backend errors that no retry can fix: the
	// store refused the request for a reason that lasts until an operator
	// acts (a key holding a value fencedlock did not write, a lock without
	// a TTL, missing permissions, failed authentication). [fencedlock.Locker.Acquire]
	// returns such an error at once instead of retrying it, and a renewal
	// failing with it reports the lease lost at once.
	ErrPermanent = errors.New("fencedlock: permanent failure")
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

func invalidf(format string, args ...any) error {
	return fmt.Errorf("fencedlock: "+format+": %w", append(args, ErrInvalid)...)
}
