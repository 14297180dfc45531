package conformance

import (
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/fencedlock/fencedlock"
	"github.com/fencedlock/fencedlock/driver"
)

// This file holds LeaseLengths: leases of different lengths from one
// client, waited out side by side. The other timing properties use MinTTL
// (and keys that must not expire are never waited out), so a store that
// caps long leases, or applies one TTL to every lease of a client (the
// first one it was asked for, a session's), would pass them. Each lease
// here must be held until the TTL asked for it, from when its request was
// sent, and be free within ExpirySlack after, from when it returned. It
// also checks the store's state after a failed Acquire: a contender's
// attempt on a held key, with a TTL of its own, changes nothing; and after
// the holder's own Acquire again (a retry whose first reply was lost).

// longLeaseFactor is how many MinTTLs the long leases last: long enough to
// tell a capped or shared TTL from the one asked, short enough to keep the
// suite quick (1.25s with the default MinTTL).
const longLeaseFactor = 5

// timedLease is one lease of LeaseLengths and its window: the store may
// free it no earlier than sent + ttl and must by got + ttl + ExpirySlack.
type timedLease struct {
	what      string
	key       string
	ttl       time.Duration
	sent, got time.Time
	freed     bool
}

func (e *env) earliest(l *timedLease) time.Time {
	// The store's clock may run at a slightly different rate than ours.
	return l.sent.Add(l.ttl - l.ttl/100 - time.Millisecond)
}

func (e *env) latest(l *timedLease) time.Time { return l.got.Add(l.ttl + e.cfg.ExpirySlack) }

func testLeaseLengths(t *testing.T, e *env) {
	short, long := e.ttl, longLeaseFactor*e.ttl
	b, contender, probe := e.backend(t), e.backend(t), e.backend(t)
	var leases []*timedLease
	acquire := func(what string, ttl time.Duration) (*timedLease, driver.Grant) {
		t.Helper()
		l := &timedLease{what: what, key: e.key("length"), sent: time.Now()}
		g := e.grabTTL(t, b, l.key, ttl)
		l.got, l.ttl = time.Now(), grantTTL(g.TTL, ttl)
		leases = append(leases, l)
		return l, g
	}
	// One client, leases asked in the order long, short, long: a client
	// that applies its first TTL, or its last, to every lease gets one of
	// them wrong.
	acquire(fmt.Sprintf("a lease of %v", long), long)
	acquire(fmt.Sprintf("a lease of %v asked after one of %v", short, long), short)
	acquire(fmt.Sprintf("a lease of %v asked after one of %v", long, short), long)

	// A short lease renewed at once to a long one.
	l, g := acquire(fmt.Sprintf("a lease of %v renewed to %v", short, long), short)
	sent := time.Now()
	d, err := b.Renew(e.ctx, g, long)
	if err != nil {
		t.Fatalf("Renew of a held key: %v", err)
	}
	if d != 0 && d != long {
		// Allowed: Renew returns the TTL the store applied (an etcd
		// lease keeps the TTL it was granted with); the lease is then
		// checked against what it reported.
		t.Logf("Renew to %v returned %v: the lease is held to that", long, d)
	}
	l.sent, l.got, l.ttl = sent, time.Now(), grantTTL(d, long)

	// Failed attempts by a contender, with a TTL of their own, change
	// nothing: not a shorter lease, not a longer one.
	contend := func(l *timedLease, ttl time.Duration) {
		t.Helper()
		_, err := contender.Acquire(e.ctx, driver.AcquireRequest{Key: l.key, Owner: owner(), TTL: ttl})
		if !errors.Is(err, fencedlock.ErrNotAcquired) {
			t.Fatalf("Acquire of a held key: %v, want ErrNotAcquired", err)
		}
	}
	l, _ = acquire(fmt.Sprintf("a lease of %v after a contender's failed Acquire of %v", long, short), long)
	contend(l, short)
	l, _ = acquire(fmt.Sprintf("a lease of %v after a contender's failed Acquire of %v", short, long), short)
	contend(l, long)

	// A lost owner's Renew, with a TTL of its own, changes nothing either
	// (a store that sets the expiry before it compares the owner shortens
	// the holder's lease, and reports ErrNotHeld as it should).
	l, _ = acquire(fmt.Sprintf("a lease of %v after another owner's refused Renew to %v", long, short), long)
	lost := driver.Grant{Key: l.key, Owner: owner(), Fence: 1}
	wantNotHeld(t, "Renew by an owner that does not hold the key", errOf(contender.Renew(e.ctx, lost, short)))

	// The holder's own Acquire again (a retry whose first reply was lost),
	// asking a longer TTL, then a shorter one.
	l, g = acquire(fmt.Sprintf("a lease of %v after its holder's repeated Acquire of %v", short, long), short)
	e.repeatByHolder(t, b, l, g, long)
	l, g = acquire(fmt.Sprintf("a lease of %v after its holder's repeated Acquire of %v", long, short), long)
	e.repeatByHolder(t, b, l, g, short)

	e.waitOut(t, probe, leases)
	t.Logf("%d leases of %v and %v on one client each held for the TTL asked and freed within ExpirySlack", len(leases), short, long)
}

// waitOut polls every lease's key on probe until it is free, and fails
// the test if one is free before its TTL or still held past its TTL +
// ExpirySlack.
func (e *env) waitOut(t *testing.T, probe driver.Backend, leases []*timedLease) {
	t.Helper()
	interval := e.pollInterval()
	left := len(leases)
	for left > 0 {
		if e.ctx.Err() != nil {
			t.Fatalf("waiting for the leases to run out: %v", e.ctx.Err())
		}
		for _, l := range leases {
			if l.freed {
				continue
			}
			attempt := time.Now()
			held := e.heldOn(t, probe, l.key)
			now := time.Now()
			switch {
			case !held && now.Before(e.earliest(l)):
				t.Fatalf("%s on %s was free %v after its request was sent, before its TTL of %v: the store did not apply the TTL asked for this lease",
					l.what, quote(l.key), now.Sub(l.sent).Round(time.Millisecond), l.ttl)
			case !held:
				l.freed = true
				left--
			case attempt.After(e.latest(l)):
				t.Fatalf("%s on %s is still held %v after its request returned, past its TTL of %v + ExpirySlack %v: the store applied a longer lease than asked",
					l.what, quote(l.key), attempt.Sub(l.got).Round(time.Millisecond), l.ttl, e.cfg.ExpirySlack)
			}
		}
		time.Sleep(interval)
	}
}

// repeatByHolder sends the holder's Acquire of l's key again, with the
// same owner and a lease of ttl, as a client retries a request whose first
// reply was lost (acquire.lua grants it; backend/memory reports the key
// held). Either outcome is right, each with its store state: ErrNotAcquired
// changes nothing (l keeps its window), and a grant carries the holder's
// fence again (never a lower one) with the lease set to ttl from this
// request (l's window moves to it). Any other error fails: the store holds
// a valid lock of this very owner.
func (e *env) repeatByHolder(t *testing.T, b driver.Backend, l *timedLease, g driver.Grant, ttl time.Duration) {
	t.Helper()
	sent := time.Now()
	g2, err := b.Acquire(e.ctx, driver.AcquireRequest{Key: g.Key, Owner: g.Owner, TTL: ttl})
	switch {
	case errors.Is(err, fencedlock.ErrNotAcquired):
		l.what += " (refused: the lease must be unchanged)"
	case err != nil:
		t.Fatalf("the holder's repeated Acquire of %s (a retry whose first reply was lost): %v, want a grant or ErrNotAcquired", quote(g.Key), err)
	default:
		e.checkGrant(t, g2, g.Key, ttl)
		if g2.Fence < g.Fence {
			t.Fatalf("the holder's repeated Acquire of %s granted fence %v, below the fence %v it holds", quote(g.Key), g2.Fence, g.Fence)
		}
		if g2.Owner != g.Owner {
			t.Errorf("Grant.Owner of the holder's repeated Acquire of %s is not the request's owner token", quote(g.Key))
		}
		l.what += fmt.Sprintf(" (granted again, fence %v after %v: the lease must be the new TTL)", g2.Fence, g.Fence)
		l.sent, l.got, l.ttl = sent, time.Now(), grantTTL(g2.TTL, ttl)
	}
}
