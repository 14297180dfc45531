// Package lategranttest holds the scenario of a grant whose reply comes
// back late (issue 28 item 1) that the tests of every networked backend
// run alike (backend/redis on rueidis, backend/goredis on go-redis, etcd in
// backend/etcd/clustertest): one Locker reaches the server through
// internal/faultproxy with its replies delayed past the lease's TTL, the
// other directly. No Lease may be handed out whose local deadline is not
// ahead, and the release of a refused grant must not touch the lock
// another owner took meanwhile.
package lategranttest

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/fencedlock/fencedlock"
	"github.com/fencedlock/fencedlock/driver"
	"github.com/fencedlock/fencedlock/internal/faultproxy"
)

// Setup is what a backend's test gives the scenario.
type Setup struct {
	// Slow reaches the server through Proxy, and grants leases of TTL
	// (its Options.TTL); Fast reaches it directly, with a TTL of its own
	// long enough not to be lost on a loaded machine (10s).
	Slow, Fast *fencedlock.Locker
	Proxy      *faultproxy.Proxy
	TTL        time.Duration
	// Inspect reads a key on the server (the backend's Inspect).
	Inspect func(context.Context, string) (driver.Info, error)
	// Lag is how late Slow's replies come back: long enough that a grant
	// comes back with less than the safety margin left. Zero: 7/4 of the
	// TTL (350ms for 200ms, the case: one round trip).
	Lag time.Duration
}

func (s Setup) lag() time.Duration {
	if s.Lag > 0 {
		return s.Lag
	}
	return s.TTL * 7 / 4
}

// applied waits until key is held on the server (Slow's request was
// applied), at most until bound.
func (s Setup) applied(key string, bound time.Duration) {
	end := time.Now().Add(bound)
	for time.Now().Before(end) {
		if info, err := s.Inspect(context.Background(), key); err == nil && info.Held {
			return
		}
		time.Sleep(2 * time.Millisecond)
	}
}

// Runs is how many acquirers race in TryAcquires (each on its own key).
const Runs = 20

// TryAcquires is the case, Runs times at once on Runs keys: with
// Slow's replies delayed by Lag (350ms for a TTL of 200ms), Slow's
// TryAcquire is applied by the server, the lease expires there while the
// reply travels, and Fast (waiting from 5/4 of the TTL on, and once the
// key is held on the server: the B tried at 250ms) takes the key.
// Slow's TryAcquire must then fail with ErrNotAcquired and ErrLateGrant
// (or find Fast's lock, if its request reached the server after Fast's,
// or fail otherwise under the delay), never return a Lease, and at least
// one grant must have been refused as late; its release of the refused grant
// (owner-checked) must leave Fast's lock held, with Fast's fence.
func TryAcquires(t *testing.T, s Setup) {
	lag := delayReplies(t, s)
	prefix := fmt.Sprintf("lategrant/%d/", time.Now().UnixNano())
	var (
		c  tally
		wg sync.WaitGroup
	)
	start := time.Now()
	for i := range Runs {
		key := fmt.Sprintf("%s%d", prefix, i)
		wg.Go(func() { race(t, s, key, start, &c) })
	}
	wg.Wait()
	t.Logf("%d runs (TTL %v, replies %v late): %d leases handed out, %d of them expired; %d grants refused as late, %d found the key held, %d failed otherwise (%v)",
		Runs, s.TTL, lag, c.handed, c.expired, c.refused, c.held, c.failed, c.firstFail)
	if c.refused == 0 {
		t.Errorf("no grant was refused as late: the scenario did not take place")
	}
}

// tally counts the outcomes of Slow's TryAcquires.
type tally struct {
	mu      sync.Mutex
	expired int // leases handed out with their deadline passed
	handed  int // leases handed out at all
	refused int
	held    int // found Fast's lock: the request came too late to be granted
	failed  int // failed otherwise (firstFail)

	firstFail error
}

// slowResult is what Slow's TryAcquire returned, and when.
type slowResult struct {
	ls  *fencedlock.Lease
	err error
	at  time.Duration
	bad error // why the lease handed out was expired, if it was
}

// slowTry is Slow's TryAcquire of key, timed from start.
func slowTry(s Setup, key string, start time.Time) slowResult {
	ls, err := s.Slow.TryAcquire(context.Background(), key)
	r := slowResult{ls: ls, err: err, at: time.Since(start)}
	if err == nil {
		if lerr := ls.Err(); lerr != nil {
			r.bad = lerr
		} else if left := time.Until(ls.Deadline()); left <= 0 {
			r.bad = fmt.Errorf("deadline %v ago", -left)
		}
	}
	return r
}

// race is one run of TryAcquires on key: Slow's TryAcquire against
// Fast's Acquire, its outcome counted in c.
func race(t *testing.T, s Setup, key string, start time.Time, c *tally) {
	lag := s.lag()
	ach := make(chan slowResult, 1)
	go func() { ach <- slowTry(s, key, start) }()
	// As the B: from 5/4 of the TTL on, after the
	// server's expiry of Slow's lease, and once Slow's request
	// was applied. etcd's may come after a renewal of a pooled lease
	// that does not answer within what is left of its TTL and a new
	// LeaseGrant: the bound covers both (TTL + 2 lags).
	s.applied(key, s.TTL+2*lag)
	time.Sleep(time.Until(start.Add(s.TTL * 5 / 4)))
	ctx, cancel := context.WithTimeout(context.Background(), 2*lag+4*s.TTL)
	lsB, errB := s.Fast.Acquire(ctx, key)
	cancel()
	atB := time.Since(start)
	r := <-ach
	if c.count(r) {
		fenceB := "none"
		if errB == nil {
			fenceB = fmt.Sprint(lsB.Fence())
		}
		t.Errorf("%s: Slow: TryAcquire returned at %v: err=nil fence=%d (expired: %v); Fast: Acquire returned at %v: err=%v fence=%s",
			key, r.at, r.ls.Fence(), r.bad, atB, errB, fenceB)
		_ = r.ls.Release(context.Background())
	}
	if errB != nil {
		// What the key held when Fast gave up tells a stuck key (a grant
		// nobody holds, a hand-off not taken) from a machine too slow.
		info, ierr := s.Inspect(context.Background(), key)
		t.Errorf("%s: Fast: Acquire returned at %v (from %v on): %v; the key then: %+v (%v); Slow: TryAcquire returned at %v: %v",
			key, atB, s.TTL*5/4, errB, info, ierr, r.at, r.err)
		return
	}
	fastUntouched(t, s, key, lsB)
}

// count counts r's outcome; true if a lease was handed out.
func (c *tally) count(r slowResult) (handed bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	switch {
	case r.err == nil:
		c.handed++
		if r.bad != nil {
			c.expired++
		}
		return true
	case errors.Is(r.err, fencedlock.ErrNotAcquired) && errors.Is(r.err, fencedlock.ErrLateGrant):
		c.refused++
	case errors.Is(r.err, fencedlock.ErrNotAcquired):
		// Its request reached the server after Fast's (Fast
		// gave up waiting for it to be applied): not the case
		// under test, and no lease was handed out.
		c.held++
	default:
		// The delay made the attempt fail otherwise (etcd: a
		// lease that expired before the Txn that uses it
		// arrived): no lease was handed out either.
		c.failed++
		if c.firstFail == nil {
			c.firstFail = r.err
		}
	}
	return false
}

// fastUntouched checks that Fast's lock on key (lease lsB) is held with
// its fence after Slow's refused grant was released (TryAcquire returns
// after that release), then releases it.
func fastUntouched(t *testing.T, s Setup, key string, lsB *fencedlock.Lease) {
	info, err := s.Inspect(context.Background(), key)
	switch {
	case err != nil:
		t.Errorf("%s: inspect: %v", key, err)
	case !info.Held || info.Fence != lsB.Fence():
		t.Errorf("%s: after Slow's refused grant the key is %+v, want held by Fast (fence %d)", key, info, lsB.Fence())
	}
	if err := lsB.Err(); err != nil {
		t.Errorf("%s: Fast's lease: %v", key, err)
	}
	if err := lsB.Release(context.Background()); err != nil {
		t.Errorf("%s: Fast's release: %v", key, err)
	}
}

// Acquire checks a waiting Acquire through the same delay: it returns a
// lease that is not expired, after the replies are on time again (after
// two lags) if they lag past the TTL (every grant is then refused, and
// Acquire keeps waiting).
func Acquire(t *testing.T, s Setup) {
	lag := delayReplies(t, s)
	key := fmt.Sprintf("lategrant/acquire/%d", time.Now().UnixNano())
	start := time.Now()
	heal := time.AfterFunc(2*lag, func() { s.Proxy.SetReplyLatency(0) })
	defer heal.Stop()
	ctx, cancel := context.WithTimeout(context.Background(), 4*lag+10*s.TTL)
	defer cancel()
	ls, err := s.Slow.Acquire(ctx, key)
	at := time.Since(start)
	if err != nil {
		t.Fatalf("Slow: Acquire returned at %v: %v", at, err)
	}
	defer ls.Release(context.Background())
	margin := s.Slow.Options().SafetyMargin
	if lerr := ls.Err(); lerr != nil {
		t.Fatalf("Slow: Acquire returned at %v an expired lease (fence %d): %v", at, ls.Fence(), lerr)
	}
	if left := time.Until(ls.Deadline()); left <= 0 {
		t.Fatalf("Slow: Acquire returned at %v a lease whose deadline passed %v ago", at, -left)
	}
	// With replies later than the TTL, every grant before the heal came
	// back late: an Acquire that returned before the heal was handed one.
	if lag >= s.TTL && at < 2*lag {
		t.Fatalf("Slow: Acquire returned at %v, before the replies were on time again (%v)", at, 2*lag)
	}
	t.Logf("Slow: Acquire returned at %v (replies on time from %v) with %v left (safety margin %v)", at, 2*lag, time.Until(ls.Deadline()), margin)
}

// delayReplies warms s up (see warm), then delays Slow's replies by the
// scenario's lag until t ends; it returns the lag.
func delayReplies(t *testing.T, s Setup) time.Duration {
	t.Helper()
	warm(t, s)
	lag := s.lag()
	s.Proxy.SetReplyLatency(lag)
	t.Cleanup(func() { s.Proxy.SetReplyLatency(0) })
	return lag
}

// warm takes and releases Runs keys at once on both Lockers before the
// delay is set: connections are made (a pooled client dials one per
// concurrent request) and scripts loaded, so that an acquire under the
// delay is one round trip, sent at once.
func warm(t *testing.T, s Setup) {
	t.Helper()
	var wg sync.WaitGroup
	for _, l := range []*fencedlock.Locker{s.Slow, s.Fast} {
		for i := range Runs {
			wg.Go(func() {
				// Acquire, not TryAcquire: the dials may take longer than
				// the TTL, and the grant is then refused and tried again.
				// (The Locker's TTL: etcd pools leases per TTL.)
				ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
				defer cancel()
				ls, err := l.Acquire(ctx, fmt.Sprintf("lategrant/warm/%d/%d", time.Now().UnixNano(), i))
				if err != nil {
					t.Errorf("warm-up: %v", err)
					return
				}
				// A short lease can end before its release on a loaded
				// machine (dials under -race): that is not under test.
				if err := ls.Release(context.Background()); err != nil && !errors.Is(err, fencedlock.ErrNotHeld) {
					t.Errorf("warm-up: %v", err)
				}
			})
		}
	}
	wg.Wait()
	if t.Failed() {
		t.FailNow()
	}
}
