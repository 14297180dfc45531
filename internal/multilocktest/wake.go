package multilocktest

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/fencedlock/fencedlock"
	"github.com/fencedlock/fencedlock/driver"
	"github.com/fencedlock/fencedlock/internal/locktest"
	"github.com/fencedlock/fencedlock/multilock"
)

// ReleaseWakesWaiter: on a backend that is a [driver.Notifier], a waiter
// for a set is woken by the release of a key of the set that another
// owner held, not by its fallback retry: every retry delay 20s (at least
// 10s with the jitter) and the holder's TTL 30s, neither within the
// test's 10s bound. Each key of the set is held and released in turn, so
// that a watch of one key only would not do. Run calls it only on a
// Notifier.
func ReleaseWakesWaiter(t *testing.T, s Setup) {
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	// ReleaseTimeout: a release may take as long as the waiter is given
	// to wake after it begins (10s), not only the default 5s: an etcd
	// cluster stalled at load 20 took 4.9s to commit one, and the test is
	// about the wake-up, not the release's latency.
	o := fencedlock.Options{TTL: 30 * time.Second, MinRetryDelay: 20 * time.Second, MaxRetryDelay: 20 * time.Second, ReleaseTimeout: 10 * time.Second}
	holder := closed[*fencedlock.Locker](t)(fencedlock.New(s.New(t), o))
	waiter := closed[*multilock.Locker](t)(multilock.New(s.New(t), o))
	ks := keys(t, 3)
	for i, k := range ks {
		ls, err := holder.TryAcquire(ctx, k)
		if err != nil {
			t.Fatal(err)
		}
		got := locktest.AcquireThenRelease(ctx, func() (*multilock.Lease, error) { return waiter.Acquire(ctx, ks) })
		// 100ms: the waiter is watching (or will try once more when it is).
		woke := locktest.Woken(t, got, 100*time.Millisecond, 10*time.Second, func() error { return ls.Release(ctx) },
			fmt.Sprintf("key %d of the set: the waiter (its fallback retry is 20s away)", i))
		t.Logf("key %d: woken %v after the release", i, woke)
	}
}

// isNotifier reports whether s's backends wake waiters on release.
func isNotifier(t *testing.T, s Setup) bool {
	_, ok := s.New(t).(driver.Notifier)
	return ok
}
