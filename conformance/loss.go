package conformance

import (
	"context"
	"errors"
	"fmt"
	mrand "math/rand/v2"
	"runtime"
	"sync"
	"testing"
	"time"

	"github.com/fencedlock/fencedlock"
	"github.com/fencedlock/fencedlock/driver"
	"github.com/fencedlock/fencedlock/fencing"
)

// This file holds the properties about a lease that was lost (invalidated
// out of band, expired, or taken over by the next holder): that the loss
// is reported (InvalidationReported), that the loser's Release and Renew
// change nothing (ReleaseAfterLoss, RenewAfterLoss), including when the
// Release races the expiry (ReleaseRacesExpiry) or comes after a pause
// (LateRelease), and that a guard rejects the paused holder's write
// (PausedHolder).

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
		ls := e.mustTryAcquire(t, l, key)
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
	ls := e.mustTryAcquire(t, l, key)
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

func testReleaseAfterLoss(t *testing.T, e *env) {
	key := e.key("release")
	b1, b2, b3 := e.backend(t), e.backend(t), e.backend(t)

	// Never held.
	wantNotHeld(t, "Release of a never-held key", b1.Release(e.ctx, driver.Grant{Key: key, Owner: owner(), Fence: 1}))

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
	wantNotHeld(t, "Release of Grant{Key, Owner} by a lost owner", b1.Release(e.ctx, driver.Grant{Key: key, Owner: ga.Owner}))
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
	if err := b3.Release(e.ctx, driver.Grant{Key: key, Owner: gc.Owner}); err != nil {
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
	ls := e.mustTryAcquire(t, l, key)
	if err := ls.Release(e.ctx); err != nil {
		t.Fatalf("Lease.Release: %v", err)
	}
	wantNotHeld(t, "second Lease.Release", ls.Release(e.ctx))
}

func testRenewAfterLoss(t *testing.T, e *env) {
	key := e.key("renew-lost")
	b1, b2 := e.backend(t), e.backend(t)

	// Never held: Renew must not create the key.
	wantNotHeld(t, "Renew of a never-held key", errOf(b1.Renew(e.ctx, driver.Grant{Key: key, Owner: owner(), Fence: 1}, e.ttl)))
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
	a, gotA := e.pausedLease(t, key)
	lb := e.locker(t, nil)
	// A is paused: no renewal. B takes the key once A's lease expired.
	bl := e.takeOver(t, lb, a, gotA)
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
// paused from the start) and returns the lease and when its TryAcquire
// returned: the store granted it no later, so its lease ends no later
// than that plus its TTL.
func (e *env) pausedLease(t *testing.T, key string) (*fencedlock.Lease, time.Time) {
	t.Helper()
	l := e.locker(t, e.pausedHolder)
	a := e.mustTryAcquire(t, l, key)
	return a, time.Now()
}

// takeOver polls l.TryAcquire of a's key until it succeeds once a's lease
// (granted by gotA, never renewed) has expired, and fails the test if an
// attempt sent after a's TTL + ExpirySlack from gotA still finds the key
// held. The bound starts when a's TryAcquire returned, not when it was
// sent: a store starts the lease when the request reaches it, which a
// loaded machine may delay by more than ExpirySlack.
func (e *env) takeOver(t *testing.T, l *fencedlock.Locker, a *fencedlock.Lease, gotA time.Time) *fencedlock.Lease {
	t.Helper()
	notAfter := gotA.Add(grantTTL(a.TTL(), e.ttl) + e.cfg.ExpirySlack)
	for {
		sent := time.Now()
		ls, err := e.tryAcquire(t, l, a.Key())
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
	a, gotA := e.pausedLease(t, key)
	lb := e.locker(t, nil)
	if err := guard.Write(e.ctx, a.Fence(), a.Holder(), "A1"); err != nil {
		t.Fatalf("A's first write (fence %v): %v", a.Fence(), err)
	}
	// A pauses past its lease; B takes the key.
	b := e.takeOver(t, lb, a, gotA)
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

func testReleaseRacesExpiry(t *testing.T, e *env) {
	const (
		pairs = 24
		// A race is close when the holder's Release starts in the last
		// closeWindow of its lease: a Release whose owner check and
		// delete are apart by a round trip deletes the successor's lock
		// in such a race. The property races until it has seen
		// wantClose close races, in at least minRounds and at most
		// maxRounds rounds (so that a loaded machine, whose timers fire
		// late, gets more rounds, not a pass by default).
		closeWindow = 2 * time.Millisecond
		wantClose   = 24
		minRounds   = 2
		maxRounds   = 8
	)
	ba, bb := e.backend(t), e.backend(t)
	ttl := e.ttl
	rounds, most := minRounds, maxRounds
	if ttl >= time.Second {
		// Stores with coarse expiry (MinTTL of a second or more) expire
		// keys at no precise moment, and their rounds take seconds.
		rounds, most = 1, 1
	}
	var (
		mu         sync.Mutex
		violations []string
		took       int // races in which the successor got the key
		closeRaces int
		errs       []error
	)
	round := 0
	for ; round < most && (round < rounds || closeRaces < wantClose); round++ {
		keys := make([]string, pairs)
		for i := range keys {
			keys[i] = e.key(fmt.Sprintf("race-%d-%d", round, i))
		}
		var wg sync.WaitGroup
		for _, key := range keys {
			wg.Go(func() {
				r := e.releaseRace(ba, bb, key, ttl)
				mu.Lock()
				defer mu.Unlock()
				if r.err != nil {
					errs = append(errs, r.err)
				}
				if r.violation != "" && len(violations) < 5 {
					violations = append(violations, r.violation)
				}
				if r.took {
					took++
				}
				if r.early >= 0 && r.early <= closeWindow {
					closeRaces++
				}
			})
		}
		wg.Wait()
		if len(violations) > 0 || len(errs) > 0 {
			break
		}
	}
	t.Logf("%d releases raced their lease's expiry in %d rounds while another owner polled; %d started in the last %v of the lease; the successor got the key %d times",
		round*pairs, round, closeRaces, closeWindow, took)
	if err := errors.Join(errs...); err != nil {
		t.Error(err)
	}
	for _, v := range violations {
		t.Error(v)
	}
}

// raceResult is the outcome of one releaseRace.
type raceResult struct {
	violation string
	took      bool          // the successor got the key
	early     time.Duration // how long before the lease's end the Release started (negative: after)
	err       error
}

// releaseRace lets A's lease of ttl on key run out while B polls the key,
// and has A release it at a random moment within a few milliseconds of
// its end. If B got the key, B's lock must survive A's Release. It runs
// on its own goroutine and must not call t's methods.
func (e *env) releaseRace(ba, bb driver.Backend, key string, ttl time.Duration) raceResult {
	sentA := time.Now()
	ga, err := ba.Acquire(e.ctx, driver.AcquireRequest{Key: key, Owner: owner(), TTL: ttl})
	if err != nil {
		return raceResult{err: fmt.Errorf("key %s: acquire of a free key: %w", quote(key), err)}
	}
	expiry := sentA.Add(grantTTL(ga.TTL, ttl))
	// A releases between 2.5ms before and 0.5ms after its lease runs
	// out. Timers fire late on a loaded machine: sleep to shortly
	// before, then spin.
	releaseAt := expiry.Add(time.Duration(mrand.Int64N(int64(3*time.Millisecond))) - 2500*time.Microsecond)
	type bResult struct {
		g   driver.Grant
		ok  bool
		err error
	}
	bres := make(chan bResult, 1)
	go func() {
		spinUntil(expiry.Add(-5 * time.Millisecond))
		giveUp := expiry.Add(e.cfg.ExpirySlack + e.schedAllowance())
		for time.Now().Before(giveUp) && e.ctx.Err() == nil {
			g, err := bb.Acquire(e.ctx, driver.AcquireRequest{Key: key, Owner: owner(), TTL: e.hold})
			if err == nil {
				bres <- bResult{g: g, ok: true}
				return
			}
			if !errors.Is(err, fencedlock.ErrNotAcquired) {
				bres <- bResult{err: fmt.Errorf("key %s: the successor's Acquire: %w", quote(key), err)}
				return
			}
			runtime.Gosched()
		}
		bres <- bResult{}
	}()
	spinUntil(releaseAt)
	early := time.Until(expiry)
	relErr := ba.Release(e.ctx, ga)
	if relErr != nil && !errors.Is(relErr, fencedlock.ErrNotHeld) {
		<-bres
		return raceResult{early: early, err: fmt.Errorf("key %s: the holder's Release: %w", quote(key), relErr)}
	}
	r := <-bres
	if r.err != nil || !r.ok {
		return raceResult{early: early, err: r.err}
	}
	// A's Release has returned and B holds a long lease: B's lock must be
	// intact whatever the order in which the store saw the two.
	if _, err := bb.Renew(e.ctx, r.g, e.hold); err != nil {
		return raceResult{took: true, early: early, violation: fmt.Sprintf("A's Release (started %v before its lease's end, returned %v) deleted the lock B took meanwhile: B's Renew: %v (the owner check and the delete are not atomic)",
			early.Round(10*time.Microsecond), relErr, err)}
	}
	if err := bb.Release(e.ctx, r.g); err != nil {
		return raceResult{took: true, early: early, err: fmt.Errorf("key %s: the successor's Release: %w", quote(key), err)}
	}
	return raceResult{took: true, early: early}
}

// spinUntil returns at t: it sleeps until shortly before, then yields in
// a loop, so that a late timer does not make it miss t by much.
func spinUntil(t time.Time) {
	if d := time.Until(t) - 2*time.Millisecond; d > 0 {
		time.Sleep(d)
	}
	for time.Now().Before(t) {
		runtime.Gosched()
	}
}
