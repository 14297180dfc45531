package semaphoretest

import (
	"context"
	"testing"
	"time"

	"github.com/fencedlock/fencedlock"
	"github.com/fencedlock/fencedlock/internal/locktest"
	"github.com/fencedlock/fencedlock/semaphore"
)

// ReleaseWakesWaiter: on a backend that is a driver.Notifier, a waiter for
// a semaphore whose every permit is held is woken by a release, not by
// its fallback retry: every retry delay 20s (at least 10s with the
// jitter) and the holder's TTL 30s, neither within the test's 10s bound.
// Only for a Notifier (memory, Redis, etcd): elsewhere the waiter polls.
func ReleaseWakesWaiter(t *testing.T, s Setup) {
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	opts := fencedlock.Options{TTL: 30 * time.Second, MinRetryDelay: 20 * time.Second, MaxRetryDelay: 20 * time.Second}
	n := name("wake")
	p, err := s.New(t, opts).Acquire(ctx, n, 2)
	if err != nil {
		t.Fatal(err)
	}
	q, err := s.New(t, opts).Acquire(ctx, n, 2)
	if err != nil {
		t.Fatal(err)
	}
	defer q.Release(ctx)
	waiter := s.New(t, opts)
	got := locktest.AcquireThenRelease(ctx, func() (*semaphore.Permit, error) { return waiter.Acquire(ctx, n, 2) })
	// 300ms: the waiter is watching (or will sweep once more when it is).
	woke := locktest.Woken(t, got, 300*time.Millisecond, 10*time.Second, func() error { return p.Release(ctx) },
		"the waiter (its fallback retry is 20s away)")
	t.Logf("woken %v after the release", woke)
}
