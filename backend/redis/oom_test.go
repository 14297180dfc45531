package redis

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/fencedlock/fencedlock/driver"
	"github.com/fencedlock/fencedlock/internal/testserver"
)

// TestAcquireAtOOM: on a server over maxmemory under noeviction (writes
// that need memory are refused with OOM), a held lock is still reported
// held — with the holder's remaining TTL — to another owner, the holder's
// retried acquire, renew and release still work, and a free lock is
// refused with OOM with nothing written. (SET NX is refused at OOM even
// when the key exists, so before acquire.lua caught it, the second owner
// got OOM instead of HeldError, and TestEvictionBehaviour/noeviction
// failed whenever its fill left the server above maxmemory.)
func TestAcquireAtOOM(t *testing.T) {
	srv := testserver.StartRedis(t, testserver.WithConfig("maxmemory-policy noeviction"))
	b, c := newBackend(t, srv, Options{})
	ctx := context.Background()
	first := acquire(t, b, "held", time.Minute)
	do(t, c, "CONFIG", "SET", "maxmemory", "1") // every write that needs memory is refused from here
	t.Cleanup(func() { do(t, c, "CONFIG", "SET", "maxmemory", "0") })

	_, err := b.Acquire(ctx, driver.AcquireRequest{Key: "held", Owner: owner(), TTL: time.Minute})
	var held *driver.HeldError
	if !errors.As(err, &held) || held.RetryAfter <= 0 || held.RetryAfter > time.Minute {
		t.Fatalf("acquire of a held lock at OOM: %v, want a HeldError with the holder's remaining TTL", err)
	}
	again, err := b.Acquire(ctx, driver.AcquireRequest{Key: "held", Owner: first.Owner, TTL: time.Minute})
	if err != nil || again.Fence != first.Fence {
		t.Fatalf("the holder's retried acquire at OOM: fence %d, %v; want fence %d", again.Fence, err, first.Fence)
	}
	if _, err := b.Renew(ctx, first, time.Minute); err != nil {
		t.Fatalf("renew at OOM: %v", err)
	}
	_, err = b.Acquire(ctx, driver.AcquireRequest{Key: "free", Owner: owner(), TTL: time.Minute})
	if err == nil || !strings.Contains(err.Error(), "OOM") {
		t.Fatalf("acquire of a free lock at OOM: %v, want the server's OOM error", err)
	}
	if exists(t, c, b.LockKey("free")) || exists(t, c, b.FenceKey("free")) {
		t.Fatal("acquire of a free lock at OOM wrote a key")
	}
	if err := b.Release(ctx, first); err != nil {
		t.Fatalf("release at OOM: %v", err)
	}
	if exists(t, c, b.LockKey("held")) {
		t.Fatal("lock key still there after release at OOM")
	}
}
