// Package hostiletest holds the hostile schedules that the Redis backends'
// tests run alike (backend/redis on rueidis, backend/goredis on go-redis):
// random cancels while the server stalls, with the checks that no lock is
// left held by an owner nobody holds.
package hostiletest

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
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
)

// CheckGoroutines waits (bounded) for the goroutines to come back to base
// and fails the test with their stacks if they do not.
func CheckGoroutines(t *testing.T, base int) {
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

// Seed returns the seed of a hostile test, logged: FENCEDLOCK_SEED
// if set, else the clock.
func Seed(t *testing.T) uint64 {
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

// Cancels runs a hostile schedule of cancels on l: 64 goroutines call
// Acquire and TryAcquire on 16 keys with contexts that end at random
// points (already ended, after microseconds while the command is queued or
// its reply in flight, after milliseconds, cancelled from another
// goroutine), keep a few leases and release the rest, while pause stalls
// the server's writes for that many milliseconds now and then. After every
// call returned, and again 500 ms later, every key must be free or held by
// a Lease the schedule kept (inspect reads a key); then the client must
// still work. Bounded: 40 rounds per goroutine, 60 s.
func Cancels(t *testing.T, l *fencedlock.Locker, inspect func(context.Context, string) (driver.Info, error), pause func(ms int) error) {
	const (
		workers = 64
		rounds  = 40
		nkeys   = 16
	)
	seed := Seed(t)
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
