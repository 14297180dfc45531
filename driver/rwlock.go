package driver

import (
	"context"
	"time"

	"github.com/fencedlock/fencedlock/fencing"
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
	// keeps the writer's intent past the END of this attempt (each attempt
	// refreshes it): while any intent is live no new reader is granted. A
	// backend whose attempt goes on after it wrote the intent (Redis's
	// WAIT with WaitReplicas, up to WaitTimeout) keeps it that much
	// longer, so that the intent outlives the pause before the writer's
	// next attempt. Zero registers none.
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
//   - writer preference: a writer refused registers its intent, kept at
//     least req.Intent past the end of the attempt (the same owner's
//     intent is replaced, not added), and a
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

// RWInspector is implemented by [RWLocker]s that can describe a
// read-write lock without changing it, for tools such as `fencedlock
// inspect`. It is optional: a backend without it holds read-write locks
// all the same.
type RWInspector interface {
	// InspectRW reports the state of the read-write lock name (not the
	// plain lock of the same name). It must not return owner tokens.
	InspectRW(ctx context.Context, name string) (RWInfo, error)
}

// RWInfo is the state of a read-write lock's name as an [RWInspector]
// sees it: its live leases, never an owner token.
type RWInfo struct {
	Writer  *RWLease  // the writer, if one holds the name
	Readers []RWLease // the readers, by fence ascending
	// Intents is the number of live intents of waiting writers (while one
	// is live no new reader is granted).
	Intents int
	// Fence is the last fence granted on the name, read or write, where
	// the backend keeps it (Redis, memory); 0 where it does not (etcd).
	Fence fencing.Token
}

// Held reports whether some reader or writer holds the name.
func (i RWInfo) Held() bool { return i.Writer != nil || len(i.Readers) > 0 }

// RWLease is one live lease of a read-write lock.
type RWLease struct {
	Holder string        // the holder id of its owner (see [HolderID])
	Fence  fencing.Token // the lease's fence
	TTL    time.Duration // its remaining lease when read
}
