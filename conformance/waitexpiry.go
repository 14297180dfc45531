package conformance

// WaiterAfterCrash: a Locker.Acquire that waits behind a holder that
// crashed (its lease never renewed nor released) is granted the key once
// the holder's lease has run out, within ExpirySlack, however long the
// waiter's own lease is.

import (
	"fmt"
	"testing"
	"time"

	"github.com/fencedlock/fencedlock"
)

// waiterTTLFactor is how many times the holder's lease (MinTTL) the
// waiter of WaiterAfterCrash asks: a waiter that looks at the key again
// only at its own refresh interval (a third of its lease) sleeps about 13
// holder leases past the expiry, far beyond the bound.
const waiterTTLFactor = 40

func testWaiterAfterCrash(t *testing.T, e *env) {
	e.retryTimed(t, e.ttl, func(ttl time.Duration) *inconclusive { return e.waiterAfterCrash(t, ttl) })
}

// crashWait is the outcome of an Acquire run in a goroutine, when the
// call began and when it returned.
type crashWait struct {
	acquired
	begun, at time.Time
}

// waiterAfterCrash takes a key with an unrenewed lease of ttl (a holder
// that crashed: nothing releases it), starts a Locker.Acquire of it with
// a lease of waiterTTLFactor x MinTTL on another backend while it is
// held, and checks that the waiter is granted the key with a greater
// fence once the holder's lease has run out (never before), within
// ExpirySlack after. An expiry is not announced as a release is: a
// WaitAcquirer (or a backend's own wait) that looks at the key again only
// after an interval derived from the waiter's lease leaves the key to
// nobody meanwhile. A waiter that did not start while the key was held
// decides nothing.
func (e *env) waiterAfterCrash(t *testing.T, requested time.Duration) *inconclusive {
	t.Helper()
	key := e.key("crashed")
	hb := e.backend(t)
	waiterTTL := min(waiterTTLFactor*e.ttl, fencedlock.MaxTTL)
	l := e.locker(t, func(o *fencedlock.Options) { o.TTL = waiterTTL })
	sentA := time.Now()
	g := e.grabTTL(t, hb, key, requested)
	gotA := time.Now()
	ttl := grantTTL(g.TTL, requested)
	// As in ExpiryWithoutRenew: the lease is not over before sentA + TTL
	// (less the store's clock rate), and over by gotA + TTL + ExpirySlack.
	earliest := sentA.Add(ttl - ttl/100 - time.Millisecond)
	due := gotA.Add(ttl + e.cfg.ExpirySlack)

	done := make(chan crashWait, 1)
	go func() {
		begun := time.Now()
		ls, err := l.Acquire(e.ctx, key)
		done <- crashWait{acquired{ls, err}, begun, time.Now()}
	}()
	got, ok := e.waitGrant(done, due)
	if !ok {
		t.Fatalf("a waiter (lease %v) behind a holder that crashed with a lease of %v was not granted the key %v after the holder's grant (%v after the lease ran out + ExpirySlack %v, scheduling lateness max %v): it did not look at the key when the holder's lease ended",
			waiterTTL, ttl, time.Since(gotA).Round(time.Millisecond), time.Since(due).Round(time.Millisecond), e.cfg.ExpirySlack, e.lag.Max().Round(time.Millisecond))
	}
	if got.err != nil {
		t.Fatalf("the waiter's Acquire behind a holder that crashed: %v", got.err)
	}
	defer got.ls.Release(e.ctx)
	if got.at.Before(earliest) {
		t.Fatalf("the waiter was granted the key %v after the holder's request was sent, before its TTL of %v",
			got.at.Sub(sentA).Round(time.Millisecond), ttl)
	}
	if got.ls.Fence() <= g.Fence {
		t.Errorf("the waiter's fence %v after the holder's expiry, want > %v", got.ls.Fence(), g.Fence)
	}
	if late := got.begun.Sub(gotA); late > ttl/2 {
		return &inconclusive{why: fmt.Sprintf("the waiter's Acquire began %v after the holder's grant, too late to wait behind it", late.Round(time.Millisecond)), late: late}
	}
	t.Logf("waiter (lease %v) granted %v after the crashed holder's grant (TTL %v, slack %v), fence %v after %v",
		waiterTTL, got.at.Sub(gotA).Round(time.Millisecond), ttl, e.cfg.ExpirySlack, got.ls.Fence(), g.Fence)
	return nil
}

// waitGrant waits for the waiter's outcome on done until due plus the
// scheduling allowance, and once more up to the settled allowance if the
// machine was held up meanwhile; it reports false if none came.
func (e *env) waitGrant(done <-chan crashWait, due time.Time) (crashWait, bool) {
	wait := func(bound time.Duration) (crashWait, bool) {
		timer := time.NewTimer(max(bound, 0))
		defer timer.Stop()
		select {
		case r := <-done:
			return r, true
		case <-timer.C:
			return crashWait{}, false
		}
	}
	if r, ok := wait(time.Until(due.Add(e.schedAllowance()))); ok {
		return r, true
	}
	if r, ok := wait(time.Until(due.Add(e.settledAllowance()))); ok {
		return r, true
	}
	return crashWait{}, false
}
