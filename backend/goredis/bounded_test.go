package goredis

import (
	"context"
	"testing"
	"time"

	"github.com/fencedlock/fencedlock/driver"
	"github.com/fencedlock/fencedlock/internal/redistest"
)

// BenchmarkBackendAcquireReleaseCancellable is BenchmarkBackendAcquireRelease
// with a context that can end, as the Locker's are: on a client without
// ContextTimeoutEnabled each command then waits for its reply or its
// context, whichever comes first (see Backend.process).
func BenchmarkBackendAcquireReleaseCancellable(b *testing.B) {
	srv := redistest.Start(b)
	be, _ := newBackend(b, srv, Options{})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
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
