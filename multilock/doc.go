// Package multilock takes a set of keys all or nothing, in one step on
// the server, with one fence per key and one lease for the set.
//
// A [Locker] works on any backend that implements [driver.MultiLocker]
// (memory; backend/redis and backend/goredis: one script per operation;
// backend/etcd: one Txn on one lease per set).
// The set's lease is a lease of a [fencedlock.Locker] (its watchdog,
// local deadline, loss notification and late-grant refusal): the Locker
// sees the set as one key of a view of the backend, and every renewal
// renews every key of the set in one step, or none. A key of the set found
// gone (deleted, expired, evicted, taken) ends the whole lease, and
// [Lease.Err] names that key through a *[driver.LostKeyError].
//
// The keys are the backend's ordinary locks: a key held through
// [fencedlock.Locker] is held for a set too, and each key's fences are
// one sequence, whichever kind of lease took it. See docs/multilock.md.
package multilock
