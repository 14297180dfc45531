package driver

import (
	"context"
	"time"
)

// RWMode is the mode of a read-write lock's lease: shared or exclusive.
type RWMode uint8

const (
	// Read is a shared lease: any number of readers hold a name at once,
	// never with a writer.
	Read RWMode = iota + 1
	// Write is an exclusive lease: one writer holds a name, with no reader.
	Write
)

// String returns "read" or "write".
func (m RWMode) String() string {
	switch m {
	case Read:
		return "read"
	case Write:
		return "write"
	}
	return "invalid"
}

// RWRequest is the input of [RWLocker.AcquireRW]: an [AcquireRequest]
// (Key is the read-write lock's name) with a mode and, for a writer, how
// long its intent outlives this attempt.
type RWRequest struct {
	AcquireRequest
	Mode RWMode
	// Intent is, for a writer the name is refused to, how long the server
	// keeps the writer's intent (refreshed by each attempt): while any
	// intent is live no new reader is granted. Zero registers none.
	Intent time.Duration
}

// RWLocker is implemented by backends that hold read-write locks (package
// rwlock runs a [fencedlock.Locker] on one view of it per mode, so every
// lease guarantee of the lock holds for readers and writers). A
// read-write lock's name lives beside the plain lock of the same name and
// never conflicts with it. Besides the [Backend] contract for each mode,
// an RWLocker must guarantee, for each name:
//
//   - never a writer with a live lease and another live lease (reader or
//     writer) at once; any number of readers at once;
//   - one fence counter shared by readers and writers, incremented by
//     every grant: a grant's fence is strictly greater than the fence of
//     every grant before it, reader or writer;
//   - writer preference: a writer refused registers its intent for
//     req.Intent (the same owner's intent is replaced, not added), and a
//     reader is refused while a live intent exists; a writer's grant, and
//     its Release (also the clean-up Release of Key and Owner only),
//     remove its intent.
type RWLocker interface {
	// AcquireRW makes one attempt to take req.Key in req.Mode, as
	// [Backend.Acquire] does; an error wrapping [ErrNotAcquired] (a
	// *[HeldError]) when the mode conflicts with a live lease or a reader
	// meets a writer's intent.
	AcquireRW(ctx context.Context, req RWRequest) (Grant, error)

	// RenewRW extends g's lease of mode m as [Backend.Renew] does.
	RenewRW(ctx context.Context, g Grant, m RWMode, ttl time.Duration) (time.Duration, error)

	// ReleaseRW ends g's lease of mode m as [Backend.Release] does (a
	// Grant of Key and Owner only also cleans up an Acquire whose outcome
	// is unknown), and wakes the name's watchers (see [Notifier]: the
	// watch of a read-write lock's name is the backend's Watch of Key).
	ReleaseRW(ctx context.Context, g Grant, m RWMode) error
}
