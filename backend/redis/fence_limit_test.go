package redis

import (
	"context"
	"errors"
	"strconv"
	"testing"
	"time"

	"github.com/fencedlock/fencedlock/driver"
	"github.com/fencedlock/fencedlock/internal/redistest"
)

// TestFenceCounterBoundary walks a fence counter up to 2^53, the largest
// integer Lua numbers (doubles) represent exactly, on a real server: every
// fence up to 2^53 is granted exactly, a retry of the holder of 2^53 gets
// it again, and the next acquire of the free lock fails with
// ErrFenceExhausted (not ErrCorrupt) and changes nothing. Above 2^53 a
// counter was not written by fencedlock: ErrCorrupt.
func TestFenceCounterBoundary(t *testing.T) {
	srv := redistest.Start(t)
	b, c := newBackend(t, srv, Options{})
	ctx := context.Background()
	const max = 1 << 53
	fk := b.FenceKey("edge")
	do(t, c, "SET", fk, strconv.FormatInt(max-2, 10))
	for _, want := range []int64{max - 1, max} {
		g, err := b.Acquire(ctx, driver.AcquireRequest{Key: "edge", Owner: owner(), TTL: time.Minute})
		if err != nil {
			t.Fatalf("acquire at counter %d: %v", want-1, err)
		}
		if int64(g.Fence) != want || str(t, c, "GET", fk) != strconv.FormatInt(want, 10) {
			t.Fatalf("fence %d, counter %s, want %d", g.Fence, str(t, c, "GET", fk), want)
		}
		info, err := b.Inspect(ctx, "edge")
		if err != nil || int64(info.Fence) != want {
			t.Fatalf("inspect: %+v %v", info, err)
		}
		if want == max {
			// The holder's retry (its first reply lost) gets 2^53 again.
			again, err := b.Acquire(ctx, driver.AcquireRequest{Key: "edge", Owner: g.Owner, TTL: time.Minute})
			if err != nil || again.Fence != g.Fence {
				t.Fatalf("retry of the holder of 2^53: %+v %v", again, err)
			}
			// Another owner waits for the holder, as for any held lock.
			var held *driver.HeldError
			if _, err := b.Acquire(ctx, driver.AcquireRequest{Key: "edge", Owner: owner(), TTL: time.Minute}); !errors.As(err, &held) {
				t.Fatalf("another owner while 2^53 is held: %v, want HeldError", err)
			}
		}
		if err := b.Release(ctx, g); err != nil {
			t.Fatal(err)
		}
	}
	_, err := b.Acquire(ctx, driver.AcquireRequest{Key: "edge", Owner: owner(), TTL: time.Minute})
	if !errors.Is(err, ErrFenceExhausted) || errors.Is(err, ErrCorrupt) {
		t.Fatalf("acquire past 2^53: %v, want ErrFenceExhausted", err)
	}
	t.Logf("past 2^53: %v", err)
	if n := num(t, c, "EXISTS", b.LockKey("edge")); n != 0 {
		t.Fatal("exhausted acquire left the lock behind")
	}
	if v := str(t, c, "GET", fk); v != strconv.FormatInt(max, 10) {
		t.Fatalf("counter changed to %s", v)
	}
	for _, bad := range []string{"9007199254740993", "9999999999999999", "10000000000000000"} {
		key := "over-" + bad
		do(t, c, "SET", b.FenceKey(key), bad)
		if _, err := b.Acquire(ctx, driver.AcquireRequest{Key: key, Owner: owner(), TTL: time.Minute}); !errors.Is(err, ErrCorrupt) {
			t.Errorf("counter %s: %v, want ErrCorrupt", bad, err)
		}
		if _, err := b.Inspect(ctx, key); !errors.Is(err, ErrCorrupt) {
			t.Errorf("inspect of counter %s: %v, want ErrCorrupt", bad, err)
		}
	}
}
