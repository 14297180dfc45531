package clustertest

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc"

	"github.com/fencedlock/fencedlock"
	"github.com/fencedlock/fencedlock/driver"
)

// streamCounter counts the gRPC streams a client opens, by method.
type streamCounter struct {
	mu sync.Mutex
	n  map[string]int
}

func (c *streamCounter) intercept(ctx context.Context, desc *grpc.StreamDesc, cc *grpc.ClientConn, method string, streamer grpc.Streamer, opts ...grpc.CallOption) (grpc.ClientStream, error) {
	c.mu.Lock()
	if c.n == nil {
		c.n = make(map[string]int)
	}
	c.n[method[strings.LastIndex(method, "/")+1:]]++
	c.mu.Unlock()
	return streamer(ctx, desc, cc, method, opts...)
}

func (c *streamCounter) get(method string) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.n[method]
}

// Many leases held by one Backend are renewed on a few shared
// LeaseKeepAlive streams (at most 8, one per lease-ID slot, never one per
// lease or per renewal) and watched by one shared watch: none is lost over several renew
// intervals, and deleting one key by hand reports exactly that lease lost,
// at once.
//
// The 100 acquires and releases saturate the three in-process members on
// a loaded 2-core machine (-race): at load average 10 the cluster answered
// no renewal at all for more than 5.4 s (the 6 s lease's local deadline),
// with no leader change ("apply request took too long" up to 490 ms,
// heartbeats late). Such a run decides nothing about streams or loss
// reports, so a lease lost at its local deadline without the server's
// word (not ErrNotHeld) makes the run inconclusive: it is retried once
// with a lease long enough for the stall measured in it, and only the
// retry's outcome counts.
func TestManyLeasesSharedStreams(t *testing.T) {
	ttl := 6 * time.Second
	var stall time.Duration
	t.Run(fmt.Sprint(ttl), func(t *testing.T) { stall = manyLeases(t, ttl) })
	if stall == 0 || t.Failed() {
		return
	}
	// Riding out a stall S needs the last renewal sent before it (up to
	// one interval, TTL/3, earlier) to outlast it by the safety margin
	// (TTL/10): TTL*(1-1/3-1/10) > S, so TTL > 1.76*S; take 2*S, whole
	// seconds (etcd's unit).
	retry := (2*stall + time.Second - 1).Truncate(time.Second)
	t.Logf("a %v lease was lost to a stall of the cluster: no renewal confirmed for %s or more (the server never said it was gone); retrying once with a %v lease",
		ttl, ms(stall), retry)
	t.Run(fmt.Sprint(retry), func(t *testing.T) {
		if s := manyLeases(t, retry); s != 0 {
			t.Fatalf("a %v lease was lost to a stall of %s as well", retry, ms(s))
		}
	})
}

// manyLeases runs TestManyLeasesSharedStreams with leases of ttl. It
// returns 0 if the run decided, or, if a lease was lost at its local
// deadline without the server's word, how long that lease went without a
// confirmed renewal (TTL minus the safety margin: a lower bound).
func manyLeases(t *testing.T, ttl time.Duration) (stall time.Duration) {
	const n = 100
	e := newEnv(t)
	var sc streamCounter
	b := e.countedBackend(1, grpc.WithChainStreamInterceptor(sc.intercept))
	// A release that takes longer than the lease is moot: allow it that.
	l := mustLocker(t, b, fencedlock.Options{TTL: ttl, ReleaseTimeout: ttl})
	defer l.Close()
	ctx := ctxFor(t, time.Minute+4*ttl)

	// The local deadline lies TTL minus the safety margin after the send
	// time of the last confirmed renewal: a lease lost there went that
	// long (or longer, unseen) without one.
	unconfirmed := ttl - ttl/fencedlock.DefaultSafetyDivisor - time.Millisecond
	// stalled reports whether err is a loss at the local deadline, not on
	// the server's word, and records the stall.
	stalled := func(err error) bool {
		if !errors.Is(err, fencedlock.ErrLeaseLost) || errors.Is(err, driver.ErrNotHeld) {
			return false
		}
		stall = max(stall, unconfirmed)
		t.Logf("inconclusive: %v", err)
		return true
	}

	leases := make([]*fencedlock.Lease, n)
	inParallel(n, func(i int) bool {
		ls, err := l.Acquire(ctx, fmt.Sprintf("many-%d", i))
		if err != nil {
			t.Errorf("acquire %d: %v", i, err)
			return false
		}
		leases[i] = ls
		return true
	})
	if t.Failed() {
		t.FailNow()
	}
	defer func() {
		if stall != 0 {
			for _, ls := range leases {
				ls.Release(ctx)
			}
		}
	}()
	// Hold until every lease has been renewed at least twice: each
	// confirmed renewal moves its deadline on by about one renew interval
	// (TTL/3), so a deadline more than 1.5 intervals past the first one
	// took two renewals.
	first := make([]time.Time, n)
	for i, ls := range leases {
		first[i] = ls.Deadline()
	}
	holdStart := time.Now()
	for i := 0; i < n; {
		if err := leases[i].Err(); err != nil {
			if stalled(err) {
				return stall
			}
			t.Fatalf("lease %d lost while held for %v: %v", i, time.Since(holdStart), err)
		}
		if leases[i].Deadline().Sub(first[i]) > ttl/2 {
			i++
			continue
		}
		if time.Since(holdStart) > 5*ttl {
			t.Fatalf("lease %d not renewed twice in %v", i, time.Since(holdStart))
		}
		time.Sleep(20 * time.Millisecond)
	}
	hold := time.Since(holdStart)
	for i, ls := range leases {
		if err := ls.Err(); err != nil {
			if stalled(err) {
				return stall
			}
			t.Fatalf("lease %d lost while held for %v: %v", i, hold, err)
		}
	}
	if got := sc.get("LeaseKeepAlive"); got < 1 || got > 8 {
		t.Errorf("%d LeaseKeepAlive streams opened for %d leases, want 1 to 8", got, n)
	}

	// Delete one key by hand: its lease, and only it, is reported lost.
	victim := n / 2
	kvs := e.entries(fmt.Sprintf("many-%d", victim))
	if len(kvs) != 1 {
		t.Fatalf("%d entries for the victim", len(kvs))
	}
	start := time.Now()
	if _, err := e.admin.Delete(ctx, string(kvs[0].Key)); err != nil {
		t.Fatal(err)
	}
	bound := ttl / 3 // the watch reports it; the renewals alone would take up to one interval more
	select {
	case <-leases[victim].Done():
	case <-time.After(bound):
		t.Fatalf("deleted key not reported lost within %v", bound)
	}
	if !errors.Is(leases[victim].Err(), driver.ErrNotHeld) {
		t.Fatalf("victim: Err = %v, want ErrNotHeld", leases[victim].Err())
	}
	delay := time.Since(start)
	time.Sleep(100 * time.Millisecond)
	for i, ls := range leases {
		if err := ls.Err(); i != victim && err != nil {
			if stalled(err) {
				return stall
			}
			t.Fatalf("lease %d lost after another's key was deleted: %v", i, err)
		}
	}
	t.Logf("%d leases (TTL %v) held %v on %d LeaseKeepAlive stream(s) and %d Watch stream(s); deleted key reported lost after %s",
		n, ttl, hold, sc.get("LeaseKeepAlive"), sc.get("Watch"), ms(delay))
	// Release as they were acquired, 16 at a time.
	var mu sync.Mutex
	inParallel(n, func(i int) bool {
		if i == victim {
			return true
		}
		if err := leases[i].Release(ctx); err != nil {
			mu.Lock()
			// A release of a lease already lost says ErrNotHeld;
			// the lease's own Err tells whose word it was.
			if !stalled(leases[i].Err()) {
				t.Errorf("release %d: %v", i, err)
			}
			mu.Unlock()
		}
		return true
	})
	leases[victim].Release(ctx)
	if stall != 0 || t.Failed() {
		return stall
	}
	waitNoLeases(t, e)
	return 0
}

// inParallel calls fn for each i in [0, n), 16 calls at a time, and
// returns when all are done; a worker whose fn returns false takes no
// further i.
func inParallel(n int, fn func(i int) bool) {
	var next atomic.Int64
	var wg sync.WaitGroup
	for range 16 {
		wg.Go(func() {
			for i := int(next.Add(1) - 1); i < n; i = int(next.Add(1) - 1) {
				if !fn(i) {
					return
				}
			}
		})
	}
	wg.Wait()
}

// A key deleted between its grant and the start of its keepalive is
// reported lost: once before the backend's shared watch exists (the keeper
// re-reads its key), once while it runs (its log of recent deletions).
func TestKeyDeletedBeforeKeepAlive(t *testing.T) {
	e := newEnv(t)
	b := e.backend(1)
	ctx := ctxFor(t, time.Minute)
	for round, what := range []string{"before the shared watch started", "while the shared watch runs"} {
		if round == 1 {
			// Start the shared watch with a healthy grant.
			g, err := b.Acquire(ctx, driver.AcquireRequest{Key: "other", Owner: "owner-other-0123456789", TTL: ttl})
			if err != nil {
				t.Fatal(err)
			}
			kctx, cancel := context.WithCancel(ctx)
			defer cancel()
			ch := b.KeepAlive(kctx, g)
			select {
			case r := <-ch:
				if r.Err != nil {
					t.Fatalf("healthy grant: %v", r.Err)
				}
			case <-time.After(ttl):
				t.Fatal("healthy grant: no renewal within its TTL")
			}
		}
		owner := fmt.Sprintf("owner-%d-0123456789", round)
		g, err := b.Acquire(ctx, driver.AcquireRequest{Key: "k", Owner: owner, TTL: ttl})
		if err != nil {
			t.Fatal(err)
		}
		kvs := e.entries("k")
		if len(kvs) != 1 {
			t.Fatalf("%d entries", len(kvs))
		}
		if _, err := e.admin.Delete(ctx, string(kvs[0].Key)); err != nil {
			t.Fatal(err)
		}
		start := time.Now()
		kctx, cancel := context.WithCancel(ctx)
		ch := b.KeepAlive(kctx, g)
		var lost error
		for lost == nil {
			select {
			case r, ok := <-ch:
				if !ok {
					t.Fatalf("%s: channel closed without reporting the loss", what)
				}
				if errors.Is(r.Err, driver.ErrNotHeld) {
					lost = r.Err
				}
			case <-time.After(ttl / 3):
				t.Fatalf("%s: deleted key not reported within %v", what, ttl/3)
			}
		}
		cancel()
		t.Logf("%s: reported after %s: %v", what, ms(time.Since(start)), lost)
		e.revoke(kvs[0].Lease)
	}
}
