package rediscoretest

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/fencedlock/fencedlock/driver"
	"github.com/fencedlock/fencedlock/fencing"
	"github.com/fencedlock/fencedlock/internal/redisscript"
)

// Backend is what the forced-release test needs of an adapter's Backend.
type Backend interface {
	driver.Backend
	driver.ForceReleaser
	LockKey(key string) string
	FenceKey(key string) string
	FenceBarrier(ctx context.Context, key string, token fencing.Token, holder string) error
}

// runForceReleaseBarrier shows, on b (with f, the Store of the same
// backend), why a forced release alone does not stop the old holder's
// writes and what does: after ForceRelease the resource's record still
// holds the old holder's fence, so the guard accepts its next write
// (equal fence, same holder); once FenceBarrier wrote ForceResult.After,
// the old holder's write is rejected and the next holder's (a fence above
// After) accepted.
func runForceReleaseBarrier(t *testing.T, b Backend, f Fixture) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	const key, res = "job", "job:resource"
	acquire := func(owner string) driver.Grant {
		g, err := b.Acquire(ctx, driver.AcquireRequest{Key: key, Owner: owner, TTL: 10 * time.Second})
		if err != nil {
			t.Fatal(err)
		}
		return g
	}
	old := acquire("owner-a-0123456789")
	oldHolder := driver.HolderID(old.Owner)
	if err := f.Store.Set(ctx, res, "v1", old.Fence, oldHolder); err != nil {
		t.Fatal(err)
	}
	r, err := b.ForceRelease(ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	if !r.Held || r.Holder != oldHolder || r.Before != old.Fence || r.After != old.Fence+1 {
		t.Fatalf("ForceRelease = %+v, want held by %s, %v -> %v", r, oldHolder, old.Fence, old.Fence+1)
	}
	if n, err := f.Do(ctx, "EXISTS", b.LockKey(key)); err != nil || n != "0" {
		t.Fatalf("lock key after ForceRelease: EXISTS %q, %v; want 0", n, err)
	}
	if got, err := f.Do(ctx, "GET", b.FenceKey(key)); err != nil || got != r.After.String() {
		t.Fatalf("fence counter %q, %v; want %v", got, err, r.After)
	}
	if _, err := b.Renew(ctx, old, 10*time.Second); !errors.Is(err, driver.ErrNotHeld) {
		t.Fatalf("old holder's Renew: %v, want ErrNotHeld", err)
	}
	// No barrier yet: the guard cannot know the lock was broken.
	if err := f.Store.Set(ctx, res, "v2 (old holder, before the barrier)", old.Fence, oldHolder); err != nil {
		t.Fatalf("old holder's write before the barrier: %v, want accepted (the guard sees only the resource's record)", err)
	}
	const operator = "0123456789abcdef"
	if err := b.FenceBarrier(ctx, res, r.After, operator); err != nil {
		t.Fatal(err)
	}
	err = f.Store.Set(ctx, res, "v3 (old holder, after the barrier)", old.Fence, oldHolder)
	var stale *fencing.StaleError
	if !errors.As(err, &stale) || stale.Accepted != r.After || stale.AcceptedFrom != operator {
		t.Fatalf("old holder's write after the barrier: %v, want stale against %v from %s", err, r.After, operator)
	}
	rec, err := f.Store.Get(ctx, res)
	if err != nil || rec.Value != "v2 (old holder, before the barrier)" || rec.Fence != r.After {
		t.Fatalf("resource %+v, %v: want the value untouched by the barrier, fence %v", rec, err, r.After)
	}
	next := acquire("owner-b-0123456789")
	if next.Fence <= r.After {
		t.Fatalf("next grant fence %v, want > %v", next.Fence, r.After)
	}
	if err := f.Store.Set(ctx, res, "v4 (next holder)", next.Fence, driver.HolderID(next.Owner)); err != nil {
		t.Fatalf("next holder's write: %v", err)
	}
	checkBarrierRule(ctx, t, b, res, r.After, next.Fence, operator)

	// A counter fencedlock did not write: nothing is changed.
	if _, err := f.Do(ctx, "SET", b.FenceKey("odd"), "not a number"); err != nil {
		t.Fatal(err)
	}
	if _, err := b.ForceRelease(ctx, "odd"); !errors.Is(err, redisscript.ErrCorrupt) {
		t.Errorf("ForceRelease over a corrupt counter: %v, want ErrCorrupt", err)
	}
	if got, err := f.Do(ctx, "GET", b.FenceKey("odd")); err != nil || got != "not a number" {
		t.Errorf("corrupt counter changed to %q, %v", got, err)
	}
}

// checkBarrierRule: the barrier on res (whose record is at fence, above
// after) follows the guard's rule: an older token or the same token from
// another holder is rejected; a greater one accepted; bad arguments are
// refused before anything is sent.
func checkBarrierRule(ctx context.Context, t *testing.T, b Backend, res string, after, fence fencing.Token, operator string) {
	t.Helper()
	if err := b.FenceBarrier(ctx, res, after, operator); !errors.Is(err, fencing.ErrStale) {
		t.Errorf("barrier below the record: %v, want ErrStale", err)
	}
	if err := b.FenceBarrier(ctx, res, fence, operator); !errors.Is(err, fencing.ErrStale) {
		t.Errorf("barrier at the record from another holder: %v, want ErrStale", err)
	}
	if err := b.FenceBarrier(ctx, res, fence+1, operator); err != nil {
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
}
