package conformance

import (
	"errors"
	"reflect"
	"testing"
	"time"

	"github.com/fencedlock/fencedlock"
	"github.com/fencedlock/fencedlock/driver"
)

// properties is the suite, in the order Run checks it, one property per
// line. Every doc is one sentence, logged by its subtest and listed in the
// package documentation (TestDocListsProperties checks that doc.go lists
// exactly these names, in this order). Each check is in the file of its
// family: core.go, cancel.go, timing.go, waitexpiry.go, loss.go, optional.go, inspect.go
// and tryfirst.go (the harness's fault hooks: faults.go, fencerecord.go);
// this file also holds the helpers that several families
// share.
var properties = []property{
	{"TryAcquire", "TryAcquire takes a free key with a non-zero fence, fails with ErrNotAcquired on a held key (from another backend or the same one), and succeeds again after Release with a greater fence.", testTryAcquire},
	{"MutualExclusion", "N backends x M goroutines contending for one key never have two valid leases at once, and each holder sees a fence greater than the previous holder's.", testMutualExclusion},
	{"FenceIncreasing", "Fences grow strictly on one key across holders, backends, releases, out-of-band invalidations and expiries.", testFenceIncreasing},
	{"RenewKeepsLease", "The watchdog's renewals keep a lease held past 3x its TTL, and no other backend can take the key meanwhile.", testRenewKeepsLease},
	{"RenewTTL", "Renew sets the lease to the TTL it returns from when it was sent (to ttl from now, not by ttl): after one renewal, or three in a row, and no more, the key stays held that long and is free within ExpirySlack after.", testRenewTTL},
	{"ExpiryWithoutRenew", "A lease that is not renewed lets another backend in within TTL + ExpirySlack, never before its TTL, and its holder sees it lost.", testExpiry},
	{"WaiterAfterCrash", "A Locker.Acquire with a long lease waiting behind a holder that crashed (its lease of MinTTL never renewed nor released) is granted the key with a greater fence within the holder's TTL + ExpirySlack, never before its TTL.", testWaiterAfterCrash},
	{"LeaseLengths", "Leases of different lengths from one client (MinTTL and 5x MinTTL, asked in either order, renewed from one to the other, or contended by a failed Acquire or Renew with another TTL, or asked again by their holder) are each held for the TTL asked and free within ExpirySlack after.", testLeaseLengths},
	{"InvalidationReported", "A key deleted or revoked out of band ends its lease's Context (cause ErrLeaseLost) within TTL + renew interval, and a manual Renew reports ErrNotHeld at once.", testInvalidationReported},
	{"ReleaseAfterLoss", "Release after loss, a double Release and a Release of a never-held key return ErrNotHeld and delete nothing, in particular not a new holder's lock.", testReleaseAfterLoss},
	{"RenewAfterLoss", "Renew by an owner that lost the key returns ErrNotHeld and changes nothing: it neither recreates a free key nor takes or extends another holder's lock.", testRenewAfterLoss},
	{"ReleaseRacesExpiry", "A Release racing its lease's expiry while another owner polls the key never deletes the new owner's lock: the owner check and the delete are one atomic step.", testReleaseRacesExpiry},
	{"RenewRaces", "Renewals racing their owner's Release, or a take-over (the key invalidated and taken by another owner), never recreate the released key nor touch the new holder's lock, and every renewal sent after the Release or the take-over returned fails with ErrNotHeld.", testRenewRaces},
	{"LateRelease", "The late Release of a lease that expired while its holder was paused does not delete the lock of the holder that took the key after it.", testLateRelease},
	{"CancelledAcquire", "An Acquire whose context ends returns promptly an error that is both ErrNotAcquired and the context's error, and leaves nothing behind: the key is free for a fresh backend as soon as its holder releases it.", testCancelledAcquire},
	{"CancelledAttempt", "An Acquire of a free key whose context ends at a random point of its round trip returns a grant or an error that is not ErrNotAcquired without the context's error, and its owner's Release of Grant{Key, Owner} leaves the key free.", testCancelledAttempt},
	{"StoreFaults", "If the harness is a FaultInjector: a request refused on its way, applied with its reply lost, or answered after its context ended is reported as a transient error or the context's (never ErrPermanent, nor \"held\" or \"not held\"), promptly, and the store's state afterwards is the request's.", testStoreFaults},
	{"ForeignValue", "If the harness is a Corrupter: a lock holding a value the backend never wrote is reported with ErrPermanent by Acquire (not as held by another), and its owner's Renew and Release fail without changing it; if it is an ExpiryCorrupter: so is a lock record of the backend's format without an expiry.", testForeignValue},
	{"Residue", "If the harness is a RecordLister: after a grant, a release, the clean-up Release of Grant{Key, Owner} (of the holder, of an owner whose Acquire never arrived, of another owner while the key is held) and a waiter that gave up, every record the store holds for the key but its fence record expires.", testResidue},
	{"FenceRecord", "If the harness is a FenceCorrupter: a fence record the backend never writes (of another type, not a number, below 1, at or above the greatest fence, or expiring) makes Acquire of the free key fail with ErrPermanent, grant nothing and leave the record as it was, and the holder's repeated Acquire (also with the record deleted) is refused so or granted its own fence; a valid record's next grant is above it.", testFenceRecord},
	{"WriteRefused", "If the harness is a WriteRefuser: while the store refuses writes, Acquire of a free key fails with an error that is not ErrNotAcquired and takes nothing, and Acquire of a held key grants nothing and leaves it to its holder.", testWriteRefused},
	{"SentIsSendTime", "Grant.Sent, Renewal.Sent and the TTLs reported with them never overstate a lease: with the responses delayed (if the harness is a Delayer), another owner never gets the key before the holder's local deadline.", testSentIsSendTime},
	{"PausedHolder", "A holder paused past its lease writes with its old fence after the next holder wrote, and the guard rejects the write with fencing.ErrStale.", testPausedHolder},
	{"AwkwardKeys", "Keys with slashes, Unicode, braces, a leading '}', spaces, control and invalid UTF-8 bytes, and of exactly MaxKeyLen bytes are distinct working keys; \"\" and MaxKeyLen+1 bytes fail with ErrInvalid.", testAwkwardKeys},
	{"Close", "Close is idempotent, every call after it fails with ErrClosed, other backends keep working, and a Locker's Close releases its leases.", testClose},
	{"Notifier", "If the backend is a Notifier, a release wakes a watcher (another watch of the key stopped or not, and a waiting Acquire) well before the holder's TTL, and the woken waiter can take the key.", testNotifier},
	{"WaitAcquirer", "If the backend is a WaitAcquirer, AcquireWait agrees with Acquire (exclusive, greater fence, blocks while held) and grants waiters in FIFO order, also after one of them left the queue.", testWaitAcquirer},
	{"NoOvertake", "If the backend is a WaitAcquirer: while a waiter queued by AcquireWait waits, a plain Acquire does not take the key, also once the holder's lease expired.", testNoOvertake},
	{"SilentWaiter", "If the backend is a WaitAcquirer and an Inspector, and the harness a FaultInjector: a queued waiter whose requests stop reaching the store keeps its place at most max(its TTL, Config.QueuePlaceTTL); a release after that hands the key to the waiter behind it, never to the silent one.", testSilentWaiter},
	{"TryFirstWaiter", "If the backend is a TryFirstWaiter, TryFirst does not block, and AcquireWaitHeld after an Acquire of the same request that did not take the key blocks while the key is held, grants the key at once with that Acquire's fence if the Acquire was applied and its reply lost, and leaves no trace when its context ends.", testTryFirstWaiter},
	{"Inspector", "If the backend is an Inspector, Inspect agrees with Acquire on whether a key is held and on its fence, and never reveals the owner token.", testInspector},
	{"KeepAliver", "If the backend is a KeepAliver, KeepAlive confirms renewals that keep a key held past its TTL and reports an invalidated key.", testKeepAliver},
	{"ForceReleaser", "If the backend is a ForceReleaser, ForceRelease breaks a held key at once (the holder's Renew and Release: ErrNotHeld; its Locker reports the loss by its next renewal), reports the broken fence, and every later grant, a queued waiter's too, is above the consumed fence After.", testForceReleaser},
}

// wantNotHeld fails t unless err, returned by the call what describes,
// wraps ErrNotHeld.
func wantNotHeld(t *testing.T, what string, err error) {
	t.Helper()
	if !errors.Is(err, fencedlock.ErrNotHeld) {
		t.Fatalf("%s: %v, want ErrNotHeld", what, err)
	}
}

// wantNotHeldOf is wantNotHeld for a call made with g, whose owner token
// (a secret) the error must not contain.
func wantNotHeldOf(t *testing.T, what string, g driver.Grant, err error) {
	t.Helper()
	wantNotHeld(t, what, err)
	noSecret(t, what+": the error", err.Error(), g.Owner)
}

// errOf returns the error of a call that also returns a value, such as
// Backend.Renew, for [wantNotHeld].
func errOf[T any](_ T, err error) error { return err }

// expired acquires key on b with a lease of MinTTL and returns the grant
// once the store must consider it expired (its TTL and ExpirySlack have
// passed since the request returned: the store granted it no later; or the
// harness's Expirer ended it),
// with nothing else done to the key meanwhile: no other request may touch
// it (a store may keep an expired lock on record until then), and when.
func (e *env) expired(t *testing.T, b driver.Backend, key string) (driver.Grant, time.Time) {
	t.Helper()
	g := e.grabTTL(t, b, key, e.ttl)
	got := time.Now()
	if exp, ok := e.h.(Expirer); ok {
		if err := exp.Expire(e.ctx, key); err != nil {
			t.Fatalf("harness Expire: %v", err)
		}
		return g, time.Now()
	}
	at := got.Add(grantTTL(g.TTL, e.ttl) + e.cfg.ExpirySlack + time.Millisecond)
	time.Sleep(time.Until(at))
	return g, at
}

// invalidate removes key's lock through the harness, as a lost lease would
// find it, and fails t if the harness cannot.
func (e *env) invalidate(t *testing.T, key string) {
	t.Helper()
	if err := e.h.Invalidate(e.ctx, key); err != nil {
		t.Fatalf("harness Invalidate: %v", err)
	}
}

// implements reports whether the backends under test implement the
// optional interface I; when they do not, it logs that there is nothing to
// check.
func implements[I any](t *testing.T, e *env) bool {
	t.Helper()
	probe := e.backend(t)
	if _, ok := probe.(I); !ok {
		t.Logf("%T is not a %v: nothing to check", probe, reflect.TypeFor[I]())
		return false
	}
	return true
}

// backendAs returns a new backend of e and the same backend as an I (an
// optional interface), or false (logged) if the backends under test do
// not implement I.
func backendAs[I any](t *testing.T, e *env) (driver.Backend, I, bool) {
	t.Helper()
	if !implements[I](t, e) {
		var none I
		return nil, none, false
	}
	b := e.backend(t)
	return b, b.(I), true
}

// harnessIs returns e's harness as an I (an optional harness capability),
// and logs that there is nothing to check if it is not one.
func harnessIs[I any](t *testing.T, e *env) (I, bool) {
	t.Helper()
	h, ok := e.h.(I)
	if !ok {
		t.Logf("%T is not a %v: nothing to check", e.h, reflect.TypeFor[I]())
	}
	return h, ok
}

// acquired is the outcome of an Acquire run in a goroutine (which must not
// call t's methods: it may outlive a failed test).
type acquired struct {
	ls  *fencedlock.Lease
	err error
}

// acquireAsync starts l.Acquire of key in a goroutine and returns the
// channel its outcome arrives on.
func (e *env) acquireAsync(l *fencedlock.Locker, key string) <-chan acquired {
	got := make(chan acquired, 1)
	go func() {
		ls, err := l.Acquire(e.ctx, key)
		got <- acquired{ls, err}
	}()
	return got
}

// nextRenewal waits for the next confirmed Renewal on ch, the KeepAlive
// channel of a held key, after renewals others. A Renewal whose Err is
// not ErrNotHeld is a failure the keepalive goes on from (the contract
// allows it; an etcd keepalive stream found unresponsive on a loaded
// machine sends one): it is logged and not counted. A Renewal wrapping
// ErrNotHeld, a closed channel, or no confirmed renewal within bound
// fails t.
func nextRenewal(t *testing.T, ch <-chan driver.Renewal, bound time.Duration, renewals int) driver.Renewal {
	t.Helper()
	timer := time.NewTimer(bound)
	defer timer.Stop()
	for {
		select {
		case r, ok := <-ch:
			switch {
			case !ok:
				t.Fatalf("KeepAlive channel closed after %d renewals of a held key", renewals)
			case r.Err == nil:
				return r
			case errors.Is(r.Err, driver.ErrNotHeld):
				t.Fatalf("KeepAlive of a held key reported %v", r.Err)
			}
			t.Logf("KeepAlive of a held key reported a failure it goes on from (not counted as a renewal): %v", r.Err)
		case <-timer.C:
			t.Fatalf("no confirmed KeepAlive renewal within %v after %d renewals", bound, renewals)
		}
	}
}
