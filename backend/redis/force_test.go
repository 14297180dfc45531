package redis

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/fencedlock/fencedlock/driver"
	"github.com/fencedlock/fencedlock/fencing"
	"github.com/fencedlock/fencedlock/internal/redistest"
)

// TestForceReleaseBarrier shows, on a real redis-server, why a forced
// release alone does not stop the old holder's writes and what does: after
// ForceRelease the resource's record still holds the old holder's fence,
// so the guard accepts its next write (equal fence, same holder); once
// FenceBarrier wrote ForceResult.After, the old holder's write is rejected
// and the next holder's (a fence above After) accepted.
func TestForceReleaseBarrier(t *testing.T) {
	srv := redistest.Start(t)
	b, c := newBackend(t, srv, Options{})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	const key, res = "job", "job:resource"

	old := acquire(t, b, "job", 10*time.Second)
	oldHolder := driver.HolderID(old.Owner)
	if err := b.FencedSet(ctx, res, "v1", old.Fence, oldHolder); err != nil {
		t.Fatal(err)
	}
	r, err := b.ForceRelease(ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	if !r.Held || r.Holder != oldHolder || r.Before != old.Fence || r.After != old.Fence+1 {
		t.Fatalf("ForceRelease = %+v, want held by %s, %v -> %v", r, oldHolder, old.Fence, old.Fence+1)
	}
	if n := num(t, c, "EXISTS", b.LockKey(key)); n != 0 {
		t.Fatalf("lock key still exists after ForceRelease")
	}
	if got := str(t, c, "GET", b.FenceKey(key)); got != r.After.String() {
		t.Fatalf("fence counter %q, want %v", got, r.After)
	}
	if _, err := b.Renew(ctx, old, 10*time.Second); !isNotHeld(err) {
		t.Fatalf("old holder's Renew: %v, want ErrNotHeld", err)
	}
	// No barrier yet: the guard cannot know the lock was broken.
	if err := b.FencedSet(ctx, res, "v2 (old holder, before the barrier)", old.Fence, oldHolder); err != nil {
		t.Fatalf("old holder's write before the barrier: %v, want accepted (the guard sees only the resource's record)", err)
	}
	const operator = "0123456789abcdef"
	if err := b.FenceBarrier(ctx, res, r.After, operator); err != nil {
		t.Fatal(err)
	}
	err = b.FencedSet(ctx, res, "v3 (old holder, after the barrier)", old.Fence, oldHolder)
	var stale *fencing.StaleError
	if !errors.As(err, &stale) || stale.Accepted != r.After || stale.AcceptedFrom != operator {
		t.Fatalf("old holder's write after the barrier: %v, want stale against %v from %s", err, r.After, operator)
	}
	rec, err := b.FencedGet(ctx, res)
	if err != nil || rec.Value != "v2 (old holder, before the barrier)" || rec.Fence != r.After {
		t.Fatalf("resource %+v, %v: want the value untouched by the barrier, fence %v", rec, err, r.After)
	}
	next := acquire(t, b, key, 10*time.Second)
	if next.Fence <= r.After {
		t.Fatalf("next grant fence %v, want > %v", next.Fence, r.After)
	}
	if err := b.FencedSet(ctx, res, "v4 (next holder)", next.Fence, driver.HolderID(next.Owner)); err != nil {
		t.Fatalf("next holder's write: %v", err)
	}

	// The barrier follows the guard's rule: an older token or the same
	// token from another holder is rejected; the same again is accepted.
	if err := b.FenceBarrier(ctx, res, r.After, operator); !errors.Is(err, fencing.ErrStale) {
		t.Errorf("barrier below the record: %v, want ErrStale", err)
	}
	if err := b.FenceBarrier(ctx, res, next.Fence, operator); !errors.Is(err, fencing.ErrStale) {
		t.Errorf("barrier at the record from another holder: %v, want ErrStale", err)
	}
	if err := b.FenceBarrier(ctx, res, next.Fence+1, operator); err != nil {
		t.Errorf("barrier above the record: %v", err)
	}
	for _, bad := range []struct {
		key    string
		token  fencing.Token
		holder string
		want   error
	}{{"", 5, operator, driver.ErrInvalid}, {"fencedlock:x", 5, operator, driver.ErrInvalid}, {res, 0, operator, fencing.ErrInvalidToken}, {res, 5, "", driver.ErrInvalid}} {
		if err := b.FenceBarrier(ctx, bad.key, bad.token, bad.holder); !errors.Is(err, bad.want) {
			t.Errorf("FenceBarrier(%q, %v, %q) = %v, want %v", bad.key, bad.token, bad.holder, err, bad.want)
		}
	}

	// A counter fencedlock did not write: nothing is changed.
	do(t, c, "SET", b.FenceKey("odd"), "not a number")
	if _, err := b.ForceRelease(ctx, "odd"); !errors.Is(err, ErrCorrupt) {
		t.Errorf("ForceRelease over a corrupt counter: %v, want ErrCorrupt", err)
	}
	if got := str(t, c, "GET", b.FenceKey("odd")); got != "not a number" {
		t.Errorf("corrupt counter changed to %q", got)
	}
}
