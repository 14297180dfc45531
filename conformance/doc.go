// Package conformance checks a [driver.Backend] against its contract.
// Run it from a test of your backend:
//
//	func TestConformance(t *testing.T) {
//		conformance.Run(t, func(t *testing.T) conformance.Harness {
//			return newHarness(t) // a fresh store (or a fresh namespace in one)
//		})
//	}
//
// and run it with the race detector: go test -race.
//
// # The harness
//
// [Run] calls its factory once per property, with that property's
// *testing.T (register cleanups on it). The [Harness] it returns gives the
// suite independent backends over one shared store, as if each ran in its
// own process (NewBackend: own connections, sessions and caches, never a
// shared client-side state), deletes or revokes a key behind its holder's
// back (Invalidate: as an operator, an eviction or a failover would, keeping
// the key's fence history), and describes the backend's timing in a
// [Config]: the shortest TTL it enforces precisely (the renewal and expiry
// properties use it; etcd needs seconds) and how late after a TTL the store
// may still report a key held. Optionally the harness can end a lease at once
// ([Expirer]), provide a resource guard on the same store ([GuardMaker];
// without one the suite guards an in-process value with [fencing.Guard]),
// and make backends whose responses are delayed ([Delayer]; [DelayReads]
// delays a net.Conn): without a Delayer, SentIsSendTime runs without
// latency and cannot tell a send time from a receive time. A
// [FaultInjector] makes a backend whose way to the store refuses requests,
// delays replies or loses them after the store applied the request
// ([Faults]), a [Corrupter] puts a foreign value in place of a lock, and a
// [FenceCorrupter] writes and reads a key's fence record, and a
// [WriteRefuser] makes the store refuse writes: without them StoreFaults,
// ForeignValue, FenceRecord and WriteRefused have nothing to check.
//
// # What it checks
//
// One subtest per property, each logging a sentence saying what it checks,
// each with unique keys, its own deadline (Config.Timeout) and a watchdog
// that panics with every goroutine's stack rather than hang. GUIDE.md maps
// every clause of the contract to the property that checks it:
//
//   - TryAcquire: a free key is taken with a non-zero fence; a held key
//     fails with ErrNotAcquired (and a RetryAfter no longer than the
//     holder's lease), from another backend or the same one; the key is
//     taken again after Release with a greater fence.
//   - MutualExclusion: 3 backends x 3 goroutines contend for one key; at no
//     moment are two leases valid (not lost, before their local deadline),
//     and every holder's fence is greater than the previous one's.
//   - FenceIncreasing: fences grow strictly across holders, backends,
//     releases, out-of-band invalidations and expiries.
//   - RenewKeepsLease: the watchdog keeps a lease past 3x its TTL, and the
//     driver's Renew called directly keeps one past its TTL; no one else
//     gets in meanwhile.
//   - RenewTTL: Renew sets the lease to the TTL it returns from when it was
//     sent (to ttl from now, not by ttl): after one renewal, or three in a
//     row, and no more, the key stays held that long and is free within
//     ExpirySlack after.
//   - ExpiryWithoutRenew: an unrenewed lease lets another backend in within
//     TTL + ExpirySlack of the holder's request's return, never before its
//     TTL from its sending, and
//     the holder sees the lease lost.
//   - WaiterAfterCrash: a Locker.Acquire with a long lease (40x MinTTL)
//     waiting behind a holder that crashed (its lease of MinTTL never
//     renewed nor released) is granted the key with a greater fence within
//     TTL + ExpirySlack of the holder's grant, never before its TTL: an
//     expiry is not announced, and a wait that looks at the key again only
//     at an interval derived from the waiter's own lease (a WaitAcquirer
//     refreshing its place every third of its TTL) leaves the key to no
//     one meanwhile.
//   - LeaseLengths: leases of MinTTL and 5x MinTTL from one client, asked
//     in either order, renewed from one to the other, or met by another
//     owner's failed Acquire or Renew with another TTL, are each held for
//     the TTL asked and free within ExpirySlack after (a store that caps
//     long leases, applies one TTL to every lease of a client, or lets a
//     refused request change the holder's lease fails). The holder's own
//     Acquire again (a retry whose first reply was lost) is refused with
//     ErrNotAcquired, changing nothing, or granted its fence again with
//     the lease set to the TTL asked.
//   - InvalidationReported: a key removed out of band ends its lease's
//     Context (cause ErrLeaseLost) within TTL + renew interval; a manual
//     Renew reports ErrNotHeld at once.
//   - ReleaseAfterLoss: Release after loss (invalidated, or expired with
//     the key untouched since), a double Release and a Release of a
//     never-held key return ErrNotHeld and delete nothing; the holder's
//     Release of Grant{Key, Owner} frees the key.
//   - RenewAfterLoss: Renew by an owner that lost the key (invalidated, or
//     expired) returns ErrNotHeld and neither recreates the key nor touches
//     another holder's lock.
//   - ReleaseRacesExpiry: Releases racing their lease's expiry while
//     another owner polls (rounds of 24, until 24 of them started in the
//     last 2ms of their lease; one round if MinTTL is a second or more)
//     never delete the new owner's lock.
//   - RenewRaces: renewals racing their owner's Release, and racing a
//     take-over (the key invalidated and taken by another owner), never
//     recreate the released key nor overwrite the new holder's lock; a
//     renewal sent after either returned fails with ErrNotHeld.
//   - LateRelease: a holder paused past its lease releases late and does not
//     delete its successor's lock.
//   - CancelledAcquire: an Acquire whose context ends returns promptly an
//     error that is both ErrNotAcquired and the context's error, and leaves
//     nothing behind; for a queueing backend, a cancelled waiter does not
//     hold up the queue.
//   - CancelledAttempt: a Backend.Acquire of a free key cancelled at a
//     random point of its round trip returns a grant or an error that is
//     not ErrNotAcquired without the context's error, and its owner's
//     Release of Grant{Key, Owner} leaves the key free; a Renew cut likewise
//     leaves the key held by its owner.
//   - StoreFaults: with a FaultInjector harness, a request refused on its
//     way, applied with its reply lost, or answered after its context
//     ended is reported promptly as a transient error or the context's
//     (never ErrPermanent, "held" or "not held"), and the store's state
//     afterwards is the request's (nothing, or what it applied).
//   - ForeignValue: with a Corrupter harness, a lock holding a value the
//     backend never wrote makes Acquire fail with ErrPermanent (not "held
//     by another"), and its owner's Renew and Release fail and change
//     nothing; with an [ExpiryCorrupter] harness, so does a lock record
//     of the backend's format that never expires.
//   - Residue: with a [RecordLister] harness, every record the store holds
//     for a key but its fence record expires, after a grant, a release,
//     the clean-up Release of Grant{Key, Owner} (of the holder, of an
//     owner whose Acquire never arrived, of another owner while the key
//     is held) and a waiter that gave up.
//   - FenceRecord: with a FenceCorrupter harness, a fence record the
//     backend never writes (another type, not a number, below 1, at or
//     above the greatest fence, expiring) makes Acquire of the free key,
//     and a WaitAcquirer's waiter on a Release's hand-off, fail with
//     ErrPermanent, grant nothing and leave the record as it was; the
//     holder's repeated Acquire of a held key with such a record, or
//     with its record deleted, is refused so (or as held) or granted the
//     holder's own fence; a valid
//     record's next grant is above it (at most the greatest fence).
//   - WriteRefused: with a WriteRefuser harness, while the store refuses
//     writes (out of memory, read-only), Acquire of a free key fails with
//     an error that is not ErrNotAcquired and takes nothing; Acquire of a
//     held key grants nothing, and its holder keeps it.
//   - SentIsSendTime: Grant.Sent, Renewal.Sent and the TTLs reported with
//     them never overstate a lease: with responses delayed (a Delayer),
//     another owner never gets the key before the holder's local deadline.
//   - PausedHolder: the paused holder's late write with its old fence is
//     rejected by the guard with fencing.ErrStale; the same fence from
//     another holder is rejected too.
//   - AwkwardKeys: keys with slashes, Unicode, braces ("{x}", a leading "}"),
//     spaces, NUL and invalid UTF-8 bytes, differing only in case, and of
//     exactly MaxKeyLen bytes are distinct working keys; "" and MaxKeyLen+1
//     bytes fail with ErrInvalid.
//   - Close: Close is idempotent, calls after it fail with ErrClosed, other
//     backends keep working; a Locker's Close releases its leases.
//
// Optional capabilities are found by type assertion on a backend and
// checked when present, including their agreement with the base methods:
//
//   - Notifier: a release wakes a watcher (the watch is in effect when
//     Watch returns, a wake-up while the watcher is not receiving is
//     kept, and stopping one watch of a key leaves another in effect), and
//     a waiting Locker.Acquire, well before the holder's TTL;
//     the woken waiter can take the key.
//   - WaitAcquirer: AcquireWait is exclusive with Acquire, blocks while the
//     key is held, grants a greater fence, serves waiters in FIFO order
//     (also after a waiter left the queue: it takes only its own place),
//     grants a waiter that waited longer than its TTL a live lease, and a
//     cancel racing the grant leaves no trace.
//   - NoOvertake: with a WaitAcquirer backend, a plain Acquire is
//     refused while a waiter queued by AcquireWait waits, also once the
//     holder's lease expired: the waiter is granted first.
//   - SilentWaiter: with a WaitAcquirer and Inspector backend and a
//     FaultInjector harness, a queued waiter whose requests stop reaching
//     the store keeps its place at most max(its TTL,
//     Config.QueuePlaceTTL) + ExpirySlack; a release after that hands the
//     key to the waiter behind it, never to the silent one.
//   - TryFirstWaiter: TryFirst does not block; AcquireWaitHeld, called as
//     the Locker calls it (after an Acquire of the same request that did
//     not take the key), blocks while another owner holds the key and
//     grants a greater fence after the release; after an Acquire that was
//     applied with its reply lost it grants req.Owner the key at once, with
//     that Acquire's fence, even with another waiter queued; a context
//     that ends makes it return promptly an error wrapping the context's
//     error, leaving no trace (the next waiter is granted at the release),
//     also when the cancel races the grant.
//   - Inspector: Inspect agrees with Acquire on whether a key is held and on
//     its fence, and never reveals the owner token.
//   - KeepAliver: KeepAlive keeps a key held past its TTL, closes its
//     channel when its context ends, and reports an invalidated key; a
//     KeepAliveStopper's stop has closed the channel when it returns, and
//     the key is no longer kept alive.
//   - ForceReleaser: ForceRelease breaks a held key at once (the holder's
//     Renew and Release report ErrNotHeld, its Locker the loss by its next
//     renewal), reports the broken fence, and every later grant, a queued
//     waiter's too, is above the consumed fence ForceResult.After.
//   - ElectionProclaim: an Elector stores a leader's value only for the
//     live term of its fence and holder id; Leader reports that term and
//     no other, refuses a late Proclaim of an ended term, and reports none
//     once the term ended.
//   - ElectionFences: the terms' fences Leader reports are their lease
//     fences, strictly increasing over releases, invalidations, expiries.
//   - ElectionObserve: WatchLeader delivers the starting state, then every
//     term beginning and ending in order, never an older term after a
//     newer one (or marks Missed), and ends when stopped.
//   - MultiAllOrNothing: a MultiLocker takes a set with one key held by
//     another owner not at all (a HeldError names the key), and a free set
//     whole, each key with a fence above its earlier ones; ReleaseMulti
//     frees every key and keeps the fences' history.
//   - MultiOneLease: once one key of a held set is invalidated, RenewMulti
//     fails every time with ErrNotHeld and a LostKeyError naming a key of
//     the set that is gone, and ReleaseMulti reports it: the set has one
//     lease.
//   - RWExclusion: an RWLocker's readers of a name share it, a writer is
//     refused while a reader or a writer holds it and a reader while a
//     writer does; renew and release are owner- and mode-checked.
//   - RWFences: the fences of successive grants of a name, readers and
//     writers, are strictly increasing.
//   - RWWriterPreference: a writer refused with an intent keeps new readers
//     out while the intent is live, is granted once the readers left, and
//     its grant and release end the intent.
//   - RWInspect: an RWInspector's InspectRW reports each live reader and
//     writer with its holder id, fence and a TTL within its lease, a
//     refused writer's intent, and not a released or expired lease; it
//     changes nothing.
//   - SemaphoreLimit: callers of limits 2 and 4 contending for one
//     semaphore (package semaphore, whose permits are the leases of slot
//     locks) never hold more than 4 valid permits, nor more than 2 of
//     slots 0..1, nor two of one slot, nor a slot at or above their limit;
//     each slot's fences increase.
//   - SemaphoreSlotFences: the permits of one slot, taken in turn from
//     several backends and ended by release or invalidation, carry
//     strictly increasing fences.
//   - SemaphoreCrashedPermit: a crashed holder's permits come back at
//     their TTL: another backend gets one, with a greater fence, within
//     TTL + ExpirySlack and not before the TTL.
//   - SemaphoreSlotAcquire: a [driver.SlotAcquirer] takes the first free
//     key in the order given, never a held one, gives an owner its own key
//     again (never a second), grants fences above every earlier fence of
//     the key, and a clean-up Release of Key and Owner frees what it took.
//
// # What a failure means
//
// A failing property is a real violation of the contract: the suite does
// not fail a correct backend because of slowness. Where it bounds time from
// above it bounds what the contract bounds (an attempt sent after TTL +
// ExpirySlack must succeed; a loss must be reported within TTL + renew
// interval), plus an allowance for scheduling delays that grows with the
// scheduling lateness measured while the property runs (logged at its end),
// and its mutual exclusion check only counts leases that their holders
// still consider valid. Leases that must not run out during a check are 20x
// MinTTL long; only the renewal and expiry properties use MinTTL itself.
// RenewKeepsLease, RenewTTL and ExpiryWithoutRenew record when every
// request was sent and returned and fail only on a measured violation (a
// key free, or a renewal refused, before the lease a confirmed request set
// ran out); a run in which the suite's own requests came too late to
// decide (a renewal after the lease ran out, a poller descheduled across
// the moment the key became free) is retried, at most twice, each time
// with a TTL long enough for the lateness just measured (8x it, at least
// 3x the previous TTL), and the log says so. Two checks rest on stated assumptions: that
// the store's clock runs at the rate of the test's clock (within 1%), and,
// for the FIFO check of a WaitAcquirer, that a waiter is queued within
// Config.QueueDelay (the check retries once with 4x that delay before it
// fails). Timing can make the suite miss a bug (a race that did not happen
// in this run): it may give false negatives, so run it often and under
// -race.
//
// The suite's own tests show it can fail: they run it on deliberately
// broken variants of a small reference backend, each reproducing a bug
// class of real lock libraries (release or renew without the owner check,
// a fence that repeats or restarts after release, no TTL, a lost lease never
// reported, a renewal that adds to the lease, a release whose check and
// delete are two requests, a send time taken at the response, a waiter
// granted after its lease ran out, a waiter that queues behind its own
// grant whose reply was lost, a guard that accepts an older token,
// check-then-set acquire, ...), and check that each is reported by the
// property meant to catch it, and for most by that property alone.
//
// # Writing a backend
//
// GUIDE.md in this directory is a short guide to writing a backend and
// running this suite on it; example_postgres_test.go is a complete backend
// on a plain PostgreSQL table that passes the suite against a real server.
package conformance
