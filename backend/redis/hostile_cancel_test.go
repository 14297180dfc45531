package redis

import (
	"bytes"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"net"
	"os"
	"runtime"
	"runtime/pprof"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/fencedlock/fencedlock"
	"github.com/fencedlock/fencedlock/driver"
	"github.com/fencedlock/fencedlock/internal/redisscript"
	"github.com/fencedlock/fencedlock/internal/redistest"
	"github.com/redis/rueidis"
)

// TestCancelledAcquiresLeaveNoOrphan: the hostile schedule of
// backend/goredis's test of the same name, on rueidis, which pipelines
// every concurrent command and returns on a context while still writing a
// queued command: 64 goroutines call Acquire and TryAcquire with contexts
// that end at random points (already ended, after a few microseconds while
// the command is queued or its reply in flight, after some milliseconds,
// or cancelled from another goroutine) while the server stalls now and
// then (CLIENT PAUSE WRITE). After every call has returned, every key is
// free or held by a Lease the test got back: no lock is held by an owner
// token nobody has, neither at once nor after the queued requests have had
// time to arrive. No goroutine is left behind and the client still works.
// The seed is logged; FENCEDLOCK_SEED repeats it.
//
// rueidis dials a connection, and says HELLO on it, with the context of
// the command that needs it first, and fails every command waiting for it
// with that error (TestReleaseNotFailedByAnotherCallersDial): a clean-up
// release (or a Lease's Release with context.Background) then fails with
// "context canceled" because another caller's context ended, and its lock
// stays held for its TTL. rueidis dials its pipeline connections lazily,
// at their first use, and again after one closed (it closes one when a
// lone command's context deadline passes while it waits for the reply).
// The subtest "warm" first makes the client dial all 4 of them (a
// Background context, counted by the dialer): it passed 8 runs of 8, with
// 1 to 4 redials each; "cold" (a fresh client) failed in 2 runs of 3 to 8.
// The backend runs such a command again (runScript): both pass.
func TestCancelledAcquiresLeaveNoOrphan(t *testing.T) {
	for _, tc := range []struct {
		name string
		warm bool
	}{{"warm", true}, {"cold", false}} {
		t.Run(tc.name, func(t *testing.T) {
			srv := redistest.Start(t)
			pauser := srv.Client(t, nil) // its own connection: not one the workers' contexts dial
			base := runtime.NumGoroutine()
			var dials atomic.Int32
			c := srv.Client(t, func(o *rueidis.ClientOption) {
				o.PipelineMultiplex = 2 // 4 pipeline connections
				o.DialCtxFn = func(ctx context.Context, dst string, d *net.Dialer, _ *tls.Config) (net.Conn, error) {
					dials.Add(1)
					return d.DialContext(ctx, "tcp", dst)
				}
			})
			if tc.warm {
				for i := 0; dials.Load() < 4; i++ {
					if i == 1000 {
						t.Fatalf("%d dials after %d commands, want 4", dials.Load(), i)
					}
					if err := c.Do(context.Background(), c.B().Get().Key(strconv.Itoa(i)).Build()).Error(); err != nil && !rueidis.IsRedisNil(err) {
						t.Fatal(err)
					}
				}
			}
			b, err := New(c, Options{})
			if err != nil {
				t.Fatal(err)
			}
			l, err := fencedlock.New(b, fencedlock.Options{TTL: 10 * time.Second,
				Logger: slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelError}))})
			if err != nil {
				t.Fatal(err)
			}
			hostileCancels(t, l, b.Inspect, func(ms int) error {
				return pauser.Do(context.Background(), pauser.B().Arbitrary("CLIENT", "PAUSE", strconv.Itoa(ms), "WRITE").Build()).Error()
			})
			var abandoned int64
			for i := range 16 {
				n, err := c.Do(context.Background(), c.B().Arbitrary("EXISTS", b.LockKey(fmt.Sprintf("hostile/%d", i))+redisscript.AbandonedSuffix).Build()).AsInt64()
				if err != nil {
					t.Fatal(err)
				}
				abandoned += n
			}
			t.Logf("%d of 16 keys have abandon marks (clean-ups of an acquire of unknown outcome); %d dials", abandoned, dials.Load())
			if abandoned == 0 {
				t.Error("no clean-up left an abandon mark: the test did not exercise them")
			}
			l.Close()
			b.Close()
			c.Close()
			checkGoroutines(t, base)
		})
	}
}

// checkGoroutines waits (bounded) for the goroutines to come back to base
// and fails the test with their stacks if they do not.
func checkGoroutines(t *testing.T, base int) {
	t.Helper()
	var n int
	for range 200 {
		if n = runtime.NumGoroutine(); n <= base {
			return
		}
		time.Sleep(50 * time.Millisecond)
	}
	var buf bytes.Buffer
	_ = pprof.Lookup("goroutine").WriteTo(&buf, 1)
	t.Errorf("%d goroutines after 10s, %d before:\n%s", n, base, buf.String())
}

// hostileSeed returns the seed of a hostile test, logged: FENCEDLOCK_SEED
// if set, else the clock.
func hostileSeed(t *testing.T) uint64 {
	seed := uint64(time.Now().UnixNano())
	if s := os.Getenv("FENCEDLOCK_SEED"); s != "" {
		n, err := strconv.ParseUint(s, 10, 64)
		if err != nil {
			t.Fatalf("FENCEDLOCK_SEED: %v", err)
		}
		seed = n
	}
	t.Logf("seed %d (FENCEDLOCK_SEED=%d repeats it)", seed, seed)
	return seed
}

// hostileCancels runs the schedule of TestCancelledAcquiresLeaveNoOrphan on
// l and checks the keys with inspect; pause stalls the server's writes for
// that many milliseconds.
func hostileCancels(t *testing.T, l *fencedlock.Locker, inspect func(context.Context, string) (driver.Info, error), pause func(ms int) error) {
	const (
		workers = 64
		rounds  = 40
		nkeys   = 16
	)
	seed := hostileSeed(t)
	keys := make([]string, nkeys)
	for i := range keys {
		keys[i] = fmt.Sprintf("hostile/%d", i)
	}
	var (
		mu       sync.Mutex
		kept     = map[string]*fencedlock.Lease{} // leases held to the end, by key
		got      atomic.Int64                     // leases got back
		failed   atomic.Int64                     // calls that failed
		deadline = time.Now().Add(60 * time.Second)
	)
	stop := make(chan struct{})
	pauser := make(chan struct{})
	go func() { // the server stalls now and then while the calls run
		defer close(pauser)
		rng := rand.New(rand.NewPCG(seed, 1))
		for range 20 {
			select {
			case <-stop:
				return
			case <-time.After(time.Duration(20+rng.IntN(80)) * time.Millisecond):
			}
			if err := pause(5 + rng.IntN(60)); err != nil {
				t.Errorf("client pause: %v", err)
				return
			}
		}
	}()
	var wg sync.WaitGroup
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(seed, uint64(w)+2))
			for range rounds {
				if time.Now().After(deadline) {
					return
				}
				key := keys[rng.IntN(nkeys)]
				ctx, cancel := context.WithCancel(context.Background())
				switch rng.IntN(5) {
				case 0: // ended before the call
					cancel()
				case 1: // ends while the command is queued or in flight
					ctx, cancel = context.WithTimeout(ctx, time.Duration(rng.IntN(200))*time.Microsecond)
				case 2:
					ctx, cancel = context.WithTimeout(ctx, time.Duration(rng.IntN(20))*time.Millisecond)
				case 3: // cancelled from another goroutine
					d := time.Duration(rng.IntN(3000)) * time.Microsecond
					time.AfterFunc(d, cancel)
				case 4: // some time to wait for the key
					ctx, cancel = context.WithTimeout(ctx, time.Duration(50+rng.IntN(200))*time.Millisecond)
				}
				var (
					ls  *fencedlock.Lease
					err error
				)
				if rng.IntN(2) == 0 {
					ls, err = l.Acquire(ctx, key)
				} else {
					ls, err = l.TryAcquire(ctx, key)
				}
				cancel()
				if err != nil {
					failed.Add(1)
					if ls != nil {
						t.Errorf("%s: a lease with the error %v", key, err)
					}
					continue
				}
				got.Add(1)
				keep := rng.IntN(32) == 0
				if keep {
					mu.Lock()
					if kept[key] == nil {
						kept[key] = ls
						mu.Unlock()
						continue
					}
					mu.Unlock()
				}
				time.Sleep(time.Duration(rng.IntN(1000)) * time.Microsecond)
				if err := ls.Release(context.Background()); err != nil {
					t.Errorf("%s: release of a lease got back: %v", key, err)
				}
			}
		}()
	}
	wg.Wait()
	close(stop)
	<-pauser
	t.Logf("%d workers x %d rounds: %d leases got back, %d calls failed, %d kept", workers, rounds, got.Load(), failed.Load(), len(kept))
	if got.Load() == 0 || failed.Load() == 0 {
		t.Errorf("no lease or no failure: the schedule did not exercise both")
	}

	check := func(when string) {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		for _, key := range keys {
			info, err := inspect(ctx, key)
			if err != nil {
				t.Fatalf("%s: inspect %s: %v", when, key, err)
			}
			ls := kept[key]
			switch {
			case info.Held && ls == nil:
				t.Errorf("%s: %s held by %s, whom no Lease the test got back holds (ttl %v, fence %d)", when, key, info.Holder, info.TTL, info.Fence)
			case info.Held && info.Holder != ls.Holder():
				t.Errorf("%s: %s held by %s, the kept Lease is %s", when, key, info.Holder, ls.Holder())
			case !info.Held && ls != nil:
				t.Errorf("%s: %s free, the kept Lease %s lost it", when, key, ls.Holder())
			}
		}
	}
	check("after every call returned")
	// Requests queued or in flight when their context ended may still
	// arrive; any that does must take nothing.
	time.Sleep(500 * time.Millisecond)
	check("500ms later")

	// The client still works, alone and pipelined.
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	var wg2 sync.WaitGroup
	for w := range workers {
		wg2.Add(1)
		go func() {
			defer wg2.Done()
			ls, err := l.TryAcquire(ctx, fmt.Sprintf("after/%d", w))
			if err != nil {
				t.Errorf("after: %v", err)
				return
			}
			if err := ls.Release(ctx); err != nil {
				t.Errorf("after: release: %v", err)
			}
		}()
	}
	wg2.Wait()
	for key, ls := range kept {
		if err := ls.Release(ctx); err != nil {
			t.Errorf("%s: release of the kept lease: %v", key, err)
		}
	}
	for _, key := range keys {
		if info, err := inspect(ctx, key); err != nil || info.Held {
			t.Errorf("%s at the end: %+v, %v; want free", key, info, err)
		}
	}
	if errors.Is(ctx.Err(), context.DeadlineExceeded) {
		t.Error("the client did not answer within 20s")
	}
}
