package conformance

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/fencedlock/fencedlock"
	"github.com/fencedlock/fencedlock/fencing"
)

// properties is the suite, in the order Run checks it. Every doc is one
// sentence, logged by its subtest and listed in the package documentation.
var properties = []property{
	{"TryAcquire", "TryAcquire takes a free key with a non-zero fence, fails with ErrNotAcquired on a held key (from another backend or the same one), and succeeds again after Release with a greater fence.", testTryAcquire},
	{"MutualExclusion", "N backends x M goroutines contending for one key never have two valid leases at once, and each holder sees a fence greater than the previous holder's.", testMutualExclusion},
	{"FenceIncreasing", "Fences grow strictly on one key across holders, backends, releases, out-of-band invalidations and expiries.", testFenceIncreasing},
	{"RenewKeepsLease", "The watchdog's renewals keep a lease held past 3x its TTL, and no other backend can take the key meanwhile.", testRenewKeepsLease},
	{"RenewTTL", "Renew sets the lease to the TTL it returns from when it was sent (to ttl from now, not by ttl): after one renewal, or three in a row, and no more, the key stays held that long and is free within ExpirySlack after.", testRenewTTL},
	{"ExpiryWithoutRenew", "A lease that is not renewed lets another backend in within TTL + ExpirySlack, never before its TTL, and its holder sees it lost.", testExpiry},
	{"InvalidationReported", "A key deleted or revoked out of band ends its lease's Context (cause ErrLeaseLost) within TTL + renew interval, and a manual Renew reports ErrNotHeld at once.", testInvalidationReported},
	{"ReleaseAfterLoss", "Release after loss, a double Release and a Release of a never-held key return ErrNotHeld and delete nothing, in particular not a new holder's lock.", testReleaseAfterLoss},
	{"RenewAfterLoss", "Renew by an owner that lost the key returns ErrNotHeld and changes nothing: it neither recreates a free key nor takes or extends another holder's lock.", testRenewAfterLoss},
	{"ReleaseRacesExpiry", "A Release racing its lease's expiry while another owner polls the key never deletes the new owner's lock: the owner check and the delete are one atomic step.", testReleaseRacesExpiry},
	{"LateRelease", "The late Release of a lease that expired while its holder was paused does not delete the lock of the holder that took the key after it.", testLateRelease},
	{"CancelledAcquire", "An Acquire whose context ends returns promptly an error that is both ErrNotAcquired and the context's error, and leaves nothing behind: the key is free for a fresh backend as soon as its holder releases it.", testCancelledAcquire},
	{"CancelledAttempt", "An Acquire of a free key whose context ends at a random point of its round trip returns a grant or an error that is not ErrNotAcquired without the context's error, and its owner's Release of Grant{Key, Owner} leaves the key free.", testCancelledAttempt},
	{"SentIsSendTime", "Grant.Sent, Renewal.Sent and the TTLs reported with them never overstate a lease: with the responses delayed (if the harness is a Delayer), another owner never gets the key before the holder's local deadline.", testSentIsSendTime},
	{"PausedHolder", "A holder paused past its lease writes with its old fence after the next holder wrote, and the guard rejects the write with fencing.ErrStale.", testPausedHolder},
	{"AwkwardKeys", "Keys with slashes, Unicode, braces, a leading '}', spaces, control and invalid UTF-8 bytes, and of exactly MaxKeyLen bytes are distinct working keys; \"\" and MaxKeyLen+1 bytes fail with ErrInvalid.", testAwkwardKeys},
	{"Close", "Close is idempotent, every call after it fails with ErrClosed, other backends keep working, and a Locker's Close releases its leases.", testClose},
	{"Notifier", "If the backend is a Notifier, a release wakes a watcher (and a waiting Acquire) well before the holder's TTL, and the woken waiter can take the key.", testNotifier},
	{"WaitAcquirer", "If the backend is a WaitAcquirer, AcquireWait agrees with Acquire (exclusive, greater fence, blocks while held) and grants waiters in FIFO order.", testWaitAcquirer},
	{"Inspector", "If the backend is an Inspector, Inspect agrees with Acquire on whether a key is held and on its fence, and never reveals the owner token.", testInspector},
	{"KeepAliver", "If the backend is a KeepAliver, KeepAlive confirms renewals that keep a key held past its TTL and reports an invalidated key.", testKeepAliver},
	{"ForceReleaser", "If the backend is a ForceReleaser, ForceRelease breaks a held key at once (the holder's Renew and Release: ErrNotHeld; its Locker reports the loss by its next renewal), reports the broken fence, and every later grant, a queued waiter's too, is above the consumed fence After.", testForceReleaser},
}

func testTryAcquire(t *testing.T, e *env) {
	key := e.key("try")
	l1 := e.locker(t, nil)
	l2 := e.locker(t, nil)

	a, err := l1.TryAcquire(e.ctx, key)
	if err != nil {
		t.Fatalf("TryAcquire of a free key: %v", err)
	}
	if a.Fence() == 0 {
		t.Fatal("TryAcquire granted fence 0")
	}
	if a.TTL() != 0 && a.TTL() < e.hold {
		t.Errorf("lease TTL %v shorter than the requested %v", a.TTL(), e.hold)
	}
	for i, l := range []*fencedlock.Locker{l2, l1} {
		_, err := l.TryAcquire(e.ctx, key)
		if !errors.Is(err, fencedlock.ErrNotAcquired) {
			t.Fatalf("TryAcquire of a held key (locker %d): %v, want an error wrapping ErrNotAcquired", i+2, err)
		}
		var he *fencedlock.HeldError
		if errors.As(err, &he) {
			if he.Key != "" && he.Key != key {
				t.Errorf("HeldError.Key = %s, want %s", quote(he.Key), quote(key))
			}
			if limit := grantTTL(a.TTL(), e.hold) + e.cfg.ExpirySlack; he.RetryAfter > limit {
				t.Errorf("HeldError.RetryAfter = %v exceeds the holder's lease %v + slack", he.RetryAfter, limit)
			}
			if he.RetryAfter < 0 {
				t.Errorf("HeldError.RetryAfter = %v is negative", he.RetryAfter)
			}
		}
	}
	if a.Err() != nil {
		t.Fatalf("holder's lease ended by another's failed attempt: %v", a.Err())
	}
	if err := a.Release(e.ctx); err != nil {
		t.Fatalf("Release: %v", err)
	}
	b, err := l2.TryAcquire(e.ctx, key)
	if err != nil {
		t.Fatalf("TryAcquire after Release: %v", err)
	}
	if b.Fence() <= a.Fence() {
		t.Fatalf("fence after Release %v, want > %v", b.Fence(), a.Fence())
	}
	if err := b.Release(e.ctx); err != nil {
		t.Fatalf("Release: %v", err)
	}
}

func testMutualExclusion(t *testing.T, e *env) {
	const (
		backends   = 3
		goroutines = 3
		rounds     = 6
	)
	key := e.key("mutex")
	lockers := make([]*fencedlock.Locker, backends)
	for i := range lockers {
		lockers[i] = e.locker(t, nil)
	}

	var (
		mu         sync.Mutex
		inside     = map[*fencedlock.Lease]struct{}{}
		lastFence  fencing.Token
		entries    int
		maxValid   int
		violations []string
	)
	// valid reports whether a lease is still held by its holder's own
	// account: not lost, and before its local deadline (which lies before
	// the earliest moment the server could grant the key to anyone else).
	valid := func(ls *fencedlock.Lease, now time.Time) bool {
		return ls.Err() == nil && now.Before(ls.Deadline())
	}
	enter := func(ls *fencedlock.Lease) {
		mu.Lock()
		defer mu.Unlock()
		now := time.Now()
		n := 1
		for other := range inside {
			if valid(other, now) {
				n++
				if len(violations) < 5 {
					violations = append(violations, fmt.Sprintf("mutual exclusion violated: fence %v granted while fence %v was still validly held", ls.Fence(), other.Fence()))
				}
			}
		}
		maxValid = max(maxValid, n)
		if n == 1 && ls.Fence() <= lastFence && len(violations) < 5 {
			violations = append(violations, fmt.Sprintf("fences out of order: a holder got fence %v after a holder with fence %v", ls.Fence(), lastFence))
		}
		lastFence = max(lastFence, ls.Fence())
		inside[ls] = struct{}{}
		entries++
	}
	leave := func(ls *fencedlock.Lease) {
		mu.Lock()
		delete(inside, ls)
		mu.Unlock()
	}

	var wg sync.WaitGroup
	errs := make(chan error, backends*goroutines)
	start := time.Now()
	for i := range backends {
		for range goroutines {
			wg.Go(func() {
				for range rounds {
					ls, err := lockers[i].Acquire(e.ctx, key)
					if err != nil {
						errs <- fmt.Errorf("acquire: %w", err)
						return
					}
					enter(ls)
					time.Sleep(time.Millisecond) // a short critical section
					leave(ls)
					lost := ls.Err()
					if err := ls.Release(e.ctx); err != nil && lost == nil {
						errs <- fmt.Errorf("release: %w", err)
						return
					}
				}
			})
		}
	}
	wg.Wait()
	close(errs)
	t.Logf("%d critical sections by %d backends x %d goroutines in %v; at most %d valid lease(s) at once",
		entries, backends, goroutines, time.Since(start).Round(time.Millisecond), maxValid)
	n := 0
	for err := range errs {
		if n++; n <= 3 {
			t.Error(err)
		}
	}
	if n > 3 {
		t.Errorf("... and %d more errors", n-3)
	}
	for _, v := range violations {
		t.Error(v)
	}
	if want := backends * goroutines * rounds; entries != want && !t.Failed() {
		t.Errorf("%d critical sections, want %d", entries, want)
	}
}

func testFenceIncreasing(t *testing.T, e *env) {
	key := e.key("fence")
	bs := []fencedlock.Backend{e.backend(t), e.backend(t), e.backend(t)}
	exp, hasExpirer := e.h.(Expirer)
	var last fencing.Token
	var history []string
	check := func(g fencedlock.Grant, how string) {
		t.Helper()
		history = append(history, fmt.Sprintf("%v(%s)", g.Fence, how))
		if g.Fence <= last {
			t.Fatalf("fence %v after %v, want strictly greater; history: %s", g.Fence, last, strings.Join(history, " "))
		}
		last = g.Fence
	}
	ends := []string{"release", "release", "invalidate", "expire", "release", "invalidate", "release", "expire", "release"}
	waited := false
	for i, end := range ends {
		b := bs[i%len(bs)]
		ttl := e.hold
		if end == "expire" {
			ttl = e.ttl
		}
		g := e.grabTTL(t, b, key, ttl)
		check(g, fmt.Sprintf("backend %d", i%len(bs)+1))
		switch end {
		case "release":
			if err := b.Release(e.ctx, g); err != nil {
				t.Fatalf("Release: %v", err)
			}
		case "invalidate":
			e.invalidate(t, key)
			if e.held(t, key) {
				t.Fatalf("key held after harness Invalidate: the harness must leave it free")
			}
		case "expire":
			if hasExpirer {
				if err := exp.Expire(e.ctx, key); err != nil {
					t.Fatalf("harness Expire: %v", err)
				}
			}
			if hasExpirer || !waited {
				// Let the next backend take the key once it expired.
				nb := bs[(i+1)%len(bs)]
				bound := time.Now().Add(grantTTL(g.TTL, ttl) + e.cfg.ExpirySlack)
				g2, _, _ := e.acquireBy(t, nb, key, bound, "fence after expiry")
				check(g2, "after expiry")
				if err := nb.Release(e.ctx, g2); err != nil {
					t.Fatalf("Release: %v", err)
				}
				waited = true
			} else if err := b.Release(e.ctx, g); err != nil {
				t.Fatalf("Release: %v", err)
			}
		}
	}
	t.Logf("fences: %s", strings.Join(history, " "))
}

func testExpiry(t *testing.T, e *env) {
	e.retryTimed(t, e.ttl, func(ttl time.Duration) *inconclusive { return e.expiry(t, ttl) })
}

// expiry checks that an unrenewed lease of ttl lets another backend in
// within its TTL + ExpirySlack, never before its TTL. A run whose poller
// was descheduled across the moment the key became free decides nothing.
func (e *env) expiry(t *testing.T, requested time.Duration) *inconclusive {
	t.Helper()
	key := e.key("expiry")
	l := e.locker(t, func(o *fencedlock.Options) { o.TTL, o.ManualRenew = requested, true })
	sentA := time.Now()
	a, err := l.TryAcquire(e.ctx, key)
	if err != nil {
		t.Fatalf("TryAcquire: %v", err)
	}
	b := e.backend(t)
	ttl := grantTTL(a.TTL(), requested)
	// The store's clock may run at a slightly different rate than ours.
	earliest := sentA.Add(ttl - ttl/100 - time.Millisecond)
	if !e.held(t, key) && time.Now().Before(earliest) {
		t.Fatalf("key free %v after TryAcquire, before its TTL of %v", time.Since(sentA).Round(time.Millisecond), ttl)
	}
	g, sent, got, gap := e.acquireByGap(t, b, key, sentA.Add(ttl+e.cfg.ExpirySlack), "unrenewed lease")
	if got.Before(earliest) {
		t.Fatalf("another backend took the key %v after the holder's request was sent, before its TTL of %v",
			got.Sub(sentA).Round(time.Millisecond), ttl)
	}
	defer b.Release(e.ctx, g)
	if maxGap := max(ttl/4, 4*e.pollInterval()); gap > maxGap {
		return &inconclusive{why: fmt.Sprintf("the poller's attempts were %v apart when the key became free", gap.Round(time.Millisecond)), late: gap - e.pollInterval()}
	}
	t.Logf("key taken by another backend %v after the holder's acquire (TTL %v, slack %v)",
		sent.Sub(sentA).Round(time.Millisecond), ttl, e.cfg.ExpirySlack)
	if g.Fence <= a.Fence() {
		t.Errorf("fence after expiry %v, want > %v", g.Fence, a.Fence())
	}
	if !e.waitDone(a.Done(), e.schedAllowance()) {
		t.Fatal("the expired holder's lease is not reported lost")
	}
	if !errors.Is(context.Cause(a.Context()), fencedlock.ErrLeaseLost) {
		t.Fatalf("cause = %v, want ErrLeaseLost", context.Cause(a.Context()))
	}
	return nil
}

func testInvalidationReported(t *testing.T, e *env) {
	type how struct {
		name string
		do   func(ctx context.Context, key string) error
	}
	ways := []how{{"invalidate", e.h.Invalidate}}
	if exp, ok := e.h.(Expirer); ok {
		ways = append(ways, how{"expire", exp.Expire})
	}
	for _, w := range ways {
		key := e.key(w.name)
		l := e.locker(t, e.short)
		ls, err := l.TryAcquire(e.ctx, key)
		if err != nil {
			t.Fatalf("TryAcquire: %v", err)
		}
		renewEvery := l.Options().RenewInterval
		time.Sleep(renewEvery / 2) // between renewals
		t0 := time.Now()
		if err := w.do(e.ctx, key); err != nil {
			t.Fatalf("harness %s: %v", w.name, err)
		}
		bound := grantTTL(ls.TTL(), e.ttl) + renewEvery + e.cfg.ExpirySlack
		if !e.waitDone(ls.Done(), bound+e.schedAllowance()) {
			t.Fatalf("%s: lease not reported lost %v after the key was removed (bound %v): a lease the store no longer holds is renewed as if held",
				w.name, time.Since(t0).Round(time.Millisecond), bound)
		}
		t.Logf("%s: loss reported after %v (renew interval %v)", w.name, time.Since(t0).Round(time.Millisecond), renewEvery)
		if cause := context.Cause(ls.Context()); !errors.Is(cause, fencedlock.ErrLeaseLost) {
			t.Fatalf("%s: cause %v, want ErrLeaseLost", w.name, cause)
		}
		wantNotHeld(t, w.name+": Release of a lost lease", ls.Release(e.ctx))
		if e.held(t, key) {
			t.Fatalf("%s: key still held after the harness removed it", w.name)
		}
	}

	// A manual Renew notices the loss at once.
	key := e.key("manual")
	l := e.locker(t, func(o *fencedlock.Options) { o.ManualRenew = true })
	ls, err := l.TryAcquire(e.ctx, key)
	if err != nil {
		t.Fatalf("TryAcquire: %v", err)
	}
	if err := ls.Renew(e.ctx); err != nil {
		t.Fatalf("Renew of a held lease: %v", err)
	}
	e.invalidate(t, key)
	wantNotHeld(t, "Renew after invalidation", ls.Renew(e.ctx))
	select {
	case <-ls.Done():
	default:
		t.Fatal("lease not ended by a Renew that reported ErrNotHeld")
	}
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
func wantNotHeldOf(t *testing.T, what string, g fencedlock.Grant, err error) {
	t.Helper()
	wantNotHeld(t, what, err)
	noSecret(t, what+": the error", err.Error(), g.Owner)
}

// errOf returns the error of a call that also returns a value, such as
// Backend.Renew, for [wantNotHeld].
func errOf[T any](_ T, err error) error { return err }

// expired acquires key on b with a lease of MinTTL and returns the grant
// once the store must consider it expired (its TTL and ExpirySlack have
// passed since the request was sent, or the harness's Expirer ended it),
// with nothing else done to the key meanwhile: no other request may touch
// it (a store may keep an expired lock on record until then), and when.
func (e *env) expired(t *testing.T, b fencedlock.Backend, key string) (fencedlock.Grant, time.Time) {
	t.Helper()
	sent := time.Now()
	g := e.grabTTL(t, b, key, e.ttl)
	if exp, ok := e.h.(Expirer); ok {
		if err := exp.Expire(e.ctx, key); err != nil {
			t.Fatalf("harness Expire: %v", err)
		}
		return g, time.Now()
	}
	at := sent.Add(grantTTL(g.TTL, e.ttl) + e.cfg.ExpirySlack + time.Millisecond)
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

func testReleaseAfterLoss(t *testing.T, e *env) {
	key := e.key("release")
	b1, b2, b3 := e.backend(t), e.backend(t), e.backend(t)

	// Never held.
	wantNotHeld(t, "Release of a never-held key", b1.Release(e.ctx, fencedlock.Grant{Key: key, Owner: owner(), Fence: 1}))

	// Lost to invalidation, key free.
	ga := e.grab(t, b1, key)
	e.invalidate(t, key)
	wantNotHeld(t, "Release after invalidation", b1.Release(e.ctx, ga))

	// Lost, and the key now held by another owner.
	gb := e.grab(t, b2, key)
	wantNotHeldOf(t, "Release of a lost grant while another owner holds the key", ga, b1.Release(e.ctx, ga))
	e.mustBeHeld(t, b2, &gb, "after a lost owner's Release")

	// The Locker also releases with a Grant carrying only Key and Owner
	// (its clean-up after an attempt that failed but may have been
	// applied). From a lost owner it must delete nothing.
	wantNotHeld(t, "Release of Grant{Key, Owner} by a lost owner", b1.Release(e.ctx, fencedlock.Grant{Key: key, Owner: ga.Owner}))
	e.mustBeHeld(t, b2, &gb, "after a lost owner's Release of Grant{Key, Owner}")

	// Double release.
	if err := b2.Release(e.ctx, gb); err != nil {
		t.Fatalf("Release by the holder: %v", err)
	}
	wantNotHeld(t, "second Release", b2.Release(e.ctx, gb))
	gc := e.grab(t, b3, key)
	wantNotHeld(t, "third Release, while another owner holds the key", b2.Release(e.ctx, gb))
	e.mustBeHeld(t, b3, &gc, "after a double Release by the previous holder")
	// The holder's own Grant{Key, Owner} (the Locker's clean-up form) frees
	// the key: an attempt applied on the server but reported failed must
	// not leave the key held until its TTL.
	if err := b3.Release(e.ctx, fencedlock.Grant{Key: key, Owner: gc.Owner}); err != nil {
		t.Fatalf("Release of Grant{Key, Owner} by the holder: %v", err)
	}
	if e.held(t, key) {
		t.Fatal("key still held after its holder's Release of Grant{Key, Owner}")
	}

	// Expired, and no one took the key since: the owner no longer holds
	// it, whatever the store still has on record.
	ke := e.key("release-expired")
	ge, notBefore := e.expired(t, b1, ke)
	if err := b1.Release(e.ctx, ge); !errors.Is(err, fencedlock.ErrNotHeld) {
		t.Fatalf("Release %v after the lease ran out (TTL %v + ExpirySlack %v): %v, want ErrNotHeld: the holder is told it held the key to the end",
			time.Since(notBefore).Round(time.Millisecond), grantTTL(ge.TTL, e.ttl), e.cfg.ExpirySlack, err)
	}
	if e.held(t, ke) {
		t.Fatal("key held after an expired owner's Release")
	}

	// Through a Locker.
	l := e.locker(t, nil)
	ls, err := l.TryAcquire(e.ctx, key)
	if err != nil {
		t.Fatalf("TryAcquire: %v", err)
	}
	if err := ls.Release(e.ctx); err != nil {
		t.Fatalf("Lease.Release: %v", err)
	}
	wantNotHeld(t, "second Lease.Release", ls.Release(e.ctx))
}

func testRenewAfterLoss(t *testing.T, e *env) {
	key := e.key("renew-lost")
	b1, b2 := e.backend(t), e.backend(t)

	// Never held: Renew must not create the key.
	wantNotHeld(t, "Renew of a never-held key", errOf(b1.Renew(e.ctx, fencedlock.Grant{Key: key, Owner: owner(), Fence: 1}, e.ttl)))
	if e.held(t, key) {
		t.Fatal("Renew of a never-held key created it")
	}

	ga := e.grab(t, b1, key)
	e.invalidate(t, key)
	wantNotHeld(t, "Renew after invalidation", errOf(b1.Renew(e.ctx, ga, e.ttl)))
	if e.held(t, key) {
		t.Fatal("Renew of a lost grant recreated the key")
	}

	// Expired, and no one took the key since.
	ke := e.key("renew-expired")
	ge, _ := e.expired(t, b1, ke)
	wantNotHeld(t, "Renew after the lease ran out (TTL + ExpirySlack)", errOf(b1.Renew(e.ctx, ge, e.hold)))
	if e.held(t, ke) {
		t.Fatal("Renew of an expired lease revived it: the key is held again")
	}

	gb := e.grab(t, b2, key)
	wantNotHeldOf(t, "Renew of a lost grant while another owner holds the key", ga, errOf(b1.Renew(e.ctx, ga, e.ttl)))
	e.mustBeHeld(t, b2, &gb, "after a lost owner's Renew")
	wantNotHeld(t, "Release of a lost grant", b1.Release(e.ctx, ga))
	if err := b2.Release(e.ctx, gb); err != nil {
		t.Fatalf("the holder's Release after a lost owner's Renew: %v", err)
	}
}

func testLateRelease(t *testing.T, e *env) {
	key := e.key("late")
	a, sentA := e.pausedLease(t, key)
	lb := e.locker(t, nil)
	// A is paused: no renewal. B takes the key once A's lease expired.
	bl := e.takeOver(t, lb, a, sentA)
	// A resumes and releases late.
	wantNotHeld(t, "late Release", a.Release(e.ctx))
	if !e.held(t, key) {
		t.Fatal("the late Release of an expired lease deleted the new holder's lock")
	}
	if err := bl.Renew(e.ctx); err != nil {
		t.Fatalf("the new holder cannot renew after the late Release: %v", err)
	}
	if err := bl.Release(e.ctx); err != nil {
		t.Fatalf("the new holder's Release: %v", err)
	}
}

// pausedLease acquires key with a Locker that never renews (a holder
// paused from the start) and returns the lease and when it was requested.
func (e *env) pausedLease(t *testing.T, key string) (*fencedlock.Lease, time.Time) {
	t.Helper()
	l := e.locker(t, e.pausedHolder)
	sent := time.Now()
	a, err := l.TryAcquire(e.ctx, key)
	if err != nil {
		t.Fatalf("TryAcquire: %v", err)
	}
	return a, sent
}

// takeOver polls l.TryAcquire of a's key until it succeeds once a's lease
// (requested at sentA, never renewed) has expired, and fails the test if an
// attempt sent after a's TTL + ExpirySlack still finds the key held.
func (e *env) takeOver(t *testing.T, l *fencedlock.Locker, a *fencedlock.Lease, sentA time.Time) *fencedlock.Lease {
	t.Helper()
	notAfter := sentA.Add(grantTTL(a.TTL(), e.ttl) + e.cfg.ExpirySlack)
	for {
		sent := time.Now()
		ls, err := l.TryAcquire(e.ctx, a.Key())
		if err == nil {
			return ls
		}
		if !errors.Is(err, fencedlock.ErrNotAcquired) {
			t.Fatalf("TryAcquire: %v", err)
		}
		if sent.After(notAfter) {
			t.Fatalf("key still held %v after the paused holder's TTL + ExpirySlack", sent.Sub(notAfter).Round(time.Millisecond))
		}
		time.Sleep(max(e.ttl/25, 2*time.Millisecond))
	}
}

func testCancelledAcquire(t *testing.T, e *env) {
	key := e.key("cancel")
	holder := e.locker(t, nil)
	waiter := e.locker(t, e.short) // a waiter left behind would hold the key for MinTTL
	h, err := holder.TryAcquire(e.ctx, key)
	if err != nil {
		t.Fatalf("TryAcquire: %v", err)
	}
	prompt := e.ttl + e.schedAllowance()

	cases := []struct {
		name string
		ctx  func() (context.Context, context.CancelFunc)
		want error
	}{
		{"deadline", func() (context.Context, context.CancelFunc) { return context.WithTimeout(e.ctx, e.ttl/2) }, context.DeadlineExceeded},
		{"cancel", func() (context.Context, context.CancelFunc) {
			ctx, cancel := context.WithCancel(e.ctx)
			time.AfterFunc(e.ttl/2, cancel)
			return ctx, cancel
		}, context.Canceled},
		{"already cancelled", func() (context.Context, context.CancelFunc) {
			ctx, cancel := context.WithCancel(e.ctx)
			cancel()
			return ctx, cancel
		}, context.Canceled},
	}
	for _, c := range cases {
		ctx, cancel := c.ctx()
		res := make(chan error, 1)
		go func() {
			ls, err := waiter.Acquire(ctx, key)
			if err == nil {
				_ = ls.Release(e.ctx)
			}
			res <- err
		}()
		<-ctx.Done()
		ended := time.Now()
		select {
		case err := <-res:
			if !errors.Is(err, fencedlock.ErrNotAcquired) || !errors.Is(err, c.want) {
				t.Fatalf("%s: Acquire of a held key: %v, want an error wrapping both ErrNotAcquired and %v", c.name, err, c.want)
			}
		case <-time.After(prompt):
			t.Fatalf("%s: Acquire still waiting %v after its context ended", c.name, prompt)
		}
		t.Logf("%s: returned %v after the context ended", c.name, time.Since(ended).Round(time.Microsecond))
		cancel()
	}
	wq, queued := e.backend(t).(fencedlock.WaitAcquirer)
	if queued {
		ctx, cancel := context.WithTimeout(e.ctx, e.ttl/2)
		_, err := wq.AcquireWait(ctx, fencedlock.AcquireRequest{Key: key, Owner: owner(), TTL: e.ttl})
		cancel()
		if !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("AcquireWait of a held key with an expiring context: %v, want an error wrapping context.DeadlineExceeded", err)
		}
	}
	if err := h.Release(e.ctx); err != nil {
		t.Fatalf("holder's Release: %v", err)
	}
	// Nothing of the cancelled waits may stand in the way now.
	fresh := e.backend(t)
	g, err := fresh.Acquire(e.ctx, fencedlock.AcquireRequest{Key: key, Owner: owner(), TTL: e.hold})
	if err != nil {
		t.Fatalf("a fresh backend's Acquire right after the holder released: %v (a cancelled wait left something behind)", err)
	}
	if err := fresh.Release(e.ctx, g); err != nil {
		t.Fatalf("Release: %v", err)
	}
	if !queued {
		return
	}

	// For a queue: a cancelled waiter between a holder and a live waiter
	// must not delay the live one.
	h, err = holder.TryAcquire(e.ctx, key)
	if err != nil {
		t.Fatalf("TryAcquire: %v", err)
	}
	// This waiter's lease is long: left in the queue, it would hold the key
	// far longer than the bound below.
	waiter2 := e.locker(t, nil)
	ctx, cancel := context.WithTimeout(e.ctx, e.ttl/2)
	_, err = waiter2.Acquire(ctx, key)
	cancel()
	if !errors.Is(err, fencedlock.ErrNotAcquired) {
		t.Fatalf("cancelled Acquire: %v", err)
	}
	live := e.locker(t, nil)
	got := make(chan acquired, 1)
	go func() {
		ls, err := live.Acquire(e.ctx, key)
		got <- acquired{ls, err}
	}()
	time.Sleep(e.cfg.QueueDelay)
	released := time.Now()
	if err := h.Release(e.ctx); err != nil {
		t.Fatalf("holder's Release: %v", err)
	}
	// A cancelled waiter left in the queue would hold the key for a TTL.
	bound := e.hold / 2
	select {
	case r := <-got:
		if r.err != nil {
			t.Fatalf("live waiter: %v", r.err)
		}
		t.Logf("live waiter got the key %v after the release", time.Since(released).Round(time.Millisecond))
		_ = r.ls.Release(e.ctx)
	case <-time.After(bound):
		t.Fatalf("live waiter still waiting %v after the holder released: a cancelled waiter blocks the queue", bound)
	}
}

// acquired is the outcome of an Acquire run in a goroutine (which must not
// call t's methods: it may outlive a failed test).
type acquired struct {
	ls  *fencedlock.Lease
	err error
}

func testPausedHolder(t *testing.T, e *env) {
	var guard Guard = &memGuard{}
	if gm, ok := e.h.(GuardMaker); ok {
		g, err := gm.NewGuard(e.ctx)
		if err != nil {
			t.Fatalf("harness NewGuard: %v", err)
		}
		guard = g
	}
	key := e.key("paused")
	a, sentA := e.pausedLease(t, key)
	lb := e.locker(t, nil)
	if err := guard.Write(e.ctx, a.Fence(), a.Holder(), "A1"); err != nil {
		t.Fatalf("A's first write (fence %v): %v", a.Fence(), err)
	}
	// A pauses past its lease; B takes the key.
	b := e.takeOver(t, lb, a, sentA)
	if err := guard.Write(e.ctx, b.Fence(), b.Holder(), "B1"); err != nil {
		t.Fatalf("B's write (fence %v): %v", b.Fence(), err)
	}
	// A resumes and writes as if it still held the lock.
	err := guard.Write(e.ctx, a.Fence(), a.Holder(), "A2")
	if !errors.Is(err, fencing.ErrStale) {
		t.Fatalf("paused holder's late write with fence %v after fence %v: %v, want an error wrapping fencing.ErrStale", a.Fence(), b.Fence(), err)
	}
	var se *fencing.StaleError
	if errors.As(err, &se) && se.Token != a.Fence() {
		t.Errorf("StaleError.Token = %v, want %v", se.Token, a.Fence())
	}
	if v, err := guard.Read(e.ctx); err != nil || v != "B1" {
		t.Fatalf("guarded value %q (%v), want B's %q", v, err, "B1")
	}
	// The same fence from the same holder is accepted, from another holder
	// not (a fence duplicated by a failover must not let two holders write).
	if err := guard.Write(e.ctx, b.Fence(), b.Holder(), "B2"); err != nil {
		t.Fatalf("B's second write with the same fence: %v", err)
	}
	if err := guard.Write(e.ctx, b.Fence(), a.Holder(), "X"); !errors.Is(err, fencing.ErrStale) {
		t.Fatalf("a write with B's fence from another holder: %v, want fencing.ErrStale", err)
	}
	if err := guard.Write(e.ctx, 0, b.Holder(), "Z"); err == nil {
		t.Fatal("a write with the zero token was accepted")
	}
	if v, err := guard.Read(e.ctx); err != nil || v != "B2" {
		t.Fatalf("guarded value %q (%v), want %q", v, err, "B2")
	}
	if !e.waitDone(a.Done(), e.schedAllowance()) {
		t.Fatal("the paused holder's lease is not reported lost")
	}
	if err := b.Release(e.ctx); err != nil {
		t.Fatalf("Release: %v", err)
	}
}

func testAwkwardKeys(t *testing.T, e *env) {
	r := randHex(4)
	long := func(last byte) string {
		k := r + "-max-" + strings.Repeat("k", fencedlock.MaxKeyLen)
		return k[:fencedlock.MaxKeyLen-1] + string(last)
	}
	keys := []string{
		r + "/a/b/c", "/" + r, r + "/", r + "//", "./" + r + "/..",
		"ünïcødé-ключ-鍵-🔒-" + r,
		"{" + r + "}", "{" + r, r + "}", "}" + r, "}{" + r, r + "{}", "x{" + r + "}y", "{" + r + "}:1", "{" + r + "}:2",
		"with space " + r, " " + r, r + " ",
		r + "\t\n\r", "\x00" + r, r + "\x00", r + "\x00x",
		r + "\xff\xfe", r + "\xfe\xff", r + "\xc3", r + "\xc3\x28",
		r + "*", r + "?", r + "%2F", r + "'\";--", r + `\`, r + ":",
		"Case-" + r, "case-" + r,
		long('a'), long('b'),
	}
	for _, k := range keys {
		if err := fencedlock.ValidateKey(k); err != nil {
			t.Fatalf("suite bug: key %s: %v", quote(k), err)
		}
	}
	if n := len(long('a')); n != fencedlock.MaxKeyLen {
		t.Fatalf("suite bug: long key of %d bytes", n)
	}
	l1, l2 := e.locker(t, nil), e.locker(t, nil)
	insp, _ := e.backend(t).(fencedlock.Inspector)
	// Each phase runs its keys concurrently (slow stores take a round trip
	// or more per call); every key is handled by one goroutine per phase.
	phase := func(name string, fn func(i int, k string) error) {
		t.Helper()
		var wg sync.WaitGroup
		errs := make([]error, len(keys))
		sem := make(chan struct{}, 8)
		for i, k := range keys {
			wg.Go(func() {
				sem <- struct{}{}
				defer func() { <-sem }()
				errs[i] = fn(i, k)
			})
		}
		wg.Wait()
		if err := errors.Join(errs...); err != nil {
			t.Fatalf("%s: %v", name, err)
		}
	}
	leases := make([]*fencedlock.Lease, len(keys))
	phase("all held at once", func(i int, k string) error {
		ls, err := l1.TryAcquire(e.ctx, k)
		if err != nil {
			return fmt.Errorf("TryAcquire(%s) while other awkward keys are held: %w (keys alias, or the key is mangled)", quote(k), err)
		}
		leases[i] = ls
		return nil
	})
	phase("held by another backend", func(i int, k string) error {
		if _, err := l2.TryAcquire(e.ctx, k); !errors.Is(err, fencedlock.ErrNotAcquired) {
			return fmt.Errorf("TryAcquire(%s) held by another backend: %v, want ErrNotAcquired", quote(k), err)
		}
		if insp != nil {
			info, err := insp.Inspect(e.ctx, k)
			if err != nil {
				return fmt.Errorf("Inspect(%s): %w", quote(k), err)
			}
			if !info.Held || info.Fence != leases[i].Fence() {
				return fmt.Errorf("Inspect(%s) = held %v fence %v, want held, fence %v", quote(k), info.Held, info.Fence, leases[i].Fence())
			}
		}
		return nil
	})
	phase("release", func(i int, k string) error {
		if err := leases[i].Release(e.ctx); err != nil {
			return fmt.Errorf("Release(%s): %w", quote(k), err)
		}
		return nil
	})
	phase("taken again", func(i int, k string) error {
		ls, err := l2.TryAcquire(e.ctx, k)
		if err != nil {
			return fmt.Errorf("TryAcquire(%s) after Release: %w", quote(k), err)
		}
		defer ls.Release(e.ctx)
		if ls.Fence() <= leases[i].Fence() {
			return fmt.Errorf("key %s: fence %v after %v", quote(k), ls.Fence(), leases[i].Fence())
		}
		return nil
	})
	for _, k := range []string{"", strings.Repeat("x", fencedlock.MaxKeyLen+1)} {
		if _, err := l1.TryAcquire(e.ctx, k); !errors.Is(err, fencedlock.ErrInvalid) {
			t.Fatalf("TryAcquire of a %d-byte key: %v, want ErrInvalid", len(k), err)
		}
	}
	t.Logf("%d awkward keys held at once, released, and taken again", len(keys))
}

func testClose(t *testing.T, e *env) {
	key := e.key("close")
	b := e.backend(t)
	other := e.backend(t)
	g := e.grab(t, b, key)
	if err := other.Release(e.ctx, g); err != nil {
		t.Fatalf("Release through another backend of the same store: %v", err)
	}
	if err := b.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	if err := b.Close(); err != nil && !errors.Is(err, fencedlock.ErrClosed) {
		t.Fatalf("second Close: %v, want nil or ErrClosed", err)
	}
	closed := func(what string, err error) {
		t.Helper()
		if !errors.Is(err, fencedlock.ErrClosed) {
			t.Fatalf("%s after Close: %v, want an error wrapping ErrClosed", what, err)
		}
	}
	_, err := b.Acquire(e.ctx, fencedlock.AcquireRequest{Key: key, Owner: owner(), TTL: e.ttl})
	closed("Acquire", err)
	og := e.grab(t, other, key)
	_, err = b.Renew(e.ctx, og, e.hold)
	closed("Renew", err)
	closed("Release", b.Release(e.ctx, og))
	e.mustBeHeld(t, other, &og, "after calls on a closed backend")
	if n, ok := b.(fencedlock.Notifier); ok {
		_, stop, err := n.Watch(e.ctx, key)
		if err == nil && stop != nil {
			stop()
		}
		closed("Watch", err)
	}
	if w, ok := b.(fencedlock.WaitAcquirer); ok {
		ctx, cancel := context.WithTimeout(e.ctx, e.ttl+e.schedAllowance())
		_, err := w.AcquireWait(ctx, fencedlock.AcquireRequest{Key: key, Owner: owner(), TTL: e.ttl})
		cancel()
		closed("AcquireWait", err)
	}
	if in, ok := b.(fencedlock.Inspector); ok {
		_, err := in.Inspect(e.ctx, key)
		closed("Inspect", err)
	}
	if err := other.Release(e.ctx, og); err != nil {
		t.Fatalf("Release by another backend after one was closed: %v", err)
	}

	// A Locker's Close releases its leases and leaves its backend open:
	// whoever created the backend closes it.
	lb := e.backend(t)
	l := mustLocker(t, lb, e.lockerOpts(nil))
	ls, err := l.TryAcquire(e.ctx, key)
	if err != nil {
		t.Fatalf("TryAcquire: %v", err)
	}
	if err := l.Close(); err != nil {
		t.Fatalf("Locker.Close: %v", err)
	}
	if err := l.Close(); err != nil {
		t.Fatalf("second Locker.Close: %v", err)
	}
	if !errors.Is(context.Cause(ls.Context()), fencedlock.ErrReleased) {
		t.Fatalf("lease cause after Locker.Close: %v, want ErrReleased", context.Cause(ls.Context()))
	}
	if e.held(t, key) {
		t.Fatal("key held after the Locker holding it was closed")
	}
	if _, err := l.TryAcquire(e.ctx, key); !errors.Is(err, fencedlock.ErrClosed) {
		t.Fatalf("TryAcquire on a closed Locker: %v, want ErrClosed", err)
	}
	l2 := mustLocker(t, lb, e.lockerOpts(nil))
	defer l2.Close()
	ls2, err := l2.TryAcquire(e.ctx, key)
	if err != nil {
		t.Fatalf("TryAcquire on the backend of a closed Locker: %v", err)
	}
	if err := ls2.Release(e.ctx); err != nil {
		t.Fatalf("Release on the backend of a closed Locker: %v", err)
	}
}

func testNotifier(t *testing.T, e *env) {
	if !implements[fencedlock.Notifier](t, e) {
		return
	}
	key := e.key("notify")
	b1, b2 := e.backend(t), e.backend(t)
	n := b2.(fencedlock.Notifier)
	wake := e.hold / 2 // well before the holder's TTL
	g := e.grabTTL(t, b1, key, e.hold)
	ch, stop, err := n.Watch(e.ctx, key)
	if err != nil {
		t.Fatalf("Watch: %v", err)
	}
	released := time.Now()
	if err := b1.Release(e.ctx, g); err != nil {
		t.Fatalf("Release: %v", err)
	}
	select {
	case <-ch:
		t.Logf("watcher woken %v after the release", time.Since(released).Round(time.Microsecond))
	case <-time.After(wake):
		stop()
		t.Fatalf("watcher not woken %v after the release (the holder's TTL was %v)", wake, e.hold)
	}
	g2 := e.grab(t, b2, key) // agreement: the woken watcher can take the key
	// A wake-up while the watcher is not receiving is kept (a buffer of
	// one), not dropped.
	if err := b2.Release(e.ctx, g2); err != nil {
		t.Fatalf("Release: %v", err)
	}
	select {
	case <-ch:
	case <-time.After(wake):
		stop()
		t.Fatalf("a release while the watcher was not receiving left no pending wake-up %v after it (the channel must have a buffer of one)", wake)
	}
	stop()

	// A Locker's waiting Acquire is woken by the release too.
	key = e.key("notify-locker")
	holder := e.locker(t, nil)
	waiter := e.locker(t, func(o *fencedlock.Options) { o.MaxRetryDelay = e.hold })
	h, err := holder.TryAcquire(e.ctx, key)
	if err != nil {
		t.Fatalf("TryAcquire: %v", err)
	}
	got := make(chan acquired, 1)
	go func() {
		ls, err := waiter.Acquire(e.ctx, key)
		got <- acquired{ls, err}
	}()
	time.Sleep(e.ttl) // let the waiter fail once and start watching
	released = time.Now()
	if err := h.Release(e.ctx); err != nil {
		t.Fatalf("Release: %v", err)
	}
	select {
	case r := <-got:
		if r.err != nil {
			t.Fatalf("waiting Acquire: %v", r.err)
		}
		ls := r.ls
		t.Logf("waiting Acquire woken %v after the release", time.Since(released).Round(time.Microsecond))
		if ls.Fence() <= h.Fence() {
			t.Errorf("woken waiter's fence %v, want > %v", ls.Fence(), h.Fence())
		}
		_ = ls.Release(e.ctx)
	case <-time.After(wake):
		t.Fatalf("waiting Acquire not woken %v after the release (the holder's TTL was %v)", wake, e.hold)
	}
}

func testWaitAcquirer(t *testing.T, e *env) {
	if !implements[fencedlock.WaitAcquirer](t, e) {
		return
	}
	key := e.key("queue")
	b1 := e.backend(t)
	w1 := b1.(fencedlock.WaitAcquirer)
	req := func() fencedlock.AcquireRequest {
		return fencedlock.AcquireRequest{Key: key, Owner: owner(), TTL: e.hold}
	}

	// A free key is granted at once, exclusively.
	start := time.Now()
	g, err := w1.AcquireWait(e.ctx, req())
	if err != nil {
		t.Fatalf("AcquireWait of a free key: %v", err)
	}
	e.checkGrant(t, g, key, e.hold)
	if !g.Sent.IsZero() && g.Sent.Before(start) {
		t.Errorf("Grant.Sent lies %v before the AcquireWait call that made the lease", start.Sub(g.Sent))
	}
	if !e.held(t, key) {
		t.Fatal("key free after AcquireWait granted it")
	}
	if err := b1.Release(e.ctx, g); err != nil {
		t.Fatalf("Release: %v", err)
	}

	// A held key blocks the waiter until released; the waiter's fence is
	// greater.
	holder := e.locker(t, nil)
	h, err := holder.TryAcquire(e.ctx, key)
	if err != nil {
		t.Fatalf("TryAcquire: %v", err)
	}
	type result struct {
		g   fencedlock.Grant
		err error
		at  time.Time
	}
	res := make(chan result, 1)
	go func() {
		g, err := w1.AcquireWait(e.ctx, req())
		res <- result{g, err, time.Now()}
	}()
	time.Sleep(2 * e.ttl) // the holder renews meanwhile
	select {
	case r := <-res:
		t.Fatalf("AcquireWait returned (%v, fence %v) while the key was held and renewed", r.err, r.g.Fence)
	default:
	}
	if err := h.Release(e.ctx); err != nil {
		t.Fatalf("Release: %v", err)
	}
	select {
	case r := <-res:
		if r.err != nil {
			t.Fatalf("AcquireWait after the release: %v", r.err)
		}
		if r.g.Fence <= h.Fence() {
			t.Fatalf("waiter's fence %v, want > holder's %v", r.g.Fence, h.Fence())
		}
		if !e.held(t, key) {
			t.Fatal("key free after AcquireWait granted it")
		}
		if err := b1.Release(e.ctx, r.g); err != nil {
			t.Fatalf("Release: %v", err)
		}
	case <-time.After(e.hold / 2):
		t.Fatalf("waiter not granted the key %v after the holder released it", e.hold/2)
	}

	// FIFO: waiters are granted in the order they queued. The suite cannot
	// see when a waiter is queued, so it starts them QueueDelay apart; if
	// the order is wrong it tries once more with 4x the delay, and fails
	// only if the order is wrong again (an unfair queue is unfair both
	// times; a slow registration is unlikely to be that slow twice).
	delay := e.cfg.QueueDelay
	for attempt := 1; ; attempt++ {
		order := e.fifoRound(t, holder, req, delay)
		if slices.IsSorted(order) {
			t.Logf("%d waiters granted in FIFO order %v (started %v apart)", len(order), order, delay)
			break
		}
		if attempt == 2 {
			t.Fatalf("waiters granted in order %v, want FIFO (waiters started %v apart, after a first round with %v)", order, delay, e.cfg.QueueDelay)
		}
		t.Logf("waiters granted in order %v with starts %v apart; trying again with %v", order, delay, 4*delay)
		delay *= 4
	}
	e.waitPastTTL(t)
	e.cancelRacesGrant(t)
}

// waitPastTTL checks that a waiter that waits longer than its own TTL is
// granted a live lease (etcd #11456): its key is held, it can renew it,
// and its Grant's Sent and TTL do not say that the lease already ran out.
func (e *env) waitPastTTL(t *testing.T) {
	t.Helper()
	key := e.key("wait-past-ttl")
	hb, wb := e.backend(t), e.backend(t)
	h := e.grab(t, hb, key)
	type result struct {
		g   fencedlock.Grant
		err error
		at  time.Time
	}
	res := make(chan result, 1)
	called := time.Now()
	go func() {
		g, err := wb.(fencedlock.WaitAcquirer).AcquireWait(e.ctx, fencedlock.AcquireRequest{Key: key, Owner: owner(), TTL: e.ttl})
		res <- result{g, err, time.Now()}
	}()
	wait := 2*e.ttl + e.cfg.ExpirySlack // longer than the waiter's TTL
	time.Sleep(wait)
	if err := hb.Release(e.ctx, h); err != nil {
		t.Fatalf("Release: %v", err)
	}
	var r result
	select {
	case r = <-res:
	case <-time.After(e.hold / 2):
		t.Fatalf("waiter not granted the key %v after the holder released it", e.hold/2)
	}
	if r.err != nil {
		t.Fatalf("AcquireWait after waiting %v (its TTL %v): %v", wait, e.ttl, r.err)
	}
	sent := r.g.Sent
	if sent.IsZero() {
		sent = called // the Locker's reckoning: the AcquireWait call
	}
	ttl := grantTTL(r.g.TTL, e.ttl)
	// A lease whose own send time and TTL ended before the grant came back
	// may have expired on the store (allowing for the scheduling lateness
	// measured, which may have delayed the backend's renewals).
	if end := sent.Add(ttl); end.Add(2 * e.lag.max()).Before(r.at) {
		t.Fatalf("AcquireWait granted a lease that had run out %v before it returned (Grant.Sent %v after the call, TTL %v): a waiter whose lease expired while it waited was granted the key",
			r.at.Sub(end).Round(time.Millisecond), sent.Sub(called).Round(time.Millisecond), ttl)
	}
	if !e.held(t, key) {
		t.Fatalf("key free right after AcquireWait granted it to a waiter that waited %v (its TTL %v): its lease expired while it waited", wait, e.ttl)
	}
	if _, err := wb.Renew(e.ctx, r.g, e.ttl); err != nil {
		t.Fatalf("the waiter granted after %v (its TTL %v) cannot renew: %v", wait, e.ttl, err)
	}
	if err := wb.Release(e.ctx, r.g); err != nil {
		t.Fatalf("Release: %v", err)
	}
	t.Logf("a waiter that waited %v (TTL %v) was granted a live lease", wait, e.ttl)
}

// cancelRacesGrant cancels waiters at about the moment the holder releases
// the key, in both orders, and checks that a waiter whose AcquireWait
// returned the context's error left no trace: the key is free.
func (e *env) cancelRacesGrant(t *testing.T) {
	t.Helper()
	const rounds = 24
	hb := e.backend(t)
	type round struct {
		key    string
		w      fencedlock.Backend
		h      fencedlock.Grant
		ctx    context.Context
		cancel context.CancelFunc
		res    chan error
		g      fencedlock.Grant
	}
	rs := make([]*round, rounds)
	for i := range rs {
		r := &round{key: e.key("cancel-race"), w: e.backend(t), res: make(chan error, 1)}
		r.h = e.grab(t, hb, r.key)
		r.ctx, r.cancel = context.WithCancel(e.ctx)
		rs[i] = r
		go func() {
			g, err := r.w.(fencedlock.WaitAcquirer).AcquireWait(r.ctx, fencedlock.AcquireRequest{Key: r.key, Owner: owner(), TTL: e.hold})
			r.g = g
			r.res <- err
		}()
	}
	defer func() {
		for _, r := range rs {
			r.cancel()
		}
	}()
	time.Sleep(e.cfg.QueueDelay)
	var wg sync.WaitGroup
	relErrs := make([]error, rounds)
	for i, r := range rs {
		wg.Go(func() {
			// Mostly cancel first, then release: the grant races the
			// waiter's leaving the queue.
			gap := time.Duration(i%3) * time.Millisecond / 2
			if i%4 != 3 {
				r.cancel()
				time.Sleep(gap)
				relErrs[i] = hb.Release(e.ctx, r.h)
			} else {
				relErrs[i] = hb.Release(e.ctx, r.h)
				time.Sleep(gap)
				r.cancel()
			}
		})
	}
	wg.Wait()
	if err := errors.Join(relErrs...); err != nil {
		t.Fatalf("the holders' Release: %v", err)
	}
	granted, cancelled := 0, 0
	for i, r := range rs {
		var err error
		select {
		case err = <-r.res:
		case <-time.After(e.ttl + e.schedAllowance()):
			t.Fatalf("round %d: AcquireWait still waiting %v after its context was cancelled", i+1, e.ttl+e.schedAllowance())
		}
		if err == nil {
			granted++
			if err := r.w.Release(e.ctx, r.g); err != nil {
				t.Fatalf("round %d: Release of the granted waiter: %v", i+1, err)
			}
			continue
		}
		cancelled++
		if !errors.Is(err, context.Canceled) {
			t.Fatalf("round %d: cancelled AcquireWait: %v, want an error wrapping context.Canceled", i+1, err)
		}
		if e.held(t, r.key) {
			t.Fatalf("round %d: key held after the holder released it and the only waiter's AcquireWait returned %v: a cancel racing the grant left the key to no one", i+1, err)
		}
	}
	t.Logf("%d cancels raced the grant: %d waiters granted, %d cancelled without a trace", rounds, granted, cancelled)
}

// fifoRound holds the key with holder, starts 4 waiters (each on its own
// backend) delay apart, releases the key and returns the order in which
// the waiters were granted it.
func (e *env) fifoRound(t *testing.T, holder *fencedlock.Locker, req func() fencedlock.AcquireRequest, delay time.Duration) []int {
	t.Helper()
	const waiters = 4
	h, err := holder.TryAcquire(e.ctx, req().Key)
	if err != nil {
		t.Fatalf("TryAcquire: %v", err)
	}
	var (
		mu    sync.Mutex
		order []int
		errs  []error
		wg    sync.WaitGroup
	)
	defer wg.Wait() // after cancel below: the waiters end before the test
	ctx, cancel := context.WithCancel(e.ctx)
	defer cancel()
	for i := range waiters {
		b := e.backend(t)
		w := b.(fencedlock.WaitAcquirer)
		wg.Go(func() {
			g, err := w.AcquireWait(ctx, req())
			if err == nil {
				err = b.Release(ctx, g)
			}
			mu.Lock()
			defer mu.Unlock()
			if err != nil {
				errs = append(errs, fmt.Errorf("waiter %d: %w", i, err))
				return
			}
			order = append(order, i)
		})
		time.Sleep(delay)
	}
	if err := h.Release(e.ctx); err != nil {
		t.Fatalf("Release: %v", err)
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		t.Fatal(err)
	}
	return order
}

func testInspector(t *testing.T, e *env) {
	if !implements[fencedlock.Inspector](t, e) {
		return
	}
	key := e.key("inspect")
	b1, b2 := e.backend(t), e.backend(t)
	in := b2.(fencedlock.Inspector)
	inspect := func(what string) fencedlock.Info {
		t.Helper()
		info, err := in.Inspect(e.ctx, key)
		if err != nil {
			t.Fatalf("Inspect %s: %v", what, err)
		}
		return info
	}

	info := inspect("of a never-used key")
	if info.Held || info.Holder != "" || info.TTL != 0 {
		t.Fatalf("Inspect of a never-used key = %+v, want not held", info)
	}
	if e.held(t, key) {
		t.Fatal("never-used key is held")
	}
	// held() above took and released the key once; start from here.
	g := e.grab(t, b1, key)
	info = inspect("of a held key")
	if !info.Held {
		t.Fatal("Inspect reports a held key free")
	}
	if info.Fence != g.Fence {
		t.Errorf("Inspect fence %v, want the holder's %v", info.Fence, g.Fence)
	}
	if limit := grantTTL(g.TTL, e.hold) + e.cfg.ExpirySlack; info.TTL <= 0 || info.TTL > limit {
		t.Errorf("Inspect TTL %v, want in (0, %v]", info.TTL, limit)
	}
	if info.Holder != "" && info.Holder != fencedlock.HolderID(g.Owner) {
		// Not printed: it may be the secret itself.
		t.Errorf("Inspect Holder (%d bytes) is not HolderID(owner) nor empty", len(info.Holder))
	}
	noSecret(t, "Info", fmt.Sprintf("%#v", info), g.Owner)
	if !e.held(t, key) {
		t.Fatal("Acquire finds free a key Inspect reports held")
	}
	if err := b1.Release(e.ctx, g); err != nil {
		t.Fatalf("Release: %v", err)
	}
	info = inspect("after release")
	if info.Held {
		t.Fatal("Inspect reports a released key held")
	}
	if info.Fence != 0 && info.Fence != g.Fence {
		t.Errorf("Inspect fence after release %v, want the last granted %v (or 0)", info.Fence, g.Fence)
	}
	if e.held(t, key) {
		t.Fatal("Acquire finds held a key Inspect reports free")
	}
	g = e.grab(t, b1, key)
	e.invalidate(t, key)
	if info = inspect("after invalidation"); info.Held {
		t.Fatal("Inspect reports an invalidated key held")
	}
}

func testKeepAliver(t *testing.T, e *env) {
	if !implements[fencedlock.KeepAliver](t, e) {
		return
	}
	key := e.key("keepalive")
	b := e.backend(t)
	ka := b.(fencedlock.KeepAliver)
	g := e.grabTTL(t, b, key, e.ttl)
	ctx, cancel := context.WithCancel(e.ctx)
	defer cancel()
	ch := ka.KeepAlive(ctx, g)
	ttl := grantTTL(g.TTL, e.ttl)
	until := time.Now().Add(2*ttl + e.cfg.ExpirySlack)
	renewals := 0
	for time.Now().Before(until) {
		select {
		case r, ok := <-ch:
			if !ok {
				t.Fatalf("KeepAlive channel closed after %d renewals of a held key", renewals)
			}
			if r.Err != nil {
				t.Fatalf("KeepAlive of a held key reported %v", r.Err)
			}
			if r.TTL <= 0 {
				t.Fatalf("KeepAlive Renewal.TTL = %v", r.TTL)
			}
			renewals++
		case <-time.After(ttl + e.schedAllowance()):
			t.Fatalf("no KeepAlive renewal within a TTL (%v) after %d renewals", ttl, renewals)
		}
	}
	if !e.held(t, key) {
		t.Fatalf("key free after %v of KeepAlive (%d renewals)", 2*ttl, renewals)
	}
	// A KeepAlive whose context ends closes its channel.
	ctx2, cancel2 := context.WithCancel(e.ctx)
	ch2 := ka.KeepAlive(ctx2, g)
	cancel2()
	closed := make(chan struct{})
	go func() {
		for range ch2 {
		}
		close(closed)
	}()
	if !e.waitDone(closed, ttl+e.schedAllowance()) {
		t.Fatalf("KeepAlive channel still open %v after its context ended", ttl+e.schedAllowance())
	}
	e.invalidate(t, key)
	bound := ttl + e.cfg.ExpirySlack + e.schedAllowance()
	timeout := time.After(bound)
	for {
		select {
		case r, ok := <-ch:
			if !ok {
				t.Logf("%d renewals, then the channel closed after invalidation", renewals)
				return
			}
			if r.Err != nil {
				if !errors.Is(r.Err, fencedlock.ErrNotHeld) {
					t.Logf("KeepAlive error after invalidation (not ErrNotHeld, treated as transient): %v", r.Err)
					continue
				}
				t.Logf("%d renewals, then ErrNotHeld after invalidation", renewals)
				return
			}
		case <-timeout:
			t.Fatalf("KeepAlive did not report the invalidated key within %v", bound)
		}
	}
}
