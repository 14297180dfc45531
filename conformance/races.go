package conformance

import (
	"context"
	"errors"
	"fmt"
	mrand "math/rand/v2"
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
	const pairs = 24
	ba, bb := e.backend(t), e.backend(t)
	ttl := e.ttl
	// Three rounds of a MinTTL each; one for stores with coarse expiry
	// (MinTTL of a second or more), whose rounds take seconds.
	rounds := 3
	if ttl >= time.Second {
		rounds = 1
	}
	var (
		mu         sync.Mutex
		violations []string
		raced      int // rounds in which the successor got the key
		errs       []error
	)
	for round := range rounds {
		keys := make([]string, pairs)
		for i := range keys {
			keys[i] = e.key(fmt.Sprintf("race-%d-%d", round, i))
		}
		var wg sync.WaitGroup
		for _, key := range keys {
			wg.Go(func() {
				v, took, err := e.releaseRace(ba, bb, key, ttl)
				mu.Lock()
				defer mu.Unlock()
				if err != nil {
					errs = append(errs, err)
				}
				if v != "" && len(violations) < 5 {
					violations = append(violations, v)
				}
				if took {
					raced++
				}
			})
		}
		wg.Wait()
		if len(violations) > 0 || len(errs) > 0 {
			break
		}
	}
	t.Logf("%d releases raced their lease's expiry while another owner polled; the successor got the key %d times", rounds*pairs, raced)
	if err := errors.Join(errs...); err != nil {
		t.Error(err)
	}
	for _, v := range violations {
		t.Error(v)
	}
}

// releaseRace lets A's lease of ttl on key run out while B polls the key,
// and has A release it at a random moment within a few milliseconds of
// its expiry. If B got the key, B's lock must survive A's Release. It
// returns a violation, whether B got the key, and any unexpected error.
// It runs on its own goroutine and must not call t's methods.
func (e *env) releaseRace(ba, bb fencedlock.Backend, key string, ttl time.Duration) (violation string, took bool, _ error) {
	sentA := time.Now()
	ga, err := ba.Acquire(e.ctx, fencedlock.AcquireRequest{Key: key, Owner: owner(), TTL: ttl})
	if err != nil {
		return "", false, fmt.Errorf("key %s: acquire of a free key: %w", quote(key), err)
	}
	expiry := sentA.Add(grantTTL(ga.TTL, ttl))
	// A releases between 3ms before and 2ms after its lease runs out.
	releaseAt := expiry.Add(time.Duration(mrand.Int64N(int64(5*time.Millisecond))) - 3*time.Millisecond)
	type bResult struct {
		g   fencedlock.Grant
		ok  bool
		err error
	}
	bres := make(chan bResult, 1)
	go func() {
		time.Sleep(time.Until(expiry.Add(-5 * time.Millisecond)))
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
		}
		bres <- bResult{}
	}()
	time.Sleep(time.Until(releaseAt))
	relErr := ba.Release(e.ctx, ga)
	if relErr != nil && !errors.Is(relErr, fencedlock.ErrNotHeld) {
		<-bres
		return "", false, fmt.Errorf("key %s: the holder's Release: %w", quote(key), relErr)
	}
	r := <-bres
	if r.err != nil || !r.ok {
		return "", false, r.err
	}
	// A's Release has returned and B holds a long lease: B's lock must be
	// intact whatever the order in which the store saw the two.
	if _, err := bb.Renew(e.ctx, r.g, e.hold); err != nil {
		return fmt.Sprintf("A's Release (returned %v) racing the expiry of its lease deleted B's lock: B's Renew: %v (the owner check and the delete are not atomic)", relErr, err), true, nil
	}
	if err := bb.Release(e.ctx, r.g); err != nil {
		return "", true, fmt.Errorf("key %s: the successor's Release: %w", quote(key), err)
	}
	return "", true, nil
}

func testCancelledAttempt(t *testing.T, e *env) {
	b := e.backend(t)
	// The round trip of an Acquire of a free key, to place the
	// cancellations: the median of a few.
	var trips []time.Duration
	for range 5 {
		key := e.key("trip")
		start := time.Now()
		g := e.grab(t, b, key)
		trips = append(trips, time.Since(start))
		if err := b.Release(e.ctx, g); err != nil {
			t.Fatalf("Release: %v", err)
		}
	}
	slices.Sort(trips)
	trip := trips[len(trips)/2]
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
			t.Fatalf("attempt %d: key held after a cancelled Acquire (%v) and its owner's Release of Grant{Key, Owner}", i+1, err)
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
		after := time.Duration(mrand.Int64N(int64(2*trip) + 1))
		ctx, cancel := context.WithTimeout(e.ctx, after)
		_, err := b.Renew(ctx, g, e.hold)
		cancel()
		if errors.Is(err, fencedlock.ErrNotHeld) && !isCtx(err) {
			t.Fatalf("renewal %d: Renew of a held key cancelled %v after it started returned %v: ErrNotHeld without the context's error reports \"not held\" for a key its owner holds",
				i+1, after, err)
		}
		ctx, cancel = context.WithTimeout(e.ctx, time.Duration(mrand.Int64N(int64(2*trip)+1)))
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
	t.Logf("%d renewals and releases of held keys cancelled within 2x the round trip", renewals)
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

	// Grant.Sent: a paused holder's deadline from its Acquire.
	key := e.key("sent-acquire")
	l := fencedlock.New(newDelayed(), e.lockerOpts(paused))
	t.Cleanup(func() { _ = l.Close() })
	ls, err := l.TryAcquire(e.ctx, key)
	if err != nil {
		t.Fatalf("TryAcquire: %v", err)
	}
	ttl := grantTTL(ls.TTL(), e.ttl)
	notBefore(key, ls.Deadline(), ttl, time.Now().Add(3*ttl+e.cfg.ExpirySlack), "Grant.Sent and Grant.TTL")

	// Renew's TTL: the deadline from a renewal the Locker sent.
	key = e.key("sent-renew")
	ls, err = l.TryAcquire(e.ctx, key)
	if err != nil {
		t.Fatalf("TryAcquire: %v", err)
	}
	if err := ls.Renew(e.ctx); err != nil {
		t.Fatalf("Renew: %v", err)
	}
	notBefore(key, ls.Deadline(), ttl, time.Now().Add(3*ttl+e.cfg.ExpirySlack), "the TTL Renew returned")

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
