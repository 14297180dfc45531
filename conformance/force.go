package conformance

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/fencedlock/fencedlock"
	"github.com/fencedlock/fencedlock/driver"
)

// testForceReleaser checks an operator's forced release: the holder loses
// the key at once (Renew and Release: ErrNotHeld; a Locker's lease ends
// with ErrLeaseLost by its next renewal), the fence advances past the
// broken one, and every later grant, a queued waiter's included, is
// greater than the consumed fence ForceResult.After.
func testForceReleaser(t *testing.T, e *env) {
	if !implements[driver.ForceReleaser](t, e) {
		return
	}
	key := e.key("force")
	b1, b2, b3 := e.backend(t), e.backend(t), e.backend(t)
	fr := b2.(driver.ForceReleaser)

	g := e.grab(t, b1, key)
	r, err := fr.ForceRelease(e.ctx, key)
	if err != nil {
		t.Fatalf("ForceRelease of a held key: %v", err)
	}
	noSecret(t, "ForceResult", fmt.Sprintf("%#v", r), g.Owner)
	if !r.Held || r.Before != g.Fence || r.After <= r.Before {
		t.Fatalf("ForceRelease of a key held with fence %v = {Held:%v Before:%v After:%v}, want held, Before %v, After > Before",
			g.Fence, r.Held, r.Before, r.After, g.Fence)
	}
	if r.Holder != "" && r.Holder != driver.HolderID(g.Owner) {
		t.Errorf("ForceResult.Holder (%d bytes) is not HolderID(owner) nor empty", len(r.Holder))
	}
	if _, err := b1.Renew(e.ctx, g, e.hold); !errors.Is(err, fencedlock.ErrNotHeld) {
		t.Fatalf("Renew after ForceRelease: %v, want ErrNotHeld", err)
	}
	g3 := e.grab(t, b3, key)
	if g3.Fence <= r.After {
		t.Fatalf("grant after ForceRelease has fence %v, want > After %v", g3.Fence, r.After)
	}
	// The broken holder's Renew and Release, once the key has a new
	// holder, change nothing.
	if _, err := b1.Renew(e.ctx, g, e.hold); !errors.Is(err, fencedlock.ErrNotHeld) {
		t.Fatalf("Renew by the broken holder while another holds the key: %v, want ErrNotHeld", err)
	}
	wantNotHeld(t, "Release by the broken holder", b1.Release(e.ctx, g))
	e.mustBeHeld(t, b3, &g3, "the old holder's Release after a forced release deleted the new holder's lock")
	if err := b3.Release(e.ctx, g3); err != nil {
		t.Fatalf("Release: %v", err)
	}

	// A free key: not an error; the fence still advances past the last.
	r, err = fr.ForceRelease(e.ctx, key)
	if err != nil {
		t.Fatalf("ForceRelease of a free key: %v", err)
	}
	if r.Held || r.Holder != "" || r.After <= r.Before || r.After <= g3.Fence {
		t.Fatalf("ForceRelease of a free key (last fence %v) = %+v, want not held, After > Before and > %v", g3.Fence, r, g3.Fence)
	}
	if g := e.grab(t, b1, key); g.Fence <= r.After {
		t.Fatalf("grant after ForceRelease of a free key has fence %v, want > After %v", g.Fence, r.After)
	} else if err := b1.Release(e.ctx, g); err != nil {
		t.Fatalf("Release: %v", err)
	}

	// A Locker's lease and a waiter: the lease is reported lost by its
	// next renewal; the waiter is granted a fence above After.
	l := e.locker(t, e.short)
	lease, err := e.tryAcquire(t, l, key)
	if err != nil {
		t.Fatalf("TryAcquire: %v", err)
	}
	waiter := e.locker(t, nil)
	type result struct {
		lease *fencedlock.Lease
		err   error
	}
	got := make(chan result, 1)
	go func() {
		w, err := waiter.Acquire(e.ctx, key)
		got <- result{w, err}
	}()
	time.Sleep(e.ttl / 4) // let the waiter queue or poll
	t0 := time.Now()
	r, err = fr.ForceRelease(e.ctx, key)
	if err != nil {
		t.Fatalf("ForceRelease of a Locker's lease: %v", err)
	}
	if !r.Held || r.Before != lease.Fence() {
		t.Fatalf("ForceRelease = %+v, want held with the lease's fence %v", r, lease.Fence())
	}
	renewEvery := l.Options().RenewInterval
	bound := grantTTL(lease.TTL(), e.ttl) + renewEvery + e.cfg.ExpirySlack
	if !e.waitDone(lease.Done(), bound+e.schedAllowance()) {
		t.Fatalf("lease not reported lost %v after ForceRelease (bound %v)", time.Since(t0).Round(time.Millisecond), bound)
	}
	t.Logf("loss reported %v after ForceRelease (renew interval %v)", time.Since(t0).Round(time.Millisecond), renewEvery)
	if cause := context.Cause(lease.Context()); !errors.Is(cause, fencedlock.ErrLeaseLost) {
		t.Fatalf("cause %v, want ErrLeaseLost", cause)
	}
	res := <-got
	if res.err != nil {
		t.Fatalf("waiter's Acquire after ForceRelease: %v", res.err)
	}
	if res.lease.Fence() <= r.After {
		t.Fatalf("waiter granted fence %v after ForceRelease, want > After %v", res.lease.Fence(), r.After)
	}
	if err := res.lease.Release(e.ctx); err != nil {
		t.Fatalf("waiter's Release: %v", err)
	}
}
