package redis

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/fencedlock/fencedlock/driver"
	"github.com/fencedlock/fencedlock/internal/redistest"
)

// TestFairNoOvertakeAfterExpiry: a holder's lease that ends without a
// release (it expired: simulated by deleting the lock key, as the server
// does) leaves the lock free with a waiter queued. Until that waiter's
// next wait.lua takes it, a FairBackend's plain attempt (TryAcquire, and
// the attempt the Locker makes before it queues) must not take the lock
// ahead of it: it reports the key held, so the newcomer queues behind.
// Before acquire.lua looked at the queue, the newcomer took the lock
// (fence 2) and the queued waiter had to wait for it.
func TestFairNoOvertakeAfterExpiry(t *testing.T) {
	srv := redistest.Start(t)
	b, c := newBackend(t, srv, Options{})
	f := &FairBackend{b}
	ctx := context.Background()
	const key = "expired-holder"

	h := acquire(t, b, key, 10*time.Second)
	// A waiter of another process: queued by wait.lua, entry valid 10 s.
	waiter := owner()
	if n, err := runWait(t, b, key, waiter, 10*time.Second, 10*time.Second); err != nil || n != 0 {
		t.Fatalf("wait.lua = %d, %v; want queued", n, err)
	}
	// The holder's lease ends without a release.
	if n := num(t, c, "DEL", b.LockKey(key)); n != 1 {
		t.Fatalf("DEL %s = %d", b.LockKey(key), n)
	}

	_, err := f.Acquire(ctx, driver.AcquireRequest{Key: key, Owner: owner(), TTL: 10 * time.Second})
	var held *driver.HeldError
	if !errors.As(err, &held) || !errors.Is(err, driver.ErrNotAcquired) {
		t.Fatalf("a newcomer's FairBackend.Acquire with a live waiter queued = %v; want a HeldError (the waiter is first)", err)
	}
	if n := num(t, c, "EXISTS", b.LockKey(key)); n != 0 {
		t.Fatalf("the newcomer's refused attempt left the lock key behind")
	}
	// The queued waiter takes it at its next wait.lua, with the next fence.
	n, err := runWait(t, b, key, waiter, 10*time.Second, 10*time.Second)
	if err != nil || n != int64(h.Fence)+1 {
		t.Fatalf("the queued waiter's wait.lua = %d, %v; want fence %d", n, err, h.Fence+1)
	}

	// The plain Backend does not look at the queue (no list permission
	// needed): its Acquire behaves as before on a free key.
	if _, err := b.Acquire(ctx, driver.AcquireRequest{Key: "plain-" + key, Owner: owner(), TTL: time.Second}); err != nil {
		t.Fatal(err)
	}
}
