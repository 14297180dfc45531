package bench

import (
	"context"
	"crypto/rand"
	"testing"

	"github.com/fencedlock/fencedlock"
	"github.com/fencedlock/fencedlock/backend/redis"
	"github.com/fencedlock/fencedlock/driver"
)

// BenchmarkOverhead splits fencedlock/redis's uncontended acquire+release
// into layers on one client: the raw baseline, the Redis backend called
// directly (its scripts and key handling), Locker.TryAcquire and
// Locker.Acquire (adding the root package: lease, watchdog, contexts,
// logging). The differences show where time and allocations go.
func BenchmarkOverhead(b *testing.B) {
	e := servers(b)
	c := e.newRueidis(b, nil)
	defer c.Close()
	be, err := redis.New(c, redis.Options{})
	if err != nil {
		b.Fatal(err)
	}
	l := mustLocker(b, be, fencedlock.Options{TTL: benchTTL})
	defer l.Close()
	raw := &rawClient{c: c, ttl: "10000"}
	ctx := context.Background()
	layers := []struct {
		name string
		op   func(key string) error
	}{
		{"raw", func(k string) error {
			h, err := raw.acquire(ctx, k)
			if err != nil {
				return err
			}
			return h.Release(ctx)
		}},
		{"backend", func(k string) error {
			g, err := be.Acquire(ctx, driver.AcquireRequest{Key: k, Owner: rand.Text(), TTL: benchTTL})
			if err != nil {
				return err
			}
			return be.Release(ctx, g)
		}},
		{"locker-try", func(k string) error {
			ls, err := l.TryAcquire(ctx, k)
			if err != nil {
				return err
			}
			return ls.Release(ctx)
		}},
		{"locker", func(k string) error {
			ls, err := l.Acquire(ctx, k)
			if err != nil {
				return err
			}
			return ls.Release(ctx)
		}},
	}
	for _, layer := range layers {
		b.Run("layer="+layer.name, func(b *testing.B) {
			k := key("overhead", layer.name, 0)
			if err := layer.op(k); err != nil { // warm-up
				b.Fatal(err)
			}
			b.ReportAllocs()
			b.ResetTimer()
			for range b.N {
				if err := layer.op(k); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
