package goredis

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/fencedlock/fencedlock/driver"
	"github.com/fencedlock/fencedlock/fencing"
	"github.com/fencedlock/fencedlock/internal/redistest"
)

// TestForceReleaseBarrier: on a real redis-server, ForceRelease breaks the
// holder and consumes a fence; until FenceBarrier writes it, the guard
// still accepts the old holder (equal fence, same holder); after, it
// rejects it, and the next holder's fence is above the barrier.
func TestForceReleaseBarrier(t *testing.T) {
	srv := redistest.Start(t)
	b, _ := newBackend(t, srv, Options{})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	req := driver.AcquireRequest{Key: "job", Owner: "owner-a-0123456789", TTL: 10 * time.Second}
	old, err := b.Acquire(ctx, req)
	if err != nil {
		t.Fatal(err)
	}
	holder := driver.HolderID(old.Owner)
	if err := b.FencedSet(ctx, "job:res", "v1", old.Fence, holder); err != nil {
		t.Fatal(err)
	}
	r, err := b.ForceRelease(ctx, "job")
	if err != nil || !r.Held || r.Holder != holder || r.Before != old.Fence || r.After != old.Fence+1 {
		t.Fatalf("ForceRelease = %+v, %v; want held by %s, %v -> %v", r, err, holder, old.Fence, old.Fence+1)
	}
	if _, err := b.Renew(ctx, old, 10*time.Second); !isNotHeld(err) {
		t.Fatalf("old holder's Renew: %v, want ErrNotHeld", err)
	}
	if err := b.FencedSet(ctx, "job:res", "v2", old.Fence, holder); err != nil {
		t.Fatalf("old holder's write before the barrier: %v, want accepted", err)
	}
	if err := b.FenceBarrier(ctx, "job:res", r.After, "operator0123456"); err != nil {
		t.Fatal(err)
	}
	if err := b.FencedSet(ctx, "job:res", "v3", old.Fence, holder); !errors.Is(err, fencing.ErrStale) {
		t.Fatalf("old holder's write after the barrier: %v, want ErrStale", err)
	}
	if err := b.FenceBarrier(ctx, "job:res", r.After, "someone-else"); !errors.Is(err, fencing.ErrStale) {
		t.Errorf("barrier at the record from another holder: %v, want ErrStale", err)
	}
	next, err := b.Acquire(ctx, driver.AcquireRequest{Key: "job", Owner: "owner-b-0123456789", TTL: 10 * time.Second})
	if err != nil || next.Fence <= r.After {
		t.Fatalf("next grant %v, %v; want a fence above %v", next.Fence, err, r.After)
	}
	if err := b.FencedSet(ctx, "job:res", "v4", next.Fence, driver.HolderID(next.Owner)); err != nil {
		t.Errorf("next holder's write: %v", err)
	}
}
