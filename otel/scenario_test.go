package otelfencedlock_test

import (
	"context"
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/fencedlock/fencedlock"
	"github.com/fencedlock/fencedlock/driver"
	"github.com/fencedlock/fencedlock/internal/locktest"
	"github.com/fencedlock/fencedlock/locktrace"
	otelfencedlock "github.com/fencedlock/fencedlock/otel"
)

var (
	outcomeAcquired = otelfencedlock.AttrOutcome.String("acquired")
	causeReleased   = otelfencedlock.AttrEndCause.String("released")
	causeNotHeld    = otelfencedlock.AttrEndCause.String("not_held")
	releaseOK       = otelfencedlock.AttrReleaseResult.String("released")
	releaseNotHeld  = otelfencedlock.AttrReleaseResult.String("not_held")
)

func locker(t *testing.T, b driver.Backend, tr *locktrace.Trace, opts fencedlock.Options) *fencedlock.Locker {
	t.Helper()
	opts.Trace = tr
	l, err := fencedlock.New(b, opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	return l
}

// handOff: A holds the key; B's blocking Acquire waits behind it and gets
// the key when A releases (announced by a notification, or by the server's
// queue). The metrics count two acquires, one hand-off, B's wait of at
// least the time A held the key after B started waiting, two releases
// and no loss; B's acquire span carries its waits, fence and holder.
func handOff(t *testing.T, st store) {
	ctx := context.Background()
	tm := newTelemetry(t)
	sig := newSignal(tm.obs)
	// A poll (every MaxRetryDelay at the latest) must not beat the
	// notification: the hand-off is the notification's.
	la := locker(t, st.backend(t), tm.obs.Trace(), fencedlock.Options{TTL: st.ttl})
	lb := locker(t, st.backend(t), sig.tr, fencedlock.Options{TTL: st.ttl, MaxRetryDelay: time.Minute})
	backend := otelfencedlock.AttrBackend.String(st.name)

	a, err := la.Acquire(ctx, "orders")
	if err != nil {
		t.Fatal(err)
	}
	got := locktest.AcquireAsync(ctx, t, lb, "orders")
	sig.await(t, st.waitKind, st.waitsBefore)
	waiting := time.Now()
	time.Sleep(50 * time.Millisecond) // A's work, while B waits
	releasing := time.Now()
	if err := a.Release(ctx); err != nil {
		t.Fatal(err)
	}
	minWait := releasing.Sub(waiting)
	b := <-got
	if b == nil {
		t.FailNow()
	}
	if b.Fence() <= a.Fence() {
		t.Fatalf("B's fence %d not above A's %d", b.Fence(), a.Fence())
	}

	ms := tm.metrics(t)
	if n := sum(t, ms, "fencedlock.lease.active", backend); n != 1 {
		t.Fatalf("lease.active %d while B holds, want 1", n)
	}
	if err := b.Release(ctx); err != nil {
		t.Fatal(err)
	}
	ms = tm.metrics(t)
	if n, _, _ := hist(t, ms, "fencedlock.acquire.duration", backend, outcomeAcquired, otelfencedlock.AttrBlocking.Bool(true)); n != 2 {
		t.Fatalf("acquire.duration count %d, want 2", n)
	}
	n, total, most := hist(t, ms, "fencedlock.acquire.wait.duration", backend, outcomeAcquired)
	if n != 2 || most < minWait.Seconds() || total < most {
		t.Fatalf("acquire.wait.duration count %d sum %.3fs max %.3fs, want 2 waits, the longest at least %v", n, total, most, minWait)
	}
	if n := sum(t, ms, "fencedlock.acquire.handoffs", backend); n != 1 {
		t.Fatalf("acquire.handoffs %d, want 1", n)
	}
	if n := sum(t, ms, "fencedlock.lease.active", backend); n != 0 {
		t.Fatalf("lease.active %d after both releases, want 0", n)
	}
	if n, _, most := hist(t, ms, "fencedlock.lease.held.duration", backend, causeReleased); n != 2 || most < minWait.Seconds() {
		t.Fatalf("lease.held.duration count %d max %.3fs, want 2 leases, A's held at least %v", n, most, minWait)
	}
	if n := sum(t, ms, "fencedlock.lease.lost", backend); n != 0 {
		t.Fatalf("lease.lost %d, want 0", n)
	}
	if n, _, _ := hist(t, ms, "fencedlock.release.duration", backend, releaseOK); n != 2 {
		t.Fatalf("release.duration count %d (released), want 2", n)
	}
	tm.noKeyAttribute(t, ms)

	// B's acquire span: its waits, the hand-off, its fence and holder.
	sb := tm.spanOf(t, "fencedlock.acquire", b.Fence())
	if v, _ := attr(sb, otelfencedlock.AttrHolder); v.AsString() != b.Holder() {
		t.Fatalf("B's acquire span holder %q, want %q", v.AsString(), b.Holder())
	}
	if v, ok := attr(sb, otelfencedlock.AttrHandOff); !ok || !v.AsBool() {
		t.Fatalf("B's acquire span is not a hand-off: %s", tm.describe())
	}
	if v, _ := attr(sb, otelfencedlock.AttrWaited); v.AsFloat64() < minWait.Seconds() {
		t.Fatalf("B's acquire span waited %.3fs, want at least %v", v.AsFloat64(), minWait)
	}
	kinds := waitKinds(sb)
	// A queued waiter's first attempt may find the key held before the
	// wait queues it (a TryFirstWaiter): only held waits come before.
	first := slices.Index(kinds, string(st.waitKind))
	if first < 0 || len(kinds)-first < st.waitsBefore ||
		slices.ContainsFunc(kinds[:first], func(k string) bool { return k != string(locktrace.WaitHeld) }) {
		t.Fatalf("B's waits %v, want %s (after held attempts only)", kinds, st.waitKind)
	}
	if st.waitKind == locktrace.WaitHeld && kinds[len(kinds)-1] != string(locktrace.WaitNotified) {
		t.Fatalf("B's waits %v, want notified last", kinds)
	}
	if sa := tm.spanOf(t, "fencedlock.acquire", a.Fence()); len(waitKinds(sa)) != 0 {
		t.Fatalf("A waited: %v", waitKinds(sa))
	}
	for _, ls := range []*fencedlock.Lease{a, b} {
		s := tm.spanOf(t, "fencedlock.release", ls.Fence())
		if v, _ := attr(s, otelfencedlock.AttrReleaseResult); v.AsString() != "released" {
			t.Fatalf("release span outcome %q", v.AsString())
		}
		if v, _ := attr(s, otelfencedlock.AttrHolder); v.AsString() != ls.Holder() {
			t.Fatalf("release span holder %q, want %q", v.AsString(), ls.Holder())
		}
	}
}

// lostByDel: the lock is deleted behind its holder's back; the lease is
// lost as not held, which the metrics count once, with the failed renewal
// and the release that found the key gone.
func lostByDel(t *testing.T, st store) {
	ctx := context.Background()
	tm := newTelemetry(t, otelfencedlock.WithKeyAttribute())
	l := locker(t, st.backend(t), tm.obs.Trace(), fencedlock.Options{TTL: st.ttl})
	backend := otelfencedlock.AttrBackend.String(st.name)
	key := otelfencedlock.AttrKey.String("orders")

	ls, err := l.Acquire(ctx, "orders")
	if err != nil {
		t.Fatal(err)
	}
	if n := sum(t, tm.metrics(t), "fencedlock.lease.active", backend, key); n != 1 {
		t.Fatalf("lease.active %d, want 1", n)
	}
	st.del(t, "orders")
	select {
	case <-ls.Done():
	case <-time.After(2 * st.ttl):
		t.Fatalf("the lease was not lost within %v of the DEL", 2*st.ttl)
	}
	if err := ls.Err(); !errors.Is(err, fencedlock.ErrLeaseLost) || !errors.Is(err, fencedlock.ErrNotHeld) {
		t.Fatalf("lease error %v, want lost as not held", err)
	}
	if err := ls.Release(ctx); !errors.Is(err, fencedlock.ErrNotHeld) {
		t.Fatalf("release: %v", err)
	}

	ms := tm.metrics(t)
	if n := sum(t, ms, "fencedlock.lease.lost", backend, key, causeNotHeld); n != 1 {
		t.Fatalf("lease.lost{not_held} %d, want 1", n)
	}
	if n := sum(t, ms, "fencedlock.lease.lost", backend); n != 1 {
		t.Fatalf("lease.lost %d, want 1", n)
	}
	if n := sum(t, ms, "fencedlock.lease.active", backend, key); n != 0 {
		t.Fatalf("lease.active %d, want 0", n)
	}
	if n, _, _ := hist(t, ms, "fencedlock.lease.held.duration", backend, key, causeNotHeld); n != 1 {
		t.Fatalf("lease.held.duration{not_held} count %d, want 1", n)
	}
	// A failed renewal is counted once, by renew.duration with error.type:
	// no second instrument repeats it.
	if n, _, _ := hist(t, ms, "fencedlock.renew.duration", backend, key, otelfencedlock.AttrErrorType.String("not_held")); n != 1 {
		t.Fatalf("renew.duration{error.type=not_held} count %d, want 1", n)
	}
	for _, gone := range []string{"fencedlock.renew.failures", "fencedlock.leases.active"} {
		if _, ok := ms[gone]; ok {
			t.Fatalf("metric %s is still exported (see the names in doc.go)", gone)
		}
	}
	if n, _, _ := hist(t, ms, "fencedlock.release.duration", backend, key, releaseNotHeld); n != 1 {
		t.Fatalf("release.duration{not_held} count %d, want 1", n)
	}
	s := tm.spanOf(t, "fencedlock.release", ls.Fence())
	if v, _ := attr(s, otelfencedlock.AttrReleaseResult); v.AsString() != "not_held" {
		t.Fatalf("release span outcome %q, want not_held", v.AsString())
	}
	if v, _ := attr(s, otelfencedlock.AttrKey); v.AsString() != "orders" {
		t.Fatalf("release span key %q with WithKeyAttribute", v.AsString())
	}
}
