package semaphore_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/fencedlock/fencedlock"
	"github.com/fencedlock/fencedlock/backend/memory"
	"github.com/fencedlock/fencedlock/driver"
	"github.com/fencedlock/fencedlock/semaphore"
)

// lostReply is a memory Backend whose AcquireSlot takes a slot on the
// store and then reports a transient error: the reply was lost after the
// server applied the request.
type lostReply struct{ *memory.Backend }

var errLost = errors.New("reply lost")

func (b lostReply) AcquireSlot(ctx context.Context, req driver.AcquireRequest, keys []string) (int, driver.Grant, error) {
	if _, _, err := b.Backend.AcquireSlot(ctx, req, keys); err != nil {
		return 0, driver.Grant{}, err
	}
	return 0, driver.Grant{}, errLost
}

// TestLostSlotReplyCleanedUp: after a one-step attempt of unknown outcome
// the Locker's clean-up Release of the permit's key and owner frees the
// slot the owner took, whichever it was: TryAcquire reports the failure
// and every slot is free again (slot 0 stays held by another holder).
func TestLostSlotReplyCleanedUp(t *testing.T) {
	st := memory.NewStore()
	other, err := semaphore.New(st.Backend(), fencedlock.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close()
	held, err := other.TryAcquire(t.Context(), "lost", 3)
	if err != nil || held.Slot() != 0 {
		t.Fatalf("first permit = %v, %v; want slot 0", held, err)
	}
	s, err := semaphore.New(lostReply{st.Backend()}, fencedlock.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if p, err := s.TryAcquire(t.Context(), "lost", 3); p != nil || !errors.Is(err, errLost) {
		t.Fatalf("TryAcquire with the reply lost = %v, %v; want the transient error", p, err)
	}
	b := st.Backend()
	for slot := 1; slot < 3; slot++ {
		if info, err := b.Inspect(t.Context(), semaphore.SlotKey("lost", slot)); err != nil || info.Held {
			t.Fatalf("slot %d after the clean-up: held %v, %v; want free", slot, info.Held, err)
		}
	}
	if info, err := b.Inspect(t.Context(), semaphore.SlotKey("lost", 0)); err != nil || !info.Held || info.Fence != held.Fence() {
		t.Fatalf("slot 0 after another owner's clean-up: %+v, %v; want still held by its permit", info, err)
	}
}

// slowRelease is lostReply whose Release takes rtt, as over a network
// with that round trip (ended early by its context).
type slowRelease struct {
	lostReply
	rtt time.Duration
}

func (b slowRelease) Release(ctx context.Context, g driver.Grant) error {
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-time.After(b.rtt):
	}
	return b.lostReply.Release(ctx, g)
}

// TestSlowCleanUpFreesHighSlot: the clean-up after a one-step attempt of
// unknown outcome must free the slot the owner took, the last of 64,
// within the Locker's ReleaseTimeout even when each Release takes a round
// trip: with 63 slots held, 64 releases one after another (10ms each, 640ms)
// outlast a ReleaseTimeout of 400ms and leave slot 63 to its TTL, held by
// an owner nobody has.
func TestSlowCleanUpFreesHighSlot(t *testing.T) {
	const name, limit = "slowclean", 64
	st := memory.NewStore()
	other, err := semaphore.New(st.Backend(), fencedlock.Options{TTL: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close()
	for range limit - 1 {
		if _, err := other.TryAcquire(t.Context(), name, limit); err != nil {
			t.Fatal(err)
		}
	}
	s, err := semaphore.New(slowRelease{lostReply{st.Backend()}, 10 * time.Millisecond}, fencedlock.Options{TTL: time.Minute, ReleaseTimeout: 400 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if p, err := s.TryAcquire(t.Context(), name, limit); p != nil || !errors.Is(err, errLost) {
		t.Fatalf("TryAcquire with the reply lost = %v, %v; want the transient error", p, err)
	}
	last := semaphore.SlotKey(name, limit-1)
	if info, err := st.Backend().Inspect(t.Context(), last); err != nil || info.Held {
		t.Fatalf("slot %d after the clean-up: held %v (fence %v), %v; want free: the clean-up ran out of its ReleaseTimeout before it reached the slot the owner took", limit-1, info.Held, info.Fence, err)
	}
}
