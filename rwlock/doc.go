// Package rwlock is a fenced read-write lock on any backend that
// implements [driver.RWLocker] (backend/memory, backend/redis,
// backend/goredis, backend/etcd): many readers or one writer hold a name
// at once.
//
//   - [RWLock.RLock] and [RWLock.Lock] return a [Lease] that is a
//     [fencedlock.Lease]: each mode is run by a Locker of its own over a
//     view of the backend, so the watchdog renews it, its Context ends
//     before its local deadline, Err reports a loss, a grant that came
//     back too late is refused and released.
//   - One fence counter per name, incremented by every grant, read or
//     write: a writer's fence is greater than the fence of every lease
//     granted before it. A resource that accepts writes only with the
//     newest fence (the guards of package fencing) rejects a writer that
//     lost its lease while a reader or another writer came in. Readers'
//     fences order readers and writers too: a resource that records each
//     reader's fence on read can reject a reader that resumes after a
//     writer was granted (its fence is below the writer's); where reads
//     have no side effects this does not matter.
//   - Writer preference: a writer that is refused registers an intent on
//     the server, refreshed by each of its attempts; while an intent is
//     live no new reader is granted, so readers cannot starve a writer.
//     A writer that gives up removes its intent; if that fails (the
//     server unreachable, the process dead) the intent expires: new
//     readers are kept out for [RWLock.Intent] after its last attempt
//     (plus what the backend adds, see there). Readers can wait behind a
//     stream of writers.
//
// See docs/rwlock.md for the design and each backend's implementation.
package rwlock
