// Package etcd is a [driver.Backend] on etcd (go.etcd.io/etcd/client/v3),
// for deployments that need the lock to survive a failover: every grant,
// renewal and release goes through Raft.
//
// Most code should use [fencedlock.Locker] on top of it; only the
// constructor differs from the other backends:
//
//	b, err := etcd.New(client, etcd.Options{})   // client is a *clientv3.Client
//	defer b.Close()                              // Locker.Close does not close b
//	locker, err := fencedlock.New(b, fencedlock.Options{TTL: 10 * time.Second})
//
// The etcd client prints its own JSON log on standard error by default,
// including warnings for outcomes the Locker expects (a failed attempt it
// retries, the revocation of a lease that expired while the process was
// paused). [ClientLogger] routes the client's log to an [slog.Logger] with
// those demoted to DEBUG: set clientv3.Config.Logger to it.
//
// # Keys
//
// For a lock named key, every holder and waiter owns one etcd key
//
//	<KeyPrefix>locks/<escaped key>/<lease id>
//
// where the escaped key is [url.PathEscape] of the lock name (so "a" and
// "a/b" never share a directory) and the lease id is the ID of the key's
// lease in 16 hex digits. The value is the holder id,
// [driver.HolderID] of the owner token: non-secret, unique per
// acquisition, and computable from the owner alone, so a release without
// the grant's private data still finds its key (the entry whose value it
// is). Each key is attached to its own lease, so etcd deletes it when the
// lease ends; a lease carries at most one key at a time, so the name is
// unique. Naming the key by its lease rather than by its holder lets a
// pooled lease reuse its names: etcd's index keeps every name ever created
// in a directory until the next compaction, and every read of the queue
// visits them all, so a new name per acquisition made each acquire of a
// busy lock slower than the last (the server CPU of a cycle at 1,000
// cycles/s grew with every cycle since the last compaction).
//
// # Fences, the queue, and hand-off
//
// The holder of a lock is the key of its directory with the lowest create
// revision; the others wait in create-revision order (FIFO), as etcd's own
// concurrency.Mutex does. The fence of a grant is the create revision of its
// key, a cluster-wide monotonic counter kept by Raft, so every later holder
// (whose key was created later) gets a greater fence, across clients,
// members and leader changes. The lease ID is never used as a fence: it is
// not monotonic.
//
// [Backend.Acquire] (one attempt, [fencedlock.Locker.TryAcquire]) is a Txn
// that creates our key only if the directory is empty (every CreateRevision
// in it is 0): it fails when anyone holds the lock or waits for it, so it
// never jumps the queue, and it leaves nothing behind (its lease is revoked
// at once).
//
// [Backend.AcquireWait] ([fencedlock.Locker.Acquire]) creates its key and
// reads the names of the queue's entries in the same Txn: if ours is the
// only one, it holds the lock. Otherwise every other entry is ahead of
// ours (a new entry's create revision is always the highest), and the
// waiter waits until the Backend's one deletion watch (see below), whose
// events arrive in revision order, has reported each of them deleted
// while our own entry was not: it then holds the lock at the revision of
// that last deletion, learnt from the event itself, with no further
// request (a hand-off costs the next holder nothing but that one watch
// event). Deletions the watch reported before the waiter subscribed come
// from its log of recent deletions; when the watch (re)starts, or its log
// does not reach back far enough, the waiter re-reads the entries ahead of
// it in one Txn that also checks that its own entry still carries its
// create revision, and takes out the deletions reported since. No waiter
// watches a key of its own, and none needs the watch to start at a past
// revision (etcd serves that through its unsynced-watcher path, caught up
// only every 100 ms: under contention that delay was the whole hand-off
// time). Because the waiter's own entry is checked at the revision at which
// it is told it holds the lock, a waiter whose lease expired (or was
// revoked) while it waited is never told it holds the lock: the bug
// Jepsen found in etcd 3.4.3 (etcd issue #11456). Such a waiter starts
// over with a new lease at the end of the queue; so does a waiter after a
// transient error (no leader, connection lost), after a backoff. A wait
// ended by its context, or by Close, revokes its lease, which deletes its
// queue entry.
//
// [Backend.Release] is a Txn that deletes our key only if it still carries
// our create revision; it never deletes another holder's key. That Txn
// alone decides the outcome and frees the lock, so Release returns after
// it. Our lease, which carried only that key, then goes back to the
// Backend's pool of idle leases (see below); if the Txn failed, or found
// the key already gone, the lease is revoked in the background instead
// ([Backend.Close] waits for those revocations). A single LeaseRevoke
// would also delete our key, but its answer does not say whether the key
// still existed (an operator may have deleted it while the lease lived,
// letting the next waiter in), so it cannot tell the caller
// [fencedlock.ErrNotHeld] reliably; the Txn can.
//
// # Release notifications
//
// The Backend is a [driver.Notifier] for the waiters that have no queue
// on the server (semaphore slots, sets of keys, read-write locks):
// [Backend.Watch] of a name is woken by the deletion of any entry of its
// lock queue or any key of its read-write lock. Every Watch of a Backend
// shares the deletion watch of "locks/" (below, which the lock's own
// waiters and holders use too) and one watch of "rwlocks/" (started on
// first use, deletions only, from the current revision), so a waiter
// costs the server no watcher of its own; a (re)start of one of them
// wakes every Watch, since a deletion may have been missed meanwhile.
//
// # Elections
//
// An election's terms are the grants of its lock (election.go); the
// leader's value is a record of its own under "elections/", reported
// only while the queue head carries the record's fence, so a record
// outlives its term without being reported. A Campaign whose Proclaim
// was applied but reported failed (a lost reply) releases its lease; if
// that release fails too, the Backend revokes the lease in the
// background, as after any failed release (bounded by CleanupTimeout),
// which deletes the queue head: no Leader or WatchLeader reports the
// record from then on, long before the lease would expire (clustertest's
// TestCampaignFailedCleanupHidesRecord). Only if the revocation fails as
// well (the cluster unreachable for CleanupTimeout) is the term reported
// until its lease expires, at most its TTL after its last renewal (the
// Locker stops renewing before it releases): no request could reach the
// cluster sooner. A leader record that Proclaim did not write vouches for
// no term: Leader returns an error wrapping [driver.ErrPermanent], and
// WatchLeader delivers no leader, marked Missed, and reads the state
// again when the record is rewritten.
//
// # One lease per grant, from a pool
//
// Every held lock (and every waiter) has a lease of its own rather than
// sharing one lease per Backend. Reasons:
//
//   - Isolation of loss: a lease that expires, is revoked by an operator
//     (etcdctl lease revoke) or cannot be renewed takes exactly one lock with
//     it. With a shared lease, one missed renewal or one revocation would drop
//     every lock of the process at once, and a waiter's expiry would also end
//     the locks it already holds.
//   - The TTL is the one the Locker asked for, per grant; a shared lease has
//     one TTL fixed when it is created.
//
// A LeaseGrant and a LeaseRevoke per lock would each cost a Raft proposal
// (LeaseGrant cannot be part of a Txn), doubling the server's work per
// lock. So a released lock's lease, which carries no key once the release
// Txn deleted ours, goes back to a pool of idle leases (one pool per TTL
// in whole seconds) and the next grant of that TTL reuses it: an
// uncontended acquire is one Txn, a release one Txn, as with a Mutex on a
// shared session, and only the first acquisitions (or those above the
// peak number held at once) grant a lease. A lease is pooled only when a
// Txn proved it carries no key, and only once per grant; a lease idle for
// a tenth of its TTL or more is renewed (one keepalive, no Raft proposal)
// before reuse, so the grant's Sent is fresh; an idle lease revoked by
// someone else makes the acquire's Txn fail as a whole and the acquire
// starts again on a new lease. [Backend.Close] revokes the idle leases.
// The invariants are at the top of pool.go.
//
// # Renewal and loss
//
// The Backend implements [driver.KeepAliver]: the Locker runs no renew
// loop of its own. Each held lease is kept alive with etcd's lease keepalive
// RPC, one request every AcquireRequest.RenewInterval (the Locker's
// RenewInterval; TTL/3 by default) on a schedule this package owns, and every
// confirmed renewal is reported with the moment its request was sent, so
// the Locker's local deadline (send time + TTL - safety margin) never lies
// past the server's expiry.
//
// All leases of a Backend share eight long-lived LeaseKeepAlive streams
// (etcdserverpb.LeaseClient on the client's connection, with
// WithRequireLeader as clientv3's own keepalive uses), each opened on first
// use and again after it ends; a lease always uses the stream chosen by a
// hash of its ID. Not one stream, because the server answers a stream's
// requests one by one, and a member that is not the leader forwards each
// renewal to the leader over HTTP: one stream would cap a client at one
// renewal per forwarding round trip (200 leases at TTL 2 s were lost that
// way on the test cluster). No goroutine runs per lease: each stream has
// one scheduler, a heap of its leases by due time, which sends every
// renewal due within the next TTL/6 in one batch (early, never late), and
// the stream's receiver hands each answer to its lease. Since each stream is answered
// in order, answers are matched to requests in send order (an answer for
// another lease ID than the oldest unanswered request ends the stream);
// each request's send time is taken before it is sent, and a request whose
// sender gave up stays queued, so a late response is only ever matched to
// the request it answers, never to a later one. When the stream ends every unanswered request fails (a
// transient error, retried on a new stream), and a stream on which nothing
// came back for a whole renew interval is dropped so the next requests
// open a new one. clientv3.Lease.KeepAliveOnce is not used because it opens
// a new stream per call, which at thousands of leases costs more than the
// renewals; the streaming clientv3.Lease.KeepAlive is not used because its
// channel does not say when the acknowledged request was sent (its requests
// go out on a 500 ms tick and may be retransmitted), so its only safe anchor
// is the previous response, which for TTLs below about 5 s puts the local
// deadline before the next routine renewal and loses healthy leases.
//
// The deletion of held keys, and of the entries ahead of a waiter, is seen
// by ONE watch per Backend, on KeyPrefix+"locks/", deletions only, started
// at the current revision (so the server keeps it synced) and dispatched by
// key to the held lease's keeper and by queue directory to the waiters of
// that queue and to the Watch callers of its name.
// One watch per held key, started at the revision of the grant, cost the
// server one lagging watcher per lease and at 10,000 leases starved the
// renewals. A keeper subscribes with the revision from which it must hear
// of its key's deletion; a deletion the shared watch dispatched just before
// the subscription is found in a short log of recent deletions (5 s), and
// when neither the log nor the watch reaches back that far (the watch was
// just started, or restarted after it broke), the keeper re-reads its key
// once the watch runs, so no deletion is missed.
//
// A held lease is reported lost (through [fencedlock.Lease.Done] and
// Context, cause [fencedlock.ErrLeaseLost]):
//
//   - at once when a keepalive answers that the lease is gone (expired or
//     revoked), or when the shared watch sees our key deleted (lease revoked
//     by another client, expired, or the key removed by hand);
//   - when a renewal's proof (below) reads our key and finds it deleted;
//   - otherwise, when no renewal succeeded before the local deadline (member
//     blackholed or partitioned, client paused): at most TTL - margin after
//     the last successful renewal was sent, which is before the server can
//     expire the lease and hand the lock to the next waiter.
//
// A keepalive proves only that the lease lives. A forced release
// ([Backend.ForceRelease]) or an operator's delete removes our key and
// leaves the lease alive, so its keepalives go on succeeding; the shared
// watch alone would report it, and a watch can stall without ending (a
// member that stops sending events, a stream stuck behind a slow reader).
// So after each renewal (reported to the Locker at once) our key is
// proven still ours at a moment after the renewal was sent, or found
// gone, which loses the lease: for all held leases of the Backend at
// once, by a round that reads a linearizable revision (one Range of a
// single key, count only) and waits for the watch's progress
// (RequestProgress) to reach it (no progress request when nothing was
// written since the last progress notification); or, when that round has
// not completed within half the renew interval, by a Range of our key.
// The bound: a held key deleted at T is reported lost
// ([fencedlock.ErrNotHeld]) by T + 2 renew intervals + the round trips of
// a keepalive and a Range, whatever the watch does, plus one renew
// interval for each of those Ranges that the cluster does not answer
// within half an interval (an overloaded cluster); the proof never delays
// or withholds a renewal, so it cannot lose a live lease. Measured with
// the watch stalled on the 3-member test cluster (TTL 2 s, renewal every
// 667 ms, so 1.33 s plus round trips): 0.11-1.21 s in 11 of 12 forced
// releases and deletes at load average 18-24, and 2.48 s in one where a
// read timed out (clustertest's TestStalledWatchForcedRelease). Before,
// the holder still held 10 s (5 TTLs) later. The cost with a healthy
// watch: one Range per batch of renewals (a batch is the renewals of one
// stream due together), plus one progress request when the store
// changed: 1 of each per renewal for a single lease, 0.03 Ranges and 0.03
// progress requests per renewal for 100 leases (TestProofCost; the client
// CPU per renewal is within the noise of the loaded test machine). The
// progress notifications go to every watch sharing the client's watch
// stream (those made with the same context metadata), as clientv3's
// progress notifications do; a server that sends none (etcd before 3.4,
// or a watch stream with a watcher that is not synced) costs one Range
// per renewal instead.
//
// etcd lease TTLs are whole seconds, with a server minimum (1.5 election
// timeouts, rounded up to a second). The TTL asked for is rounded up to
// whole seconds, and the Grant and every renewal report the TTL the server
// actually applied, so the Locker computes its deadlines from the real
// lease.
//
// Manual renewal ([fencedlock.Options.ManualRenew]) uses [Backend.Renew]:
// one keepalive, then a check that our key still exists with our create
// revision. etcd cannot change a lease's TTL after it is granted, so Renew
// renews the lease to its granted TTL and returns it.
//
// [driver.Info.Fence] from [Backend.Inspect] is the holder's fence while
// the lock is held and 0 when it is free (not the last fence granted, as on
// the Redis and memory backends): etcd keeps no record of a released
// key's revision, and none is needed, since the next fence is a newer
// revision anyway. A cluster restored from a snapshot restarts its
// revisions from the snapshot; fences are monotonic within one cluster's
// history only.
//
// # Fenced writes on etcd
//
// [FencedStore] ([NewFencedStore]) is the resource-side guard for data
// kept in etcd, a [fencing.Store]: Set is one Txn that compares the
// resource's stored fence and holder and writes the value and the new fence
// together, following [fencing.Check]; Update is the read-modify-write form.
package etcd
