package conformance

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/fencedlock/fencedlock"
	"github.com/fencedlock/fencedlock/driver"
	"github.com/fencedlock/fencedlock/fencing"
)

// This file holds the core properties, the ones every backend must pass
// with no timing assumption beyond its leases not running out: TryAcquire,
// MutualExclusion, FenceIncreasing, AwkwardKeys and Close.

func testTryAcquire(t *testing.T, e *env) {
	key := e.key("try")
	l1 := e.locker(t, nil)
	l2 := e.locker(t, nil)

	a, err := e.tryAcquire(t, l1, key)
	if err != nil {
		t.Fatalf("TryAcquire of a free key: %v", err)
	}
	if a.Fence() == 0 {
		t.Fatal("TryAcquire granted fence 0")
	}
	if a.TTL() != 0 && a.TTL() < e.hold {
		t.Errorf("lease TTL %v shorter than the requested %v", a.TTL(), e.hold)
	}
	for i, l := range []*fencedlock.Locker{l2, l1} {
		_, err := e.tryAcquire(t, l, key)
		if !errors.Is(err, fencedlock.ErrNotAcquired) {
			t.Fatalf("TryAcquire of a held key (locker %d): %v, want an error wrapping ErrNotAcquired", i+2, err)
		}
		var he *fencedlock.HeldError
		if errors.As(err, &he) {
			if he.Key != "" && he.Key != key {
				t.Errorf("HeldError.Key = %s, want %s", quote(he.Key), quote(key))
			}
			if limit := grantTTL(a.TTL(), e.hold) + e.cfg.ExpirySlack; he.RetryAfter > limit {
				t.Errorf("HeldError.RetryAfter = %v exceeds the holder's lease %v + slack", he.RetryAfter, limit)
			}
			if he.RetryAfter < 0 {
				t.Errorf("HeldError.RetryAfter = %v is negative", he.RetryAfter)
			}
		}
	}
	if a.Err() != nil {
		t.Fatalf("holder's lease ended by another's failed attempt: %v", a.Err())
	}
	if err := a.Release(e.ctx); err != nil {
		t.Fatalf("Release: %v", err)
	}
	b, err := e.tryAcquire(t, l2, key)
	if err != nil {
		t.Fatalf("TryAcquire after Release: %v", err)
	}
	if b.Fence() <= a.Fence() {
		t.Fatalf("fence after Release %v, want > %v", b.Fence(), a.Fence())
	}
	if err := b.Release(e.ctx); err != nil {
		t.Fatalf("Release: %v", err)
	}
}

func testMutualExclusion(t *testing.T, e *env) {
	const (
		backends   = 3
		goroutines = 3
		rounds     = 6
	)
	key := e.key("mutex")
	lockers := make([]*fencedlock.Locker, backends)
	for i := range lockers {
		lockers[i] = e.locker(t, nil)
	}
	x := &exclusionLog{inside: map[*fencedlock.Lease]struct{}{}}
	var wg sync.WaitGroup
	errs := make(chan error, backends*goroutines)
	start := time.Now()
	for i := range backends {
		for range goroutines {
			wg.Go(func() {
				for range rounds {
					ls, err := lockers[i].Acquire(e.ctx, key)
					if err != nil {
						errs <- fmt.Errorf("acquire: %w", err)
						return
					}
					x.enter(ls)
					time.Sleep(time.Millisecond) // a short critical section
					x.leave(ls)
					lost := ls.Err()
					if err := ls.Release(e.ctx); err != nil && lost == nil {
						errs <- fmt.Errorf("release: %w", err)
						return
					}
				}
			})
		}
	}
	wg.Wait()
	close(errs)
	t.Logf("%d critical sections by %d backends x %d goroutines in %v; at most %d valid lease(s) at once",
		x.entries, backends, goroutines, time.Since(start).Round(time.Millisecond), x.maxValid)
	x.report(t, errs, backends*goroutines*rounds)
}

// exclusionLog records the holders inside MutualExclusion's critical
// section, and the violations seen on entry: a second valid lease, a fence
// not above the previous holder's.
type exclusionLog struct {
	mu         sync.Mutex
	inside     map[*fencedlock.Lease]struct{}
	lastFence  fencing.Token
	entries    int
	maxValid   int
	violations []string
}

// valid reports whether a lease is still held by its holder's own account:
// not lost, and before its local deadline (which lies before the earliest
// moment the server could grant the key to anyone else).
func valid(ls *fencedlock.Lease, now time.Time) bool {
	return ls.Err() == nil && now.Before(ls.Deadline())
}

func (x *exclusionLog) enter(ls *fencedlock.Lease) {
	x.mu.Lock()
	defer x.mu.Unlock()
	now := time.Now()
	n := 1
	for other := range x.inside {
		if valid(other, now) {
			n++
			if len(x.violations) < 5 {
				x.violations = append(x.violations, fmt.Sprintf("mutual exclusion violated: fence %v granted while fence %v was still validly held", ls.Fence(), other.Fence()))
			}
		}
	}
	x.maxValid = max(x.maxValid, n)
	if n == 1 && ls.Fence() <= x.lastFence && len(x.violations) < 5 {
		x.violations = append(x.violations, fmt.Sprintf("fences out of order: a holder got fence %v after a holder with fence %v", ls.Fence(), x.lastFence))
	}
	x.lastFence = max(x.lastFence, ls.Fence())
	x.inside[ls] = struct{}{}
	x.entries++
}

func (x *exclusionLog) leave(ls *fencedlock.Lease) {
	x.mu.Lock()
	delete(x.inside, ls)
	x.mu.Unlock()
}

// report fails t with the first errors of the contenders, every violation,
// and a count of critical sections other than want.
func (x *exclusionLog) report(t *testing.T, errs <-chan error, want int) {
	t.Helper()
	n := 0
	for err := range errs {
		if n++; n <= 3 {
			t.Error(err)
		}
	}
	if n > 3 {
		t.Errorf("... and %d more errors", n-3)
	}
	for _, v := range x.violations {
		t.Error(v)
	}
	if x.entries != want && !t.Failed() {
		t.Errorf("%d critical sections, want %d", x.entries, want)
	}
}

func testFenceIncreasing(t *testing.T, e *env) {
	key := e.key("fence")
	bs := []driver.Backend{e.backend(t), e.backend(t), e.backend(t)}
	exp, hasExpirer := e.h.(Expirer)
	var last fencing.Token
	var history []string
	check := func(g driver.Grant, how string) {
		t.Helper()
		history = append(history, fmt.Sprintf("%v(%s)", g.Fence, how))
		if g.Fence <= last {
			t.Fatalf("fence %v after %v, want strictly greater; history: %s", g.Fence, last, strings.Join(history, " "))
		}
		last = g.Fence
	}
	ends := []string{"release", "release", "invalidate", "expire", "release", "invalidate", "release", "expire", "release"}
	waited := false
	for i, end := range ends {
		b := bs[i%len(bs)]
		ttl := e.hold
		if end == "expire" {
			ttl = e.ttl
		}
		g := e.grabTTL(t, b, key, ttl)
		check(g, fmt.Sprintf("backend %d", i%len(bs)+1))
		switch end {
		case "release":
			if err := b.Release(e.ctx, g); err != nil {
				t.Fatalf("Release: %v", err)
			}
		case "invalidate":
			e.invalidate(t, key)
			if e.held(t, key) {
				t.Fatalf("key held after harness Invalidate: the harness must leave it free")
			}
		case "expire":
			if hasExpirer {
				if err := exp.Expire(e.ctx, key); err != nil {
					t.Fatalf("harness Expire: %v", err)
				}
			}
			if hasExpirer || !waited {
				// Let the next backend take the key once it expired.
				nb := bs[(i+1)%len(bs)]
				bound := time.Now().Add(grantTTL(g.TTL, ttl) + e.cfg.ExpirySlack)
				g2, _, _ := e.acquireBy(t, nb, key, bound, "fence after expiry")
				check(g2, "after expiry")
				if err := nb.Release(e.ctx, g2); err != nil {
					t.Fatalf("Release: %v", err)
				}
				waited = true
			} else if err := b.Release(e.ctx, g); err != nil {
				t.Fatalf("Release: %v", err)
			}
		}
	}
	t.Logf("fences: %s", strings.Join(history, " "))
}

func testAwkwardKeys(t *testing.T, e *env) {
	keys := awkwardKeys(randHex(4))
	for _, k := range keys {
		if err := fencedlock.ValidateKey(k); err != nil {
			t.Fatalf("suite bug: key %s: %v", quote(k), err)
		}
	}
	if n := len(keys[len(keys)-1]); n != fencedlock.MaxKeyLen {
		t.Fatalf("suite bug: long key of %d bytes", n)
	}
	l1, l2 := e.locker(t, nil), e.locker(t, nil)
	insp, _ := e.backend(t).(driver.Inspector)
	phase := func(name string, fn func(i int, k string) error) { t.Helper(); keyPhase(t, name, keys, fn) }
	leases := make([]*fencedlock.Lease, len(keys))
	phase("all held at once", func(i int, k string) error {
		ls, err := e.tryAcquire(t, l1, k)
		if err != nil {
			return fmt.Errorf("TryAcquire(%s) while other awkward keys are held: %w (keys alias, or the key is mangled)", quote(k), err)
		}
		leases[i] = ls
		return nil
	})
	phase("held by another backend", func(i int, k string) error {
		if _, err := e.tryAcquire(t, l2, k); !errors.Is(err, fencedlock.ErrNotAcquired) {
			return fmt.Errorf("TryAcquire(%s) held by another backend: %v, want ErrNotAcquired", quote(k), err)
		}
		if insp != nil {
			info, err := insp.Inspect(e.ctx, k)
			if err != nil {
				return fmt.Errorf("Inspect(%s): %w", quote(k), err)
			}
			if !info.Held || info.Fence != leases[i].Fence() {
				return fmt.Errorf("Inspect(%s) = held %v fence %v, want held, fence %v", quote(k), info.Held, info.Fence, leases[i].Fence())
			}
		}
		return nil
	})
	phase("release", func(i int, k string) error {
		if err := leases[i].Release(e.ctx); err != nil {
			return fmt.Errorf("Release(%s): %w", quote(k), err)
		}
		return nil
	})
	phase("taken again", func(i int, k string) error {
		ls, err := e.tryAcquire(t, l2, k)
		if err != nil {
			return fmt.Errorf("TryAcquire(%s) after Release: %w", quote(k), err)
		}
		defer ls.Release(e.ctx)
		if ls.Fence() <= leases[i].Fence() {
			return fmt.Errorf("key %s: fence %v after %v", quote(k), ls.Fence(), leases[i].Fence())
		}
		return nil
	})
	for _, k := range []string{"", strings.Repeat("x", fencedlock.MaxKeyLen+1)} {
		if _, err := e.tryAcquire(t, l1, k); !errors.Is(err, fencedlock.ErrInvalid) {
			t.Fatalf("TryAcquire of a %d-byte key: %v, want ErrInvalid", len(k), err)
		}
	}
	t.Logf("%d awkward keys held at once, released, and taken again", len(keys))
}

// awkwardKeys returns AwkwardKeys' keys, each unique to the run r; the
// last two are MaxKeyLen bytes long.
func awkwardKeys(r string) []string {
	long := func(last byte) string {
		k := r + "-max-" + strings.Repeat("k", fencedlock.MaxKeyLen)
		return k[:fencedlock.MaxKeyLen-1] + string(last)
	}
	return []string{
		r + "/a/b/c", "/" + r, r + "/", r + "//", "./" + r + "/..",
		"ünïcødé-ключ-鍵-🔒-" + r,
		"{" + r + "}", "{" + r, r + "}", "}" + r, "}{" + r, r + "{}", "x{" + r + "}y", "{" + r + "}:1", "{" + r + "}:2",
		"with space " + r, " " + r, r + " ",
		r + "\t\n\r", "\x00" + r, r + "\x00", r + "\x00x",
		r + "\xff\xfe", r + "\xfe\xff", r + "\xc3", r + "\xc3\x28",
		r + "*", r + "?", r + "%2F", r + "'\";--", r + `\`, r + ":",
		"Case-" + r, "case-" + r,
		long('a'), long('b'),
	}
}

// keyPhase runs fn on every key concurrently (slow stores take a round
// trip or more per call), one goroutine per key, eight at a time, and
// fails t with the errors.
func keyPhase(t *testing.T, name string, keys []string, fn func(i int, k string) error) {
	t.Helper()
	var wg sync.WaitGroup
	errs := make([]error, len(keys))
	sem := make(chan struct{}, 8)
	for i, k := range keys {
		wg.Go(func() {
			sem <- struct{}{}
			defer func() { <-sem }()
			errs[i] = fn(i, k)
		})
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		t.Fatalf("%s: %v", name, err)
	}
}

func testClose(t *testing.T, e *env) {
	key := e.key("close")
	b := e.backend(t)
	other := e.backend(t)
	g := e.grab(t, b, key)
	if err := other.Release(e.ctx, g); err != nil {
		t.Fatalf("Release through another backend of the same store: %v", err)
	}
	if err := b.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	if err := b.Close(); err != nil && !errors.Is(err, fencedlock.ErrClosed) {
		t.Fatalf("second Close: %v, want nil or ErrClosed", err)
	}
	closed := func(what string, err error) {
		t.Helper()
		if !errors.Is(err, fencedlock.ErrClosed) {
			t.Fatalf("%s after Close: %v, want an error wrapping ErrClosed", what, err)
		}
	}
	_, err := b.Acquire(e.ctx, driver.AcquireRequest{Key: key, Owner: owner(), TTL: e.ttl})
	closed("Acquire", err)
	og := e.grab(t, other, key)
	_, err = b.Renew(e.ctx, og, e.hold)
	closed("Renew", err)
	closed("Release", b.Release(e.ctx, og))
	e.mustBeHeld(t, other, &og, "after calls on a closed backend")
	if n, ok := b.(driver.Notifier); ok {
		_, stop, err := n.Watch(e.ctx, key)
		if err == nil && stop != nil {
			stop()
		}
		closed("Watch", err)
	}
	if w, ok := b.(driver.WaitAcquirer); ok {
		ctx, cancel := context.WithTimeout(e.ctx, e.ttl+e.schedAllowance())
		_, err := w.AcquireWait(ctx, driver.AcquireRequest{Key: key, Owner: owner(), TTL: e.ttl})
		cancel()
		closed("AcquireWait", err)
	}
	if w, ok := b.(driver.TryFirstWaiter); ok {
		ctx, cancel := context.WithTimeout(e.ctx, e.ttl+e.schedAllowance())
		_, err := w.AcquireWaitHeld(ctx, driver.AcquireRequest{Key: key, Owner: owner(), TTL: e.ttl})
		cancel()
		closed("AcquireWaitHeld", err)
	}
	if in, ok := b.(driver.Inspector); ok {
		_, err := in.Inspect(e.ctx, key)
		closed("Inspect", err)
	}
	if err := other.Release(e.ctx, og); err != nil {
		t.Fatalf("Release by another backend after one was closed: %v", err)
	}
	e.lockerClose(t, key)
}

// lockerClose checks that a Locker's Close releases its leases and leaves
// its backend open: whoever created the backend closes it.
func (e *env) lockerClose(t *testing.T, key string) {
	t.Helper()
	lb := e.backend(t)
	l := mustLocker(t, lb, e.lockerOpts(nil))
	ls := e.mustTryAcquire(t, l, key)
	if err := l.Close(); err != nil {
		t.Fatalf("Locker.Close: %v", err)
	}
	if err := l.Close(); err != nil {
		t.Fatalf("second Locker.Close: %v", err)
	}
	if !errors.Is(context.Cause(ls.Context()), fencedlock.ErrReleased) {
		t.Fatalf("lease cause after Locker.Close: %v, want ErrReleased", context.Cause(ls.Context()))
	}
	if e.held(t, key) {
		t.Fatal("key held after the Locker holding it was closed")
	}
	if _, err := e.tryAcquire(t, l, key); !errors.Is(err, fencedlock.ErrClosed) {
		t.Fatalf("TryAcquire on a closed Locker: %v, want ErrClosed", err)
	}
	l2 := mustLocker(t, lb, e.lockerOpts(nil))
	defer l2.Close()
	ls2, err := e.tryAcquire(t, l2, key)
	if err != nil {
		t.Fatalf("TryAcquire on the backend of a closed Locker: %v", err)
	}
	if err := ls2.Release(e.ctx); err != nil {
		t.Fatalf("Release on the backend of a closed Locker: %v", err)
	}
}
