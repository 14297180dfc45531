package fencedlock_test

import (
	"context"
	"testing"
	"time"

	"github.com/fencedlock/fencedlock"
	"github.com/fencedlock/fencedlock/backend/memory"
)

// benchLease returns a held lease on a memory backend, renewed by hand
// only, released when the benchmark ends.
func benchLease(b *testing.B) *fencedlock.Lease {
	b.Helper()
	l := mustLocker(b, memory.New(), fencedlock.Options{TTL: time.Minute, ManualRenew: true})
	b.Cleanup(func() { l.Close() })
	ls, err := l.TryAcquire(context.Background(), "bench")
	if err != nil {
		b.Fatal(err)
	}
	return ls
}

// BenchmarkLeaseErr is the cost of Lease.Err on a held lease: the clock
// readings that decide validity.
func BenchmarkLeaseErr(b *testing.B) {
	ls := benchLease(b)
	for b.Loop() {
		if err := ls.Err(); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkLeaseRenew is the cost of a renewal (Lease.Renew on a memory
// backend, so the backend costs little): the clock readings, the
// backend's Renew, the new deadline.
func BenchmarkLeaseRenew(b *testing.B) {
	ls := benchLease(b)
	ctx := context.Background()
	for b.Loop() {
		if err := ls.Renew(ctx); err != nil {
			b.Fatal(err)
		}
	}
}
