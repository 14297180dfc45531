package fencedlock_test

import (
	"context"
	"testing"
	"time"

	"github.com/fencedlock/fencedlock"
	"github.com/fencedlock/fencedlock/backend/memory"
)

// BenchmarkLockerPaths measures the Locker's uncontended paths on the
// memory backend with no Trace: what every call pays for the hooks
// while it is unset (compare with the commit before the hook).
func BenchmarkLockerPaths(b *testing.B) {
	benchLockerPaths(b, fencedlock.Options{TTL: time.Minute})
}

func benchLockerPaths(b *testing.B, opts fencedlock.Options) {
	ctx := context.Background()
	// acquireRelease measures one acquire (the method expression
	// (*Locker).TryAcquire or (*Locker).Acquire) and the lease's Release.
	acquireRelease := func(acquire func(*fencedlock.Locker, context.Context, string, ...fencedlock.LeaseOption) (*fencedlock.Lease, error)) func(*testing.B) {
		return func(b *testing.B) {
			l := mustLocker(b, memory.New(), opts)
			defer l.Close()
			b.ReportAllocs()
			for b.Loop() {
				ls, err := acquire(l, ctx, "k")
				if err != nil {
					b.Fatal(err)
				}
				if err := ls.Release(ctx); err != nil {
					b.Fatal(err)
				}
			}
		}
	}
	b.Run("TryAcquireRelease", acquireRelease((*fencedlock.Locker).TryAcquire))
	b.Run("AcquireRelease", acquireRelease((*fencedlock.Locker).Acquire))
	b.Run("Do", func(b *testing.B) {
		l := mustLocker(b, memory.New(), opts)
		defer l.Close()
		fn := func(context.Context, *fencedlock.Lease) error { return nil }
		b.ReportAllocs()
		for b.Loop() {
			if err := l.Do(ctx, "k", fn); err != nil {
				b.Fatal(err)
			}
		}
	})
}
