package clustertest

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/fencedlock/fencedlock"
	"github.com/fencedlock/fencedlock/backend/etcd"
	"github.com/fencedlock/fencedlock/backend/memory"
	"github.com/fencedlock/fencedlock/driver"
	"github.com/fencedlock/fencedlock/fencing"
	"github.com/fencedlock/fencedlock/internal/locktest"
)

// Six clients, two per member, contend for one key: an overlap detector
// finds no two holders at once, and fences grow strictly in the order the
// critical section was entered.
func TestMutualExclusionAcrossMembers(t *testing.T) {
	e := newEnv(t)
	const workers, rounds = 6, 4
	lockers := make([]*fencedlock.Locker, workers)
	for i := range lockers {
		lockers[i], _ = e.locker(i%3, fencedlock.Options{})
	}
	ctx := ctxFor(t, time.Minute)
	fences := locktest.Contend(ctx, t, lockers, "counter", rounds, time.Minute, func(ls *fencedlock.Lease) error {
		time.Sleep(2 * time.Millisecond)
		if err := ls.Err(); err != nil {
			return fmt.Errorf("lease lost inside the critical section: %w", err)
		}
		return nil
	})
	if n := len(e.entries("counter")); n != 0 {
		t.Errorf("%d queue entries left", n)
	}
	waitNoLeases(t, e)
	t.Logf("%d grants from %d clients on 3 members, no overlap; fences %d..%d strictly increasing", len(fences), workers, fences[0], fences[len(fences)-1])
}

// Waiters are served in the order they queued, each watching only its
// predecessor; Inspect shows the holder.
func TestFIFOOrder(t *testing.T) {
	e := newEnv(t)
	const n = 5
	holder, hb := e.locker(0, fencedlock.Options{})
	ctx := ctxFor(t, time.Minute)
	h, err := holder.Acquire(ctx, "fifo")
	if err != nil {
		t.Fatal(err)
	}
	info, err := hb.Inspect(ctx, "fifo")
	if err != nil || !info.Held || info.Fence != h.Fence() || info.Holder != h.Holder() || info.TTL <= 0 {
		t.Fatalf("Inspect = %+v, %v; want held by fence %d holder %s", info, err, h.Fence(), h.Holder())
	}

	var (
		mu    sync.Mutex
		order []int
		fence []fencing.Token
		wg    sync.WaitGroup
	)
	errs := make(chan error, n)
	for i := 1; i <= n; i++ {
		l, _ := e.locker(i%3, fencedlock.Options{})
		wg.Add(1)
		go func() {
			defer wg.Done()
			ls, err := l.Acquire(ctx, "fifo")
			if err != nil {
				errs <- err
				return
			}
			mu.Lock()
			order = append(order, i)
			fence = append(fence, ls.Fence())
			mu.Unlock()
			if err := ls.Release(ctx); err != nil {
				errs <- err
			}
		}()
		e.waitEntries("fifo", i+1) // waiter i has queued
	}
	if err := h.Release(ctx); err != nil {
		t.Fatal(err)
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	for i, got := range order {
		if got != i+1 {
			t.Fatalf("service order %v, want 1..%d", order, n)
		}
		if i > 0 && fence[i] <= fence[i-1] {
			t.Fatalf("fences %v not increasing", fence)
		}
	}
	if fence[0] <= h.Fence() {
		t.Fatalf("first waiter's fence %d not above the holder's %d", fence[0], h.Fence())
	}
	if info, err := hb.Inspect(ctx, "fifo"); err != nil || info.Held || info.Fence != 0 {
		t.Errorf("Inspect after all released = %+v, %v", info, err)
	}
	t.Logf("served in order %v with fences %v", order, fence)
}

// A wait ended by its context or by Close removes its queue entry and
// lease; TryAcquire
// on a held lock fails with the holder's remaining TTL and leaves nothing.
func TestCancelledWaitLeavesNothing(t *testing.T) {
	e := newEnv(t)
	hl, _ := e.locker(0, fencedlock.Options{})
	wl, _ := e.locker(1, fencedlock.Options{})
	ctx := ctxFor(t, time.Minute)
	h, err := hl.Acquire(ctx, "k")
	if err != nil {
		t.Fatal(err)
	}
	if n := e.leases(); n != 1 {
		t.Fatalf("%d leases with one holder", n)
	}

	wctx, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
	_, err = wl.Acquire(wctx, "k")
	cancel()
	if !errors.Is(err, driver.ErrNotAcquired) || !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("timed-out wait: %v, want ErrNotAcquired and DeadlineExceeded", err)
	}

	// Explicit cancellation while queued.
	cctx, ccancel := context.WithCancel(ctx)
	ch := acquireAsync(cctx, wl, "k")
	e.waitEntries("k", 2)
	ccancel()
	if a := <-ch; !errors.Is(a.err, driver.ErrNotAcquired) || !errors.Is(a.err, context.Canceled) {
		t.Fatalf("cancelled wait: %v", a.err)
	}

	// A Locker closed while one of its Acquires waits.
	cl, _ := e.locker(2, fencedlock.Options{})
	ch = acquireAsync(ctx, cl, "k")
	e.waitEntries("k", 2)
	if err := cl.Close(); err != nil {
		t.Fatal(err)
	}
	if a := <-ch; !errors.Is(a.err, driver.ErrClosed) {
		t.Fatalf("wait ended by Close: %v, want ErrClosed", a.err)
	}

	_, err = wl.TryAcquire(ctx, "k")
	var he *driver.HeldError
	if !errors.As(err, &he) || !errors.Is(err, driver.ErrNotAcquired) || he.RetryAfter <= 0 || he.RetryAfter > 2*ttl {
		t.Fatalf("TryAcquire on a held lock: %v, want *HeldError with 0 < RetryAfter <= %v", err, 2*ttl)
	}

	kvs := e.entries("k")
	if len(kvs) != 1 || kvs[0].CreateRevision != int64(h.Fence()) {
		t.Fatalf("queue after cancelled waits: %d entries, want only the holder's", len(kvs))
	}
	if n := e.leases(); n != 1 {
		t.Fatalf("%d leases after cancelled waits and a failed TryAcquire, want 1", n)
	}
	if err := h.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if n := len(e.entries("k")); n != 0 {
		t.Fatalf("after release: %d entries", n)
	}
	waitNoLeases(t, e)
	// TryAcquire succeeds on a free lock, with a greater fence.
	ls, err := wl.TryAcquire(ctx, "k")
	if err != nil || ls.Fence() <= h.Fence() {
		t.Fatalf("TryAcquire on a free lock: %v (fence %v after %v)", err, ls, h.Fence())
	}
	ls.Release(ctx)
}

// etcd issue #11456 (Jepsen, etcd 3.4.3): a waiter whose lease expired while
// it waited was handed the lock when its predecessor went away. Here W's
// lease is revoked while it waits behind H with C queued after it, and H
// releases right away: C is served next, and W only later, with a new
// queue entry and a greater fence, never with its dead entry.
func TestExpiredWaiterIsNotGranted(t *testing.T) {
	e := newEnv(t)
	ctx := ctxFor(t, time.Minute)
	h, wch, cch, kvs := e.queuedBehind(ctx, "jepsen")
	dead := kvs[1] // W's entry
	e.revoke(dead.Lease)
	if err := h.Release(ctx); err != nil {
		t.Fatal(err)
	}

	var first, second acquired
	var firstIsC bool
	select {
	case first = <-cch:
		firstIsC = true
	case first = <-wch:
	case <-time.After(10 * time.Second):
		t.Fatal("nobody acquired after the holder released")
	}
	if first.err != nil {
		t.Fatal(first.err)
	}
	if !firstIsC {
		t.Fatalf("the waiter whose lease was revoked got the lock first (fence %d, dead entry's revision %d)", first.lease.Fence(), dead.CreateRevision)
	}
	time.Sleep(100 * time.Millisecond) // W must stay queued behind C
	select {
	case a := <-wch:
		t.Fatalf("W acquired while C held the lock: %v", a.err)
	default:
	}
	if err := first.lease.Release(ctx); err != nil {
		t.Fatal(err)
	}
	second = recv(t, wch, 10*time.Second, "W after C")
	if second.lease.Fence() == fencing.Token(dead.CreateRevision) || second.lease.Fence() <= first.lease.Fence() {
		t.Fatalf("W's fence %d: want a new entry above C's %d (dead entry was %d)", second.lease.Fence(), first.lease.Fence(), dead.CreateRevision)
	}
	second.lease.Release(ctx)
	t.Logf("H fence %d; W's entry %d revoked while waiting; C granted %d; W re-queued and granted %d", h.Fence(), dead.CreateRevision, first.lease.Fence(), second.lease.Fence())
}

// A lease revoked by another client (etcdctl lease revoke), or whose key is
// deleted by hand, is reported lost through the Lease API at once (the
// watch on our key), well within TTL + one renew interval.
func TestRevocationByAnotherClient(t *testing.T) {
	e := newEnv(t)
	l, _ := e.locker(1, fencedlock.Options{})
	ctx := ctxFor(t, time.Minute)
	for _, how := range []string{"lease revoked", "key deleted"} {
		ls, err := l.Acquire(ctx, "k")
		if err != nil {
			t.Fatal(err)
		}
		kvs := e.entries("k")
		start := time.Now()
		if how == "lease revoked" {
			e.revoke(kvs[0].Lease)
		} else if _, err := e.admin.Delete(ctx, string(kvs[0].Key)); err != nil {
			t.Fatal(err)
		}
		bound := ttl + ttl/3
		select {
		case <-ls.Done():
		case <-time.After(bound):
			t.Fatalf("%s: loss not reported within %v", how, bound)
		}
		delay := time.Since(start)
		if !errors.Is(ls.Err(), fencedlock.ErrLeaseLost) || !errors.Is(ls.Err(), driver.ErrNotHeld) {
			t.Fatalf("%s: Err = %v, want ErrLeaseLost wrapping ErrNotHeld", how, ls.Err())
		}
		if err := ls.Release(ctx); !errors.Is(err, driver.ErrNotHeld) {
			t.Fatalf("%s: release after loss = %v, want ErrNotHeld", how, err)
		}
		t.Logf("%s: loss reported after %s (%v)", how, ms(delay), ls.Err())
	}
	if n := len(e.entries("k")); n != 0 {
		t.Fatalf("left %d entries", n)
	}
	waitNoLeases(t, e)
}

// A release after the lease was lost and another client took the lock
// deletes nothing; a release by owner without the grant's data (the
// Locker's clean-up path) finds its own entry by holder id.
func TestLateReleaseDeletesNothing(t *testing.T) {
	e := newEnv(t)
	b1, b2 := e.backend(0), e.backend(1)
	ctx := ctxFor(t, time.Minute)
	req1 := driver.AcquireRequest{Key: "k", Owner: "owner-one-0123456789", TTL: ttl}
	req2 := driver.AcquireRequest{Key: "k", Owner: "owner-two-0123456789", TTL: ttl}
	g1, err := b1.Acquire(ctx, req1)
	if err != nil {
		t.Fatal(err)
	}
	if g1.TTL != ttl {
		t.Errorf("granted TTL %v, want %v", g1.TTL, ttl)
	}
	e.revoke(e.entries("k")[0].Lease) // g1's lease expires
	g2, err := b2.Acquire(ctx, req2)
	if err != nil {
		t.Fatal(err)
	}
	if g2.Fence <= g1.Fence {
		t.Fatalf("fence %d after %d", g2.Fence, g1.Fence)
	}
	if err := b1.Release(ctx, g1); !errors.Is(err, driver.ErrNotHeld) {
		t.Fatalf("late release: %v, want ErrNotHeld", err)
	}
	if err := b1.Release(ctx, driver.Grant{Key: "k", Owner: req1.Owner}); !errors.Is(err, driver.ErrNotHeld) {
		t.Fatalf("late release without data: %v, want ErrNotHeld", err)
	}
	if _, err := b1.Renew(ctx, g1, ttl); !errors.Is(err, driver.ErrNotHeld) {
		t.Fatalf("late renew: %v, want ErrNotHeld", err)
	}
	kvs := e.entries("k")
	if len(kvs) != 1 || kvs[0].CreateRevision != int64(g2.Fence) {
		t.Fatalf("the late release touched the new holder's key: %d entries", len(kvs))
	}
	// The new holder renews by hand (ManualRenew path), then releases by
	// owner alone.
	if got, err := b2.Renew(ctx, g2, ttl); err != nil || got != ttl {
		t.Fatalf("renew: %v %v", got, err)
	}
	if err := b2.Release(ctx, driver.Grant{Key: "k", Owner: req2.Owner}); err != nil {
		t.Fatalf("release by owner: %v", err)
	}
	if n := len(e.entries("k")); n != 0 {
		t.Fatalf("left %d entries", n)
	}
	waitNoLeases(t, e)
}

// The resource-side guard on etcd: greater fence accepted, equal only from
// the same holder, anything else rejected with a StaleError and nothing
// written.
func TestFencedPut(t *testing.T) {
	e := newEnv(t)
	la, ba := e.locker(0, fencedlock.Options{})
	lb, bb := e.locker(2, fencedlock.Options{})
	ctx := ctxFor(t, time.Minute)
	const data = "app/orders/state"

	a, err := la.Acquire(ctx, "orders")
	if err != nil {
		t.Fatal(err)
	}
	if err := ba.FencedPut(ctx, data, "a1", a.Fence(), a.Holder()); err != nil {
		t.Fatal(err)
	}
	if err := ba.FencedPut(ctx, data, "a2", a.Fence(), a.Holder()); err != nil {
		t.Fatalf("equal fence, same holder: %v", err)
	}
	err = bb.FencedPut(ctx, data, "x", a.Fence(), "someone-else")
	var se *fencing.StaleError
	if !errors.As(err, &se) || !errors.Is(err, fencing.ErrStale) || se.Accepted != a.Fence() || se.AcceptedFrom != a.Holder() {
		t.Fatalf("equal fence, other holder: %v", err)
	}
	if err := a.Release(ctx); err != nil {
		t.Fatal(err)
	}
	b, err := lb.Acquire(ctx, "orders")
	if err != nil {
		t.Fatal(err)
	}
	if err := bb.FencedPut(ctx, data, "b1", b.Fence(), b.Holder()); err != nil {
		t.Fatalf("greater fence: %v", err)
	}
	// A's late write (it was paused past its lease).
	if err := ba.FencedPut(ctx, data, "a-late", a.Fence(), a.Holder()); !errors.As(err, &se) || se.Accepted != b.Fence() || se.Token != a.Fence() {
		t.Fatalf("late write: %v, want StaleError accepted %d", err, b.Fence())
	}
	if err := ba.FencedPut(ctx, data, "zero", 0, a.Holder()); !errors.Is(err, fencing.ErrInvalidToken) {
		t.Fatalf("zero token: %v", err)
	}
	if err := bb.FencedPut(ctx, data, "anon", b.Fence(), ""); !errors.Is(err, driver.ErrInvalid) {
		t.Fatalf("empty holder id: %v", err)
	}
	rec, err := bb.FencedGet(ctx, data)
	if err != nil || !rec.Found || rec.Value != "b1" || rec.Fence != b.Fence() || rec.Holder != b.Holder() {
		t.Fatalf("stored %+v (%v), want b1 %d %s", rec, err, b.Fence(), b.Holder())
	}
	b.Release(ctx)
}

// useLock is application code, written against the fencedlock API only: it
// runs unchanged on every backend; only the constructor of l differs. Each
// worker increments a counter under the lock, through a fencing guard.
func useLock(ctx context.Context, l *fencedlock.Locker, workers, rounds int) (count int, last fencing.Token, err error) {
	var (
		guard fencing.Guard
		wg    sync.WaitGroup
		errs  = make(chan error, workers)
	)
	for range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range rounds {
				err := l.Do(ctx, "counter", func(ctx context.Context, ls *fencedlock.Lease) error {
					return guard.Do(ls.Fence(), ls.Holder(), func() error {
						v := count
						time.Sleep(time.Millisecond) // widen the race window
						count = v + 1
						return nil
					})
				})
				if err != nil {
					errs <- err
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	last, _ = guard.Accepted()
	return count, last, <-errs
}

// The same application function runs on etcd and on the in-memory
// reference backend; only the constructor line differs.
func TestSameCodeAsOtherBackends(t *testing.T) {
	e := newEnv(t)
	constructors := []struct {
		name string
		make func() (driver.Backend, error)
	}{
		{"etcd", func() (driver.Backend, error) { return etcd.New(e.client(1), etcd.Options{}) }},
		{"memory", func() (driver.Backend, error) { return memory.New(), nil }},
	}
	for _, c := range constructors {
		b, err := c.make() // the only backend-specific line
		if err != nil {
			t.Fatal(err)
		}
		l := mustLocker(t, b, fencedlock.Options{TTL: ttl})
		count, last, err := useLock(ctxFor(t, time.Minute), l, 4, 5)
		l.Close()
		b.Close() // a Locker does not close its backend
		if err != nil || count != 20 || last == 0 {
			t.Fatalf("%s: useLock: count %d, last fence %d, err %v; want 20 increments", c.name, count, last, err)
		}
		t.Logf("%s: 20 guarded increments from 4 workers, last fence %d", c.name, last)
	}
}

// Manual renewal keeps a lease past its TTL without the keepalive; a
// revoked lease fails the manual renewal with ErrNotHeld and is lost.
func TestManualRenew(t *testing.T) {
	e := newEnv(t)
	l, _ := e.locker(2, fencedlock.Options{ManualRenew: true})
	ctx := ctxFor(t, time.Minute)
	ls, err := l.Acquire(ctx, "k")
	if err != nil {
		t.Fatal(err)
	}
	for range 3 {
		time.Sleep(ttl / 2)
		before := ls.Deadline()
		if err := ls.Renew(ctx); err != nil {
			t.Fatal(err)
		}
		if !ls.Deadline().After(before) {
			t.Fatal("renew did not move the deadline")
		}
	}
	if ls.Err() != nil {
		t.Fatalf("lost despite manual renewals past 1.5x TTL: %v", ls.Err())
	}
	e.revoke(e.entries("k")[0].Lease)
	if err := ls.Renew(ctx); !errors.Is(err, driver.ErrNotHeld) {
		t.Fatalf("renew of a revoked lease: %v", err)
	}
	if !errors.Is(ls.Err(), fencedlock.ErrLeaseLost) {
		t.Fatalf("Err = %v", ls.Err())
	}
}

// etcd leases are whole seconds with a server minimum: the Grant reports
// the TTL the server applied, and the Locker's deadline follows it, so a
// lease asked for 300 ms (applied as 1 s) is kept alive and not lost.
// Closing the backend leaves the caller's client open.
func TestTTLRoundedUp(t *testing.T) {
	e := newEnv(t)
	ctx := ctxFor(t, time.Minute)
	for _, c := range []struct{ asked, applied time.Duration }{
		{300 * time.Millisecond, time.Second},
		{1500 * time.Millisecond, 2 * time.Second},
	} {
		cli := e.client(1)
		b, err := etcd.New(cli, etcd.Options{})
		if err != nil {
			t.Fatal(err)
		}
		l := mustLocker(t, b, fencedlock.Options{TTL: c.asked})
		// One attempt: the Grant's TTL is the applied lease.
		ls, err := l.TryAcquire(ctx, "k")
		if err != nil {
			t.Fatal(err)
		}
		if ls.TTL() != c.applied {
			t.Errorf("asked %v: lease TTL %v, want %v", c.asked, ls.TTL(), c.applied)
		}
		if err := ls.Release(ctx); err != nil {
			t.Fatal(err)
		}
		// Through the queue: the TTL counts from the call to AcquireWait,
		// so it exceeds the applied lease by the time spent in the call.
		ls, err = l.Acquire(ctx, "k")
		if err != nil {
			t.Fatal(err)
		}
		if ls.TTL() < c.applied || ls.TTL() > c.applied+time.Second {
			t.Errorf("asked %v: queued lease TTL %v, want %v plus the time in the call", c.asked, ls.TTL(), c.applied)
		}
		if info, err := b.Inspect(ctx, "k"); err != nil || info.TTL <= 0 || info.TTL > c.applied {
			t.Errorf("asked %v: Inspect TTL %v (%v), want in (0, %v]", c.asked, info.TTL, err, c.applied)
		}
		select {
		case <-ls.Done():
			t.Fatalf("asked %v: lost: %v", c.asked, ls.Err())
		case <-time.After(c.applied + c.applied/2):
		}
		if err := ls.Release(ctx); err != nil {
			t.Fatal(err)
		}
		if err := l.Close(); err != nil {
			t.Fatal(err)
		}
		if err := b.Close(); err != nil { // a Locker does not close its backend
			t.Fatal(err)
		}
		if _, err := cli.Get(ctx, "k"); err != nil {
			t.Fatalf("the client was closed with the backend: %v", err)
		}
	}
}
