package shapes_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/fencedlock/fencedlock"
	"github.com/fencedlock/fencedlock/backend/redis"
	"github.com/fencedlock/fencedlock/driver"
	"github.com/fencedlock/fencedlock/fencing"
	"github.com/redis/rueidis"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m,
		// A cluster client's topology refresh sleeps before retrying.
		goleak.IgnoreAnyFunction("github.com/redis/rueidis.(*clusterClient)._refresh.func2"),
	)
}

// newBackend returns a redis.Backend on c, closed when the test ends.
func newBackend(t testing.TB, c rueidis.Client, opts redis.Options) *redis.Backend {
	t.Helper()
	b, err := redis.New(c, opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { b.Close() })
	return b
}

// newLocker returns a Locker on b, closed when the test ends.
func newLocker(t testing.TB, b driver.Backend, opts fencedlock.Options) *fencedlock.Locker {
	t.Helper()
	l := mustLocker(t, b, opts)
	t.Cleanup(func() { l.Close() })
	return l
}

func ctxT(t testing.TB, d time.Duration) context.Context {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

// do runs a raw command.
func do(c rueidis.Client, args ...string) rueidis.RedisResult {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	return c.Do(ctx, c.B().Arbitrary(args...).Build())
}

// history records guarded writes that a fencing.Guard accepted, in the
// order the guard accepted them, and checks them independently of the
// guard: a write is stale if its token is lower than one accepted before,
// or equal to it from another holder.
type history struct {
	mu       sync.Mutex
	accepted []write
	rejected int
}

type write struct {
	token  fencing.Token
	holder string
	value  string
}

// write applies one guarded write through g and records the outcome; the
// record is made inside the guard's critical section, so its order is the
// order of acceptance.
func (h *history) write(g *fencing.Guard, token fencing.Token, holder, value string) error {
	err := g.Do(token, holder, func() error {
		h.mu.Lock()
		h.accepted = append(h.accepted, write{token, holder, value})
		h.mu.Unlock()
		return nil
	})
	if err != nil {
		h.mu.Lock()
		h.rejected++
		h.mu.Unlock()
	}
	return err
}

// stale counts accepted writes that break the fencing rule.
func (h *history) stale() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	n := 0
	var maxTok fencing.Token
	var maxHolder string
	for i, w := range h.accepted {
		if i > 0 && (w.token < maxTok || (w.token == maxTok && w.holder != maxHolder)) {
			n++
			continue
		}
		maxTok, maxHolder = w.token, w.holder
	}
	return n
}

func (h *history) counts() (accepted, rejected int) {
	h.mu.Lock()
	defer h.mu.Unlock()
	return len(h.accepted), h.rejected
}

// Lease-keeping tests use keptTTL: under load the watchdog's renewals run
// late. Measured on the 2-core machine with two shapes suites and other
// tests running (load average 11-16), over 90s: a 200ms renew interval
// stretched to 490ms at most (290ms late), and a goroutine sleeping 5ms
// woke up to 370ms late. A lease is lost when no renewal succeeds for
// TTL minus the safety margin (0.9*TTL), that is 0.57*TTL after a renewal
// falls due (interval TTL/3): 1.7s at 3s, over 4 times the worst delay
// measured. (At 600ms, 340ms of delay lost a lease, and at 300ms, 170ms.)
const keptTTL = 3 * time.Second

// renewedSince reports whether a renewal of ls sent at or after t0 has
// succeeded: each success moves the local deadline to its send time plus
// the TTL minus the safety margin.
func renewedSince(l *fencedlock.Locker, ls *fencedlock.Lease, t0 time.Time) bool {
	o := l.Options()
	return !ls.Deadline().Before(t0.Add(o.TTL - o.SafetyMargin))
}

// lastRenewalSent returns when the renewal behind ls's current local
// deadline was sent.
func lastRenewalSent(l *fencedlock.Locker, ls *fencedlock.Lease) time.Time {
	o := l.Options()
	return ls.Deadline().Add(-(o.TTL - o.SafetyMargin))
}

// waitRenewed waits until a renewal of ls sent at or after t0 has
// succeeded. It fails the test if the lease ends first, or after two TTLs
// (the watchdog renews every TTL/3).
func waitRenewed(t testing.TB, l *fencedlock.Locker, ls *fencedlock.Lease, t0 time.Time) {
	t.Helper()
	limit := time.Now().Add(2 * l.Options().TTL)
	for !renewedSince(l, ls, t0) {
		if err := ls.Err(); err != nil {
			t.Fatalf("%s lost before it was renewed: %v", ls.Key(), err)
		}
		if time.Now().After(limit) {
			t.Fatalf("%s not renewed within %v", ls.Key(), 2*l.Options().TTL)
		}
		time.Sleep(10 * time.Millisecond)
	}
}
