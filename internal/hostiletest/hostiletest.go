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
	c := &cancels{t: t, l: l, inspect: inspect, seed: Seed(t), kept: map[string]*fencedlock.Lease{},
		keys: make([]string, cancelKeys), deadline: time.Now().Add(60 * time.Second)}
	for i := range c.keys {
		c.keys[i] = fmt.Sprintf("hostile/%d", i)
	}
	stop := make(chan struct{})
	pauser := make(chan struct{})
	go func() { // the server stalls now and then while the calls run
		defer close(pauser)
		c.pauses(stop, pause)
	}()
	var wg sync.WaitGroup
	for w := range cancelWorkers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c.worker(w)
		}()
	}
	wg.Wait()
	close(stop)
	<-pauser
	t.Logf("%d workers x %d rounds: %d leases got back, %d calls failed, %d kept", cancelWorkers, cancelRounds, c.got.Load(), c.failed.Load(), len(c.kept))
	if c.got.Load() == 0 || c.failed.Load() == 0 {
		t.Errorf("no lease or no failure: the schedule did not exercise both")
	}

	c.check("after every call returned")
	// Requests queued or in flight when their context ended may still
	// arrive; any that does must take nothing.
	time.Sleep(500 * time.Millisecond)
	c.check("500ms later")
	c.stillWorks()
}

// The size of the Cancels schedule.
const (
	cancelWorkers = 64
	cancelRounds  = 40
	cancelKeys    = 16
)

// cancels is one run of Cancels.
type cancels struct {
	t        *testing.T
	l        *fencedlock.Locker
	inspect  func(context.Context, string) (driver.Info, error)
	seed     uint64
	keys     []string
	deadline time.Time

	mu     sync.Mutex
	kept   map[string]*fencedlock.Lease // leases held to the end, by key
	got    atomic.Int64                 // leases got back
	failed atomic.Int64                 // calls that failed
}

// pauses stalls the server's writes (pause) 20 times at random moments,
// until stop.
func (c *cancels) pauses(stop <-chan struct{}, pause func(ms int) error) {
	rng := rand.New(rand.NewPCG(c.seed, 1))
	for range 20 {
		select {
		case <-stop:
			return
		case <-time.After(time.Duration(20+rng.IntN(80)) * time.Millisecond):
		}
		if err := pause(5 + rng.IntN(60)); err != nil {
			c.t.Errorf("client pause: %v", err)
			return
		}
	}
}

// worker runs worker w's rounds: a call with a context that ends at a
// random point, then the lease, if any, kept or released.
func (c *cancels) worker(w int) {
	rng := rand.New(rand.NewPCG(c.seed, uint64(w)+2))
	for range cancelRounds {
		if time.Now().After(c.deadline) {
			return
		}
		key := c.keys[rng.IntN(cancelKeys)]
		ctx, cancel := hostileContext(rng)
		var (
			ls  *fencedlock.Lease
			err error
		)
		if rng.IntN(2) == 0 {
			ls, err = c.l.Acquire(ctx, key)
		} else {
			ls, err = c.l.TryAcquire(ctx, key)
		}
		cancel()
		if err != nil {
			c.failed.Add(1)
			if ls != nil {
				c.t.Errorf("%s: a lease with the error %v", key, err)
			}
			continue
		}
		c.got.Add(1)
		if rng.IntN(32) == 0 && c.keep(key, ls) {
			continue
		}
		time.Sleep(time.Duration(rng.IntN(1000)) * time.Microsecond)
		if err := ls.Release(context.Background()); err != nil {
			c.t.Errorf("%s: release of a lease got back: %v", key, err)
		}
	}
}

// keep keeps ls to the end if no lease of key is kept yet.
func (c *cancels) keep(key string, ls *fencedlock.Lease) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.kept[key] != nil {
		return false
	}
	c.kept[key] = ls
	return true
}

// hostileContext is a context that ends at a random point: already
// ended, while the command is queued or in flight, after milliseconds,
// cancelled from another goroutine, or with some time to wait for the key.
func hostileContext(rng *rand.Rand) (context.Context, context.CancelFunc) {
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
	return ctx, cancel
}

// check fails the test if a key is held by anyone but its kept Lease.
func (c *cancels) check(when string) {
	c.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for _, key := range c.keys {
		info, err := c.inspect(ctx, key)
		if err != nil {
			c.t.Fatalf("%s: inspect %s: %v", when, key, err)
		}
		ls := c.kept[key]
		switch {
		case info.Held && ls == nil:
			c.t.Errorf("%s: %s held by %s, whom no Lease the test got back holds (ttl %v, fence %d)", when, key, info.Holder, info.TTL, info.Fence)
		case info.Held && info.Holder != ls.Holder():
			c.t.Errorf("%s: %s held by %s, the kept Lease is %s", when, key, info.Holder, ls.Holder())
		case !info.Held && ls != nil:
			c.t.Errorf("%s: %s free, the kept Lease %s lost it", when, key, ls.Holder())
		}
	}
}

// stillWorks checks that the client still works, alone and pipelined,
// and releases the kept leases.
func (c *cancels) stillWorks() {
	t := c.t
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	var wg sync.WaitGroup
	for w := range cancelWorkers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			ls, err := c.l.TryAcquire(ctx, fmt.Sprintf("after/%d", w))
			if err != nil {
				t.Errorf("after: %v", err)
				return
			}
			if err := ls.Release(ctx); err != nil {
				t.Errorf("after: release: %v", err)
			}
		}()
	}
	wg.Wait()
	for key, ls := range c.kept {
		if err := ls.Release(ctx); err != nil {
			t.Errorf("%s: release of the kept lease: %v", key, err)
		}
	}
	for _, key := range c.keys {
		if info, err := c.inspect(ctx, key); err != nil || info.Held {
			t.Errorf("%s at the end: %+v, %v; want free", key, info, err)
		}
	}
	if errors.Is(ctx.Err(), context.DeadlineExceeded) {
		t.Error("the client did not answer within 20s")
	}
}
