// Package election is fenced leader election on any backend that
// implements [driver.Elector] (backend/memory, backend/etcd,
// backend/redis and backend/goredis today).
//
// An election is the lock of its name, and each term is a lease on it:
//
//   - [Election.Campaign] blocks until the caller leads, as
//     [fencedlock.Locker.Acquire] blocks until it holds, then stores the
//     leader's value with the term and returns the [Term]. A Term is a
//     [fencedlock.Lease]: renewed by the watchdog, its Context ends before
//     the term's local deadline, Err reports a loss, and [Term.Resign]
//     (Release) ends it. A Campaign whose context ends leaves nothing
//     behind: no queued waiter, no term.
//   - The term's fence (Term.Fence, the lease's [fencing.Token]) is
//     strictly greater than the fence of every earlier term of the name,
//     so a resigned, expired or paused leader's late writes are rejected
//     by the guards of package fencing (a [fencing.Store] such as
//     memory.FencedStore, etcd's or Redis' FencedStore) once a later
//     leader wrote.
//   - [Election.Leader] reads the current term: its value, fence, holder
//     id and remaining TTL, or [ErrNoLeader].
//   - [Election.Observe] delivers the current state and then every change
//     of leader (a term beginning, a term ending) in order; it never
//     delivers a term older than one it delivered, and an [Event] with
//     Missed set says changes may have been missed before it.
//
// A term begins when its value is stored, after its lease was granted:
// Leader and Observe do not report a lease whose Campaign has not stored
// its value yet. Two terms are never live at once, because the lock is
// exclusive; a leader that must not act after its term ended checks
// Term.Err, or better, writes through a guard with Term.Fence.
//
// An election's name is its lock key: do not Acquire the same key with a
// Locker on the same store.
package election
