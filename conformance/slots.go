package conformance

import (
	"errors"
	"testing"

	"github.com/fencedlock/fencedlock"
	"github.com/fencedlock/fencedlock/driver"
	"github.com/fencedlock/fencedlock/semaphore"
)

// This file holds the property of the optional [driver.SlotAcquirer]: one
// step that takes the first free of a semaphore's slot keys, as Acquire
// would take that key.

func init() {
	properties = append(properties, property{"SemaphoreSlotAcquire", "If the backend is a SlotAcquirer: AcquireSlot takes the first free key in the order given and never a held one, gives an owner that holds a key that key again (never a second), reports all held with ErrNotAcquired, grants fences above every earlier fence of the key (Acquire's and its own), and a clean-up Release of Key and Owner frees the key it took.", testSlotAcquire})
}

// slotAttempt is one AcquireSlot of keys by owner on sa, failing t on an
// error.
func (e *env) slotAttempt(t *testing.T, sa driver.SlotAcquirer, keys []string, owner string) (int, driver.Grant) {
	t.Helper()
	i, g, err := sa.AcquireSlot(e.ctx, driver.AcquireRequest{Owner: owner, TTL: e.hold}, keys)
	if err != nil {
		t.Fatalf("AcquireSlot(%d keys): %v", len(keys), err)
	}
	if i < 0 || i >= len(keys) {
		t.Fatalf("AcquireSlot(%d keys) took index %d", len(keys), i)
	}
	e.checkGrant(t, g, keys[i], e.hold)
	return i, g
}

func testSlotAcquire(t *testing.T, e *env) {
	if !implements[driver.SlotAcquirer](t, e) {
		return
	}
	b, other := e.backend(t), e.backend(t)
	sa := b.(driver.SlotAcquirer)
	name := e.key("slots")
	keys := []string{semaphore.SlotKey(name, 0), semaphore.SlotKey(name, 1), semaphore.SlotKey(name, 2)}
	if !sa.SlotsInOneStep(keys) {
		t.Logf("%T cannot take these keys in one step (SlotsInOneStep): nothing to check", b)
		return
	}
	e.grab(t, other, keys[0])           // slot 0 held by another backend's owner
	before := e.grab(t, other, keys[1]) // slot 1's fence counter moved by Acquire, then freed
	e.mustRelease(t, other, before)

	ownerB := owner()
	i, gb := e.slotAttempt(t, sa, keys, ownerB)
	if i != 1 || gb.Fence <= before.Fence {
		t.Fatalf("AcquireSlot with slot 0 held, 1 and 2 free took slot %d with fence %v; want slot 1 (the first free) with a fence above Acquire's %v", i, gb.Fence, before.Fence)
	}
	if again, g := e.slotAttempt(t, sa, keys, ownerB); again != 1 || g.Fence != gb.Fence {
		t.Fatalf("AcquireSlot again by slot 1's owner took slot %d with fence %v; want slot 1 again with its fence %v, never a second slot", again, g.Fence, gb.Fence)
	}
	if e.held(t, keys[2]) {
		t.Fatalf("slot 2 is held after two AcquireSlot of one owner: an owner took a second slot")
	}
	if i, g := e.slotAttempt(t, sa, keys, owner()); i != 2 {
		t.Fatalf("AcquireSlot with slots 0 and 1 held took slot %d (fence %v); want slot 2", i, g.Fence)
	}
	_, _, err := sa.AcquireSlot(e.ctx, driver.AcquireRequest{Owner: owner(), TTL: e.hold}, keys)
	var he *driver.HeldError
	switch {
	case !errors.Is(err, fencedlock.ErrNotAcquired):
		t.Fatalf("AcquireSlot with every slot held = %v; want an error wrapping ErrNotAcquired", err)
	case errors.As(err, &he) && (he.RetryAfter < 0 || he.RetryAfter > e.hold):
		t.Fatalf("AcquireSlot with every slot held: RetryAfter %v outside [0, %v]", he.RetryAfter, e.hold)
	}

	// Released, slot 1 is the first free again, with a greater fence; the
	// clean-up Release of Key and Owner (after an outcome unknown) frees it.
	e.mustRelease(t, b, gb)
	ownerE := owner()
	i, ge := e.slotAttempt(t, sa, keys, ownerE)
	if i != 1 || ge.Fence <= gb.Fence {
		t.Fatalf("AcquireSlot after slot 1's release took slot %d with fence %v; want slot 1 with a fence above %v", i, ge.Fence, gb.Fence)
	}
	if err := b.Release(e.ctx, driver.Grant{Key: keys[1], Owner: ownerE}); err != nil {
		t.Fatalf("clean-up Release(Key, Owner) of the slot AcquireSlot took: %v", err)
	}
	after := e.grab(t, other, keys[1])
	if after.Fence <= ge.Fence {
		t.Fatalf("Acquire of slot 1 after the clean-up has fence %v, not above AcquireSlot's %v", after.Fence, ge.Fence)
	}
}
