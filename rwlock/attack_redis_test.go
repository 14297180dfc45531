package rwlock_test

import (
	"context"
	"crypto/rand"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/fencedlock/fencedlock/backend/redis"
	"github.com/fencedlock/fencedlock/driver"
	"github.com/fencedlock/fencedlock/internal/backendtest"
	"github.com/fencedlock/fencedlock/internal/testserver"
)

// TestRedisTamperedFences: rwlock.lua's state changed by hand (the fence
// counter deleted or overwritten, a reader's recorded fence overwritten)
// while leases hold. Where the script can tell (a lease is live, so the
// counter existed and is at least its fence), an acquire fails with an
// error wrapping ErrCorrupt and ErrPermanent and grants nothing: no fence
// at or below a live lease's, no reply that is no fence.
func TestRedisTamperedFences(t *testing.T) {
	srv := testserver.StartRedis(t)
	c := srv.Client(t, nil)
	set := func(t *testing.T, args ...string) {
		t.Helper()
		if err := c.Do(t.Context(), c.B().Arbitrary(args[0]).Keys(args[1]).Args(args[2:]...).Build()).Error(); err != nil {
			t.Fatal(err)
		}
	}
	cases := []struct {
		name   string
		hold   driver.RWMode // the mode of the leases held when the state is changed
		tamper func(t *testing.T, lk string)
		retry  bool // the holder's retried acquire, not a new owner's
	}{
		{"counter deleted, writer retries", driver.Write, func(t *testing.T, lk string) { set(t, "DEL", lk+":rw:fence") }, true},
		{"counter not a number, writer retries", driver.Write, func(t *testing.T, lk string) { set(t, "SET", lk+":rw:fence", "abc") }, true},
		{"counter deleted, new reader", driver.Read, func(t *testing.T, lk string) { set(t, "DEL", lk+":rw:fence") }, false},
		{"counter deleted, writer behind readers", driver.Read, func(t *testing.T, lk string) { set(t, "DEL", lk+":rw:fence") }, false},
		{"counter deleted, writer behind a writer", driver.Write, func(t *testing.T, lk string) { set(t, "DEL", lk+":rw:fence") }, false},
		{"counter deleted, reader behind a writer", driver.Write, func(t *testing.T, lk string) { set(t, "DEL", lk+":rw:fence") }, false},
		{"reader's fence not a number, reader retries", driver.Read, func(t *testing.T, lk string) {
			set(t, "HSET", lk+":rw:fences", holderOwner, "abc")
		}, true},
	}
	for _, cl := range backendtest.RedisClients {
		b, _ := cl.Open(t, srv)
		t.Cleanup(func() { b.Close() })
		rw := b.(driver.RWLocker)
		for i, tc := range cases {
			t.Run(cl.Name+"/"+tc.name, func(t *testing.T) {
				ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
				defer cancel()
				n := "tamper-" + cl.Name + string(rune('a'+i))
				lk := "fencedlock:{" + n + "}"
				acquire := func(owner string) (driver.Grant, error) {
					return rw.AcquireRW(ctx, driver.RWRequest{AcquireRequest: driver.AcquireRequest{Key: n, Owner: owner, TTL: 30 * time.Second}, Mode: tc.hold})
				}
				var held driver.Grant
				for range 3 { // fences 1..3 (a writer: released and taken again)
					g, err := acquire(holderOwner)
					if err != nil {
						t.Fatal(err)
					}
					held = g
					if tc.hold == driver.Write || !tc.retry {
						if err := rw.ReleaseRW(ctx, g, tc.hold); err != nil {
							t.Fatal(err)
						}
					}
				}
				if tc.hold == driver.Write || !tc.retry {
					g, err := acquire(holderOwner)
					if err != nil {
						t.Fatal(err)
					}
					held = g
				}
				tc.tamper(t, lk)
				owner := holderOwner
				if !tc.retry {
					owner = "new-secret-" + rand.Text()
				}
				m := tc.hold
				if strings.Contains(tc.name, "writer behind") {
					m = driver.Write
				} else if strings.Contains(tc.name, "reader behind") {
					m = driver.Read
				}
				g, err := rw.AcquireRW(ctx, driver.RWRequest{AcquireRequest: driver.AcquireRequest{Key: n, Owner: owner, TTL: 30 * time.Second}, Mode: m, Intent: time.Minute})
				if !errors.Is(err, redis.ErrCorrupt) || !errors.Is(err, driver.ErrPermanent) || !strings.Contains(err.Error(), lk+":rw:fence") {
					t.Fatalf("%v acquire after the state was changed by hand (%v lease of fence %v held): grant %+v, %v; want an error wrapping ErrCorrupt and ErrPermanent naming the key",
						m, tc.hold, held.Fence, g.Fence, err)
				}
			})
		}
	}
}

// holderOwner is the owner token of the holder in TestRedisTamperedFences.
var holderOwner = "holder-secret-" + rand.Text()
