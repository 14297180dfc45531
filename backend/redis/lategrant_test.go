package redis

import (
	"testing"
	"time"

	"github.com/redis/rueidis"

	"github.com/fencedlock/fencedlock"
	"github.com/fencedlock/fencedlock/driver"
	"github.com/fencedlock/fencedlock/internal/faultproxy"
	"github.com/fencedlock/fencedlock/internal/lategranttest"
	"github.com/fencedlock/fencedlock/internal/locktest"
	"github.com/fencedlock/fencedlock/internal/redistest"
)

// lateGrantSetup starts a server and a fault proxy in front of it, and
// returns the scenario's Lockers: Slow (TTL 200ms) on a client through
// the proxy, Fast (TTL 10s) on a client of its own; newBackend makes the backend
// (Backend or FairBackend) on a client.
func lateGrantSetup(t *testing.T, newBackend func(rueidis.Client) (driver.Backend, error)) lategranttest.Setup {
	t.Helper()
	srv := redistest.Start(t)
	p, err := faultproxy.New(srv.Addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Close() })
	const ttl = 200 * time.Millisecond
	locker := func(c rueidis.Client, ttl time.Duration) (*fencedlock.Locker, driver.Backend) {
		b, err := newBackend(c)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { b.Close() })
		l := locktest.New(t, b, fencedlock.Options{TTL: ttl})
		t.Cleanup(func() { l.Close() })
		return l, b
	}
	slow, _ := locker(srv.Client(t, func(o *rueidis.ClientOption) { o.InitAddress = []string{p.Addr()} }), ttl)
	fast, fb := locker(srv.Client(t, nil), 10*time.Second)
	return lategranttest.Setup{Slow: slow, Fast: fast, Proxy: p, TTL: ttl, Inspect: fb.(driver.Inspector).Inspect}
}

// TestLateGrantRefused (issue 28 item 1): through a proxy that delays
// replies by 350ms, a TryAcquire of a 200ms lease is applied by the server
// and expires there before its reply arrives, and another client takes the
// key: the late grant is refused (ErrLateGrant) and released without
// touching the other's lock, on the Backend and the FairBackend; a waiting
// Acquire keeps waiting until the replies are on time.
func TestLateGrantRefused(t *testing.T) {
	for name, nb := range map[string]func(rueidis.Client) (driver.Backend, error){
		"Backend":     func(c rueidis.Client) (driver.Backend, error) { return New(c, Options{}) },
		"FairBackend": func(c rueidis.Client) (driver.Backend, error) { return NewFair(c, Options{}) },
	} {
		t.Run(name, func(t *testing.T) {
			s := lateGrantSetup(t, nb)
			t.Run("TryAcquire", func(t *testing.T) { lategranttest.TryAcquires(t, s) })
			t.Run("Acquire", func(t *testing.T) { lategranttest.Acquire(t, s) })
		})
	}
}
