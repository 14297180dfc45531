package rwlock_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/fencedlock/fencedlock"
	"github.com/fencedlock/fencedlock/backend/memory"
	"github.com/fencedlock/fencedlock/driver"
	"github.com/fencedlock/fencedlock/internal/backendtest"
	"github.com/fencedlock/fencedlock/internal/locktest"
	"github.com/fencedlock/fencedlock/internal/testserver"
	"github.com/fencedlock/fencedlock/rwlock"
)

// slowRelease is a memory Backend whose ReleaseRW takes delay to reach
// the store, as over a slow link.
type slowRelease struct {
	*memory.Backend
	delay time.Duration
}

func (s slowRelease) ReleaseRW(ctx context.Context, g driver.Grant, m driver.RWMode) error {
	time.Sleep(s.delay)
	return s.Backend.ReleaseRW(ctx, g, m)
}

// TestCloseRemovesWaitingIntent: Close ends a Lock waiting behind a
// reader, and that Lock removes the intent it registered before Close
// returns, so that the caller may then close the backend (as New's doc
// asks). Close returned before the removal, which then met a closed
// backend: the intent stayed, keeping new readers out of the name for
// up to Intent with no writer waiting.
func TestCloseRemovesWaitingIntent(t *testing.T) {
	st := memory.NewStore()
	ctx := context.Background()
	hold, err := rwlock.New(st.Backend(), fencedlock.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer hold.Close()
	h, err := hold.RLock(ctx, "close")
	if err != nil {
		t.Fatal(err)
	}
	defer h.Release(ctx)

	b := slowRelease{Backend: st.Backend(), delay: 50 * time.Millisecond}
	w, err := rwlock.New(b, fencedlock.Options{})
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { _, err := w.Lock(ctx, "close"); done <- err }()
	for { // until the writer's intent is registered (bounded by the test's timeout)
		info, err := st.Backend().InspectRW(ctx, "close")
		if err != nil {
			t.Fatal(err)
		}
		if info.Intents > 0 {
			break
		}
		time.Sleep(time.Millisecond)
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	b.Close() // the caller closes the backend after the RWLock
	<-done
	info, err := st.Backend().InspectRW(ctx, "close")
	if err != nil {
		t.Fatal(err)
	}
	if info.Intents != 0 {
		t.Fatalf("after Close and the backend's Close: %d intents left, want the closed writer's removed", info.Intents)
	}
}

// TestCloseUnderLoad: Close while goroutines sharing the RWLock hold,
// wait for and try read and write leases of two names: every call returns
// (ErrClosed once it is closed), Close reports no error, and nothing is
// left on the backend: another RWLock takes both names for writing at
// once, with no intent in the way. On memory and a real redis-server with
// each client.
func TestCloseUnderLoad(t *testing.T) {
	st := memory.NewStore()
	t.Run("memory", func(t *testing.T) { closeUnderLoad(t, func(*testing.T) driver.Backend { return st.Backend() }) })
	srv := testserver.StartRedis(t)
	for _, cl := range backendtest.RedisClients {
		t.Run(cl.Name, func(t *testing.T) {
			closeUnderLoad(t, func(t *testing.T) driver.Backend {
				b, _ := cl.Open(t, srv)
				t.Cleanup(func() { b.Close() })
				return b
			})
		})
	}
}

func closeUnderLoad(t *testing.T, open func(*testing.T) driver.Backend) {
	r, err := rwlock.New(open(t), fencedlock.Options{MaxRetryDelay: 20 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	names := []string{"close-a", "close-b"}
	var wg sync.WaitGroup
	for i := range 16 {
		wg.Go(func() {
			for j := 0; j < 1000 && ctx.Err() == nil; j++ { // until closed (bounded)
				l, err := anyLease(ctx, r, names[(i+j)%2], (i+j)%4)
				if errors.Is(err, fencedlock.ErrClosed) {
					return
				}
				if err == nil {
					time.Sleep(time.Millisecond)
					_ = l.Release(ctx)
				}
			}
		})
	}
	time.Sleep(200 * time.Millisecond)
	if err := r.Close(); err != nil {
		t.Fatalf("Close under load: %v", err)
	}
	wg.Wait()
	if ctx.Err() != nil {
		t.Fatalf("the RWLock's callers ran until the test's timeout: %v", ctx.Err())
	}
	b := open(t)
	other := locktest.Open(t, b, fencedlock.Options{}, rwlock.New)
	for _, n := range names {
		info, err := b.(driver.RWInspector).InspectRW(ctx, n)
		if err != nil || info.Held() || info.Intents != 0 {
			t.Fatalf("%q after Close: %+v, %v; want nothing held, no intent", n, info, err)
		}
		w, err := other.TryLock(ctx, n)
		if err != nil {
			t.Fatalf("TryLock of %q after Close: %v", n, err)
		}
		_ = w.Release(ctx)
	}
}

// anyLease takes a lease of n with r: Lock, RLock, TryLock or TryRLock
// for how 0 to 3.
func anyLease(ctx context.Context, r *rwlock.RWLock, n string, how int) (*rwlock.Lease, error) {
	switch how {
	case 0:
		return r.Lock(ctx, n)
	case 1:
		return r.RLock(ctx, n)
	case 2:
		return r.TryLock(ctx, n)
	}
	return r.TryRLock(ctx, n)
}
