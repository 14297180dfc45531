package semaphore_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/fencedlock/fencedlock"
	"github.com/fencedlock/fencedlock/backend/memory"
	"github.com/fencedlock/fencedlock/driver"
	"github.com/fencedlock/fencedlock/internal/locktest"
	"github.com/fencedlock/fencedlock/internal/semaphoretest"
	"github.com/fencedlock/fencedlock/semaphore"
)

// memorySetup runs the scenarios on backend/memory: each Semaphore on its
// own Backend of one Store, as processes sharing one server. Memory is a
// driver.SlotAcquirer: each attempt takes the first free slot in one step.
func memorySetup() semaphoretest.Setup {
	return memoryWith(func(b *memory.Backend) driver.Backend { return b })
}

// oneAtATime is a memory Backend that is a Notifier but no SlotAcquirer:
// the Semaphore tries its slots one TryAcquire at a time, as on etcd or a
// Redis Cluster.
type oneAtATime struct {
	driver.Backend
	driver.Notifier
}

// sweepSetup is memorySetup with the slots tried one at a time.
func sweepSetup() semaphoretest.Setup {
	return memoryWith(func(b *memory.Backend) driver.Backend { return oneAtATime{b, b} })
}

// memoryWith runs the scenarios on the Backends of one memory Store, each
// seen through wrap.
func memoryWith(wrap func(*memory.Backend) driver.Backend) semaphoretest.Setup {
	st := memory.NewStore()
	return semaphoretest.Setup{
		New: func(t *testing.T, opts fencedlock.Options) *semaphore.Semaphore {
			t.Helper()
			b := st.Backend()
			s, err := semaphore.New(wrap(b), opts)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { s.Close(); b.Close() })
			return s
		},
		Store: memory.NewFencedStore(),
		TTL:   300 * time.Millisecond,
	}
}

// bothPaths runs scenario on memorySetup ("slots": each attempt one
// SlotAcquirer step) and again on sweepSetup ("sweep": the slots tried one
// at a time, the fallback of a backend that is no SlotAcquirer, or a Redis
// Cluster).
func bothPaths(t *testing.T, scenario func(*testing.T, semaphoretest.Setup)) {
	t.Run("slots", func(t *testing.T) { scenario(t, memorySetup()) })
	t.Run("sweep", func(t *testing.T) { scenario(t, sweepSetup()) })
}

func TestLimitNeverExceeded(t *testing.T) {
	bothPaths(t, func(t *testing.T, s semaphoretest.Setup) { semaphoretest.LimitNeverExceeded(t, s, 3, 8, 10) })
}

func TestLimitOne(t *testing.T) {
	semaphoretest.LimitNeverExceeded(t, memorySetup(), 1, 4, 10)
}

func TestLimitsDisagree(t *testing.T) {
	bothPaths(t, func(t *testing.T, s semaphoretest.Setup) { semaphoretest.LimitsDisagree(t, s, 2, 4, 8, 10) })
}

func TestLowerLimitWaitsForLowSlots(t *testing.T) {
	semaphoretest.LowerLimitWaitsForLowSlots(t, memorySetup())
}

func TestPausedHolderWriteRefused(t *testing.T) {
	semaphoretest.PausedHolderWriteRefused(t, memorySetup())
}

func TestCrashedPermitReturns(t *testing.T) {
	semaphoretest.CrashedPermitReturns(t, memorySetup())
}

func TestCancelledAcquireLeavesNothing(t *testing.T) {
	bothPaths(t, semaphoretest.CancelledAcquireLeavesNothing)
}

// heldByAnother returns the permit of name, limit 1, held by one Semaphore,
// and another Semaphore on the same store to wait for it: both with a TTL
// of 30s and MaxRetryDelay of 20s (no fallback retry within a test's
// bound), closed when t ends.
func heldByAnother(t *testing.T, ctx context.Context, name string) (*semaphore.Permit, *semaphore.Semaphore) {
	t.Helper()
	st := memory.NewStore()
	opts := fencedlock.Options{TTL: 30 * time.Second, MaxRetryDelay: 20 * time.Second}
	var sems [2]*semaphore.Semaphore
	for i := range sems {
		sems[i] = locktest.Open(t, st.Backend(), opts, semaphore.New)
	}
	p, err := sems[0].Acquire(ctx, name, 1)
	if err != nil {
		t.Fatal(err)
	}
	return p, sems[1]
}

// TestReleaseWakesWaiter: on memory, a Notifier, a waiter is woken by the
// release (internal/semaphoretest, as on Redis and etcd).
func TestReleaseWakesWaiter(t *testing.T) {
	semaphoretest.ReleaseWakesWaiter(t, memorySetup())
}

func TestInvalidInput(t *testing.T) {
	s, err := semaphore.New(memory.New(), fencedlock.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	for _, c := range []struct {
		name  string
		limit int
	}{{"n", 0}, {"n", -1}, {"n", semaphore.MaxLimit + 1}, {"", 1}, {strings.Repeat("k", fencedlock.MaxKeyLen-8), 10}} {
		if p, err := s.Acquire(t.Context(), c.name, c.limit); !errors.Is(err, fencedlock.ErrInvalid) {
			t.Errorf("Acquire(%d-byte name, %d) = %v, %v; want ErrInvalid", len(c.name), c.limit, p, err)
		}
		if p, err := s.TryAcquire(t.Context(), c.name, c.limit); !errors.Is(err, fencedlock.ErrInvalid) {
			t.Errorf("TryAcquire(%d-byte name, %d) = %v, %v; want ErrInvalid", len(c.name), c.limit, p, err)
		}
	}
}

func TestSlotKeysDistinct(t *testing.T) {
	seen := map[string]string{}
	for _, n := range []string{"a", "a/permit/1", "a/permit", "a/permit/", "b"} {
		for slot := range 12 {
			k := semaphore.SlotKey(n, slot)
			if prev, ok := seen[k]; ok {
				t.Fatalf("SlotKey(%q, %d) = %q, as %s", n, slot, k, prev)
			}
			seen[k] = n
		}
	}
}

// TestCloseEndsWait: Close ends a waiting Acquire at once (its fallback
// retry is 20s away) with ErrClosed, and every later call fails so too.
func TestCloseEndsWait(t *testing.T) {
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	_, waiter := heldByAnother(t, ctx, "close")
	closeEndsAcquire(t, ctx, waiter, "close", 1, "waiting (its fallback retry 20s away)", 10*time.Second)
	if _, err := waiter.Acquire(ctx, "close", 1); !errors.Is(err, fencedlock.ErrClosed) {
		t.Fatalf("Acquire after Close = %v, want ErrClosed", err)
	}
	if err := waiter.Close(); err != nil {
		t.Fatalf("second Close: %v", err)
	}
}

// failingSlot is a memory Backend whose Acquire of one key fails with a
// transient error (a store unreachable for that key). It is no
// SlotAcquirer: the Semaphore tries its slots one at a time.
type failingSlot struct {
	driver.Backend
	key string
}

var errUnreachable = errors.New("unreachable")

func (b failingSlot) Acquire(ctx context.Context, req driver.AcquireRequest) (driver.Grant, error) {
	if req.Key == b.key {
		return driver.Grant{}, errUnreachable
	}
	return b.Backend.Acquire(ctx, req)
}

// TestTransientErrorSkipsSlot: a slot whose attempt fails transiently is
// passed over for the next one; when no slot can be taken, the wait ends
// with the context's error and the transient one.
func TestTransientErrorSkipsSlot(t *testing.T) {
	s, err := semaphore.New(failingSlot{memory.New(), semaphore.SlotKey("flaky", 0)}, fencedlock.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	for range 10 { // whichever slot the sweep starts from
		p, err := s.Acquire(t.Context(), "flaky", 2)
		if err != nil || p.Slot() != 1 {
			t.Fatalf("Acquire with slot 0 unreachable = %v, %v; want slot 1", p, err)
		}
		if err := p.Release(t.Context()); err != nil {
			t.Fatal(err)
		}
	}
	ctx, cancel := context.WithTimeout(t.Context(), 50*time.Millisecond)
	defer cancel()
	p, err := s.Acquire(ctx, "flaky", 1)
	if p != nil || !errors.Is(err, fencedlock.ErrNotAcquired) || !errors.Is(err, context.DeadlineExceeded) || !errors.Is(err, errUnreachable) {
		t.Fatalf("Acquire with its only slot unreachable = %v, %v; want ErrNotAcquired, DeadlineExceeded and the transient error", p, err)
	}
}

// slowWatch is a memory Backend whose Watch takes a round trip of rtt
// (ended early by its context), as a subscription to a remote server.
type slowWatch struct {
	*memory.Backend
	rtt time.Duration
}

func (b slowWatch) Watch(ctx context.Context, key string) (<-chan struct{}, func(), error) {
	select {
	case <-ctx.Done():
		return nil, nil, ctx.Err()
	case <-time.After(b.rtt):
	}
	return b.Backend.Watch(ctx, key)
}

// TestCloseEndsWatchSetup: Close ends a waiting Acquire at once even while
// it is still setting up its release watches, one per slot (100 slots at
// 30ms each take 3s): it returns ErrClosed within 1s.
func TestCloseEndsWatchSetup(t *testing.T) {
	const name, limit = "closewatch", 100
	st := memory.NewStore()
	holder, err := semaphore.New(st.Backend(), fencedlock.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer holder.Close()
	for range limit {
		if _, err := holder.TryAcquire(t.Context(), name, limit); err != nil {
			t.Fatal(err)
		}
	}
	waiter, err := semaphore.New(slowWatch{st.Backend(), 30 * time.Millisecond}, fencedlock.Options{MaxRetryDelay: 20 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	closeEndsAcquire(t, t.Context(), waiter, name, limit, "setting up its watches", time.Second)
}

// closeEndsAcquire starts waiter.Acquire(ctx, name, limit), closes waiter
// 100ms later, when the Acquire is at what (waiting, setting up its
// watches), and fails t unless the Acquire returns ErrClosed within bound
// of the Close.
func closeEndsAcquire(t *testing.T, ctx context.Context, waiter *semaphore.Semaphore, name string, limit int, what string, bound time.Duration) {
	t.Helper()
	got := make(chan error, 1)
	go func() {
		_, err := waiter.Acquire(ctx, name, limit)
		got <- err
	}()
	time.Sleep(100 * time.Millisecond) // the waiter is at what, or about to be
	closed := time.Now()
	if err := waiter.Close(); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-got:
		if !errors.Is(err, fencedlock.ErrClosed) {
			t.Fatalf("Acquire ended by Close while %s = %v, want ErrClosed", what, err)
		}
		t.Logf("Acquire %s returned %v after Close", what, time.Since(closed).Round(time.Millisecond))
	case <-time.After(bound):
		err := <-got
		t.Fatalf("Close did not end an Acquire %s within %v: it returned %v after Close (%v)", what, bound, time.Since(closed).Round(time.Millisecond), err)
	}
}
