package conformance

import (
	"context"
	"testing"
	"time"

	"github.com/fencedlock/fencedlock"
	"github.com/fencedlock/fencedlock/fencing"
	"github.com/fencedlock/fencedlock/internal/semaphoretest"
	"github.com/fencedlock/fencedlock/semaphore"
)

// This file holds the properties of package semaphore on the backend: a
// semaphore needs no capability of its own (a permit is the lease of one
// slot's lock), so these check that the Backend's locks, used as slots,
// keep a semaphore's guarantees: at most limit valid permits, per-slot
// fences increasing, a crashed permit back at its TTL.

// semaphoreProperties are appended to the suite (see properties.go).
var semaphoreProperties = []property{
	{"SemaphoreLimit", "Callers of limit 2 and of limit 4 on three backends contending for one semaphore (package semaphore) never hold more than 4 valid permits, nor more than 2 of slots 0..1, nor two of one slot, nor a slot at or above their limit, and each slot's fences increase.", testSemaphoreLimit},
	{"SemaphoreSlotFences", "The permits of one slot, taken in turn from several backends and ended by release or out-of-band invalidation, carry strictly increasing fences.", testSemaphoreSlotFences},
	{"SemaphoreCrashedPermit", "The permits of a holder that stops renewing (a crash) come back at their TTL: another backend's Acquire gets one, with a greater fence, within TTL + ExpirySlack and not before the TTL.", testSemaphoreCrashedPermit},
}

func init() { properties = append(properties, semaphoreProperties...) }

// semaphores returns the scenarios' Setup on the backend under test: each
// Semaphore on a backend of its own, with the suite's Locker options.
func (e *env) semaphores() semaphoretest.Setup {
	return semaphoretest.Setup{
		New: func(t *testing.T, opts fencedlock.Options) *semaphore.Semaphore {
			t.Helper()
			o := e.lockerOpts(nil)
			if opts.TTL != 0 {
				o.TTL = opts.TTL
			}
			o.ManualRenew = opts.ManualRenew
			s, err := semaphore.New(e.backend(t), o)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = s.Close() })
			return s
		},
		TTL: e.ttl,
	}
}

func testSemaphoreLimit(t *testing.T, e *env) {
	semaphoretest.LimitsDisagree(t, e.semaphores(), 2, 4, 8, 5)
}

func testSemaphoreSlotFences(t *testing.T, e *env) {
	s := e.semaphores()
	sems := []*semaphore.Semaphore{s.New(t, fencedlock.Options{}), s.New(t, fencedlock.Options{}), s.New(t, fencedlock.Options{})}
	name := e.key("semfences")
	var last fencing.Token
	for i := range 8 {
		p, err := sems[i%len(sems)].Acquire(e.ctx, name, 1)
		if err != nil {
			t.Fatalf("permit %d: Acquire(%s, 1): %v", i, quote(name), err)
		}
		if p.Slot() != 0 || p.Fence() <= last {
			t.Fatalf("permit %d: slot %d, fence %v after fence %v; want slot 0 and a greater fence", i, p.Slot(), p.Fence(), last)
		}
		last = p.Fence()
		if i%2 == 1 {
			// Out of band: the slot is free at once, and the permit's
			// Release finds it gone.
			e.invalidate(t, semaphore.SlotKey(name, 0))
			wantNotHeld(t, "Release of an invalidated permit", p.Release(e.ctx))
			continue
		}
		if err := p.Release(e.ctx); err != nil {
			t.Fatalf("permit %d: Release: %v", i, err)
		}
	}
}

func testSemaphoreCrashedPermit(t *testing.T, e *env) {
	s := e.semaphores()
	crashed := s.New(t, fencedlock.Options{TTL: e.ttl, ManualRenew: true})
	waiter := s.New(t, fencedlock.Options{})
	name := e.key("semcrash")
	sent := time.Now()
	var fences [2]fencing.Token
	for range 2 {
		p, err := crashed.Acquire(e.ctx, name, 2)
		if err != nil {
			t.Fatalf("Acquire(%s, 2) of a free permit: %v", quote(name), err)
		}
		fences[p.Slot()] = p.Fence()
	}
	got := time.Now()
	ctx, cancel := context.WithCancel(e.ctx)
	defer cancel()
	type result struct {
		p   *semaphore.Permit
		err error
		at  time.Time
	}
	res := make(chan result, 1)
	done := make(chan struct{})
	go func() {
		p, err := waiter.Acquire(ctx, name, 2)
		res <- result{p, err, time.Now()}
		close(done)
	}()
	bound := time.Until(got.Add(e.ttl + e.cfg.ExpirySlack + e.schedAllowance()))
	if !e.waitDone(done, bound) {
		cancel()
		<-done
		t.Fatalf("no permit granted %v after the crashed holder took both (TTL %v, ExpirySlack %v): a crashed permit was never returned",
			time.Since(got).Round(time.Millisecond), e.ttl, e.cfg.ExpirySlack)
	}
	r := <-res
	if r.err != nil {
		t.Fatalf("Acquire after the crash: %v", r.err)
	}
	defer r.p.Release(e.ctx)
	if earliest := sent.Add(e.ttl - e.ttl/100 - time.Millisecond); r.at.Before(earliest) {
		t.Fatalf("a permit was granted %v after the crashed holder's Acquire was sent, before its TTL of %v: limit+1 permits",
			r.at.Sub(sent).Round(time.Millisecond), e.ttl)
	}
	if r.p.Fence() <= fences[r.p.Slot()] {
		t.Fatalf("slot %d's permit after the crash has fence %v, not above the crashed one's %v", r.p.Slot(), r.p.Fence(), fences[r.p.Slot()])
	}
	t.Logf("a crashed permit came back %v after it was taken (TTL %v)", r.at.Sub(sent).Round(time.Millisecond), e.ttl)
}
