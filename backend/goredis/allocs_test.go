package goredis

import (
	"context"
	"testing"
	"time"

	"github.com/fencedlock/fencedlock/driver"
	"github.com/fencedlock/fencedlock/internal/redisscript"
	"github.com/fencedlock/fencedlock/internal/redistest"
)

// TestHotPathAllocs bounds what Acquire and Release allocate beyond
// go-redis itself: go-redis's share is measured as two EVALSHA commands
// sent with Do on prebuilt arguments (what the backend sends), so the
// bound holds across go-redis versions. The backend's own share is three
// allocations: Acquire's keys (one string) and its command, Release's
// keys and its command, less the fence Do boxes into an any (fences
// start above 255 here, as they soon do in use: Go boxes smaller
// integers without allocating).
func TestHotPathAllocs(t *testing.T) {
	srv := redistest.Start(t)
	b, c := newBackend(t, srv, Options{})
	ctx := context.Background()
	req := driver.AcquireRequest{Key: "allocs", Owner: owner(), TTL: 10 * time.Second}
	for _, k := range []string{b.FenceKey("allocs"), b.FenceKey("raw")} {
		if err := c.Set(ctx, k, 1000, 0).Err(); err != nil {
			t.Fatal(err)
		}
	}
	// Load the scripts.
	g, err := b.Acquire(ctx, req)
	if err != nil {
		t.Fatal(err)
	}
	if err := b.Release(ctx, g); err != nil {
		t.Fatal(err)
	}
	acquire := []any{"evalsha", redisscript.AcquireSHA, 3, b.LockKey("raw"), b.FenceKey("raw"), b.LockKey("raw") + redisscript.AbandonedSuffix, req.Owner, "10000"}
	release := []any{"evalsha", redisscript.ReleaseSHA, 1, b.LockKey("raw"), req.Owner}
	client := testing.AllocsPerRun(200, func() {
		if err := c.Do(ctx, acquire...).Err(); err != nil {
			t.Fatal(err)
		}
		if err := c.Do(ctx, release...).Err(); err != nil {
			t.Fatal(err)
		}
	})
	backend := testing.AllocsPerRun(200, func() {
		g, err := b.Acquire(ctx, req)
		if err != nil {
			t.Fatal(err)
		}
		if err := b.Release(ctx, g); err != nil {
			t.Fatal(err)
		}
	})
	const own = 3
	t.Logf("Acquire+Release: %.1f allocations; go-redis alone: %.1f", backend, client)
	if backend > client+own {
		t.Errorf("Acquire+Release allocates %.1f times, go-redis alone %.1f: the backend's own share is %.1f, want at most %d",
			backend, client, backend-client, own)
	}
}
