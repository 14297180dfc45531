package rediscoretest

import (
	"context"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/fencedlock/fencedlock/driver"
	"github.com/fencedlock/fencedlock/internal/testserver"
)

// RunBenchmarks runs the microbenchmarks of a Backend's own overhead (no
// Locker: its round trips and allocations) on a's Backend against a real
// redis-server on loopback, one server per benchmark. The comparison with
// other libraries lives in bench/.
func RunBenchmarks[C any](b *testing.B, a Adapter[C]) {
	const ttl = 10 * time.Second
	req := driver.AcquireRequest{Key: "bench", Owner: "bench-owner-0123456789abcdef", TTL: ttl}
	b.Run("AcquireRelease", func(b *testing.B) {
		benchCycles(b, a, context.Background(), req)
	})
	// A context that can end, as the Locker's are: on a go-redis client
	// without ContextTimeoutEnabled each command then waits for its reply
	// or its context, whichever comes first.
	b.Run("AcquireReleaseCancellable", func(b *testing.B) {
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		benchCycles(b, a, ctx, req)
	})
	b.Run("Renew", func(b *testing.B) {
		be, _ := a.backend(b, a.local(b, testserver.StartRedis(b)))
		ctx := context.Background()
		g, err := be.Acquire(ctx, req)
		if err != nil {
			b.Fatal(err)
		}
		b.ReportAllocs()
		for b.Loop() {
			if _, err := be.Renew(ctx, g, ttl); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("AcquireParallelKeys", func(b *testing.B) {
		be, _ := a.backend(b, a.local(b, testserver.StartRedis(b)))
		b.ReportAllocs()
		var id atomic.Int64
		b.RunParallel(func(pb *testing.PB) {
			key := "bench-" + strconv.FormatInt(id.Add(1), 10)
			req := driver.AcquireRequest{Key: key, Owner: "bench-owner-" + key, TTL: ttl}
			for pb.Next() {
				if err := cycle(context.Background(), be, req); err != nil {
					b.Error(err)
					return
				}
			}
		})
	})
}

// benchCycles times cycle on a new Backend of a with ctx and req.
func benchCycles[C any](b *testing.B, a Adapter[C], ctx context.Context, req driver.AcquireRequest) {
	be, _ := a.backend(b, a.local(b, testserver.StartRedis(b)))
	b.ReportAllocs()
	for b.Loop() {
		if err := cycle(ctx, be, req); err != nil {
			b.Fatal(err)
		}
	}
}

// cycle acquires req on be and releases it.
func cycle(ctx context.Context, be driver.Backend, req driver.AcquireRequest) error {
	g, err := be.Acquire(ctx, req)
	if err != nil {
		return err
	}
	return be.Release(ctx, g)
}
