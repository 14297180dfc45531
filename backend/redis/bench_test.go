package redis

import (
	"context"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/fencedlock/fencedlock/driver"
	"github.com/fencedlock/fencedlock/internal/redistest"
)

// Microbenchmarks of the backend's own overhead against a real
// redis-server on loopback. The comparison with other libraries lives in
// bench/.

func BenchmarkAcquireRelease(b *testing.B) {
	srv := redistest.Start(b)
	be, _ := newBackend(b, srv, Options{})
	ctx := context.Background()
	req := driver.AcquireRequest{Key: "bench", Owner: "bench-owner-0123456789abcdef", TTL: 10 * time.Second}
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

func BenchmarkRenew(b *testing.B) {
	srv := redistest.Start(b)
	be, _ := newBackend(b, srv, Options{})
	ctx := context.Background()
	g, err := be.Acquire(ctx, driver.AcquireRequest{Key: "bench", Owner: "bench-owner-0123456789abcdef", TTL: 10 * time.Second})
	if err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	for b.Loop() {
		if _, err := be.Renew(ctx, g, 10*time.Second); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkAcquireParallelKeys(b *testing.B) {
	srv := redistest.Start(b)
	be, _ := newBackend(b, srv, Options{})
	ctx := context.Background()
	b.ReportAllocs()
	var id atomic.Int64
	b.RunParallel(func(pb *testing.PB) {
		key := "bench-" + strconv.FormatInt(id.Add(1), 10)
		req := driver.AcquireRequest{Key: key, Owner: "bench-owner-" + key, TTL: 10 * time.Second}
		for pb.Next() {
			g, err := be.Acquire(ctx, req)
			if err != nil {
				b.Error(err)
				return
			}
			if err := be.Release(ctx, g); err != nil {
				b.Error(err)
				return
			}
		}
	})
}
