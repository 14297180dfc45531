package conformance

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/fencedlock/fencedlock"
	"github.com/fencedlock/fencedlock/driver"
)

// This file holds SentIsSendTime: the send times a backend reports under
// latency never overstate a lease (the recorder it shares with the other
// timing properties is in timing.go).

func testSentIsSendTime(t *testing.T, e *env) {
	r := &sentRun{t: t, e: e, delay: max(e.ttl/4, 20*time.Millisecond), other: e.backend(t)}
	if _, ok := e.h.(Delayer); ok {
		t.Logf("responses delayed by %v", r.delay)
	} else {
		r.delay = 0
		t.Logf("the harness is not a Delayer: checked without latency, which cannot tell a send time from a receive time")
	}
	// A margin of 1ns: the deadline itself must lie before the store
	// lets anyone else in.
	paused := func(o *fencedlock.Options) {
		o.TTL, o.ManualRenew, o.SafetyMargin = e.ttl, true, time.Nanosecond
	}
	l := mustLocker(t, r.newDelayed(), e.lockerOpts(paused))
	t.Cleanup(func() { _ = l.Close() })
	r.grantSent(l)
	r.renewTTL(l)
	r.renewalSent()
}

// sentRun is one run of SentIsSendTime: responses to the holder's backends
// come delay late (if the harness is a Delayer), and other takes the key
// after each holder's deadline.
type sentRun struct {
	t     *testing.T
	e     *env
	delay time.Duration
	other driver.Backend
}

// newDelayed returns a backend whose responses come r.delay late (a plain
// one if the harness is not a Delayer), closed when the test ends.
func (r *sentRun) newDelayed() driver.Backend {
	r.t.Helper()
	d, ok := r.e.h.(Delayer)
	if !ok {
		return r.e.backend(r.t)
	}
	b, err := d.NewDelayedBackend(r.e.ctx, r.delay)
	if err != nil {
		r.t.Fatalf("harness NewDelayedBackend: %v", err)
	}
	r.t.Cleanup(func() { _ = b.Close() })
	return b
}

// notBefore fails the test if another backend gets key before the deadline
// dl (less the clock-rate allowance). The bound from above is lenient (3x
// the TTL): it is RenewTTL's and ExpiryWithoutRenew's to check.
func (r *sentRun) notBefore(key string, dl time.Time, ttl time.Duration, what string) {
	t, e := r.t, r.e
	t.Helper()
	g, _, got := e.acquireBy(t, r.other, key, time.Now().Add(3*ttl+e.cfg.ExpirySlack), what)
	if limit := dl.Add(-ttl/100 - time.Millisecond); got.Before(limit) {
		t.Fatalf("%s: another backend got the key %v before the holder's local deadline (responses delayed by %v): the reported send time or TTL overstates the lease",
			what, limit.Sub(got).Round(time.Millisecond), r.delay)
	}
	t.Logf("%s: another backend got the key %v after the holder's local deadline", what, got.Sub(dl).Round(time.Millisecond))
	if err := r.other.Release(e.ctx, g); err != nil {
		t.Fatalf("Release: %v", err)
	}
}

// grantSent: a paused holder's deadline from its Acquire. The store
// applied the request at least delay before the response came back, so
// the send time the deadline rests on must lie before that.
func (r *sentRun) grantSent(l *fencedlock.Locker) {
	t, e := r.t, r.e
	key := e.key("sent-acquire")
	ls, err := e.tryAcquire(t, l, key)
	returned := time.Now()
	if err != nil {
		t.Fatalf("TryAcquire: %v", err)
	}
	ttl := grantTTL(ls.TTL(), e.ttl)
	if sent := ls.Deadline().Add(-ttl + time.Nanosecond); sent.After(returned.Add(-r.delay + time.Millisecond)) {
		t.Fatalf("Grant.Sent lies %v after the store could have applied the request (the response took %v to come back): it is not the send time",
			sent.Sub(returned.Add(-r.delay)).Round(time.Millisecond), r.delay)
	}
	r.notBefore(key, ls.Deadline(), ttl, "Grant.Sent and Grant.TTL")
}

// renewTTL: the deadline from a renewal the Locker sent. With the
// responses delayed, the Acquire and the Renew take two delays of the
// lease's TTL; a loaded machine can push the Renew's answer past the local
// deadline, and the Locker then (rightly) reports the lease lost. That
// says nothing about the backend: inconclusive, retried once with a lease
// three times longer.
func (r *sentRun) renewTTL(l *fencedlock.Locker) {
	t, e := r.t, r.e
	for attempt, rttl := 0, e.ttl; ; attempt, rttl = attempt+1, 3*e.ttl {
		key := e.key("sent-renew")
		ls := e.mustTryAcquire(t, l, key, fencedlock.WithTTL(rttl), fencedlock.WithSafetyMargin(time.Nanosecond), fencedlock.WithManualRenew(true))
		renewSent, dl := time.Now(), ls.Deadline()
		if err := ls.Renew(e.ctx); err != nil {
			// Late: the answer came after rttl/2, or the local deadline
			// had passed (the Acquire's delayed answer and a stalled
			// scheduler can use up a lease of MinTTL before the Renew).
			late := time.Now().After(renewSent.Add(rttl/2)) || !time.Now().Before(dl)
			if attempt == 0 && errors.Is(err, fencedlock.ErrLeaseLost) && late {
				t.Logf("inconclusive with TTL %v: Renew answered %v after it was sent (responses delayed by %v), after the lease's local deadline: %v; not a violation: retrying once with TTL %v",
					rttl, time.Since(renewSent).Round(time.Millisecond), r.delay, err, 3*e.ttl)
				continue
			}
			t.Fatalf("Renew: %v", err)
		}
		r.notBefore(key, ls.Deadline(), grantTTL(ls.TTL(), rttl), "the TTL Renew returned")
		return
	}
}

// renewalSent: the deadline from a KeepAliver's renewals, which stop when
// the holder crashes.
func (r *sentRun) renewalSent() {
	t, e := r.t, r.e
	b := r.newDelayed()
	ka, ok := b.(driver.KeepAliver)
	if !ok {
		return
	}
	key := e.key("sent-keepalive")
	g := e.grabTTL(t, b, key, e.ttl)
	ttl := grantTTL(g.TTL, e.ttl)
	ctx, cancel := context.WithCancel(e.ctx)
	defer cancel()
	ch := ka.KeepAlive(ctx, g)
	var dl time.Time
	later := func(rn driver.Renewal) {
		if d := rn.Sent.Add(rn.TTL); d.After(dl) {
			dl = d
		}
	}
	for renewals := 0; renewals < 2; renewals++ {
		rn := nextRenewal(t, ch, ttl+e.schedAllowance(), renewals)
		if limit := time.Now().Add(-r.delay + time.Millisecond); rn.Sent.After(limit) {
			t.Fatalf("Renewal.Sent lies %v after the store could have applied the renewal (responses take %v to come back): it is not the send time",
				rn.Sent.Sub(limit.Add(-time.Millisecond)).Round(time.Millisecond), r.delay)
		}
		later(rn)
	}
	cancel()
	for rn := range ch { // renewals confirmed before it stopped count too
		if rn.Err == nil {
			later(rn)
		}
	}
	r.notBefore(key, dl, ttl, "Renewal.Sent and Renewal.TTL")
}
