package conformance

import (
	"errors"
	mrand "math/rand/v2"
	"runtime"
	"sync/atomic"
	"testing"
	"time"

	"github.com/fencedlock/fencedlock"
	"github.com/fencedlock/fencedlock/driver"
)

// This file holds RenewRaces: a holder's renewals racing its own Release,
// and racing a take-over (the key invalidated out of band and taken by
// another owner). A Renew whose owner check and write are two steps (GET,
// compare, then SET with the owner and a new expiry) passes every check
// made one call at a time: only a release or a take-over landing between
// its two steps shows it, recreating a released key or overwriting the
// new holder's lock.

// renewLoop renews g on b until stop is set, then sends afterStop more
// renewals, which must all find the key gone. It runs on its own
// goroutine and must not call t's methods: it returns what it saw.
type renewLoop struct {
	stop atomic.Bool
	done chan struct{}
	// set by the goroutine before done is closed
	renewed    int   // renewals that succeeded
	lateOK     int   // renewals sent after stop was set that succeeded
	unexpected error // an error other than ErrNotHeld
}

const afterStop = 3

func (e *env) startRenewLoop(b driver.Backend, g driver.Grant) *renewLoop {
	r := &renewLoop{done: make(chan struct{})}
	go func() {
		defer close(r.done)
		extra := 0
		for e.ctx.Err() == nil {
			stopped := r.stop.Load()
			if stopped {
				if extra == afterStop {
					return
				}
				extra++
			}
			_, err := b.Renew(e.ctx, g, e.hold)
			switch {
			case err == nil && stopped:
				r.lateOK++
			case err == nil:
				r.renewed++
			case !errors.Is(err, driver.ErrNotHeld):
				r.unexpected = err
				return
			}
			runtime.Gosched()
		}
	}()
	return r
}

// finish stops the loop and waits for it to end.
func (r *renewLoop) finish() {
	r.stop.Store(true)
	<-r.done
}

// raceJitter is a random pause of up to 300µs, so that the racing call
// lands at different points of the renewals' round trips.
func raceJitter() {
	spinUntil(time.Now().Add(time.Duration(mrand.Int64N(int64(300 * time.Microsecond)))))
}

func testRenewRaces(t *testing.T, e *env) {
	// At least minRounds of each race, and on while the property has run
	// less than a second (fast stores get many rounds), at most maxRounds.
	const minRounds, maxRounds = 20, 150
	b, other, probe := e.backend(t), e.backend(t), e.backend(t)
	start := time.Now()
	budget := max(time.Second, 2*e.ttl)
	rounds := 0
	renewed := 0
	for ; rounds < maxRounds && (rounds < minRounds || time.Since(start) < budget); rounds++ {
		// Renewals racing the holder's own Release.
		key := e.key("renew-release")
		g := e.grab(t, b, key)
		loop := e.startRenewLoop(b, g)
		raceJitter()
		relErr := b.Release(e.ctx, g)
		loop.finish()
		if loop.unexpected != nil {
			t.Fatalf("round %d: Renew racing its owner's Release: %v, want nil or ErrNotHeld", rounds+1, loop.unexpected)
		}
		if relErr != nil {
			t.Fatalf("round %d: the holder's Release racing its renewals: %v", rounds+1, relErr)
		}
		renewed += loop.renewed
		if e.heldOn(t, probe, key) {
			t.Fatalf("round %d: %s is held after its owner's Release returned nil and every renewal racing it had returned: a Renew that checks the owner, then writes, recreated the released key (%d renewals after the Release succeeded)",
				rounds+1, quote(key), loop.lateOK)
		}
		if loop.lateOK > 0 {
			t.Fatalf("round %d: %d Renew(s) sent after the owner's Release returned nil succeeded, want ErrNotHeld", rounds+1, loop.lateOK)
		}

		// Renewals racing a take-over: the key is invalidated and
		// another owner takes it while the old owner keeps renewing.
		key = e.key("renew-takeover")
		ga := e.grab(t, b, key)
		loop = e.startRenewLoop(b, ga)
		raceJitter()
		e.invalidate(t, key)
		gb, err := other.Acquire(e.ctx, driver.AcquireRequest{Key: key, Owner: owner(), TTL: e.hold})
		if err != nil {
			loop.finish()
			if errors.Is(err, fencedlock.ErrNotAcquired) {
				t.Fatalf("round %d: %s is held after the harness invalidated it, with only its lost owner renewing: a Renew racing the invalidation recreated the key (%v)", rounds+1, quote(key), err)
			}
			t.Fatalf("round %d: Acquire of an invalidated key: %v", rounds+1, err)
		}
		loop.finish()
		if loop.unexpected != nil {
			t.Fatalf("round %d: Renew racing a take-over: %v, want nil or ErrNotHeld", rounds+1, loop.unexpected)
		}
		if _, err := other.Renew(e.ctx, gb, e.hold); err != nil {
			t.Fatalf("round %d: the new holder of %s cannot renew after the old owner's renewals raced its take-over: %v (a Renew that checks the owner, then writes, overwrote the new holder's lock)", rounds+1, quote(key), err)
		}
		if loop.lateOK > 0 {
			t.Fatalf("round %d: %d Renew(s) by the old owner sent after another owner took the key succeeded, want ErrNotHeld", rounds+1, loop.lateOK)
		}
		if !e.heldOn(t, probe, key) {
			t.Fatalf("round %d: %s is free while its new holder's lease runs", rounds+1, quote(key))
		}
		if err := other.Release(e.ctx, gb); err != nil {
			t.Fatalf("round %d: the new holder's Release: %v", rounds+1, err)
		}
	}
	t.Logf("%d rounds of renewals racing a Release and a take-over in %v (%d renewals succeeded before the Release)",
		rounds, time.Since(start).Round(time.Millisecond), renewed)
}

// heldOn reports whether probe's one attempt at key, for a fresh owner,
// finds it held; it releases what it gets. Any outcome other than success
// or ErrNotAcquired fails the test. (It is held with a backend the caller
// keeps, for checks repeated many times.)
func (e *env) heldOn(t *testing.T, probe driver.Backend, key string) bool {
	t.Helper()
	g, err := probe.Acquire(e.ctx, driver.AcquireRequest{Key: key, Owner: owner(), TTL: e.hold})
	if err == nil {
		if rerr := probe.Release(e.ctx, g); rerr != nil {
			t.Fatalf("Release of a fresh grant on %s: %v", quote(key), rerr)
		}
		return false
	}
	if !errors.Is(err, fencedlock.ErrNotAcquired) {
		t.Fatalf("Acquire(%s): %v, want nil or an error wrapping ErrNotAcquired", quote(key), err)
	}
	return true
}
