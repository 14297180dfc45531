// Package semaphore is a fenced counting semaphore on any
// [driver.Backend]: at most limit permits of a name are valid at once,
// and each permit carries a slot and a fence.
//
// A semaphore of limit N is N locks, one per slot (see [SlotKey]), and a
// permit is the lease of one of them:
//
//   - [Semaphore.Acquire] blocks until one slot in 0..limit-1 is free and
//     takes it. The [Permit] is a [fencedlock.Lease]: renewed by the
//     watchdog, its Context ends before its local deadline, Err reports a
//     loss, Release gives the permit back. A crashed holder's permit comes
//     back when its TTL runs out on the server. An Acquire whose context
//     ends leaves no slot taken (an attempt of unknown outcome is cleaned
//     up, within the Locker's ReleaseTimeout; a clean-up that cannot reach
//     the server is logged, and the slot comes back at its TTL).
//   - A permit names its slot (Permit.Slot) and its fence (Permit.Fence)
//     is strictly greater than the fence of every earlier permit of that
//     slot: a resource partitioned by slot rejects the late writes of a
//     stale holder of its slot (released, expired, paused) with the guards
//     of package fencing ([fencing.Store], memory.FencedStore, etcd's
//     FencedStore), keyed by slot.
//   - Never more than limit valid permits at once: each valid permit holds
//     a distinct slot lock below limit, and a lock has at most one valid
//     lease (its local deadline lies before the server could grant it to
//     anyone else).
//   - Waiters are woken by release where the backend is a
//     [driver.Notifier] (each waiter watches the slots it may take; a
//     release wakes the waiters of that semaphore, which try again), and
//     poll with the Locker's backoff elsewhere. Where the backend's lock is
//     FIFO (Redis, etcd, PostgreSQL's Fair), waiters queue on [QueueKey]
//     and get permits in the order they began to wait, only the first of
//     them trying the slots; elsewhere the order is not FIFO.
//
// Callers need not agree on the limit: a caller only takes slots below its
// own limit, so for every L the valid permits of slots 0..L-1 are at most
// L, and the valid permits of a name are at most the largest limit any
// caller passes. This needs no limit stored on the server and no
// refusal to race on; its cost is that lowering the limit takes full
// effect only when the permits of the higher slots are released.
//
// On a [driver.SlotAcquirer] (memory; Redis with either client, except
// on a Redis Cluster or with WaitReplicas) an attempt above limit 1 takes
// the first free slot in one step, one round trip on Redis, however many
// slots are held; elsewhere it tries the slots one at a time. The permit
// is a Lease either way.
//
// A semaphore's slot keys are lock keys: do not Acquire them with a
// Locker on the same store.
package semaphore
