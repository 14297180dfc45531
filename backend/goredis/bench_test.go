package goredis

import (
	"context"
	"testing"
	"time"

	"github.com/fencedlock/fencedlock/driver"
	"github.com/fencedlock/fencedlock/internal/redistest"
)

// BenchmarkBackendAcquireRelease: one Acquire and one Release straight on
// the Backend (no Locker), on a real redis-server: the backend's own
// round trips and allocations.
func BenchmarkBackendAcquireRelease(b *testing.B) {
	srv := redistest.Start(b)
	be, _ := newBackend(b, srv, Options{})
	ctx := context.Background()
	req := driver.AcquireRequest{Key: "bench", Owner: owner(), TTL: 10 * time.Second}
	b.ReportAllocs()
	for b.Loop() {
		g, err := be.Acquire(ctx, req)
		if err != nil {
			b.Fatal(err)
		}
		if err := be.Release(ctx, g); err != nil {
			b.Fatal(err)
		}
	}
}
