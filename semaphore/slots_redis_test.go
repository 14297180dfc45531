package semaphore_test

import (
	"context"
	"errors"
	"log/slog"
	"math/rand/v2"
	"os"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/fencedlock/fencedlock"
	"github.com/fencedlock/fencedlock/driver"
	"github.com/fencedlock/fencedlock/internal/backendtest"
	"github.com/fencedlock/fencedlock/internal/redisnames"
	"github.com/fencedlock/fencedlock/internal/redisscript"
	"github.com/fencedlock/fencedlock/internal/testserver"
	"github.com/fencedlock/fencedlock/semaphore"
)

// slotBackend is a Redis backend of either client, which is a Notifier,
// an Inspector and a SlotAcquirer.
type slotBackend interface {
	driver.Backend
	driver.Notifier
	driver.Inspector
	driver.SlotAcquirer
}

// openSlots opens a Backend of the Redis client cl on srv, closed when t
// ends.
func openSlots(t *testing.T, cl backendtest.RedisClient, srv *testserver.Redis) slotBackend {
	t.Helper()
	b, _ := cl.Open(t, srv)
	t.Cleanup(func() { b.Close() })
	sb, ok := b.(slotBackend)
	if !ok {
		t.Fatalf("%s: %T is no slotBackend", cl.Name, b)
	}
	return sb
}

// newSem returns a Semaphore on b, closed when t ends.
func newSem(t *testing.T, b driver.Backend, opts fencedlock.Options) *semaphore.Semaphore {
	t.Helper()
	s, err := semaphore.New(b, opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

// scriptCalls returns the EVALSHA and EVAL commands the server ran since
// its last CONFIG RESETSTAT (INFO commandstats).
func scriptCalls(t *testing.T, srv *testserver.Redis) int {
	t.Helper()
	out, err := srv.CLI(t, "INFO", "commandstats")
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, m := range regexp.MustCompile(`cmdstat_eval(?:sha)?:calls=(\d+)`).FindAllStringSubmatch(out, -1) {
		c, _ := strconv.Atoi(m[1])
		n += c
	}
	return n
}

// TestRedisPermitRoundTrips counts, with INFO commandstats on a real
// redis-server, the scripts a TryAcquire sends with k of 8 slots held by
// another Semaphore: exactly one on a SlotAcquirer (both clients), against
// the slot-by-slot sweep of a backend that is none (logged, N/(N-k) on
// average from a random slot).
func TestRedisPermitRoundTrips(t *testing.T) {
	const limit, tries = 8, 20
	for _, client := range backendtest.RedisClients {
		t.Run(client.Name, func(t *testing.T) {
			srv := testserver.StartRedis(t)
			b := openSlots(t, client, srv)
			holder := newSem(t, openSlots(t, client, srv), fencedlock.Options{TTL: 30 * time.Second})
			for _, k := range []int{0, 4, 7} {
				name := "rt-" + strconv.Itoa(k)
				for range k {
					if _, err := holder.TryAcquire(t.Context(), name, limit); err != nil {
						t.Fatal(err)
					}
				}
				for _, mode := range []struct {
					name string
					b    driver.Backend
				}{{"one step", b}, {"sweep", oneAtATime{b, b}}} {
					s := newSem(t, mode.b, fencedlock.Options{TTL: 30 * time.Second})
					p, err := s.TryAcquire(t.Context(), name, limit) // the scripts loaded
					if err != nil {
						t.Fatal(err)
					}
					if err := p.Release(t.Context()); err != nil {
						t.Fatal(err)
					}
					if _, err := srv.CLI(t, "CONFIG", "RESETSTAT"); err != nil {
						t.Fatal(err)
					}
					permits := make([]*semaphore.Permit, 0, tries)
					for range tries {
						p, err := s.TryAcquire(t.Context(), name, limit)
						if err != nil {
							t.Fatal(err)
						}
						permits = append(permits, p)
						if err := p.Release(t.Context()); err != nil {
							t.Fatal(err)
						}
					}
					calls := scriptCalls(t, srv) - tries // less the releases
					t.Logf("%s: %d of %d slots held: %.2f scripts per TryAcquire", mode.name, k, limit, float64(calls)/tries)
					if mode.name == "one step" && calls != tries {
						t.Errorf("one step with %d of %d held: %d scripts for %d TryAcquire; want one each", k, limit, calls, tries)
					}
					for _, p := range permits {
						if p.Slot() < k && mode.name == "one step" {
							t.Errorf("one step took slot %d, held by another", p.Slot())
						}
					}
				}
			}
		})
	}
}

// TestRedisLateSlotAcquireRefused: the clean-up of a permit's acquire of
// unknown outcome (the Locker's Release of its key and owner, which the
// view sends to every slot) makes the server refuse that owner's request
// if it arrives later: AcquireSlot by the owner after the clean-up takes
// nothing, and every slot stays free.
func TestRedisLateSlotAcquireRefused(t *testing.T) {
	for _, client := range backendtest.RedisClients {
		t.Run(client.Name, func(t *testing.T) {
			srv := testserver.StartRedis(t)
			b := openSlots(t, client, srv)
			keys := []string{semaphore.SlotKey("late", 0), semaphore.SlotKey("late", 1)}
			owner := "late-owner-" + strconv.Itoa(rand.IntN(1e9))
			for _, k := range keys {
				if err := b.Release(t.Context(), driver.Grant{Key: k, Owner: owner}); !errors.Is(err, driver.ErrNotHeld) {
					t.Fatalf("clean-up Release of free %q = %v, want ErrNotHeld", k, err)
				}
			}
			_, g, err := b.AcquireSlot(t.Context(), driver.AcquireRequest{Owner: owner, TTL: 10 * time.Second}, keys)
			if !errors.Is(err, fencedlock.ErrNotAcquired) {
				t.Fatalf("AcquireSlot after its clean-up = %v, fence %v; want it refused with ErrNotAcquired", err, g.Fence)
			}
			for _, k := range keys {
				if info, err := b.Inspect(t.Context(), k); err != nil || info.Held {
					t.Fatalf("Inspect(%q) after a refused late AcquireSlot = held %v, %v; want free", k, info.Held, err)
				}
			}
		})
	}
}

// TestRedisCancelledPermitsLeaveNoOrphan: 16 goroutines take permits of
// one semaphore (limit 3) with contexts that end at random points (before
// the request, while it is queued or its reply in flight) while the server
// stalls now and then (CLIENT PAUSE WRITE): after every call returned and
// the stalled requests had time to arrive, every slot is free or held by
// a permit a caller got back, never by an owner nobody has. Both clients.
func TestRedisCancelledPermitsLeaveNoOrphan(t *testing.T) {
	for _, client := range backendtest.RedisClients {
		t.Run(client.Name, func(t *testing.T) {
			srv := testserver.StartRedis(t)
			b := openSlots(t, client, srv)
			s := newSem(t, b, fencedlock.Options{TTL: 10 * time.Second, MinRetryDelay: time.Millisecond, MaxRetryDelay: 5 * time.Millisecond,
				Logger: slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))})
			const name, limit = "orphan", 3
			var (
				mu   sync.Mutex
				held = map[string]*semaphore.Permit{}
				wg   sync.WaitGroup
			)
			stop := make(chan struct{})
			wg.Go(func() { // the server stalls writes now and then
				for i := 0; ; i++ {
					select {
					case <-stop:
						return
					case <-time.After(time.Duration(5+rand.IntN(10)) * time.Millisecond):
					}
					if _, err := srv.CLI(t, "CLIENT", "PAUSE", strconv.Itoa(1+rand.IntN(20)), "WRITE"); err != nil {
						t.Error(err)
						return
					}
				}
			})
			var workers sync.WaitGroup
			for range 16 {
				workers.Go(func() {
					for range 20 {
						ctx, cancel := context.WithTimeout(context.Background(), time.Duration(rand.IntN(3000))*time.Microsecond)
						p, err := s.Acquire(ctx, name, limit)
						cancel()
						if err != nil {
							continue
						}
						mu.Lock()
						if len(held) < limit-1 && rand.IntN(8) == 0 { // one slot always cycles
							held[p.Key()] = p // kept to the end
							mu.Unlock()
							continue
						}
						mu.Unlock()
						_ = p.Release(context.Background())
					}
				})
			}
			workers.Wait()
			close(stop)
			wg.Wait()
			time.Sleep(200 * time.Millisecond) // the stalled requests arrive (pauses are at most 20 ms)
			orphans := 0
			for slot := range limit {
				k := semaphore.SlotKey(name, slot)
				info, err := b.Inspect(context.Background(), k)
				if err != nil {
					t.Fatal(err)
				}
				p := held[k]
				switch {
				case info.Held && (p == nil || p.Err() != nil):
					orphans++
					t.Errorf("slot %d is held (fence %v) by an owner no caller got a permit for", slot, info.Fence)
				case info.Held && info.Fence != p.Fence():
					t.Errorf("slot %d is held with fence %v, its permit has %v", slot, info.Fence, p.Fence())
				case !info.Held && p != nil && p.Err() == nil:
					t.Errorf("slot %d is free, but its permit (fence %v) is still valid", slot, p.Fence())
				}
			}
			abandoned := 0
			for slot := range limit {
				ak := redisscript.LockKey(redisscript.DefaultKeyPrefix, semaphore.SlotKey(name, slot)) + redisnames.AbandonedSuffix
				out, err := srv.CLI(t, "EXISTS", ak)
				if err != nil {
					t.Fatal(err)
				}
				if strings.TrimSpace(out) == "1" {
					abandoned++
				}
			}
			t.Logf("%d permits held at the end, %d orphans; %d of %d slots have abandon marks (clean-ups of an acquire of unknown outcome)", len(held), orphans, abandoned, limit)
			if abandoned == 0 {
				t.Error("no clean-up left an abandon mark: the test did not exercise them")
			}
		})
	}
}
