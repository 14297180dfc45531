package rwlock_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"runtime"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/fencedlock/fencedlock"
	"github.com/fencedlock/fencedlock/backend/memory"
	"github.com/fencedlock/fencedlock/driver"
	"github.com/fencedlock/fencedlock/internal/backendtest"
	"github.com/fencedlock/fencedlock/internal/locktest"
	"github.com/fencedlock/fencedlock/internal/rwlocktest"
	"github.com/fencedlock/fencedlock/internal/testserver"
	"github.com/fencedlock/fencedlock/rwlock"
)

// memorySetup runs the scenarios on backends of one memory.Store.
func memorySetup(t *testing.T) rwlocktest.Setup {
	st := memory.NewStore()
	return rwlocktest.Setup{
		New: func(t *testing.T, opts fencedlock.Options) *rwlock.RWLock {
			return locktest.Open(t, st.Backend(), opts, rwlock.New)
		},
		Backend: func(*testing.T) driver.RWLocker { return st.Backend() },
		Store:   memory.NewFencedStore(),
		TTL:     300 * time.Millisecond,
	}
}

func TestMemoryModesExclude(t *testing.T) { rwlocktest.ModesExclude(t, memorySetup(t)) }

func TestMemoryNeverReaderAndWriter(t *testing.T) {
	rwlocktest.NeverReaderAndWriter(t, memorySetup(t), 8, 50)
}

func TestMemoryWriterNotStarved(t *testing.T) { rwlocktest.WriterNotStarved(t, memorySetup(t)) }

func TestMemoryPausedWriterRefused(t *testing.T) { rwlocktest.PausedWriterRefused(t, memorySetup(t)) }

func TestMemoryCancelledWriterLeavesNothing(t *testing.T) {
	rwlocktest.CancelledWriterLeavesNothing(t, memorySetup(t))
}

func TestMemoryCancelledWriterWakesReaders(t *testing.T) {
	rwlocktest.CancelledWriterWakesReaders(t, memorySetup(t))
}

func TestMemoryCrashedWriterIntentExpires(t *testing.T) {
	rwlocktest.CrashedWriterIntentExpires(t, memorySetup(t))
}

func TestMemoryInspect(t *testing.T) { rwlocktest.Inspect(t, memorySetup(t)) }

func TestMemoryTryLockLeavesNoIntent(t *testing.T) {
	rwlocktest.TryLockLeavesNoIntent(t, memorySetup(t))
}

func TestMemoryPausedReaderLost(t *testing.T) { rwlocktest.PausedReaderLost(t, memorySetup(t)) }

func TestMemoryCloseUnderLoad(t *testing.T) { rwlocktest.CloseUnderLoad(t, memorySetup(t)) }

func TestMemoryManyReadersThenWriter(t *testing.T) {
	rwlocktest.ManyReadersThenWriter(t, memorySetup(t))
}

func TestMemoryReservedNames(t *testing.T) { rwlocktest.ReservedNames(t, memorySetup(t)) }

func TestMemoryRetriedAcquire(t *testing.T) { rwlocktest.RetriedAcquire(t, memorySetup(t)) }

func TestMemoryCloseReleasesLeases(t *testing.T) {
	rwlocktest.CloseReleasesLeases(t, memorySetup(t))
}

// A backend without read-write locks is refused with ErrUnsupported.
type plain struct{ driver.Backend }

func TestNewNeedsRWLocker(t *testing.T) {
	_, err := rwlock.New(plain{memory.New()}, fencedlock.Options{})
	if !errors.Is(err, errors.ErrUnsupported) {
		t.Fatalf("New on a plain backend: %v, want ErrUnsupported", err)
	}
}

func TestInvalidName(t *testing.T) {
	r, err := rwlock.New(memory.New(), fencedlock.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	for _, n := range []string{"", "a\x00b", string(make([]byte, 1020))} {
		if _, err := r.TryRLock(t.Context(), n); !errors.Is(err, fencedlock.ErrInvalid) {
			t.Errorf("TryRLock(%q...): %v, want ErrInvalid", n[:min(len(n), 4)], err)
		}
	}
}

// A printed read lease shows its name and mode, never the owner token nor
// the readers' Locker key.
func TestLeasePrint(t *testing.T) {
	r, err := rwlock.New(memory.New(), fencedlock.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	l, err := r.RLock(t.Context(), "orders")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Release(t.Context())
	for _, s := range []string{fmt.Sprint(l), fmt.Sprintf("%+v", l), l.String()} {
		if !strings.Contains(s, "orders") || !strings.Contains(s, "read") || strings.Contains(s, "\x00") {
			t.Errorf("printed lease %q: want its name and mode, no reader key", s)
		}
	}
	js, err := json.Marshal(l)
	if err != nil || strings.Contains(string(js), "\\u0000") || !strings.Contains(string(js), `"Mode":"read"`) {
		t.Errorf("JSON of a lease: %s, %v", js, err)
	}
}

// TestRedis runs the scenarios of internal/rwlocktest on a real
// redis-server with each client, every RWLock on a Backend of its own.
func TestRedis(t *testing.T) {
	for _, cl := range backendtest.RedisClients {
		for _, sc := range rwlocktest.Scenarios(8, 30) {
			t.Run(cl.Name+"/"+sc.Name, func(t *testing.T) {
				srv := testserver.StartRedis(t)
				b, store := cl.Open(t, srv)
				t.Cleanup(func() { b.Close() })
				sc.Run(t, rwlocktest.Setup{
					New: func(t *testing.T, opts fencedlock.Options) *rwlock.RWLock {
						b, _ := cl.Open(t, srv)
						return locktest.Open(t, b, opts, rwlock.New)
					},
					Backend: func(t *testing.T) driver.RWLocker {
						b, _ := cl.Open(t, srv)
						t.Cleanup(func() { b.Close() })
						return b.(driver.RWLocker)
					},
					Store: store,
					TTL:   500 * time.Millisecond,
				})
			})
		}
	}
}

// TestRedisRetriedAcquire runs rwlocktest.RetriedAcquire on a real
// redis-server with each client: rwlock.lua's answer to a retried
// acquire, which backend/memory gives too. It is not among the Scenarios
// because backend/etcd answers otherwise (a write retry refused, a read
// retry a second lease with a new fence).
func TestRedisRetriedAcquire(t *testing.T) {
	srv := testserver.StartRedis(t)
	for _, cl := range backendtest.RedisClients {
		t.Run(cl.Name, func(t *testing.T) {
			rwlocktest.RetriedAcquire(t, rwlocktest.Setup{Backend: func(t *testing.T) driver.RWLocker {
				b, _ := cl.Open(t, srv)
				t.Cleanup(func() { b.Close() })
				return b.(driver.RWLocker)
			}})
		})
	}
}

// TestRedisWrongType: a key of the name's read-write lock holding a value
// of another type fails every step at once with an error wrapping
// ErrPermanent that names the key, and nothing is granted.
func TestRedisWrongType(t *testing.T) {
	srv := testserver.StartRedis(t)
	c := srv.Client(t, nil)
	// A hash where a hash is expected (the readers' fences) would be no
	// error: a string there, and in the abandoned set.
	for i, suffix := range []string{":rw:writer", ":rw:readers", ":rw:intents", ":rw:fence", ":rw:fences", ":rw:abandoned"} {
		for _, cl := range backendtest.RedisClients {
			b, _ := cl.Open(t, srv)
			r := locktest.Open(t, b, fencedlock.Options{}, rwlock.New)
			name := "wrongtype" + string(rune('a'+i)) + cl.Name
			key := "fencedlock:{" + name + "}" + suffix
			cmd := c.B().Hset().Key(key).FieldValue().FieldValue("f", "v").Build()
			if suffix == ":rw:fences" || suffix == ":rw:abandoned" {
				cmd = c.B().Set().Key(key).Value("v").Build()
			}
			if err := c.Do(t.Context(), cmd).Error(); err != nil {
				t.Fatal(err)
			}
			ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
			for _, m := range []rwlock.Mode{rwlock.Read, rwlock.Write} {
				var err error
				if m == rwlock.Read {
					_, err = r.RLock(ctx, name)
				} else {
					_, err = r.Lock(ctx, name)
				}
				if !errors.Is(err, fencedlock.ErrPermanent) || ctx.Err() != nil || !strings.Contains(err.Error(), "WRONGTYPE") {
					t.Errorf("%s: %v lock with a value of another type at %s: %v, want a permanent WRONGTYPE error at once", cl.Name, m, suffix, err)
				}
			}
			cancel()
		}
	}
}

// benchHold is the critical section of every operation of the mixes: what
// readers overlap and a plain lock serialises.
const benchHold = time.Millisecond

// BenchmarkMix: 64 goroutines on one name, each operation a read or a
// write lease (writes% of them writes) held for benchHold, against the
// plain lock of one key taken for every operation (lock). ops/s is the
// figure to compare: readers must scale where the lock cannot.
func BenchmarkMix(b *testing.B) {
	backendtest.EachBench(b, func(b *testing.B, be driver.Backend) {
		b.Run("lock", func(b *testing.B) {
			l, err := fencedlock.New(be, fencedlock.Options{})
			if err != nil {
				b.Fatal(err)
			}
			defer l.Close()
			run64(b, func(ctx context.Context) (releaser, error) {
				return l.Acquire(ctx, "bench-lock")
			})
		})
		for _, writes := range []int{1, 50} {
			b.Run(fmt.Sprintf("rw-%d-%d", 100-writes, writes), func(b *testing.B) {
				r, err := rwlock.New(be, fencedlock.Options{})
				if err != nil {
					b.Fatal(err)
				}
				defer r.Close()
				var n atomic.Int64
				run64(b, func(ctx context.Context) (releaser, error) {
					if n.Add(1)%100 < int64(writes) {
						return r.Lock(ctx, "bench-rw")
					}
					return r.RLock(ctx, "bench-rw")
				})
			})
		}
	})
}

// releaser is a lease of either kind.
type releaser interface{ Release(context.Context) error }

// run64 runs take, holds the lease for benchHold and releases it, in 64
// goroutines, and reports operations per second.
func run64(b *testing.B, take func(context.Context) (releaser, error)) {
	b.SetParallelism(max(1, 64/testingProcs()))
	start := time.Now()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			l, err := take(b.Context())
			if err != nil {
				b.Error(err)
				return
			}
			time.Sleep(benchHold)
			if err := l.Release(b.Context()); err != nil {
				b.Error(err)
				return
			}
		}
	})
	b.ReportMetric(float64(b.N)/time.Since(start).Seconds(), "ops/s")
}

// testingProcs is GOMAXPROCS, which RunParallel multiplies the
// parallelism by.
func testingProcs() int { return runtime.GOMAXPROCS(0) }
