package semaphoretest

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/fencedlock/fencedlock"
	"github.com/fencedlock/fencedlock/semaphore"
)

// PausedHolderWriteRefused: of a semaphore of limit 2, a holder paused past
// its TTL (no renewals) loses its permit; a waiter gets that slot no
// earlier than the TTL after the paused holder's Acquire began, with a
// greater fence, and writes the slot's partition of the resource; the
// paused holder's write on resuming is refused, and its Release deletes
// nothing.
func PausedHolderWriteRefused(t *testing.T, s Setup) {
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	paused := s.New(t, fencedlock.Options{TTL: s.TTL, ManualRenew: true})
	other, next := s.New(t, fencedlock.Options{}), s.New(t, retrying)
	n := name("paused")
	start := time.Now() // before a's permit began: nobody gets its slot before start+TTL
	a := acquire(t, ctx, paused, n, 2)
	b := acquire(t, ctx, other, n, 2) // the other slot, renewed: stays held
	defer b.Release(ctx)
	c := acquire(t, ctx, next, n, 2) // blocks until a's permit expired on the store
	defer c.Release(ctx)
	if waited := time.Since(start); waited < s.TTL {
		t.Fatalf("c got a permit %v after a's Acquire began, within a's TTL of %v: 3 permits of limit 2", waited, s.TTL)
	}
	if c.Slot() != a.Slot() || c.Fence() <= a.Fence() {
		t.Fatalf("c got slot %d fence %v; want a's slot %d with a fence above %v", c.Slot(), c.Fence(), a.Slot(), a.Fence())
	}
	if err := a.Err(); !errors.Is(err, fencedlock.ErrLeaseLost) {
		t.Fatalf("paused holder's Err = %v, want ErrLeaseLost", err)
	}
	key := fmt.Sprintf("%s/data/slot%d", n, a.Slot()) // the resource partition of the slot
	if err := s.Store.Set(ctx, key, "by c", c.Fence(), c.Holder()); err != nil {
		t.Fatalf("c's write: %v", err)
	}
	wantStale(t, s.Store.Set(ctx, key, "late a", a.Fence(), a.Holder()), c.Fence(), "paused holder a's late write")
	if rec, err := s.Store.Get(ctx, key); err != nil || rec.Value != "by c" {
		t.Fatalf("stored %+v, %v after the refused write, want %q", rec, err, "by c")
	}
	if err := a.Release(ctx); !errors.Is(err, fencedlock.ErrNotHeld) {
		t.Fatalf("paused holder's Release = %v, want ErrNotHeld", err)
	}
	if err := c.Err(); err != nil {
		t.Fatalf("c's permit after a's late Release: %v", err)
	}
}

// CrashedPermitReturns: a holder that takes every permit of limit 2 and
// crashes (never renews nor releases) gives them back at their TTL: a
// waiter gets one no earlier than the TTL after the crash's Acquire began.
func CrashedPermitReturns(t *testing.T, s Setup) {
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	crashed, next := s.New(t, fencedlock.Options{TTL: s.TTL, ManualRenew: true}), s.New(t, retrying)
	n := name("crashed")
	start := time.Now()
	acquire(t, ctx, crashed, n, 2)
	acquire(t, ctx, crashed, n, 2)
	p := acquire(t, ctx, next, n, 2)
	defer p.Release(ctx)
	if waited := time.Since(start); waited < s.TTL {
		t.Fatalf("a permit was granted %v after the crashed holder's, within its TTL of %v", waited, s.TTL)
	}
	t.Logf("a crashed permit came back %v after it was taken (TTL %v)", time.Since(start), s.TTL)
}

// CancelledAcquireLeavesNothing: an Acquire waiting on a full semaphore
// whose context ends returns ErrNotAcquired and the context's error, and
// takes nothing: once the holders release, every permit is free for
// others.
func CancelledAcquireLeavesNothing(t *testing.T, s Setup) {
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	holder, waiter, after := s.New(t, fencedlock.Options{}), s.New(t, retrying), s.New(t, fencedlock.Options{})
	n := name("cancel")
	a, b := acquire(t, ctx, holder, n, 2), acquire(t, ctx, holder, n, 2)
	for _, d := range []time.Duration{0, 50 * time.Millisecond} {
		wctx, wcancel := context.WithTimeout(ctx, d)
		p, err := waiter.Acquire(wctx, n, 2)
		wcancel()
		if p != nil || !errors.Is(err, fencedlock.ErrNotAcquired) || !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("Acquire of a full semaphore cancelled after %v = %v, %v; want ErrNotAcquired and DeadlineExceeded", d, p, err)
		}
	}
	if p, err := after.TryAcquire(ctx, n, 2); !errors.Is(err, fencedlock.ErrNotAcquired) {
		t.Fatalf("TryAcquire of a full semaphore = %v, %v; want ErrNotAcquired", p, err)
	}
	if err := errors.Join(a.Release(ctx), b.Release(ctx)); err != nil {
		t.Fatal(err)
	}
	for range 2 { // both permits free: the cancelled waiter holds none
		if _, err := after.TryAcquire(ctx, n, 2); err != nil {
			t.Fatalf("TryAcquire after the holders released: %v (the cancelled Acquire left a permit taken)", err)
		}
	}
}

// LowerLimitWaitsForLowSlots: with every permit of limit 4 held, a caller
// of limit 2 gets none; a release of a slot at or above 2 does not let it
// in (the bound is its own limit), a release of a slot below 2 does, and
// it gets that slot.
func LowerLimitWaitsForLowSlots(t *testing.T, s Setup) {
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	big, small := s.New(t, fencedlock.Options{}), s.New(t, retrying)
	n := name("lower")
	held := map[int]*semaphore.Permit{}
	for range 4 {
		p := acquire(t, ctx, big, n, 4)
		held[p.Slot()] = p
	}
	if p, err := small.TryAcquire(ctx, n, 2); !errors.Is(err, fencedlock.ErrNotAcquired) {
		t.Fatalf("limit 2 TryAcquire with slots 0..3 held = %v, %v; want ErrNotAcquired", p, err)
	}
	if err := held[3].Release(ctx); err != nil {
		t.Fatal(err)
	}
	if p, err := small.TryAcquire(ctx, n, 2); !errors.Is(err, fencedlock.ErrNotAcquired) {
		t.Fatalf("limit 2 TryAcquire with slots 0..2 held = %v, %v; want ErrNotAcquired: slot 3 is not below its limit", p, err)
	}
	if err := held[1].Release(ctx); err != nil {
		t.Fatal(err)
	}
	p := acquire(t, ctx, small, n, 2)
	defer p.Release(ctx)
	if p.Slot() != 1 || p.Fence() <= held[1].Fence() {
		t.Fatalf("limit 2 caller got slot %d fence %v; want slot 1 above fence %v", p.Slot(), p.Fence(), held[1].Fence())
	}
}
