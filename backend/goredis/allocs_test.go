package goredis

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/fencedlock/fencedlock/driver"
	"github.com/fencedlock/fencedlock/internal/redisnames"
	"github.com/fencedlock/fencedlock/internal/redisscript"
	"github.com/fencedlock/fencedlock/internal/testserver"
)

// TestHotPathAllocs bounds what Acquire, Release and Renew allocate
// beyond go-redis itself: go-redis's share is measured as the same
// EVALSHA commands sent with Do on prebuilt arguments (what the backend
// sends), so the bound holds across go-redis versions. The backend's own
// share is one allocation per call (its command, with its keys inside),
// less the fence that Do boxes into an any and the backend does not
// (fences start above 255 here, as they soon do in use: Go boxes smaller
// integers without allocating).
func TestHotPathAllocs(t *testing.T) {
	srv := testserver.StartRedis(t)
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
	acquire := []any{"evalsha", redisscript.AcquireSHA, 4, b.LockKey("raw"), b.FenceKey("raw"), b.LockKey("raw") + redisnames.AbandonedSuffix, b.LockKey("raw") + redisnames.QueueSuffix, req.Owner, "10000"}
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
	const own = 1
	t.Logf("Acquire+Release: %.1f allocations; go-redis alone: %.1f", backend, client)
	if backend > client+own {
		t.Errorf("Acquire+Release allocates %.1f times, go-redis alone %.1f: the backend's own share is %.1f, want at most %d",
			backend, client, backend-client, own)
	}

	g, err = b.Acquire(ctx, req)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := b.Renew(ctx, g, 10*time.Second); err != nil { // loads the script
		t.Fatal(err)
	}
	renew := []any{"evalsha", redisscript.RenewSHA, 1, b.LockKey("allocs"), req.Owner, "10000"}
	client = testing.AllocsPerRun(200, func() {
		if err := c.Do(ctx, renew...).Err(); err != nil {
			t.Fatal(err)
		}
	})
	backend = testing.AllocsPerRun(200, func() {
		if _, err := b.Renew(ctx, g, 10*time.Second); err != nil {
			t.Fatal(err)
		}
	})
	t.Logf("Renew: %.1f allocations; go-redis alone: %.1f", backend, client)
	if backend > client+1 {
		t.Errorf("Renew allocates %.1f times, go-redis alone %.1f: the backend's own share is %.1f, want at most 1",
			backend, client, backend-client)
	}
}

// TestLongKeys: keys longer than the commands' buffers (and with
// characters LockKey escapes) are acquired, renewed and released as
// short ones are, under the same Redis keys.
func TestLongKeys(t *testing.T) {
	srv := testserver.StartRedis(t)
	b, c := newBackend(t, srv, Options{})
	ctx := ctxT(t)
	for _, key := range []string{"short{}%", strings.Repeat("k{", 40), strings.Repeat("long%", 200)} {
		g, err := b.Acquire(ctx, driver.AcquireRequest{Key: key, Owner: owner(), TTL: time.Minute})
		if err != nil {
			t.Fatalf("%d-byte key: acquire: %v", len(key), err)
		}
		if got, err := c.Get(ctx, b.LockKey(key)).Result(); err != nil || got != g.Owner {
			t.Fatalf("%d-byte key: GET %s = %q, %v; want the owner", len(key), b.LockKey(key), got, err)
		}
		if n, err := c.Exists(ctx, b.FenceKey(key)).Result(); err != nil || n != 1 {
			t.Fatalf("%d-byte key: fence counter %s: %d, %v", len(key), b.FenceKey(key), n, err)
		}
		if _, err := b.Renew(ctx, g, 2*time.Minute); err != nil {
			t.Fatalf("%d-byte key: renew: %v", len(key), err)
		}
		if ms, err := c.PTTL(ctx, b.LockKey(key)).Result(); err != nil || ms <= time.Minute {
			t.Fatalf("%d-byte key: PTTL after renew %v, %v; want over a minute", len(key), ms, err)
		}
		if err := b.Release(ctx, g); err != nil {
			t.Fatalf("%d-byte key: release: %v", len(key), err)
		}
		if n, err := c.Exists(ctx, b.LockKey(key)).Result(); err != nil || n != 0 {
			t.Fatalf("%d-byte key: lock key after release: %d, %v", len(key), n, err)
		}
	}
}
