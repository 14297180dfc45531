package driver

import (
	"context"
	"time"

	"github.com/fencedlock/fencedlock/fencing"
)

// Elector is implemented by backends that hold elections (package
// election builds Campaign, Leader and Observe on it). An election on key
// is key's lock: each lease granted on key is a term, its fence is the
// term's fence, and the leader's value is stored with the term by
// Proclaim. A term begins when Proclaim for it succeeds and ends with its
// lease (released, expired, invalidated).
//
// Besides the [Backend] contract on key, an Elector must guarantee:
//
//   - Proclaim stores a value only for the live lease of key that carries
//     the given fence and holder id, atomically with that check; a value
//     belongs to its term and is never reported with another term, earlier
//     or later;
//   - Leader and WatchLeader report a term only while its lease is live on
//     the server (at most ExpirySlack late, as for Acquire) and only after
//     its Proclaim was applied: never two terms at once, since the lock is
//     exclusive;
//   - WatchLeader delivers the states of key in the order the server
//     applied them, each change of leader once, never a term with a lower
//     fence after one with a higher fence; when it cannot deliver a change
//     (a slow receiver, a compacted history, a reconnect) the next event
//     it delivers carries the current state and Missed set.
//
// The fences of terms are the lock's fences: strictly increasing over all
// terms of key, so a resigned or expired leader's writes are rejected by
// any guard of package fencing that has seen a later term's fence.
type Elector interface {
	// Proclaim stores value as the leader's value of the term of key whose
	// fence is fence and whose holder id is holder (see [HolderID]), if,
	// and only if, that lease still holds key. Otherwise it stores nothing
	// and returns an error wrapping [ErrNotHeld].
	Proclaim(ctx context.Context, key string, fence fencing.Token, holder string, value []byte) error

	// Leader reports key's current term, or a LeaderInfo with Held false if
	// no term is live. It changes nothing.
	Leader(ctx context.Context, key string) (LeaderInfo, error)

	// WatchLeader starts watching key's terms. The channel first receives
	// key's state when the watch took effect, then every change of leader
	// (a term beginning, a term ending) in order; it is closed when ctx is
	// done, stop is called or the backend is closed. stop ends the watch
	// and must be called exactly once.
	WatchLeader(ctx context.Context, key string) (events <-chan LeaderEvent, stop func(), err error)
}

// LeaderInfo is the state of an election as an [Elector] reports it. It
// never carries the leader's owner token.
type LeaderInfo struct {
	Held   bool          // a term is live
	Fence  fencing.Token // the term's fence, if Held
	Holder string        // the leader's holder id (see [HolderID]), if Held
	Value  []byte        // the leader's value, stored by Proclaim, if Held
	TTL    time.Duration // the term's remaining lease when read, if Held
}

// LeaderEvent is one state delivered by [Elector.WatchLeader].
type LeaderEvent struct {
	LeaderInfo
	// Missed reports that changes of leader before this one may not have
	// been delivered: this event is the state after them.
	Missed bool
}
