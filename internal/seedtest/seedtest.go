// Package seedtest holds the four expectations of the original problem
// statement as tests that each Redis backend (backend/redis on rueidis,
// backend/goredis on go-redis) runs against a real redis-server, so that
// both are held to exactly the same checks.
package seedtest

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/fencedlock/fencedlock"
	"github.com/fencedlock/fencedlock/driver"
	"github.com/fencedlock/fencedlock/fencing"
	"github.com/fencedlock/fencedlock/internal/clitest"
	"github.com/fencedlock/fencedlock/internal/locktest"
	"github.com/fencedlock/fencedlock/internal/testserver"
)

// Backend is what the seed tests need of a Redis backend: the driver
// contract, Inspect, and the Redis guard.
type Backend interface {
	driver.Backend
	driver.Inspector
	FencedSet(ctx context.Context, key, value string, token fencing.Token, holder string) error
	FencedGet(ctx context.Context, key string) (fencing.Record, error)
}

// NewBackend returns a new Backend over srv with a client of its own (as
// a separate process would have), closed when the test ends.
type NewBackend func(t *testing.T, srv *testserver.Redis) Backend

// Run runs the seed tests as subtests of t, each on its own redis-server.
func Run(t *testing.T, newBackend NewBackend) {
	t.Run("OneHolderAtATime", func(t *testing.T) { oneHolderAtATime(t, newBackend) })
	t.Run("LeaseSurvives5xTTL", func(t *testing.T) { leaseSurvives5xTTL(t, newBackend) })
	t.Run("LateReleaseDeletesNothing", func(t *testing.T) { lateReleaseDeletesNothing(t, newBackend) })
	t.Run("PausedHolderWriteRejected", func(t *testing.T) { pausedHolderWriteRejected(t, newBackend) })
}

// mustLocker returns fencedlock.New(b, opts), failing t if New refuses
// the options (internal/locktest).
var mustLocker = locktest.New

func isNotHeld(err error) bool { return errors.Is(err, driver.ErrNotHeld) }

// oneHolderAtATime: several independent Backends (each with its
// own client, as separate processes would be) contend for one key; an
// overlap detector checks that no two of them are ever inside the critical
// section together, and the fences seen inside it strictly increase.
func oneHolderAtATime(t *testing.T, newBackend NewBackend) {
	srv := testserver.StartRedis(t)
	const (
		workers = 4
		rounds  = 15
		key     = "orders"
	)
	var guard fencing.Guard
	lockers := make([]*fencedlock.Locker, workers)
	for w := range lockers {
		lockers[w] = mustLocker(t, newBackend(t, srv), fencedlock.Options{TTL: time.Second})
		t.Cleanup(func() { lockers[w].Close() })
	}
	fences := locktest.Contend(context.Background(), t, lockers, key, rounds, 20*time.Second, func(ls *fencedlock.Lease) error {
		return guard.Do(ls.Fence(), ls.Holder(), func() error { time.Sleep(time.Millisecond); return nil })
	})
	t.Logf("%d workers x %d rounds: no overlap, fences %d..%d strictly increasing", workers, rounds, fences[0], fences[len(fences)-1])
}

// leaseSurvives5xTTL: a healthy holder's watchdog keeps a 500ms
// lease for 5x its TTL; meanwhile nobody else gets the key and the server
// still holds it for the same holder and fence.
//
// A holder (or a redis-server) the machine does not run for longer than
// the renewal's slack cannot keep a 500ms lease, and is not a healthy
// holder: a loaded run (two make test at once on 2 cores) once saw the
// other owner get the key 1.07s in. A run in which another owner got the
// key must still show the promise that holds whatever the machine does:
// the holder's local deadline had passed when the other's grant came back
// (it was told first). The scenario then runs again, 5 runs at most, and
// one of them must keep the lease for 5x its TTL; the longest scheduling
// delay of the test process (Lag) is reported with each lost run.
func leaseSurvives5xTTL(t *testing.T, newBackend NewBackend) {
	srv := testserver.StartRedis(t)
	// 500ms: short enough to show five TTLs in 2.5s, long enough that a
	// CI machine running packages in parallel under -race renews in time.
	const ttl = 500 * time.Millisecond
	b := newBackend(t, srv)
	locker := mustLocker(t, b, fencedlock.Options{TTL: ttl})
	defer locker.Close()
	other := newBackend(t, srv)
	otherLocker := mustLocker(t, other, fencedlock.Options{TTL: ttl})
	defer otherLocker.Close()
	lag := clitest.StartLag(t)
	const runs = 5
	for run := 1; ; run++ {
		before := lag.Max()
		key := fmt.Sprintf("orders-%d", run)
		if keptFor5xTTL(t, locker, otherLocker, b, key, ttl) {
			return
		}
		if run == runs {
			t.Fatalf("%d runs, the lease lost in each (longest scheduling delay of the test process %v): its holder was told first every time, but no run kept it for 5x TTL", runs, lag.Max())
		}
		t.Logf("run %d: the lease ran out, its holder told first (longest scheduling delay of the test process so far: %v, before this run: %v); again", run, lag.Max(), before)
	}
}

// keptFor5xTTL holds key with locker for 5x ttl while otherLocker tries
// it every ttl/4, and reports whether the lease was kept throughout. If
// the other got the key, it fails t unless the holder's deadline had
// passed by then, and releases both.
func keptFor5xTTL(t *testing.T, locker, otherLocker *fencedlock.Locker, b Backend, key string, ttl time.Duration) bool {
	lease, err := locker.TryAcquire(context.Background(), key)
	if err != nil {
		t.Fatal(err)
	}
	defer lease.Release(context.Background())
	end := time.Now().Add(5 * ttl)
	attempts := 0
	for time.Now().Before(end) {
		time.Sleep(ttl / 4)
		attempts++
		got, err := otherLocker.TryAcquire(context.Background(), key)
		if err == nil {
			late := time.Since(lease.Deadline())
			got.Release(context.Background())
			if late <= 0 {
				t.Fatalf("another owner got the key %v before the holder's local deadline (after %v of 5x TTL)", -late, time.Since(end.Add(-5*ttl)))
			}
			t.Logf("another owner got the key %v after the holder's local deadline (lease: %v)", late, lease.Err())
			return false
		}
		var held *driver.HeldError
		if !errors.As(err, &held) {
			t.Fatalf("other TryAcquire after %v: %v, want *HeldError", time.Since(end.Add(-5*ttl)), err)
		}
	}
	if err := lease.Err(); err != nil {
		t.Fatalf("lease lost after 5x TTL: %v", err)
	}
	info, err := b.Inspect(context.Background(), key)
	if err != nil {
		t.Fatal(err)
	}
	if !info.Held || info.Holder != lease.Holder() || info.Fence != lease.Fence() || info.TTL <= 0 {
		t.Fatalf("server state %+v, want held by %s with fence %d", info, lease.Holder(), lease.Fence())
	}
	if err := lease.Release(context.Background()); err != nil {
		t.Fatal(err)
	}
	t.Logf("lease of %v held for %v (%d contending attempts refused), fence %d", ttl, 5*ttl, attempts, lease.Fence())
	return true
}

// pausedAndLive starts a server and two backends on it: A's (ba), whose
// Locker la grants leases of 100ms it never renews (a holder paused past
// its TTL), and B's (bb), whose Locker lb grants leases of 5s.
func pausedAndLive(t *testing.T, newBackend NewBackend) (ba, bb Backend, la, lb *fencedlock.Locker) {
	srv := testserver.StartRedis(t)
	ba = newBackend(t, srv)
	bb = newBackend(t, srv)
	la = mustLocker(t, ba, fencedlock.Options{TTL: 100 * time.Millisecond, ManualRenew: true})
	t.Cleanup(func() { la.Close() })
	lb = mustLocker(t, bb, fencedlock.Options{TTL: 5 * time.Second})
	t.Cleanup(func() { lb.Close() })
	return ba, bb, la, lb
}

// tryShort is la.TryAcquire of A's 100ms lease, tried again when the
// grant came back too late to be handed out (ErrLateGrant: the Locker
// released it). On a loaded machine a reply takes 84-215ms now and then
// (measured, CI and make test at load 12-14), longer than such a lease
// can spare; what these tests check starts after the grant. At most 20
// tries.
func tryShort(la *fencedlock.Locker, key string) (*fencedlock.Lease, error) {
	for i := 1; ; i++ {
		a, err := la.TryAcquire(context.Background(), key)
		if !errors.Is(err, fencedlock.ErrLateGrant) || i == 20 {
			return a, err
		}
	}
}

// lateReleaseDeletesNothing: A's lease expires (no renewal), B
// acquires, then A releases: ErrNotHeld, and B still holds the key.
func lateReleaseDeletesNothing(t *testing.T, newBackend NewBackend) {
	ba, bb, la, lb := pausedAndLive(t, newBackend)

	a, err := tryShort(la, "orders")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	b, err := lb.Acquire(ctx, "orders") // waits for A's expiry (PTTL hint)
	if err != nil {
		t.Fatal(err)
	}
	<-a.Done() // lost locally by then
	lateErr := a.Release(context.Background())
	if !isNotHeld(lateErr) {
		t.Fatalf("late release: %v, want ErrNotHeld", lateErr)
	}
	// Also straight at the backend, with A's grant.
	if err := ba.Release(context.Background(), driver.Grant{Key: "orders", Owner: "not-the-owner"}); !isNotHeld(err) {
		t.Fatalf("release by a stranger: %v, want ErrNotHeld", err)
	}
	info, err := bb.Inspect(context.Background(), "orders")
	if err != nil {
		t.Fatal(err)
	}
	if !info.Held || info.Holder != b.Holder() || info.Fence != b.Fence() {
		t.Fatalf("after A's late release: %+v, want still held by B (%s, fence %d)", info, b.Holder(), b.Fence())
	}
	if err := b.Err(); err != nil {
		t.Fatalf("B's lease: %v", err)
	}
	if err := b.Release(context.Background()); err != nil {
		t.Fatal(err)
	}
	t.Logf("A (fence %d) released late: %v; B (fence %d) kept the key", a.Fence(), lateErr, b.Fence())
}

// pausedHolderWriteRejected: A acquires and is paused past its TTL
// (it simply does not renew), B acquires a higher fence and writes through
// a fencing.Guard; A's write with its old fence is rejected with ErrStale
// and changes nothing.
func pausedHolderWriteRejected(t *testing.T, newBackend NewBackend) {
	ba, bb, la, lb := pausedAndLive(t, newBackend)

	var (
		guard fencing.Guard
		value string
	)
	a, err := tryShort(la, "orders")
	if err != nil {
		t.Fatal(err)
	}
	// A pauses here; B waits for A's lease to expire on the server.
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	b, err := lb.Acquire(ctx, "orders")
	if err != nil {
		t.Fatal(err)
	}
	if b.Fence() <= a.Fence() {
		t.Fatalf("B's fence %d not above A's %d", b.Fence(), a.Fence())
	}
	if err := guard.Do(b.Fence(), b.Holder(), func() error { value = "written by B"; return nil }); err != nil {
		t.Fatalf("B's write: %v", err)
	}
	// A resumes and writes with its fence.
	err = guard.Do(a.Fence(), a.Holder(), func() error { value = "written by A"; return nil })
	if !errors.Is(err, fencing.ErrStale) {
		t.Fatalf("A's late write: %v, want ErrStale", err)
	}
	if value != "written by B" {
		t.Fatalf("value %q after A's rejected write", value)
	}
	if tok, holder := guard.Accepted(); tok != b.Fence() || holder != b.Holder() {
		t.Fatalf("guard accepted %d from %s, want B's %d", tok, holder, b.Fence())
	}
	// The same through the Redis guard of this backend.
	if err := bb.FencedSet(context.Background(), "orders:data", "written by B", b.Fence(), b.Holder()); err != nil {
		t.Fatalf("B's fenced write: %v", err)
	}
	ferr := ba.FencedSet(context.Background(), "orders:data", "written by A", a.Fence(), a.Holder())
	if !errors.Is(ferr, fencing.ErrStale) {
		t.Fatalf("A's late fenced write: %v, want ErrStale", ferr)
	}
	rec, gerr := ba.FencedGet(context.Background(), "orders:data")
	if gerr != nil || !rec.Found || rec.Value != "written by B" || rec.Fence != b.Fence() || rec.Holder != b.Holder() {
		t.Fatalf("fenced get = %+v, %v; want B's write with fence %d", rec, gerr, b.Fence())
	}
	if err := b.Release(context.Background()); err != nil {
		t.Fatal(err)
	}
	t.Logf("A fence %d paused; B fence %d wrote; A's writes rejected: %v; %v", a.Fence(), b.Fence(), err, ferr)
}
