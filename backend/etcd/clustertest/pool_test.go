package clustertest

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/fencedlock/fencedlock"
	"github.com/fencedlock/fencedlock/backend/etcd"
	"github.com/fencedlock/fencedlock/driver"
)

// The etcd backend reuses the lease of a released lock for a later grant
// (a pool of idle leases), so that an acquire is one Txn and a release one
// Txn. These tests hold the pool to what lease-per-lock promises: a held
// lock's lease carries its key and no other, whatever was done before.

func req(key string, ttl time.Duration) driver.AcquireRequest {
	return driver.AcquireRequest{Key: key, Owner: rand.Text(), TTL: ttl}
}

// acquire takes key for a new owner through b, failing t if it cannot.
func acquire(t *testing.T, ctx context.Context, b *etcd.Backend, key string, ttl time.Duration) driver.Grant {
	t.Helper()
	g, err := b.Acquire(ctx, req(key, ttl))
	if err != nil {
		t.Fatal(err)
	}
	return g
}

// leaseOf returns the lease of key's holder entry.
func (e *env) leaseOf(key string) int64 {
	e.t.Helper()
	kvs := e.entries(key)
	if len(kvs) == 0 {
		e.t.Fatalf("no entry for %q", key)
	}
	return kvs[0].Lease
}

// keysOn returns the keys attached to a lease (nil if it is gone).
func (e *env) keysOn(id int64) []string {
	e.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	tr, err := e.admin.TimeToLive(ctx, clientv3.LeaseID(id), clientv3.WithAttachedKeys())
	if err != nil {
		e.t.Fatal(err)
	}
	if tr.TTL <= 0 {
		return nil
	}
	var keys []string
	for _, k := range tr.Keys {
		keys = append(keys, string(k))
	}
	return keys
}

// A released lock's lease is reused by the next grant of the same TTL (no
// LeaseGrant), renewed first when it has been idle for a tenth of its TTL
// or more (so the grant's Sent is fresh), and never for another TTL; under
// churn every held lock's lease carries its own key and no other.
func TestPooledLeaseReuse(t *testing.T) {
	e := newEnv(t)
	b := e.backend(1)
	ctx := ctxFor(t, time.Minute)

	ga := acquire(t, ctx, b, "a", ttl)
	la := e.leaseOf("a")
	if err := b.Release(ctx, ga); err != nil {
		t.Fatal(err)
	}
	gb := acquire(t, ctx, b, "b", ttl)
	if lb := e.leaseOf("b"); lb != la {
		t.Errorf("second grant's lease %x, want the released lock's %x (pooled)", lb, la)
	}
	if err := b.Release(ctx, gb); err != nil {
		t.Fatal(err)
	}

	// Idle for more than TTL/10: renewed before reuse, so Sent is the
	// renewal's, not the old grant's.
	time.Sleep(ttl/10 + 100*time.Millisecond)
	before := time.Now()
	gc, err := b.AcquireWait(ctx, req("c", ttl))
	if err != nil {
		t.Fatal(err)
	}
	if e.leaseOf("c") != la {
		t.Errorf("third grant did not reuse the idle lease")
	}
	if gc.Sent.Before(before) {
		t.Errorf("grant on a lease idle for %v: Sent %v before the call: the idle lease was not renewed first", ttl/10+100*time.Millisecond, before.Sub(gc.Sent))
	}
	if err := b.Release(ctx, gc); err != nil {
		t.Fatal(err)
	}

	// Another TTL: another lease, with that TTL.
	gd := acquire(t, ctx, b, "d", 2*ttl)
	if e.leaseOf("d") == la || gd.TTL != 2*ttl {
		t.Errorf("grant with TTL %v: lease %x (pooled %x), TTL %v", 2*ttl, e.leaseOf("d"), la, gd.TTL)
	}
	b.Release(ctx, gd)

	// Churn: 8 workers acquire, check, release; every held lock's lease
	// carries exactly its key.
	l := mustLocker(t, b, fencedlock.Options{TTL: ttl})
	defer l.Close()
	var wg sync.WaitGroup
	for w := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range 10 {
				key := fmt.Sprintf("churn-%d-%d", w, i%3)
				ls, err := l.Acquire(ctx, key)
				if err != nil {
					t.Errorf("acquire %s: %v", key, err)
					return
				}
				if keys := e.keysOn(e.leaseOf(key)); len(keys) != 1 {
					t.Errorf("held %s: its lease carries %v, want its key only", key, keys)
				}
				if err := ls.Release(ctx); err != nil {
					t.Errorf("release %s: %v", key, err)
				}
			}
		}()
	}
	wg.Wait()
	waitNoLeases(t, e)
	t.Logf("leases after churn: %d, none carrying a key", e.allLeases())
}

// A second Release of a released grant, after its lease went back to the
// pool and was reused by another lock, must not revoke that lease: the
// other lock would be lost with it.
func TestSecondReleaseLeavesReusedLeaseAlone(t *testing.T) {
	e := newEnv(t)
	b := e.backend(1)
	ctx := ctxFor(t, time.Minute)
	ga := acquire(t, ctx, b, "a", ttl)
	if err := b.Release(ctx, ga); err != nil {
		t.Fatal(err)
	}
	gb := acquire(t, ctx, b, "b", ttl)
	lb := e.leaseOf("b")
	if err := b.Release(ctx, ga); !errors.Is(err, driver.ErrNotHeld) {
		t.Fatalf("second release: %v, want ErrNotHeld", err)
	}
	time.Sleep(200 * time.Millisecond) // a background revocation would land by now
	if kvs := e.entries("b"); len(kvs) != 1 || kvs[0].Lease != lb {
		t.Fatalf("b's entry after a second release of a's grant: %d entries; the reused lease %x was revoked", len(kvs), lb)
	}
	if _, err := b.Renew(ctx, gb, ttl); err != nil {
		t.Fatalf("renew b: %v", err)
	}
	if err := b.Release(ctx, gb); err != nil {
		t.Fatal(err)
	}
}

// A Release whose Txn fails (here its context is already cancelled: the
// Txn never reaches the server and the key stays on the lease; a timeout
// would leave the outcome unknown, with the same answer) revokes the lease
// instead of pooling it: the next grant gets another lease, and the
// released lock's key goes away at once, not after its TTL.
func TestFailedReleaseRevokesLease(t *testing.T) {
	e := newEnv(t)
	b := e.backend(1)
	ctx := ctxFor(t, time.Minute)
	// A TTL whose tenth (the age below which a pooled lease is reused
	// without a renewal) outlasts the test: with a pool that took the
	// lease back, the next grant would reuse it as is.
	const ttl = 10 * time.Second
	ga := acquire(t, ctx, b, "a", ttl)
	la := e.leaseOf("a")
	cctx, cancel := context.WithCancel(ctx)
	cancel()
	if err := b.Release(cctx, ga); err == nil {
		t.Fatal("release with a cancelled context succeeded")
	}
	gb := acquire(t, ctx, b, "b", ttl)
	if lb := e.leaseOf("b"); lb == la {
		t.Fatalf("the lease %x of a failed release (a's key still on it: %v) was reused for another lock", la, e.keysOn(la))
	}
	// a's key leaves with its lease, revoked in the background.
	deadline := time.Now().Add(etcd.DefaultCleanupTimeout)
	for len(e.entries("a")) > 0 {
		if time.Now().After(deadline) {
			t.Fatalf("a's entry still there %v after its failed release", etcd.DefaultCleanupTimeout)
		}
		time.Sleep(20 * time.Millisecond)
	}
	if keys := e.keysOn(e.leaseOf("b")); len(keys) != 1 {
		t.Fatalf("b's lease carries %v", keys)
	}
	b.Release(ctx, gb)
}

// An idle pooled lease revoked by an operator does not fail the next
// acquire (the Txn is refused as a whole; a new lease is granted), and
// Close revokes the idle leases at once.
func TestPoolRevokedIdleLeaseAndClose(t *testing.T) {
	e := newEnv(t)
	b := e.backend(1)
	ctx := ctxFor(t, time.Minute)
	const ttl = 4 * time.Second // reused without a renewal for 400 ms: the Txn meets the revoked lease
	for _, wait := range []bool{false, true} {
		acquire := b.Acquire
		if wait {
			acquire = b.AcquireWait
		}
		g, err := acquire(ctx, req("a", ttl))
		if err != nil {
			t.Fatal(err)
		}
		la := e.leaseOf("a")
		if err := b.Release(ctx, g); err != nil {
			t.Fatal(err)
		}
		e.revoke(la)
		g, err = acquire(ctx, req("a", ttl))
		if err != nil {
			t.Fatalf("acquire (wait %v) after the idle pooled lease was revoked: %v", wait, err)
		}
		if e.leaseOf("a") == la {
			t.Fatal("granted on the revoked lease")
		}
		if err := b.Release(ctx, g); err != nil {
			t.Fatal(err)
		}
	}

	// Fill the pool with 4 leases, then Close: none is left.
	gs := make([]driver.Grant, 4)
	for i := range gs {
		var err error
		if gs[i], err = b.Acquire(ctx, req(fmt.Sprint("p", i), ttl)); err != nil {
			t.Fatal(err)
		}
	}
	for _, g := range gs {
		if err := b.Release(ctx, g); err != nil {
			t.Fatal(err)
		}
	}
	// The admin's member serves the lease list from its own state, which
	// may lag the member that granted or revoked a lease by a few applies:
	// poll, within 1 s (below the 4 s TTL, so a lease left to expire still
	// fails the test).
	waitLeases := func(ok func(int) bool) int {
		deadline := time.Now().Add(time.Second)
		for {
			n := e.allLeases()
			if ok(n) || time.Now().After(deadline) {
				return n
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
	if n := waitLeases(func(n int) bool { return n >= 4 }); n < 4 {
		t.Fatalf("%d leases after 4 releases, want the 4 pooled ones", n)
	}
	if err := b.Close(); err != nil {
		t.Fatal(err)
	}
	if n := waitLeases(func(n int) bool { return n == 0 }); n != 0 {
		t.Fatalf("%d leases left 1 s after Close, want 0 (the pool revoked)", n)
	}
}
