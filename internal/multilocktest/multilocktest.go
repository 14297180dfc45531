// Package multilocktest holds the scenarios of package multilock that the
// tests of every backend run alike (memory in package multilock, Redis on
// both clients against a real redis-server): a partial grant is never
// visible, one key lost ends the whole lease naming that key, and an
// acquire whose outcome is unknown (reply lost, reply late, context
// ended) leaves no key taken.
package multilocktest

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/fencedlock/fencedlock"
	"github.com/fencedlock/fencedlock/driver"
	"github.com/fencedlock/fencedlock/multilock"
)

// Backend is what the scenarios need of a backend: the lock contract,
// sets, and reading a key.
type Backend interface {
	driver.Backend
	driver.MultiLocker
	driver.Inspector
}

// Setup is what a backend's test gives the scenarios.
type Setup struct {
	// New returns a new client of the shared store, as another process
	// would have; the test closes it.
	New func(t *testing.T) Backend
	// Delete deletes key's lock behind its holder's back (an operator, an
	// eviction).
	Delete func(t *testing.T, key string)
	// Corrupt, if not nil, makes key's lock a value fencedlock did not
	// write (a hash on Redis).
	Corrupt func(t *testing.T, key string)
	// Foreign, if not nil, is the error that the errors about a Corrupt
	// key wrap besides driver.ErrPermanent (redis.ErrCorrupt).
	Foreign error
	// Abandons says that a clean-up release makes the server refuse the
	// owner's acquire if it arrives later (Redis).
	Abandons bool
}

// opts are the Lockers' options: short enough that waits are quick, long
// enough for a loaded machine.
func opts() fencedlock.Options {
	return fencedlock.Options{TTL: 2 * time.Second, MaxRetryDelay: 50 * time.Millisecond}
}

func newLocker(t *testing.T, b driver.Backend) *multilock.Locker {
	return closed[*multilock.Locker](t)(multilock.New(b, opts()))
}

func newSingle(t *testing.T, b driver.Backend) *fencedlock.Locker {
	return closed[*fencedlock.Locker](t)(fencedlock.New(b, opts()))
}

// closed returns a function that fails t on err, or closes v when the
// test ends and returns it.
func closed[T interface{ Close() error }](t *testing.T) func(v T, err error) T {
	t.Helper()
	return func(v T, err error) T {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { v.Close() })
		return v
	}
}

// held fails t unless each key's state on the server is want.
func held(t *testing.T, b Backend, want bool, keys ...string) {
	t.Helper()
	for _, k := range keys {
		info, err := b.Inspect(context.Background(), k)
		if err != nil {
			t.Fatalf("inspect %q: %v", k, err)
		}
		if info.Held != want {
			t.Errorf("key %q held = %v, want %v", k, info.Held, want)
		}
	}
}

// keys returns n keys unique to t.
func keys(t *testing.T, n int) []string {
	ks := make([]string, n)
	for i := range ks {
		ks[i] = fmt.Sprintf("%s/k%02d", t.Name(), i)
	}
	return ks
}

// PartialNeverVisible: with one key of a set held by a single-key lease,
// neither TryAcquire nor a waiting Acquire (ended by its context) takes
// any key of the set, and the error names the held key; once it is
// released the set is taken whole, each key with a fence above every
// earlier one, single-key leases are refused on its keys, and its release
// frees them all.
func PartialNeverVisible(t *testing.T, s Setup) {
	b := s.New(t)
	m, single := newLocker(t, b), newSingle(t, s.New(t))
	ks := keys(t, 4)
	ctx := context.Background()
	blocker, err := single.TryAcquire(ctx, ks[2])
	if err != nil {
		t.Fatal(err)
	}
	_, err = m.TryAcquire(ctx, ks)
	var he *driver.HeldError
	if !errors.Is(err, fencedlock.ErrNotAcquired) || !errors.As(err, &he) || he.Key != ks[2] {
		t.Fatalf("TryAcquire with %q held: %v, want a HeldError naming it", ks[2], err)
	}
	held(t, b, false, ks[0], ks[1], ks[3])
	wctx, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
	_, err = m.Acquire(wctx, ks)
	cancel()
	if !errors.Is(err, fencedlock.ErrNotAcquired) {
		t.Fatalf("Acquire ended by its context: %v, want ErrNotAcquired", err)
	}
	held(t, b, false, ks[0], ks[1], ks[3])
	before := blocker.Fence()
	if err := blocker.Release(ctx); err != nil {
		t.Fatal(err)
	}

	ls, err := m.Acquire(ctx, []string{ks[3], ks[1], ks[0], ks[2]}) // any order
	if err != nil {
		t.Fatal(err)
	}
	if got := ls.Keys(); fmt.Sprint(got) != fmt.Sprint(ks) {
		t.Errorf("Keys() = %q, want sorted %q", got, ks)
	}
	if f, ok := ls.Fence(ks[2]); !ok || f <= before {
		t.Errorf("fence of %q = %d (%v), want above the single lease's %d", ks[2], f, ok, before)
	}
	held(t, b, true, ks...)
	for _, k := range ks {
		if _, err := single.TryAcquire(ctx, k); !errors.Is(err, fencedlock.ErrNotAcquired) {
			t.Errorf("single TryAcquire of %q inside a held set: %v, want ErrNotAcquired", k, err)
		}
	}
	if err := ls.Release(ctx); err != nil {
		t.Fatal(err)
	}
	held(t, b, false, ks...)
	after, err := single.TryAcquire(ctx, ks[0])
	if err != nil {
		t.Fatal(err)
	}
	defer after.Release(ctx)
	if f, _ := ls.Fence(ks[0]); after.Fence() <= f {
		t.Errorf("single lease after the set: fence %d, want above the set's %d", after.Fence(), f)
	}
}

// KeyLostEndsLease: one key of a held set deleted behind its back ends
// the whole lease at its next renewal, and Err names that key.
func KeyLostEndsLease(t *testing.T, s Setup) {
	b := s.New(t)
	m := newLocker(t, b)
	ks := keys(t, 3)
	ls, err := m.Acquire(context.Background(), ks, fencedlock.WithTTL(600*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	s.Delete(t, ks[1])
	select {
	case <-ls.Done():
	case <-time.After(10 * time.Second): // TTL/3 renewals; wide for a loaded machine
		t.Fatal("the lease of a set with a key deleted still holds after 10s")
	}
	err = ls.Err()
	var lk *driver.LostKeyError
	if !errors.Is(err, fencedlock.ErrLeaseLost) || !errors.As(err, &lk) || lk.Key != ks[1] {
		t.Fatalf("Err = %v, want ErrLeaseLost naming %q", err, ks[1])
	}
}

// CorruptKeyTakesNothing: a key of the set holding a value fencedlock
// did not write fails the acquire at once (a permanent error, not "held")
// and no key is taken.
func CorruptKeyTakesNothing(t *testing.T, s Setup) {
	if s.Corrupt == nil {
		t.Skip("the backend stores no foreign values")
	}
	b := s.New(t)
	m := newLocker(t, b)
	ks := keys(t, 3)
	s.Corrupt(t, ks[1])
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_, err := m.Acquire(ctx, ks)
	if err == nil || errors.Is(err, fencedlock.ErrNotAcquired) || !errors.Is(err, driver.ErrPermanent) {
		t.Fatalf("Acquire with a corrupt key: %v, want a permanent error", err)
	}
	held(t, b, false, ks[0], ks[2])
}

// faulty is a backend whose AcquireMulti misbehaves as fault says.
type faulty struct {
	Backend
	fault func(ctx context.Context, req driver.MultiRequest) (driver.MultiGrant, error)
}

func (f faulty) AcquireMulti(ctx context.Context, req driver.MultiRequest) (driver.MultiGrant, error) {
	return f.fault(ctx, req)
}

var errLost = errors.New("multilocktest: reply lost")

// UnknownOutcomeLeavesNothing: an acquire applied on the server whose
// reply is lost, or comes back after the lease's deadline (refused as
// late), is released whole by the Locker's clean-up; where the backend
// remembers cleaned-up owners, an acquire that arrives after its
// clean-up takes nothing.
func UnknownOutcomeLeavesNothing(t *testing.T, s Setup) {
	b := s.New(t)
	ctx := context.Background()
	t.Run("ReplyLost", func(t *testing.T) {
		ks := keys(t, 3)
		m := newLocker(t, faulty{b, func(ctx context.Context, req driver.MultiRequest) (driver.MultiGrant, error) {
			if _, err := b.AcquireMulti(ctx, req); err != nil {
				return driver.MultiGrant{}, err
			}
			return driver.MultiGrant{}, errLost
		}})
		if _, err := m.TryAcquire(ctx, ks); !errors.Is(err, errLost) {
			t.Fatalf("TryAcquire: %v, want the lost reply", err)
		}
		held(t, b, false, ks...)
	})
	t.Run("Late", func(t *testing.T) {
		ks := keys(t, 3)
		m := newLocker(t, faulty{b, func(ctx context.Context, req driver.MultiRequest) (driver.MultiGrant, error) {
			g, err := b.AcquireMulti(ctx, req)
			time.Sleep(max(req.TTL, g.TTL)) // past the local deadline (etcd rounds TTLs up to seconds)
			return g, err
		}})
		if _, err := m.TryAcquire(ctx, ks, fencedlock.WithTTL(200*time.Millisecond)); !errors.Is(err, fencedlock.ErrLateGrant) {
			t.Fatalf("TryAcquire: %v, want ErrLateGrant", err)
		}
		held(t, b, false, ks...)
	})
	t.Run("ArrivesAfterCleanup", func(t *testing.T) {
		if !s.Abandons {
			t.Skip("the backend does not remember cleaned-up owners")
		}
		ks := keys(t, 3)
		late := make(chan driver.MultiRequest, 1)
		m := newLocker(t, faulty{b, func(ctx context.Context, req driver.MultiRequest) (driver.MultiGrant, error) {
			late <- req // sent after the clean-up, as a request stuck in a client
			return driver.MultiGrant{}, errLost
		}})
		if _, err := m.TryAcquire(ctx, ks); !errors.Is(err, errLost) {
			t.Fatalf("TryAcquire: %v, want the lost reply", err)
		}
		_, err := b.AcquireMulti(ctx, <-late)
		if err == nil || !errors.Is(err, fencedlock.ErrNotAcquired) {
			t.Fatalf("an acquire arriving after its clean-up: %v, want ErrNotAcquired", err)
		}
		held(t, b, false, ks...)
	})
}

// Run runs every scenario.
func Run(t *testing.T, s Setup) {
	t.Run("PartialNeverVisible", func(t *testing.T) { PartialNeverVisible(t, s) })
	t.Run("KeyLostEndsLease", func(t *testing.T) { KeyLostEndsLease(t, s) })
	t.Run("LostKeyRenewExtendsNone", func(t *testing.T) { LostKeyRenewExtendsNone(t, s) })
	t.Run("NestedRefused", func(t *testing.T) { NestedRefused(t, s) })
	t.Run("CancelledLeavesNothing", func(t *testing.T) { CancelledLeavesNothing(t, s) })
	t.Run("CloseReleasesAndEndsWaiters", func(t *testing.T) { CloseReleasesAndEndsWaiters(t, s) })
	t.Run("DoLostKey", func(t *testing.T) { DoLostKey(t, s) })
	t.Run("OddNamesAndMaxKeys", func(t *testing.T) { OddNamesAndMaxKeys(t, s) })
	t.Run("MixedContention", func(t *testing.T) { MixedContention(t, s) })
	t.Run("CorruptKeyTakesNothing", func(t *testing.T) { CorruptKeyTakesNothing(t, s) })
	t.Run("ReplacedKeyNamed", func(t *testing.T) { ReplacedKeyNamed(t, s) })
	t.Run("UnknownOutcomeLeavesNothing", func(t *testing.T) { UnknownOutcomeLeavesNothing(t, s) })
	if isNotifier(t, s) {
		t.Run("ReleaseWakesWaiter", func(t *testing.T) { ReleaseWakesWaiter(t, s) })
	}
}
