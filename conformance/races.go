package conformance

import (
	"context"
	"errors"
	"fmt"
	mrand "math/rand/v2"
	"runtime"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/fencedlock/fencedlock"
)

// This file holds the properties that race the backend against time: a
// Release racing its lease's expiry (ReleaseRacesExpiry), an Acquire
// cancelled in flight (CancelledAttempt), and the send times a backend
// reports under latency (SentIsSendTime).

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
func (e *env) releaseRace(ba, bb fencedlock.Backend, key string, ttl time.Duration) raceResult {
	sentA := time.Now()
	ga, err := ba.Acquire(e.ctx, fencedlock.AcquireRequest{Key: key, Owner: owner(), TTL: ttl})
	if err != nil {
		return raceResult{err: fmt.Errorf("key %s: acquire of a free key: %w", quote(key), err)}
	}
	expiry := sentA.Add(grantTTL(ga.TTL, ttl))
	// A releases between 2.5ms before and 0.5ms after its lease runs
	// out. Timers fire late on a loaded machine: sleep to shortly
	// before, then spin.
	releaseAt := expiry.Add(time.Duration(mrand.Int64N(int64(3*time.Millisecond))) - 2500*time.Microsecond)
	type bResult struct {
		g   fencedlock.Grant
		ok  bool
		err error
	}
	bres := make(chan bResult, 1)
	go func() {
		spinUntil(expiry.Add(-5 * time.Millisecond))
		giveUp := expiry.Add(e.cfg.ExpirySlack + e.schedAllowance())
		for time.Now().Before(giveUp) && e.ctx.Err() == nil {
			g, err := bb.Acquire(e.ctx, fencedlock.AcquireRequest{Key: key, Owner: owner(), TTL: e.hold})
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

func testCancelledAttempt(t *testing.T, e *env) {
	b := e.backend(t)
	// The round trip of an Acquire of a free key, to place the
	// cancellations: the median of a few.
	var trips, renewTrips, releaseTrips []time.Duration
	for range 5 {
		key := e.key("trip")
		start := time.Now()
		g := e.grab(t, b, key)
		trips = append(trips, time.Since(start))
		start = time.Now()
		if _, err := b.Renew(e.ctx, g, e.hold); err != nil {
			t.Fatalf("Renew of a held key: %v", err)
		}
		renewTrips = append(renewTrips, time.Since(start))
		start = time.Now()
		if err := b.Release(e.ctx, g); err != nil {
			t.Fatalf("Release: %v", err)
		}
		releaseTrips = append(releaseTrips, time.Since(start))
	}
	median := func(d []time.Duration) time.Duration {
		slices.Sort(d)
		return d[len(d)/2]
	}
	trip, renewTrip, releaseTrip := median(trips), median(renewTrips), median(releaseTrips)
	const attempts = 40
	var applied, cancelled int
	for i := range attempts {
		key := e.key("attempt")
		req := fencedlock.AcquireRequest{Key: key, Owner: owner(), TTL: e.hold}
		// Cancel at a random point between before the call and twice its
		// round trip; every fourth attempt before it starts.
		var after time.Duration
		if i%4 != 0 {
			after = time.Duration(mrand.Int64N(int64(2*trip) + 1))
		}
		ctx, cancel := context.WithTimeout(e.ctx, after)
		g, err := b.Acquire(ctx, req)
		ctxErr := ctx.Err()
		cancel()
		if err == nil {
			applied++
			if err := b.Release(e.ctx, g); err != nil {
				t.Fatalf("attempt %d: Release of a grant: %v", i+1, err)
			}
			continue
		}
		cancelled++
		if errors.Is(err, fencedlock.ErrNotAcquired) && !errors.Is(err, context.DeadlineExceeded) && !errors.Is(err, context.Canceled) {
			t.Fatalf("attempt %d: Acquire of a free key cancelled %v after it started (context: %v) returned %v: ErrNotAcquired without the context's error reports \"held by another\" for an outcome the store may have applied",
				i+1, after, ctxErr, err)
		}
		// The Locker's clean-up after an unknown outcome: a Release of
		// Grant{Key, Owner} must leave the key free.
		if err := b.Release(e.ctx, fencedlock.Grant{Key: key, Owner: req.Owner}); err != nil && !errors.Is(err, fencedlock.ErrNotHeld) {
			t.Fatalf("attempt %d: Release of Grant{Key, Owner} after a cancelled Acquire: %v", i+1, err)
		}
		if e.held(t, key) {
			// Tell the lead which way it went: a second Release that
			// frees the key means the Acquire was applied after the
			// first one, its request still in flight when it returned.
			again := b.Release(e.ctx, fencedlock.Grant{Key: key, Owner: req.Owner})
			t.Fatalf("attempt %d: key held after a cancelled Acquire (%v) and its owner's Release of Grant{Key, Owner} (a second Release: %v; nil means the Acquire's request was applied after the first Release: the backend returned while it was still in flight)", i+1, err, again)
		}
	}
	t.Logf("%d attempts on free keys cancelled within 2x the round trip (%v): %d granted, %d failed", attempts, trip, applied, cancelled)

	// Renew and Release by the holder, cancelled likewise: the owner holds
	// the key, so ErrNotHeld without the context's error is never right.
	isCtx := func(err error) bool {
		return errors.Is(err, context.DeadlineExceeded) || errors.Is(err, context.Canceled)
	}
	const renewals = 20
	for i := range renewals {
		key := e.key("held")
		g := e.grab(t, b, key)
		after := time.Duration(mrand.Int64N(int64(2*renewTrip) + 1))
		ctx, cancel := context.WithTimeout(e.ctx, after)
		_, err := b.Renew(ctx, g, e.hold)
		cancel()
		if errors.Is(err, fencedlock.ErrNotHeld) && !isCtx(err) {
			t.Fatalf("renewal %d: Renew of a held key cancelled %v after it started returned %v: ErrNotHeld without the context's error reports \"not held\" for a key its owner holds",
				i+1, after, err)
		}
		ctx, cancel = context.WithTimeout(e.ctx, time.Duration(mrand.Int64N(int64(2*releaseTrip)+1)))
		err = b.Release(ctx, g)
		cancel()
		if errors.Is(err, fencedlock.ErrNotHeld) && !isCtx(err) {
			t.Fatalf("release %d: Release of a held key cancelled mid-flight returned %v: ErrNotHeld without the context's error reports \"not held\" for a key its owner held", i+1, err)
		}
		if err != nil {
			// Unknown outcome: the owner's Release again frees the key.
			if err := b.Release(e.ctx, fencedlock.Grant{Key: key, Owner: g.Owner}); err != nil && !errors.Is(err, fencedlock.ErrNotHeld) {
				t.Fatalf("release %d: Release after a cancelled one: %v", i+1, err)
			}
		}
		if e.held(t, key) {
			t.Fatalf("release %d: key held after its owner's Release (%v)", i+1, err)
		}
	}
	t.Logf("%d renewals and releases of held keys cancelled within 2x their round trips (%v, %v)", renewals, renewTrip, releaseTrip)
}

func testSentIsSendTime(t *testing.T, e *env) {
	delay := max(e.ttl/4, 20*time.Millisecond)
	newDelayed := func() fencedlock.Backend {
		t.Helper()
		d, ok := e.h.(Delayer)
		if !ok {
			return e.backend(t)
		}
		b, err := d.NewDelayedBackend(e.ctx, delay)
		if err != nil {
			t.Fatalf("harness NewDelayedBackend: %v", err)
		}
		t.Cleanup(func() { _ = b.Close() })
		return b
	}
	if _, ok := e.h.(Delayer); ok {
		t.Logf("responses delayed by %v", delay)
	} else {
		delay = 0
		t.Logf("the harness is not a Delayer: checked without latency, which cannot tell a send time from a receive time")
	}
	// A margin of 1ns: the deadline itself must lie before the store
	// lets anyone else in.
	paused := func(o *fencedlock.Options) {
		o.TTL, o.ManualRenew, o.SafetyMargin = e.ttl, true, time.Nanosecond
	}
	other := e.backend(t)
	// notBefore fails t if another backend gets key before the deadline
	// dl (less the clock-rate allowance). The bound from above is lenient
	// (3x the TTL): it is RenewTTL's and ExpiryWithoutRenew's to check.
	notBefore := func(key string, dl time.Time, ttl time.Duration, notAfter time.Time, what string) {
		t.Helper()
		g, _, got := e.acquireBy(t, other, key, notAfter, what)
		if limit := dl.Add(-ttl/100 - time.Millisecond); got.Before(limit) {
			t.Fatalf("%s: another backend got the key %v before the holder's local deadline (responses delayed by %v): the reported send time or TTL overstates the lease",
				what, limit.Sub(got).Round(time.Millisecond), delay)
		}
		t.Logf("%s: another backend got the key %v after the holder's local deadline", what, got.Sub(dl).Round(time.Millisecond))
		if err := other.Release(e.ctx, g); err != nil {
			t.Fatalf("Release: %v", err)
		}
	}

	// Grant.Sent: a paused holder's deadline from its Acquire. The store
	// applied the request at least delay before the response came back,
	// so the send time the deadline rests on must lie before that.
	key := e.key("sent-acquire")
	l := mustLocker(t, newDelayed(), e.lockerOpts(paused))
	t.Cleanup(func() { _ = l.Close() })
	ls, err := l.TryAcquire(e.ctx, key)
	returned := time.Now()
	if err != nil {
		t.Fatalf("TryAcquire: %v", err)
	}
	ttl := grantTTL(ls.TTL(), e.ttl)
	if sent := ls.Deadline().Add(-ttl + time.Nanosecond); sent.After(returned.Add(-delay + time.Millisecond)) {
		t.Fatalf("Grant.Sent lies %v after the store could have applied the request (the response took %v to come back): it is not the send time",
			sent.Sub(returned.Add(-delay)).Round(time.Millisecond), delay)
	}
	notBefore(key, ls.Deadline(), ttl, time.Now().Add(3*ttl+e.cfg.ExpirySlack), "Grant.Sent and Grant.TTL")

	// Renew's TTL: the deadline from a renewal the Locker sent. With the
	// responses delayed, the Acquire and the Renew take two delays of the
	// lease's TTL; a loaded machine can push the Renew's answer past the
	// local deadline, and the Locker then (rightly) reports the lease
	// lost. That says nothing about the backend: inconclusive, retried
	// once with a lease three times longer.
	for attempt, rttl := 0, e.ttl; ; attempt, rttl = attempt+1, 3*e.ttl {
		key = e.key("sent-renew")
		ls, err = l.TryAcquire(e.ctx, key, fencedlock.WithTTL(rttl), fencedlock.WithSafetyMargin(time.Nanosecond), fencedlock.WithManualRenew(true))
		if err != nil {
			t.Fatalf("TryAcquire: %v", err)
		}
		renewSent := time.Now()
		if err := ls.Renew(e.ctx); err != nil {
			if attempt == 0 && errors.Is(err, fencedlock.ErrLeaseLost) && time.Now().After(renewSent.Add(rttl/2)) {
				t.Logf("inconclusive with TTL %v: Renew answered %v after it was sent (responses delayed by %v), after the lease's local deadline: %v; not a violation: retrying once with TTL %v",
					rttl, time.Since(renewSent).Round(time.Millisecond), delay, err, 3*e.ttl)
				continue
			}
			t.Fatalf("Renew: %v", err)
		}
		notBefore(key, ls.Deadline(), grantTTL(ls.TTL(), rttl), time.Now().Add(3*rttl+e.cfg.ExpirySlack), "the TTL Renew returned")
		break
	}

	// Renewal.Sent: the deadline from a KeepAliver's renewals, which stop
	// when the holder crashes.
	b := newDelayed()
	ka, ok := b.(fencedlock.KeepAliver)
	if !ok {
		return
	}
	key = e.key("sent-keepalive")
	g := e.grabTTL(t, b, key, e.ttl)
	ctx, cancel := context.WithCancel(e.ctx)
	ch := ka.KeepAlive(ctx, g)
	var dl time.Time
	renewals := 0
	for renewals < 2 {
		select {
		case r, ok := <-ch:
			if !ok {
				cancel()
				t.Fatalf("KeepAlive channel closed after %d renewals of a held key", renewals)
			}
			if r.Err != nil {
				cancel()
				t.Fatalf("KeepAlive of a held key reported %v", r.Err)
			}
			if limit := time.Now().Add(-delay + time.Millisecond); r.Sent.After(limit) {
				cancel()
				t.Fatalf("Renewal.Sent lies %v after the store could have applied the renewal (responses take %v to come back): it is not the send time",
					r.Sent.Sub(limit.Add(-time.Millisecond)).Round(time.Millisecond), delay)
			}
			renewals++
			if d := r.Sent.Add(r.TTL); d.After(dl) {
				dl = d
			}
		case <-time.After(ttl + e.schedAllowance()):
			cancel()
			t.Fatalf("no KeepAlive renewal within %v", ttl+e.schedAllowance())
		}
	}
	cancel()
	for r := range ch { // renewals confirmed before it stopped count too
		if r.Err == nil {
			if d := r.Sent.Add(r.TTL); d.After(dl) {
				dl = d
			}
		}
	}
	notBefore(key, dl, ttl, time.Now().Add(3*ttl+e.cfg.ExpirySlack), "Renewal.Sent and Renewal.TTL")
}
