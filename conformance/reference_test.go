package conformance_test

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/fencedlock/fencedlock/conformance"
	"github.com/fencedlock/fencedlock/driver"
	"github.com/fencedlock/fencedlock/fencing"
	"github.com/fencedlock/fencedlock/internal/procfault"
)

// This file holds a small in-memory backend written only for the suite's
// own tests: correct by default, and with switches that reproduce bugs
// found in real lock libraries, so that TestBrokenBackendsAreReported can
// show that the suite catches each of them. (The backend users should
// model is backend/memory; this one exists to be broken.)

// bug selects one defect of the reference backend.
type bug int

const (
	correct bug = iota
	// Release deletes the key whoever holds it (DEL without comparing the
	// owner): a holder that resumes after expiry deletes its successor's lock.
	bugReleaseNoOwnerCheck
	// Renew extends the key whoever holds it (PEXPIRE without comparing the
	// owner): a holder that lost the key believes it still holds it.
	bugRenewNoOwnerCheck
	// Each backend counts fences on its own (a client-side counter instead
	// of one on the server): two processes hand out the same fence.
	bugFenceRepeats
	// The fence counter is deleted with the lock (Redisson's fenced lock):
	// after a release the next holder gets fence 1 again.
	bugFenceResets
	// Keys are stored without a TTL: a crashed holder keeps the key forever.
	bugNoTTL
	// Renew always reports success without asking the store: a lease lost
	// to an operator or a failover is never reported.
	bugRenewAlwaysOK
	// A cancelled AcquireWait leaves its waiter queued: the ghost is granted
	// the key when the holder releases it and blocks everyone for a TTL.
	bugQueueGhost
	// Acquire checks, then sets in a second step (GET then SET without
	// NX): two contenders both see the key free and both take it.
	bugCheckThenSet
	// Watch never delivers: waiters sleep until the holder's TTL.
	bugSilentNotifier
	// Inspect returns the owner token instead of the holder id.
	bugInspectorLeaks
	// The wait queue is served last in, first out.
	bugLIFOQueue
	// Keys are normalised before use (invalid UTF-8 replaced, truncated to
	// 255 bytes, as a text column or a path would): distinct keys alias.
	bugKeyMangling
	// The server applies half the TTL it reports (a seconds/milliseconds
	// mix-up): the key is free before the holder's local deadline.
	bugEarlyExpiry
	// Close does nothing: calls after Close still reach the store.
	bugUsableAfterClose
	// Renew extends the lease by ttl instead of to ttl from now (EXPIRE
	// added to the remaining TTL): a crashed holder keeps the key for the
	// sum of its renewals.
	bugRenewAddsTTL
	// Renew reports twice the TTL it applies: the holder's deadline lies
	// after the key is free.
	bugRenewReportsLonger
	// Release checks the owner, then deletes in a second request (GET,
	// compare, DEL): a lease that expires in between takes the next
	// owner's lock with it.
	bugReleaseCheckThenDelete
	// A cancelled Acquire whose request was applied is reported as "held"
	// (any failure mapped to ErrNotAcquired): the Locker skips its
	// clean-up and the key stays held for a TTL.
	bugCancelReportsHeld
	// Grant.Sent is taken when the response arrives, not when the request
	// was sent: with latency the holder's deadline lies after the expiry.
	bugGrantSentAtResponse
	// Renewal.Sent is taken when the response arrives (KeepAlive).
	bugRenewalSentAtResponse
	// A waiter's lease starts when it queues and is not kept alive while
	// it waits (etcd #11456): a waiter granted after its TTL holds a lease
	// that already ran out.
	bugWaiterLeaseNotKept
	// A cancelled waiter leaves the queue without checking whether it was
	// granted the key meanwhile: the grant stays, held by no one.
	bugCancelRaceGhost
	// KeepAlive reports renewals it never sends: the key expires while the
	// holder believes it kept alive.
	bugKeepAliveFakes
	// KeepAlive swallows ErrNotHeld and keeps trying: a lost lease is
	// never reported by it.
	bugKeepAliveSilent
	// KeepAliveStop's stop only asks the keepalive to end: when it
	// returns the channel is still open (and a renewal may still be sent),
	// so the Locker's Release would not send its release at once.
	bugKeepAliveStopAsync
	// Renew extends an expired lease still on record for its owner (no
	// expiry check in the UPDATE's WHERE): an expired holder gets its key
	// back.
	bugRenewRevivesExpired
	// Release of an expired lease still on record for its owner reports
	// success: a holder whose critical section ran unprotected is told it
	// held the key to the end.
	bugReleaseExpiredOK
	// Release compares the fence as well as the owner: the Locker's
	// clean-up Release of Grant{Key, Owner} never frees the key.
	bugReleaseNeedsFence
	// Watch returns before the subscription is in effect (SUBSCRIBE sent
	// asynchronously): a release just after Watch returns is missed.
	bugWatchLate
	// Watch's channel has no buffer and the send does not block: a wake-up
	// while the watcher is not receiving is lost.
	bugNotifierUnbuffered
	// HeldError.RetryAfter is the remaining TTL in the wrong unit (1000x):
	// waiters that trust it sleep long past the release.
	bugRetryAfterTooLong
	// Renew silently caps a lease at twice its first TTL from the acquire
	// (a maximum lifetime the TTL it returns does not show): a holder that
	// renews on time loses the key after 2 TTLs.
	bugLeaseMaxLifetime
	// The fence counter is kept in the lock's record, which an operator's
	// delete (Invalidate) removes with it: the next holder gets fence 1.
	bugFenceLostOnInvalidate
	// A cancelled Renew whose request was applied is reported as "not
	// held": the Locker gives up a lease its owner holds.
	bugCancelReportsNotHeld
	// Errors name the owner token (a secret) along with the key.
	bugErrorLeaksOwner
	// A held key is reported with an error that does not wrap
	// ErrNotAcquired: the Locker treats it as a failure, not a wait.
	bugHeldNotWrapped
	// AcquireWaitHeld ignores that the key may already be held by
	// req.Owner (the Locker's Acquire applied, its reply lost) and queues
	// behind it: the waiter waits for its own lease to run out.
	bugWaitHeldQueuesBehindOwn
	// AcquireWaitHeld takes a key held by req.Owner as if it were free,
	// with the next fence: the fence of the applied Acquire, which the
	// store may already have seen written, is granted to no one.
	bugWaitHeldRegrants
	// AcquireWaitHeld whose context ends returns without leaving the
	// queue (the wait goes on, detached): the ghost is granted the key at
	// the holder's release and holds it for its lease.
	bugWaitHeldCancelLeftQueued
	// AcquireWaitHeld makes the plain attempt again and returns its
	// outcome instead of waiting: a held key fails the Locker's Acquire.
	bugWaitHeldNoWait
	// TryFirst asks the store and waits (up to a second) while the key is
	// held, as a cache refresh under a lock would: the Locker's Acquire
	// blocks before it has even tried.
	bugTryFirstBlocks
	// Renew reads the lock, compares the owner, then writes the owner and
	// a new expiry in a second request (GET, compare, SET PX): a release
	// or a take-over between the two is undone.
	bugRenewCheckThenWrite
	// The store caps every lease at 3x DefaultMinTTL and reports the TTL
	// asked: a long lease ends early.
	bugTTLCapped
	// A client applies the TTL of its first Acquire to every lease it
	// takes or renews (one session per client) and reports the TTL asked.
	bugOneTTLPerClient
	// Acquire sets the key if absent, then sets its expiry in a second,
	// unconditional step (SETNX, then PEXPIRE): a failed attempt resets
	// the holder's lease to the contender's TTL.
	bugFailedAcquireSetsTTL
	// Renew re-creates the lock in two steps (delete, then set again) and
	// gives up between them when its context ends: a renewal cut in flight
	// frees the key its owner holds, reported as a transient error.
	bugCutRenewDrops
	// Renew sets the expiry first and compares the owner after (PEXPIRE,
	// then GET): a lost owner's Renew reports ErrNotHeld but has already
	// changed the holder's lease to its own TTL.
	bugRenewWritesFirst
	// Every error of the way to the store (a refused or reset
	// connection) is wrapped with ErrPermanent: the Locker gives up at
	// once on a fault a retry would overcome.
	bugTransportPermanent
	// A request whose reply was lost is sent again (a client's automatic
	// retry): the retry of an applied Acquire finds the key held and
	// reports "held by another", of an applied Release "not held".
	bugRetryLostReply
	// The backend waits for a late reply whatever its context (the round
	// trip made with context.Background): a call does not return when its
	// context ends.
	bugReplyIgnoresCtx
	// A lock holding a value the backend never wrote is taken for a lock
	// held by another owner (Acquire: HeldError; Renew, Release: not
	// held): the Locker waits for a holder that does not exist.
	bugForeignValueHeld
	// A watch's stop deletes the key's whole set of watchers, not its
	// own (found by mutation testing of backend/memory): stopping one
	// watch ends the others on the key.
	bugWatchStopDropsOthers
	// A fence record the backend never wrote (not a number, negative,
	// expiring, at or above the greatest fence) is taken for an empty one
	// and replaced: the key's fences restart at 1, below those granted.
	bugFenceRecordRestarts
)

// refMaxFence is the reference backend's greatest fence.
const refMaxFence fencing.Token = 1 << 53

// refStore is the shared state: one per harness.
type refStore struct {
	bug      bug
	mu       sync.Mutex
	locks    map[string]*refLock
	fences   map[string]fencing.Token
	badFence map[string]conformance.FenceRecord // fence records no refBackend writes (refHarness.SetFenceRecord)
	refusing bool                               // the store refuses writes (refHarness.RefuseWrites)
	watchers map[string]map[chan struct{}]struct{}
	leaked   map[string]bool // bugCleanupLeaks: keys with a record of abandoned owners that never expires
}

type refLock struct {
	owner    string // "" while free
	fence    fencing.Token
	expires  time.Time
	maxLife  time.Time // bugLeaseMaxLifetime: when the lease ends at the latest
	corrupt  bool      // a value the backend never writes is stored in its place (refHarness.Corrupt)
	noExpiry bool      // the corrupt value is a lock record without an expiry (refHarness.CorruptNoExpiry)
	queue    []*refWaiter
}

type refWaiter struct {
	req     driver.AcquireRequest
	queued  time.Time
	granted chan driver.Grant // buffered: receives the grant once
	refused chan error        // buffered: receives the error of a refused fence record
	dropped bool              // bugLeaveDropsOthers: removed from the queue by another waiter's leaving (s.mu)
	faults  *procfault.Faults // its backend's way to the store: a waiter silent for its TTL loses its place (dropSilent)
}

func newRefStore(b bug) *refStore {
	return &refStore{
		bug:      b,
		locks:    make(map[string]*refLock),
		fences:   make(map[string]fencing.Token),
		badFence: make(map[string]conformance.FenceRecord),
		watchers: make(map[string]map[chan struct{}]struct{}),
	}
}

func (s *refStore) mangle(key string) string {
	if s.bug != bugKeyMangling {
		return key
	}
	key = strings.ToValidUTF8(key, "?")
	if len(key) > 255 {
		key = key[:255]
	}
	return key
}

func (s *refStore) enforced(ttl time.Duration) time.Duration {
	switch s.bug {
	case bugNoTTL:
		return 100 * 365 * 24 * time.Hour
	case bugEarlyExpiry:
		return ttl / 2
	case bugTTLCapped:
		return min(ttl, 3*conformance.DefaultMinTTL)
	}
	return ttl
}

// settle expires key's holder if its lease ran out, and hands a free key
// to the first waiter in its queue. s.mu must be held.
func (s *refStore) settle(key string, now time.Time) *refLock {
	l := s.locks[key]
	if l == nil {
		l = &refLock{}
		s.locks[key] = l
	}
	if l.owner != "" && !now.Before(l.expires) {
		l.owner = ""
		if s.bug == bugFenceResets {
			delete(s.fences, key)
		}
	}
	if l.owner == "" {
		s.dropSilent(l)
	}
	if l.owner == "" && len(l.queue) > 0 {
		if err := s.fenceUsable(key, l.queue[0].req.Key); err != nil {
			// Not handed over: the first waiter is told (wait.lua runs
			// the same checks as acquire.lua).
			l.queue[0].refused <- err
			l.queue = l.queue[1:]
			return l
		}
		i := 0
		if s.bug == bugLIFOQueue {
			i = len(l.queue) - 1
		}
		w := l.queue[i]
		l.queue = append(l.queue[:i:i], l.queue[i+1:]...)
		from := now // the waiter's lease is kept alive while it waits
		if s.bug == bugWaiterLeaseNotKept {
			from = w.queued
		}
		g := s.grant(key, l, w.req, from, 0)
		g.Sent = from
		w.granted <- g
	}
	return l
}

// grant gives l to req. s.mu must be held.
func (s *refStore) grant(key string, l *refLock, req driver.AcquireRequest, now time.Time, local fencing.Token) driver.Grant {
	fence := s.fences[key] + 1
	s.fences[key] = fence
	if s.bug == bugFenceRepeats {
		fence = local
	}
	l.owner, l.fence, l.expires = req.Owner, fence, now.Add(s.enforced(req.TTL))
	l.maxLife = now.Add(2 * req.TTL)
	return driver.Grant{Key: req.Key, Owner: req.Owner, Fence: fence, TTL: req.TTL}
}

// free deletes key's lock and wakes its watchers. s.mu must be held.
func (s *refStore) free(key string, l *refLock) {
	l.owner = ""
	if s.bug == bugFenceResets {
		delete(s.fences, key)
	}
	if s.bug != bugSilentNotifier {
		// A watcher's channel may be unbuffered (bugNotifierUnbuffered):
		// the send never blocks.
		for ch := range s.watchers[key] {
			select {
			case ch <- struct{}{}:
			default:
			}
		}
	}
	s.settle(key, time.Now())
}

// refBackend is one client of a refStore. It implements Backend, Notifier
// and Inspector.
type refBackend struct {
	s      *refStore
	delay  time.Duration // of every response (refHarness.NewDelayedBackend)
	mu     sync.Mutex
	closed bool
	local  map[string]fencing.Token // bugFenceRepeats: this client's counters
	first  time.Duration            // bugOneTTLPerClient: the TTL of its first Acquire
	faults *procfault.Faults        // the way to the store (refHarness.NewFaultyBackend); nil: no faults
}

// foreign is the error of op on a key whose lock holds a value the
// backend never wrote.
func (s *refStore) foreign(op, key string, acquire bool) error {
	switch {
	case s.bug != bugForeignValueHeld:
		return fmt.Errorf("ref: %s %q: a value the backend never wrote: %w", op, key, driver.ErrPermanent)
	case acquire:
		return &driver.HeldError{Key: key}
	}
	return s.notHeld(op, driver.Grant{Key: key})
}

// transport wraps an error of the way to the store (procfault.Faults).
func (b *refBackend) transport(op, key string, err error) error {
	if b.s.bug == bugTransportPermanent && !errors.Is(err, context.Canceled) && !errors.Is(err, context.DeadlineExceeded) {
		return fmt.Errorf("ref: %s %q: %w: %w", op, key, err, driver.ErrPermanent)
	}
	return fmt.Errorf("ref: %s %q: %w", op, key, err)
}

// roundTrip makes the request call to the store through b.faults: call
// is applied unless the request is refused, and its outcome is lost if
// the reply is (sent again once with bugRetryLostReply).
func roundTrip[T any](ctx context.Context, b *refBackend, op, key string, call func() (T, error)) (T, error) {
	var zero T
	if err := b.faults.Send(); err != nil {
		return zero, b.transport(op, key, err)
	}
	v, err := call()
	rerr := b.faults.Reply(ctx, b.s.bug == bugReplyIgnoresCtx)
	if errors.Is(rerr, procfault.ErrReset) && b.s.bug == bugRetryLostReply {
		return roundTrip(ctx, b, op, key, call)
	}
	if rerr != nil {
		return zero, b.transport(op, key, rerr)
	}
	return v, err
}

func (b *refBackend) Acquire(ctx context.Context, req driver.AcquireRequest) (driver.Grant, error) {
	return roundTrip(ctx, b, "acquire", req.Key, func() (driver.Grant, error) { return b.acquireStore(ctx, req) })
}

func (b *refBackend) Renew(ctx context.Context, g driver.Grant, ttl time.Duration) (time.Duration, error) {
	return roundTrip(ctx, b, "renew", g.Key, func() (time.Duration, error) { return b.renewStore(ctx, g, ttl) })
}

func (b *refBackend) Release(ctx context.Context, g driver.Grant) error {
	_, err := roundTrip(ctx, b, "release", g.Key, func() (struct{}, error) { return struct{}{}, b.releaseStore(ctx, g) })
	return err
}

// ttlFor returns the lease the client asks the store for when ttl is
// asked: ttl, except with bugOneTTLPerClient.
func (b *refBackend) ttlFor(ttl time.Duration) time.Duration {
	if b.s.bug != bugOneTTLPerClient {
		return ttl
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.first == 0 {
		b.first = ttl
	}
	return b.first
}

func (b *refBackend) usable(ctx context.Context) error {
	b.mu.Lock()
	closed := b.closed
	b.mu.Unlock()
	if closed && b.s.bug != bugUsableAfterClose {
		return fmt.Errorf("ref: %w", driver.ErrClosed)
	}
	return ctx.Err()
}

func (b *refBackend) nextLocal(key string) fencing.Token {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.local == nil {
		b.local = make(map[string]fencing.Token)
	}
	b.local[key]++
	return b.local[key]
}

func (b *refBackend) acquireStore(ctx context.Context, req driver.AcquireRequest) (driver.Grant, error) {
	if err := b.usable(ctx); err != nil {
		return driver.Grant{}, err
	}
	s, key := b.s, b.s.mangle(req.Key)
	var local fencing.Token
	if s.bug == bugFenceRepeats {
		local = b.nextLocal(key)
	}
	s.mu.Lock()
	now := time.Now()
	l := s.settleAcquire(key, now)
	if l.corrupt {
		held := l.noExpiry && s.bug == bugNoExpiryHeld
		s.mu.Unlock()
		if held {
			return driver.Grant{}, &driver.HeldError{Key: req.Key}
		}
		return driver.Grant{}, s.foreign("acquire", req.Key, true)
	}
	if l.owner != "" {
		defer s.mu.Unlock()
		if l.owner == req.Owner && s.regrants() {
			if _, bad := s.badFence[key]; bad && s.bug == bugRepeatRefusedSetsTTL {
				l.expires = now.Add(s.enforced(req.TTL))
				return driver.Grant{}, &driver.HeldError{Key: req.Key}
			}
			if rec := s.badFence[key]; s.bug == bugRepeatNeedsRecord && rec.Absent {
				return driver.Grant{}, fmt.Errorf("ref: acquire %q: the fence record is missing", req.Key)
			}
			return s.regrant(key, req, l, now), nil
		}
		retry := l.expires.Sub(now)
		if s.bug == bugRetryAfterTooLong {
			retry *= 1000
		}
		if s.bug == bugHeldNotWrapped {
			return driver.Grant{}, fmt.Errorf("ref: %q is locked", req.Key)
		}
		if s.bug == bugFailedAcquireSetsTTL {
			l.expires = now.Add(s.enforced(req.TTL))
		}
		return driver.Grant{}, &driver.HeldError{Key: req.Key, RetryAfter: retry}
	}
	if err := s.fenceUsable(key, req.Key); err != nil {
		s.mu.Unlock()
		return driver.Grant{}, err
	}
	if s.refusing {
		s.mu.Unlock()
		return driver.Grant{}, s.refusedWrite(req.Key)
	}
	if s.bug == bugCheckThenSet {
		// The check above and the set below are two round trips.
		s.mu.Unlock()
		time.Sleep(200 * time.Microsecond)
		s.mu.Lock()
	}
	asked := req
	asked.TTL = b.ttlFor(req.TTL)
	g := s.grant(key, l, asked, now, local)
	g.TTL = req.TTL
	s.mu.Unlock()
	g.Sent = now
	b.respond()
	if s.bug == bugGrantSentAtResponse {
		g.Sent = time.Now()
	}
	if s.bug == bugCancelReportsHeld {
		time.Sleep(time.Millisecond) // the response travels
		if ctx.Err() != nil {
			return driver.Grant{}, &driver.HeldError{Key: req.Key}
		}
	}
	return g, nil
}

// notHeld is the error of a Renew or Release by an owner that does not
// hold g.Key.
func (s *refStore) notHeld(op string, g driver.Grant) error {
	if s.bug == bugErrorLeaksOwner {
		return fmt.Errorf("ref: %s %q for owner %s: %w", op, g.Key, g.Owner, driver.ErrNotHeld)
	}
	return fmt.Errorf("ref: %s %q: %w", op, g.Key, driver.ErrNotHeld)
}

// respond waits for the response to travel back (b.delay).
func (b *refBackend) respond() {
	if b.delay > 0 {
		time.Sleep(b.delay)
	}
}

func (b *refBackend) renewStore(ctx context.Context, g driver.Grant, ttl time.Duration) (_ time.Duration, err error) {
	if err := b.usable(ctx); err != nil {
		return 0, err
	}
	s, key := b.s, b.s.mangle(g.Key)
	if s.bug == bugRenewAlwaysOK {
		return ttl, nil
	}
	defer b.respond()
	s.mu.Lock()
	defer s.mu.Unlock()
	now := time.Now()
	var l *refLock
	if s.bug == bugRenewRevivesExpired {
		l = s.locks[key] // no expiry check
		if l == nil {
			l = s.settle(key, now)
		}
	} else {
		l = s.settle(key, now)
	}
	if l.corrupt {
		return 0, s.foreign("renew", g.Key, false)
	}
	if s.bug == bugRenewWritesFirst && l.owner != "" {
		l.expires = now.Add(ttl)
	}
	if l.owner == "" || (l.owner != g.Owner && s.bug != bugRenewNoOwnerCheck) {
		return 0, s.notHeld("renew", g)
	}
	if s.bug == bugCancelReportsNotHeld {
		defer func() {
			time.Sleep(time.Millisecond) // the response travels
			if ctx.Err() != nil {
				err = fmt.Errorf("ref: renew %q: %w", g.Key, driver.ErrNotHeld)
			}
		}()
	}
	switch s.bug {
	case bugRenewAddsTTL:
		l.expires = l.expires.Add(ttl)
	case bugRenewReportsLonger:
		l.expires = now.Add(ttl)
		return 2 * ttl, nil
	case bugLeaseMaxLifetime:
		l.expires = now.Add(ttl)
		if l.expires.After(l.maxLife) {
			l.expires = l.maxLife
		}
	case bugRenewCheckThenWrite:
		// The write is a second request: SET key owner PX ttl.
		s.mu.Unlock()
		time.Sleep(200 * time.Microsecond)
		s.mu.Lock()
		l = s.locks[key]
		l.owner, l.expires = g.Owner, time.Now().Add(ttl)
	case bugCutRenewDrops:
		s.free(key, l)
		s.mu.Unlock()
		time.Sleep(200 * time.Microsecond) // the second request travels
		s.mu.Lock()
		if ctx.Err() != nil {
			return 0, fmt.Errorf("ref: renew %q: %w", g.Key, ctx.Err())
		}
		l = s.settle(key, time.Now())
		if l.owner != "" {
			return 0, s.notHeld("renew", g)
		}
		l.owner, l.expires = g.Owner, time.Now().Add(ttl)
	default:
		l.expires = now.Add(s.enforced(b.ttlFor(ttl)))
	}
	return ttl, nil
}

func (b *refBackend) releaseStore(ctx context.Context, g driver.Grant) error {
	if err := b.usable(ctx); err != nil {
		return err
	}
	s, key := b.s, b.s.mangle(g.Key)
	defer b.respond()
	s.mu.Lock()
	defer s.mu.Unlock()
	s.noteCleanup(key, g.Fence)
	var l *refLock
	if s.bug == bugReleaseExpiredOK && s.locks[key] != nil {
		l = s.locks[key] // no expiry check
	} else {
		l = s.settle(key, time.Now())
	}
	if l.corrupt {
		return s.foreign("release", g.Key, false)
	}
	if l.owner == "" || (l.owner != g.Owner && s.bug != bugReleaseNoOwnerCheck) ||
		(s.bug == bugReleaseNeedsFence && l.fence != g.Fence) {
		return s.notHeld("release", g)
	}
	if s.bug == bugReleaseCheckThenDelete {
		// The check above and the delete below are two round trips.
		s.mu.Unlock()
		time.Sleep(2 * time.Millisecond)
		s.mu.Lock()
		l = s.locks[key]
	}
	s.free(key, l)
	return nil
}

func (b *refBackend) Close() error {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.closed = true
	return nil
}

func (b *refBackend) Watch(ctx context.Context, key string) (<-chan struct{}, func(), error) {
	if err := b.usable(ctx); err != nil {
		return nil, nil, err
	}
	s, key := b.s, b.s.mangle(key)
	ch := make(chan struct{}, 1)
	if s.bug == bugNotifierUnbuffered {
		ch = make(chan struct{})
	}
	subscribe := func() {
		s.mu.Lock()
		if s.watchers[key] == nil {
			s.watchers[key] = make(map[chan struct{}]struct{})
		}
		s.watchers[key][ch] = struct{}{}
		s.mu.Unlock()
	}
	if s.bug == bugWatchLate {
		time.AfterFunc(500*time.Millisecond, subscribe)
	} else {
		subscribe()
	}
	var once sync.Once
	return ch, func() {
		once.Do(func() {
			s.mu.Lock()
			delete(s.watchers[key], ch)
			if s.bug == bugWatchStopDropsOthers {
				delete(s.watchers, key)
			}
			s.mu.Unlock()
		})
	}, nil
}

func (b *refBackend) Inspect(ctx context.Context, key string) (driver.Info, error) {
	if err := b.usable(ctx); err != nil {
		return driver.Info{}, err
	}
	s, key := b.s, b.s.mangle(key)
	s.mu.Lock()
	defer s.mu.Unlock()
	now := time.Now()
	l := s.settle(key, now)
	info := driver.Info{Fence: s.fences[key]}
	if l.owner != "" {
		info.Held, info.TTL, info.Fence, info.Holder = true, l.expires.Sub(now), l.fence, driver.HolderID(l.owner)
		if s.bug == bugInspectorLeaks {
			info.Holder = l.owner
		}
	}
	return info, nil
}

// refQueueBackend adds a server-side FIFO queue: a WaitAcquirer.
type refQueueBackend struct{ *refBackend }

func (b refQueueBackend) AcquireWait(ctx context.Context, req driver.AcquireRequest) (driver.Grant, error) {
	if err := b.usable(context.WithoutCancel(ctx)); err != nil {
		return driver.Grant{}, err
	}
	s, key := b.s, b.s.mangle(req.Key)
	w := &refWaiter{req: req, queued: time.Now(), granted: make(chan driver.Grant, 1), refused: make(chan error, 1), faults: b.faults}
	s.mu.Lock()
	l := s.settle(key, time.Now())
	l.queue = append(l.queue, w)
	s.settle(key, time.Now())
	s.mu.Unlock()
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	for {
		s.mu.Lock()
		l := s.settle(key, time.Now())
		wait := s.waiterWake(l, w)
		if s.bug == bugLeaveDropsOthers {
			wait = min(wait, s.requeue(key, l, w))
		}
		s.mu.Unlock()
		timer.Reset(max(wait, time.Millisecond))
		select {
		case g := <-w.granted:
			return g, nil
		case err := <-w.refused:
			return driver.Grant{}, err
		case <-timer.C:
		case <-ctx.Done():
			if s.bug == bugQueueGhost {
				return driver.Grant{}, fmt.Errorf("ref: %w", ctx.Err())
			}
			time.Sleep(time.Millisecond) // the request to leave the queue travels
			s.mu.Lock()
			defer s.mu.Unlock()
			for i, q := range l.queue {
				if q == w {
					l.queue = append(l.queue[:i:i], l.queue[i+1:]...)
					break
				}
			}
			if s.bug == bugLeaveDropsOthers {
				s.dropQueue(l)
			}
			if s.bug != bugCancelRaceGhost {
				select {
				case <-w.granted: // granted meanwhile: give it back
					s.free(key, l)
				default:
				}
			}
			return driver.Grant{}, fmt.Errorf("ref: %w", ctx.Err())
		}
	}
}

// refFirstBackend adds TryFirst and AcquireWaitHeld: a TryFirstWaiter.
type refFirstBackend struct{ refQueueBackend }

// TryFirst reports whether key has no waiters queued; it takes the store's
// lock only briefly, as a local cache of a remote store would.
func (b refFirstBackend) TryFirst(key string) bool {
	s, key := b.s, b.s.mangle(key)
	if s.bug == bugTryFirstBlocks {
		for end := time.Now().Add(time.Second); time.Now().Before(end); time.Sleep(time.Millisecond) {
			s.mu.Lock()
			l := s.settle(key, time.Now())
			free := l.owner == ""
			s.mu.Unlock()
			if free {
				break
			}
		}
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	l := s.locks[key]
	return l == nil || len(l.queue) == 0
}

// AcquireWaitHeld is AcquireWait, except that a key held by req.Owner (the
// Locker's Acquire was applied and its reply lost) is granted to it at
// once, with its fence and a lease of req.TTL from now.
func (b refFirstBackend) AcquireWaitHeld(ctx context.Context, req driver.AcquireRequest) (driver.Grant, error) {
	if err := b.usable(context.WithoutCancel(ctx)); err != nil {
		return driver.Grant{}, err
	}
	s, key := b.s, b.s.mangle(req.Key)
	s.mu.Lock()
	now := time.Now()
	l := s.settle(key, now)
	if l.owner == req.Owner && s.bug != bugWaitHeldQueuesBehindOwn {
		var g driver.Grant
		if s.bug == bugWaitHeldRegrants {
			g = s.grant(key, l, req, now, 0)
		} else {
			l.expires = now.Add(s.enforced(req.TTL))
			g = driver.Grant{Key: req.Key, Owner: req.Owner, Fence: l.fence, TTL: req.TTL}
		}
		s.mu.Unlock()
		g.Sent = now
		b.respond()
		return g, nil
	}
	s.mu.Unlock()
	if s.bug == bugWaitHeldNoWait {
		return b.Acquire(ctx, req)
	}
	if s.bug == bugWaitHeldCancelLeftQueued {
		res := make(chan driver.Grant, 1)
		go func() {
			g, err := b.refQueueBackend.AcquireWait(context.WithoutCancel(ctx), req)
			if err == nil {
				res <- g
			}
		}()
		select {
		case g := <-res:
			return g, nil
		case <-ctx.Done():
			return driver.Grant{}, fmt.Errorf("ref: acquire %q: %w: %w", req.Key, driver.ErrNotAcquired, ctx.Err())
		}
	}
	g, err := b.refQueueBackend.AcquireWait(ctx, req)
	if err != nil && ctx.Err() != nil {
		return driver.Grant{}, fmt.Errorf("ref: acquire %q: %w: %w", req.Key, driver.ErrNotAcquired, ctx.Err())
	}
	return g, err
}

// refKeeperBackend adds a client that keeps leases alive on its own: a
// KeepAliver.
type refKeeperBackend struct{ *refBackend }

func (b refKeeperBackend) KeepAlive(ctx context.Context, g driver.Grant) <-chan driver.Renewal {
	out, _ := b.keepAlive(ctx, g)
	return out
}

// keepAlive is KeepAlive; done is closed when its goroutine has ended.
func (b refKeeperBackend) keepAlive(ctx context.Context, g driver.Grant) (<-chan driver.Renewal, <-chan struct{}) {
	out := make(chan driver.Renewal, 1)
	done := make(chan struct{})
	ttl := g.TTL
	if ttl <= 0 {
		ttl = conformance.DefaultMinTTL
	}
	go func() {
		defer close(done)
		defer close(out)
		timer := time.NewTimer(ttl / 3)
		defer timer.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-timer.C:
			}
			sent := time.Now()
			r := driver.Renewal{Sent: sent, TTL: ttl}
			if b.s.bug != bugKeepAliveFakes {
				d, err := b.Renew(context.WithoutCancel(ctx), g, ttl)
				r.TTL, r.Err = d, err
			}
			if b.s.bug == bugRenewalSentAtResponse {
				r.Sent = time.Now()
			}
			if errors.Is(r.Err, driver.ErrNotHeld) && b.s.bug == bugKeepAliveSilent {
				timer.Reset(ttl / 3)
				continue
			}
			select {
			case out <- r:
			case <-ctx.Done():
				return
			}
			if errors.Is(r.Err, driver.ErrNotHeld) {
				return
			}
			timer.Reset(max(time.Until(sent.Add(ttl/3)), 0))
		}
	}()
	return out, done
}

// refStopperBackend is a refKeeperBackend whose keepalive can be stopped
// on the caller's goroutine: a KeepAliveStopper.
type refStopperBackend struct{ refKeeperBackend }

func (b refStopperBackend) KeepAliveStop(ctx context.Context, g driver.Grant) (<-chan driver.Renewal, func()) {
	ctx, cancel := context.WithCancel(ctx)
	out, done := b.keepAlive(ctx, g)
	return out, func() {
		cancel()
		if b.s.bug != bugKeepAliveStopAsync {
			<-done
		}
	}
}

// refHarness is the conformance harness of the reference store. It is a
// conformance.Delayer.
type refHarness struct {
	s     *refStore
	queue bool // backends are WaitAcquirers
	first bool // backends are TryFirstWaiters (and WaitAcquirers)
	keep  bool // backends are KeepAlivers
	stop  bool // backends are KeepAliveStoppers (and KeepAlivers)
}

func (h *refHarness) NewBackend(ctx context.Context) (driver.Backend, error) {
	return h.NewDelayedBackend(ctx, 0)
}

func (h *refHarness) NewDelayedBackend(_ context.Context, delay time.Duration) (driver.Backend, error) {
	return h.wrap(&refBackend{s: h.s, delay: delay}), nil
}

// NewFaultyBackend makes the harness a conformance.FaultInjector.
func (h *refHarness) NewFaultyBackend(context.Context) (driver.Backend, conformance.Faults, error) {
	f := &procfault.Faults{}
	return h.wrap(&refBackend{s: h.s, faults: f}), f, nil
}

// Corrupt makes the harness a conformance.Corrupter: key's lock holds a
// value no refBackend writes.
func (h *refHarness) Corrupt(_ context.Context, key string) error {
	s, key := h.s, h.s.mangle(key)
	s.mu.Lock()
	defer s.mu.Unlock()
	l := s.settle(key, time.Now())
	l.owner, l.corrupt = "", true
	return nil
}

// SetFenceRecord makes the harness a conformance.FenceCorrupter.
func (h *refHarness) SetFenceRecord(_ context.Context, key string, rec conformance.FenceRecord) error {
	s, key := h.s, h.s.mangle(key)
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.badFence, key)
	n, err := strconv.ParseUint(rec.Value, 10, 64)
	if rec.Absent || rec.Foreign || rec.Expires || err != nil || n == 0 || fencing.Token(n) > refMaxFence {
		s.badFence[key] = rec
		return nil
	}
	s.fences[key] = fencing.Token(n)
	return nil
}

// ReadFenceRecord describes key's fence record.
func (h *refHarness) ReadFenceRecord(_ context.Context, key string) (string, error) {
	s, key := h.s, h.s.mangle(key)
	s.mu.Lock()
	defer s.mu.Unlock()
	if rec, ok := s.badFence[key]; ok {
		return "bad " + rec.String(), nil
	}
	return fmt.Sprintf("fence %d", s.fences[key]), nil
}

// MaxFence is the reference backend's greatest fence.
func (h *refHarness) MaxFence() fencing.Token { return refMaxFence }

// fenceUsable returns the error of an Acquire of key (asked as
// name) whose fence record the backend never wrote, or is at
// refMaxFence; nil if the next fence can be granted. s.mu must be held.
func (s *refStore) fenceUsable(key, name string) error {
	_, bad := s.badFence[key]
	if s.bug == bugFenceRecordRestarts && bad {
		delete(s.badFence, key)
		s.fences[key] = 0
		return nil
	}
	switch {
	case bad:
		return fmt.Errorf("ref: acquire %q: a fence record the backend never wrote: %w", name, driver.ErrPermanent)
	case s.fences[key] >= refMaxFence:
		return fmt.Errorf("ref: acquire %q: fences exhausted: %w", name, driver.ErrPermanent)
	}
	return nil
}

// wrap returns b as the backend type of the harness's capabilities.
func (h *refHarness) wrap(b *refBackend) driver.Backend {
	switch {
	case h.first:
		return refFirstBackend{refQueueBackend{b}}
	case h.queue:
		return refQueueBackend{b}
	case h.stop:
		return refStopperBackend{refKeeperBackend{b}}
	case h.keep:
		return refKeeperBackend{b}
	}
	return b
}

func (h *refHarness) Invalidate(_ context.Context, key string) error {
	s, key := h.s, h.s.mangle(key)
	s.mu.Lock()
	defer s.mu.Unlock()
	l := s.settle(key, time.Now())
	l.owner = ""
	if s.bug == bugFenceResets || s.bug == bugFenceLostOnInvalidate {
		delete(s.fences, key)
	}
	return nil
}

// Config: the default timing, and a short per-property deadline, since
// some broken variants (a silent notifier under contention) would otherwise
// keep a property waiting for the default 30 seconds.
func (h *refHarness) Config() conformance.Config { return conformance.Config{Timeout: 8 * time.Second} }

// expiringHarness adds Expire (the store can end a lease on demand).
type expiringHarness struct{ *refHarness }

func (h expiringHarness) Expire(_ context.Context, key string) error {
	s, key := h.s, h.s.mangle(key)
	s.mu.Lock()
	defer s.mu.Unlock()
	l := s.settle(key, time.Now())
	if l.owner != "" {
		l.expires = time.Now()
	}
	return nil
}

// guardHarness adds a GuardMaker.
type guardHarness struct {
	*refHarness
	newGuard func() conformance.Guard
}

func (h guardHarness) NewGuard(context.Context) (conformance.Guard, error) { return h.newGuard(), nil }

// versionGuard is a guarded value kept as its own record (as a row with a
// fence column would be), applying fencing.Check on every write.
type versionGuard struct {
	mu     sync.Mutex
	token  fencing.Token
	holder string
	value  string
	// broken: reject only a repeat of the last token (an idempotency check
	// mistaken for fencing), so any older token is accepted.
	broken bool
}

func (g *versionGuard) Write(_ context.Context, token fencing.Token, holder, value string) error {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.broken {
		if token == 0 || (token == g.token && holder != g.holder) {
			return &fencing.StaleError{Token: token, Holder: holder, Accepted: g.token, AcceptedFrom: g.holder}
		}
	} else if err := fencing.Check(g.token, g.holder, token, holder); err != nil {
		return err
	}
	g.token, g.holder, g.value = token, holder, value
	return nil
}

func (g *versionGuard) Read(context.Context) (string, error) {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.value, nil
}

// variant is a configuration of the reference harness.
type variant struct {
	name string
	// want lists the properties that must report this variant's bug; empty
	// for a correct variant, which must pass the whole suite.
	want []string
	make func() conformance.Harness
}

func plain(b bug) func() conformance.Harness {
	return func() conformance.Harness { return &refHarness{s: newRefStore(b)} }
}

func expiring(b bug) func() conformance.Harness {
	return func() conformance.Harness { return expiringHarness{&refHarness{s: newRefStore(b)}} }
}

func queued(b bug) func() conformance.Harness {
	return func() conformance.Harness { return &refHarness{s: newRefStore(b), queue: true} }
}

func tryingFirst(b bug) func() conformance.Harness {
	return func() conformance.Harness { return &refHarness{s: newRefStore(b), first: true} }
}

func keeping(b bug) func() conformance.Harness {
	return func() conformance.Harness { return &refHarness{s: newRefStore(b), keep: true} }
}

func stopping(b bug) func() conformance.Harness {
	return func() conformance.Harness { return &refHarness{s: newRefStore(b), keep: true, stop: true} }
}

func guarded(broken bool) func() conformance.Harness {
	return func() conformance.Harness {
		return guardHarness{&refHarness{s: newRefStore(correct)}, func() conformance.Guard { return &versionGuard{broken: broken} }}
	}
}

var correctVariants = []variant{
	{name: "polling", make: expiring(correct)},
	{name: "queue", make: queued(correct)},
	{name: "tryfirst", make: tryingFirst(correct)},
	{name: "keepalive", make: keeping(correct)},
	{name: "keepalive-stop", make: stopping(correct)},
	{name: "guard", make: guarded(false)},
}

var brokenVariants = []variant{
	{"ReleaseWithoutOwnerCheck", []string{"ReleaseAfterLoss", "LateRelease"}, plain(bugReleaseNoOwnerCheck)},
	{"RenewWithoutOwnerCheck", []string{"RenewAfterLoss", "LeaseLengths", "RenewRaces"}, plain(bugRenewNoOwnerCheck)},
	{"FenceRepeats", []string{"FenceIncreasing"}, plain(bugFenceRepeats)},
	{"FenceResetOnRelease", []string{"FenceIncreasing"}, plain(bugFenceResets)},
	{"NoTTL", []string{"ExpiryWithoutRenew"}, plain(bugNoTTL)},
	{"LostLeaseNeverReported", []string{"InvalidationReported"}, expiring(bugRenewAlwaysOK)},
	{"CancelledWaitLeftQueued", []string{"CancelledAcquire"}, queued(bugQueueGhost)},
	{"GuardAcceptsOlderToken", []string{"PausedHolder"}, guarded(true)},
	{"CheckThenSet", []string{"MutualExclusion"}, plain(bugCheckThenSet)},
	{"SilentNotifier", []string{"Notifier"}, plain(bugSilentNotifier)},
	{"InspectorLeaksOwner", []string{"Inspector"}, plain(bugInspectorLeaks)},
	{"LIFOQueue", []string{"WaitAcquirer"}, queued(bugLIFOQueue)},
	{"KeyMangling", []string{"AwkwardKeys"}, plain(bugKeyMangling)},
	{"EarlyExpiry", []string{"ExpiryWithoutRenew"}, plain(bugEarlyExpiry)},
	{"UsableAfterClose", []string{"Close"}, plain(bugUsableAfterClose)},
	{"RenewAddsTTL", []string{"RenewTTL", "LeaseLengths"}, plain(bugRenewAddsTTL)},
	{"RenewReportsLonger", []string{"RenewTTL"}, plain(bugRenewReportsLonger)},
	{"ReleaseCheckThenDelete", []string{"ReleaseRacesExpiry"}, plain(bugReleaseCheckThenDelete)},
	{"CancelReportsHeld", []string{"CancelledAttempt"}, plain(bugCancelReportsHeld)},
	{"GrantSentAtResponse", []string{"SentIsSendTime"}, plain(bugGrantSentAtResponse)},
	{"RenewalSentAtResponse", []string{"SentIsSendTime"}, keeping(bugRenewalSentAtResponse)},
	{"WaiterLeaseNotKept", []string{"WaitAcquirer"}, queued(bugWaiterLeaseNotKept)},
	{"CancelRaceGhost", []string{"WaitAcquirer"}, queued(bugCancelRaceGhost)},
	{"KeepAliveFakes", []string{"KeepAliver"}, keeping(bugKeepAliveFakes)},
	{"KeepAliveSilent", []string{"KeepAliver"}, keeping(bugKeepAliveSilent)},
	{"KeepAliveStopAsync", []string{"KeepAliver"}, stopping(bugKeepAliveStopAsync)},
	{"RenewRevivesExpired", []string{"RenewAfterLoss"}, plain(bugRenewRevivesExpired)},
	{"ReleaseExpiredOK", []string{"ReleaseAfterLoss"}, plain(bugReleaseExpiredOK)},
	{"ReleaseNeedsFence", []string{"ReleaseAfterLoss"}, plain(bugReleaseNeedsFence)},
	{"WatchLate", []string{"Notifier"}, plain(bugWatchLate)},
	{"NotifierUnbuffered", []string{"Notifier"}, plain(bugNotifierUnbuffered)},
	{"RetryAfterTooLong", []string{"TryAcquire"}, plain(bugRetryAfterTooLong)},
	{"LeaseMaxLifetime", []string{"RenewKeepsLease", "LeaseLengths"}, plain(bugLeaseMaxLifetime)},
	{"FenceLostOnInvalidate", []string{"FenceIncreasing"}, plain(bugFenceLostOnInvalidate)},
	{"CancelReportsNotHeld", []string{"CancelledAttempt"}, plain(bugCancelReportsNotHeld)},
	{"ErrorLeaksOwner", []string{"ReleaseAfterLoss", "RenewAfterLoss"}, plain(bugErrorLeaksOwner)},
	{"HeldNotWrapped", []string{"TryAcquire"}, plain(bugHeldNotWrapped)},
	{"WaitHeldQueuesBehindOwn", []string{"TryFirstWaiter"}, tryingFirst(bugWaitHeldQueuesBehindOwn)},
	{"WaitHeldRegrants", []string{"TryFirstWaiter"}, tryingFirst(bugWaitHeldRegrants)},
	{"WaitHeldCancelLeftQueued", []string{"TryFirstWaiter", "CancelledAcquire"}, tryingFirst(bugWaitHeldCancelLeftQueued)},
	{"WaitHeldNoWait", []string{"TryFirstWaiter"}, tryingFirst(bugWaitHeldNoWait)},
	{"TryFirstBlocks", []string{"TryFirstWaiter"}, tryingFirst(bugTryFirstBlocks)},
	{"RenewCheckThenWrite", []string{"RenewRaces"}, plain(bugRenewCheckThenWrite)},
	{"TTLCapped", []string{"LeaseLengths"}, plain(bugTTLCapped)},
	{"OneTTLPerClient", []string{"LeaseLengths"}, plain(bugOneTTLPerClient)},
	{"FailedAcquireSetsTTL", []string{"LeaseLengths"}, plain(bugFailedAcquireSetsTTL)},
	{"CutRenewDrops", []string{"CancelledAttempt", "RenewRaces"}, plain(bugCutRenewDrops)},
	{"RenewWritesFirst", []string{"LeaseLengths"}, plain(bugRenewWritesFirst)},
	{"TransportPermanent", []string{"StoreFaults"}, plain(bugTransportPermanent)},
	{"RetryLostReply", []string{"StoreFaults"}, plain(bugRetryLostReply)},
	{"ReplyIgnoresCtx", []string{"StoreFaults"}, plain(bugReplyIgnoresCtx)},
	{"ForeignValueHeld", []string{"ForeignValue"}, plain(bugForeignValueHeld)},
	{"WatchStopDropsOthers", []string{"Notifier"}, plain(bugWatchStopDropsOthers)},
	{"FenceRecordRestarts", []string{"FenceRecord"}, plain(bugFenceRecordRestarts)},
}

// addExclusive registers a broken variant of the plain reference backend
// with bug b that only property reports (see exclusive).
func addExclusive(name, property string, b bug) {
	brokenVariants = append(brokenVariants, variant{name, []string{property}, plain(b)})
	exclusive[name] = true
}

// exclusive names the broken variants that only the properties in their
// want list report: each is the witness that its property is needed (no
// other property would catch the bug). TestBrokenBackendsAreReported
// checks that the failing properties are exactly those.
var exclusive = map[string]bool{
	"RenewWithoutOwnerCheck": true, "GuardAcceptsOlderToken": true, "CheckThenSet": true,
	"SilentNotifier": true, "InspectorLeaksOwner": true, "LIFOQueue": true, "KeyMangling": true,
	"UsableAfterClose": true, "RenewAddsTTL": true,
	"ReleaseCheckThenDelete": true, "CancelReportsHeld": true, "GrantSentAtResponse": true,
	"RenewalSentAtResponse": true, "WaiterLeaseNotKept": true, "CancelRaceGhost": true,
	"KeepAliveSilent": true, "KeepAliveStopAsync": true, "RenewRevivesExpired": true, "ReleaseExpiredOK": true,
	"WatchLate": true, "NotifierUnbuffered": true,
	"RetryAfterTooLong": true, "LeaseMaxLifetime": true, "FenceLostOnInvalidate": true,
	"CancelReportsNotHeld": true, "ErrorLeaksOwner": true,
	"WaitHeldQueuesBehindOwn": true, "WaitHeldRegrants": true,
	"RenewCheckThenWrite": true, "TTLCapped": true, "RenewWritesFirst": true,
	"TransportPermanent": true, "RetryLostReply": true, "ReplyIgnoresCtx": true, "ForeignValueHeld": true,
	"WatchStopDropsOthers": true, "FenceRecordRestarts": true,
}

// TestReference runs the suite on the correct reference backend: as a
// polling backend with Notifier, Inspector and an Expirer harness, as a
// queueing WaitAcquirer, as one that is also a TryFirstWaiter, as a
// KeepAliver with and without KeepAliveStop, with a GuardMaker, and as one
// that grants a holder's repeated Acquire (regrant: repeat_ref_test.go).
// Under -short (make short, the contributors' loop of under a minute) it
// runs the first two, the polling and the queueing shapes; make test runs
// them all (the seven took 38s of the loop's 66s on the 2-core machine).
func TestReference(t *testing.T) {
	variants := correctVariants
	if testing.Short() {
		variants = variants[:2]
		t.Logf("-short: the reference variants %q only; make test runs all %d", []string{variants[0].name, variants[1].name}, len(correctVariants))
	}
	for _, v := range variants {
		t.Run(v.name, func(t *testing.T) {
			t.Parallel()
			conformance.Run(t, func(*testing.T) conformance.Harness { return v.make() })
		})
	}
}
