package bench

import (
	"context"
	"fmt"
	"sync"
	"testing"

	"github.com/fencedlock/fencedlock"
	"github.com/fencedlock/fencedlock/driver"
	"github.com/fencedlock/fencedlock/semaphore"
)

// semaphoreBackends are the backends of the semaphore benchmarks, each
// opened with a client of its own on the run's shared servers.
var semaphoreBackends = []struct {
	name string
	open func(b *testing.B, e *env) driver.Backend
}{
	{"redis", func(b *testing.B, e *env) driver.Backend {
		be, c := e.newRedisBackend(b)
		b.Cleanup(func() { be.Close(); c.Close() })
		return be
	}},
	{"etcd", func(b *testing.B, e *env) driver.Backend {
		be, c := e.newEtcdBackend(b)
		b.Cleanup(func() { be.Close(); _ = c.Close() })
		return be
	}},
}

// BenchmarkSemaphore: one caller's Acquire+Release of a permit at limits 1,
// 8 and 64 (the permit of a free semaphore: slot 0 is free, so one attempt),
// timed alone; "vs-lock" is then a Locker's Acquire+Release of a key over
// the permit's, run back to back in the same milliseconds (pairedRatio,
// a quarter of b.N of each): 1 means a permit costs what a lock costs.
func BenchmarkSemaphore(b *testing.B) {
	e := servers(b)
	for _, sb := range semaphoreBackends {
		b.Run(sb.name, func(b *testing.B) {
			be := sb.open(b, e)
			l := mustLocker(b, be, fencedlock.Options{})
			defer l.Close()
			s, err := semaphore.New(be, fencedlock.Options{})
			if err != nil {
				b.Fatal(err)
			}
			defer s.Close()
			lock := func(ctx context.Context) error {
				ls, err := l.Acquire(ctx, "bench-sem-lock")
				if err != nil {
					return err
				}
				return ls.Release(ctx)
			}
			for _, limit := range []int{1, 8, 64} {
				b.Run(fmt.Sprintf("limit=%d", limit), func(b *testing.B) {
					name := fmt.Sprintf("bench-sem-%d", limit)
					permit := func(ctx context.Context) error {
						p, err := s.Acquire(ctx, name, limit)
						if err != nil {
							return err
						}
						return p.Release(ctx)
					}
					for b.Loop() {
						if err := permit(b.Context()); err != nil {
							b.Fatal(err)
						}
					}
					ratio, err := pairedRatio(1, max(b.N/4, 1), []func(context.Context) error{permit}, []func(context.Context) error{lock})
					if err != nil {
						b.Fatal(err)
					}
					b.ReportMetric(ratio, "vs-lock")
				})
			}
		})
	}
}

// BenchmarkSemaphoreContended: 32 callers, each a Semaphore of its own (a
// process), on 8 permits (4 callers per permit), each Acquire+Release in a
// loop; ns/op is the wall time per permit granted over all callers.
func BenchmarkSemaphoreContended(b *testing.B) {
	e := servers(b)
	const limit, callers = 8, 32
	for _, sb := range semaphoreBackends {
		b.Run(sb.name, func(b *testing.B) {
			be := sb.open(b, e)
			sems := make([]*semaphore.Semaphore, callers)
			for i := range sems {
				s, err := semaphore.New(be, fencedlock.Options{})
				if err != nil {
					b.Fatal(err)
				}
				defer s.Close()
				sems[i] = s
			}
			name := fmt.Sprintf("bench-sem-contended-%d", b.N)
			var next sync.Mutex
			left := b.N
			take := func() bool {
				next.Lock()
				defer next.Unlock()
				left--
				return left >= 0
			}
			var wg sync.WaitGroup
			b.ResetTimer()
			for _, s := range sems {
				wg.Add(1)
				go func() {
					defer wg.Done()
					for take() {
						p, err := s.Acquire(context.Background(), name, limit)
						if err != nil {
							b.Error(err)
							return
						}
						if err := p.Release(context.Background()); err != nil {
							b.Error(err)
							return
						}
					}
				}()
			}
			wg.Wait()
		})
	}
}
