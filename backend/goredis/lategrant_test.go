package goredis

import (
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/fencedlock/fencedlock"
	"github.com/fencedlock/fencedlock/internal/faultproxy"
	"github.com/fencedlock/fencedlock/internal/lategranttest"
	"github.com/fencedlock/fencedlock/internal/locktest"
	"github.com/fencedlock/fencedlock/internal/redistest"
)

// TestLateGrantRefused (issue 28 item 1): through a proxy that delays
// replies by 350ms, a TryAcquire of a 200ms lease is applied by the server
// and expires there before its reply arrives, and another client takes the
// key: the late grant is refused (ErrLateGrant) and released without
// touching the other's lock; a waiting Acquire keeps waiting until the
// replies are on time.
func TestLateGrantRefused(t *testing.T) {
	srv := redistest.Start(t)
	p, err := faultproxy.New(srv.Addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Close() })
	const ttl = 200 * time.Millisecond
	locker := func(addr string, ttl time.Duration) (*fencedlock.Locker, *Backend) {
		c := redis.NewClient(&redis.Options{Addr: addr})
		t.Cleanup(func() { c.Close() })
		b, err := New(c, Options{})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { b.Close() })
		l := locktest.New(t, b, fencedlock.Options{TTL: ttl})
		t.Cleanup(func() { l.Close() })
		return l, b
	}
	slow, _ := locker(p.Addr(), ttl)
	fast, fb := locker(srv.Addr, 10*time.Second) // Fast's lease need not be short
	s := lategranttest.Setup{Slow: slow, Fast: fast, Proxy: p, TTL: ttl, Inspect: fb.Inspect}
	t.Run("TryAcquire", func(t *testing.T) { lategranttest.TryAcquires(t, s) })
	t.Run("Acquire", func(t *testing.T) { lategranttest.Acquire(t, s) })
}
