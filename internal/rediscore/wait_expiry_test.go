package rediscore_test

import (
	"context"
	"crypto/rand"
	"testing"
	"time"

	"github.com/fencedlock/fencedlock"
	"github.com/fencedlock/fencedlock/driver"
	"github.com/fencedlock/fencedlock/internal/backendtest"
	"github.com/fencedlock/fencedlock/internal/testserver"
)

// TestWaiterGetsExpiredHoldersKey: a waiter whose own lease is long (30s,
// so that it refreshes its queue entry every 10s) behind a holder whose
// 300ms lease runs out unreleased gets the key soon after it ran out, not
// at its next refresh: an expiry is not announced, so wait.lua tells the
// waiter the holder's PTTL. It told only a waiter already queued, and a
// new one waited its refresh (found by lategranttest under load: Fast's
// Acquire, 10s lease, gave up 1.5s after Slow's 200ms lease expired).
// Through AcquireWait, and through a Locker (which tries once first).
func TestWaiterGetsExpiredHoldersKey(t *testing.T) {
	srv := testserver.StartRedis(t)
	const holderTTL, waiterTTL, bound = 300 * time.Millisecond, 30 * time.Second, 5 * time.Second
	for _, cl := range backendtest.RedisClients {
		t.Run(cl.Name, func(t *testing.T) {
			b, _ := cl.Open(t, srv)
			t.Cleanup(func() { b.Close() })
			l, err := fencedlock.New(b, fencedlock.Options{TTL: waiterTTL})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { l.Close() })
			for _, how := range []string{"AcquireWait", "Locker.Acquire"} {
				t.Run(how, func(t *testing.T) {
					ctx, cancel := context.WithTimeout(t.Context(), bound)
					defer cancel()
					key := "expiry/" + cl.Name + "/" + how
					if _, err := b.Acquire(ctx, driver.AcquireRequest{Key: key, Owner: rand.Text(), TTL: holderTTL}); err != nil {
						t.Fatal(err)
					}
					start := time.Now()
					var fence uint64
					switch how {
					case "AcquireWait":
						g, err := b.(driver.WaitAcquirer).AcquireWait(ctx, driver.AcquireRequest{Key: key, Owner: rand.Text(), TTL: waiterTTL})
						if err != nil {
							t.Fatalf("AcquireWait behind a %v lease left to expire: %v after %v; want the key once it expired", holderTTL, err, time.Since(start).Round(time.Millisecond))
						}
						fence = uint64(g.Fence)
						_ = b.Release(t.Context(), g)
					default:
						ls, err := l.Acquire(ctx, key)
						if err != nil {
							t.Fatalf("Acquire behind a %v lease left to expire: %v after %v; want the key once it expired", holderTTL, err, time.Since(start).Round(time.Millisecond))
						}
						fence = uint64(ls.Fence())
						_ = ls.Release(t.Context())
					}
					if fence != 2 {
						t.Errorf("fence %d, want 2", fence)
					}
					t.Logf("granted %v after the holder's %v lease was taken", time.Since(start).Round(time.Millisecond), holderTTL)
				})
			}
		})
	}
}
