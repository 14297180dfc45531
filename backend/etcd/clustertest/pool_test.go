package clustertest

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/fencedlock/fencedlock"
	"github.com/fencedlock/fencedlock/backend/etcd"
	"github.com/fencedlock/fencedlock/driver"
	"github.com/fencedlock/fencedlock/internal/clitest"
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
	// -1: not found. The server truncates the time left to whole
	// seconds: 0 is a live lease with less than a second left (a 2 s lease
	// whose renewal is late by a second, as under load), not a gone one.
	if tr.TTL < 0 {
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
//
// The leases live 2 s. A check that finds a lease gone is void, not
// failed, when the lease was lost as measured: a grant nothing renews
// (the first part) read back after its TTL had passed since its Sent; a
// lock of the churn lost by its watchdog (no renewal confirmed before its
// local deadline) while the scheduling delay measured in the test, or one
// of the iteration's own round trips to the cluster, reached a renew
// interval (TTL/3). Under load (load average 20 on 2 cores) both
// happened. A void part or iteration runs again, a bounded number of
// times.
func TestPooledLeaseReuse(t *testing.T) {
	e := newEnv(t)
	lag := clitest.StartLag(t) // after newEnv: its leak check would count it
	ctx := ctxFor(t, 2*time.Minute)

	const attempts = 3
	for a := range attempts {
		void := pooledReuse(t, e, e.backend(1), ctx, fmt.Sprint(a, "-"))
		if void == "" {
			break
		}
		if a == attempts-1 {
			t.Fatalf("pooled reuse void in all %d attempts (scheduling delay up to %v): %s", attempts, lag.Max(), void)
		}
		t.Logf("attempt %d void (scheduling delay up to %v): %s", a, lag.Max(), void)
	}

	// Churn: 8 workers acquire, check, release; every held lock's lease
	// carries exactly its key.
	b := e.backend(1)
	l := mustLocker(t, b, fencedlock.Options{TTL: ttl})
	defer l.Close()
	const maxVoid = 10 // void iterations a worker runs again
	var wg sync.WaitGroup
	for w := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			voids := 0
			for i := 0; i < 10; {
				key := fmt.Sprintf("churn-%d-%d", w, i%3)
				// slowest is the longest of this iteration's own round
				// trips to the cluster (the acquire and the two reads).
				var slowest time.Duration
				timed := func(start time.Time) { slowest = max(slowest, time.Since(start)) }
				start := time.Now()
				ls, err := l.Acquire(ctx, key)
				if err != nil {
					t.Errorf("acquire %s: %v", key, err)
					return
				}
				timed(start)
				// The key's entry gone counts as a lease carrying
				// nothing (leaseOf would end the test from this
				// goroutine).
				start = time.Now()
				kvs := e.entries(key)
				timed(start)
				var keys []string
				if len(kvs) > 0 {
					start = time.Now()
					keys = e.keysOn(kvs[0].Lease)
					timed(start)
				}
				again := "" // a second read, when the first found no key or another
				if len(keys) != 1 {
					again = e.describeLease(kvs)
				}
				rerr := ls.Release(ctx)
				// Lost, as measured: the scheduling delay, or one of our
				// own round trips to the cluster, reached a renew
				// interval (TTL/3), the silence after which the backend
				// drops a keepalive stream and fails its renewals. The
				// check (if it found the lease gone) and the release are
				// void.
				if errors.Is(rerr, fencedlock.ErrLeaseLost) && len(keys) <= 1 && max(lag.Max(), slowest) >= ttl/3 {
					if voids++; voids > maxVoid {
						t.Errorf("worker %d: %d leases lost (scheduling delay up to %v, slowest round trip %v), the last %s: %v", w, voids, lag.Max(), slowest, key, rerr)
						return
					}
					t.Logf("%s lost (its lease carried %v; scheduling delay up to %v, slowest round trip %v, renew interval %v): void, again: %v", key, keys, lag.Max(), slowest, ttl/3, rerr)
					continue
				}
				if len(keys) != 1 {
					t.Errorf("held %s: its lease carries %v, want its key only (%d entries; scheduling delay up to %v, slowest round trip %v; read again at once: %s)",
						key, keys, len(kvs), lag.Max(), slowest, again)
				}
				if rerr != nil {
					t.Errorf("release %s: %v (scheduling delay up to %v, slowest round trip %v)", key, rerr, lag.Max(), slowest)
				}
				i++
			}
		}()
	}
	wg.Wait()
	waitNoLeases(t, e)
	t.Logf("leases after churn: %d, none carrying a key", e.allLeases())
}

// pooledReuse runs the first part of TestPooledLeaseReuse through b, on a
// pool of its own, with keys prefixed by p. It returns why it is void (a
// grant's lease expired before its check, as measured: its TTL had passed
// since its Sent), or "".
func pooledReuse(t *testing.T, e *env, b *etcd.Backend, ctx context.Context, p string) string {
	// expired is why a check that found g's key (or its lease) gone is
	// void: g's TTL had passed since its Sent when the check returned.
	expired := func(g driver.Grant, what string) string {
		if age := time.Since(g.Sent); age >= g.TTL {
			return fmt.Sprintf("%s: %s gone %v after its grant was sent (TTL %v)", what, g.Key, age, g.TTL)
		}
		return ""
	}
	// leaseOf is e.leaseOf for g's key, or a reason the check is void.
	leaseOf := func(g driver.Grant) (int64, string) {
		kvs := e.entries(g.Key)
		if len(kvs) == 0 {
			if v := expired(g, "entry"); v != "" {
				return 0, v
			}
			t.Fatalf("no entry for %q %v after its grant (TTL %v)", g.Key, time.Since(g.Sent), g.TTL)
		}
		return kvs[0].Lease, ""
	}
	release := func(g driver.Grant) string {
		err := b.Release(ctx, g)
		if err == nil {
			return ""
		}
		if errors.Is(err, driver.ErrNotHeld) {
			if v := expired(g, "release"); v != "" {
				return v
			}
		}
		t.Fatal(err)
		return ""
	}

	ga := acquire(t, ctx, b, p+"a", ttl)
	la, v := leaseOf(ga)
	if v != "" {
		return v
	}
	if v := release(ga); v != "" {
		return v
	}
	gb := acquire(t, ctx, b, p+"b", ttl)
	lb, v := leaseOf(gb)
	if v != "" {
		return v
	}
	if lb != la {
		t.Errorf("second grant's lease %x, want the released lock's %x (pooled)", lb, la)
	}
	if v := release(gb); v != "" {
		return v
	}

	// Idle for more than TTL/10: renewed before reuse, so Sent is the
	// renewal's, not the old grant's.
	time.Sleep(ttl/10 + 100*time.Millisecond)
	before := time.Now()
	gc, err := b.AcquireWait(ctx, req(p+"c", ttl))
	if err != nil {
		t.Fatal(err)
	}
	lc, v := leaseOf(gc)
	if v != "" {
		return v
	}
	if lc != la {
		t.Errorf("third grant did not reuse the idle lease")
	}
	if gc.Sent.Before(before) {
		t.Errorf("grant on a lease idle for %v: Sent %v before the call: the idle lease was not renewed first", ttl/10+100*time.Millisecond, before.Sub(gc.Sent))
	}
	if v := release(gc); v != "" {
		return v
	}

	// Another TTL: another lease, with that TTL.
	gd := acquire(t, ctx, b, p+"d", 2*ttl)
	ld, v := leaseOf(gd)
	if v != "" {
		return v
	}
	if ld == la || gd.TTL != 2*ttl {
		t.Errorf("grant with TTL %v: lease %x (pooled %x), TTL %v", 2*ttl, ld, la, gd.TTL)
	}
	b.Release(ctx, gd)
	return ""
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
	// Its warnings (a revocation that failed, the lease left to expire)
	// go to the test's log: they name a lease left after Close.
	b, err := etcd.New(e.client(1), etcd.Options{Logger: slog.New(slog.NewTextHandler(t.Output(), &slog.HandlerOptions{Level: slog.LevelWarn}))})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { b.Close() })
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
	pooled := map[int64]bool{}
	for i := range gs {
		var err error
		if gs[i], err = b.Acquire(ctx, req(fmt.Sprint("p", i), ttl)); err != nil {
			t.Fatal(err)
		}
		pooled[e.leaseOf(gs[i].Key)] = true
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
		t.Fatalf("%d leases after 4 releases, want the 4 pooled ones: %s", n, e.describeLeases(pooled))
	}
	if err := b.Close(); err != nil {
		t.Fatal(err)
	}
	if n := waitLeases(func(n int) bool { return n == 0 }); n != 0 {
		t.Fatalf("%d leases left 1 s after Close, want 0 (the pool revoked): %s", n, e.describeLeases(pooled))
	}
}

// describeLease describes the lease of the first of kvs as TimeToLive
// reports it now: the TTL left (-1: not found) and the keys on it.
func (e *env) describeLease(kvs []*mvccpb.KeyValue) string {
	if len(kvs) == 0 {
		return "no entry"
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	tr, err := e.admin.TimeToLive(ctx, clientv3.LeaseID(kvs[0].Lease), clientv3.WithAttachedKeys())
	if err != nil {
		return fmt.Sprintf("lease %x: %v", kvs[0].Lease, err)
	}
	return fmt.Sprintf("lease %x: TTL %ds, %d keys", kvs[0].Lease, tr.TTL, len(tr.Keys))
}

// describeLeases describes every lease of the cluster, marking those of
// known: its ID, the TTL left and granted, and the keys on it.
func (e *env) describeLeases(known map[int64]bool) string {
	e.t.Helper()
	var out []string
	for _, l := range e.leaseList() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		tr, err := e.admin.TimeToLive(ctx, l.ID, clientv3.WithAttachedKeys())
		cancel()
		if err != nil {
			out = append(out, fmt.Sprintf("%x: %v", l.ID, err))
			continue
		}
		var keys []string
		for _, k := range tr.Keys {
			keys = append(keys, string(k))
		}
		out = append(out, fmt.Sprintf("%x (pooled %v): TTL %ds of %ds, keys %q", l.ID, known[int64(l.ID)], tr.TTL, tr.GrantedTTL, keys))
	}
	return strings.Join(out, "; ")
}
