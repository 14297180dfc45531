package goredis

import (
	"context"
	"errors"
	"net"
	"testing"
	"time"

	"github.com/fencedlock/fencedlock/conformance"
	"github.com/fencedlock/fencedlock/driver"
	"github.com/fencedlock/fencedlock/internal/redistest"
	"github.com/redis/go-redis/v9"
)

// newClient returns a go-redis client of srv, closed when the test ends.
// delay, if positive, delays everything the client reads by that much.
func newClient(t testing.TB, srv *redistest.Server, delay time.Duration) *redis.Client {
	t.Helper()
	o := &redis.Options{Addr: srv.Addr}
	if delay > 0 {
		o.Dialer = delayedDialer(delay)
	}
	c := redis.NewClient(o)
	t.Cleanup(func() { c.Close() })
	return c
}

// delayedDialer dials TCP and delays what the connection reads.
func delayedDialer(delay time.Duration) func(ctx context.Context, network, addr string) (net.Conn, error) {
	return func(ctx context.Context, network, addr string) (net.Conn, error) {
		var d net.Dialer
		c, err := d.DialContext(ctx, network, addr)
		if err != nil {
			return nil, err
		}
		return conformance.DelayReads(c, delay), nil
	}
}

// newClusterClient returns a go-redis cluster client seeded with every
// node of cl, closed when the test ends.
func newClusterClient(t testing.TB, cl *redistest.Cluster, delay time.Duration) *redis.ClusterClient {
	t.Helper()
	o := &redis.ClusterOptions{}
	for _, s := range cl.Nodes {
		o.Addrs = append(o.Addrs, s.Addr)
	}
	if delay > 0 {
		o.Dialer = delayedDialer(delay)
	}
	c := redis.NewClusterClient(o)
	t.Cleanup(func() { c.Close() })
	return c
}

// newFailoverClient returns a go-redis client that finds the master of g
// through its sentinels, closed when the test ends.
func newFailoverClient(t testing.TB, g *redistest.Sentinels, delay time.Duration) *redis.Client {
	t.Helper()
	o := &redis.FailoverOptions{MasterName: g.MasterName}
	for _, s := range g.Nodes {
		o.SentinelAddrs = append(o.SentinelAddrs, s.Addr)
	}
	if delay > 0 {
		o.Dialer = delayedDialer(delay)
	}
	c := redis.NewFailoverClient(o)
	t.Cleanup(func() { c.Close() })
	return c
}

// newBackend returns a Backend on its own client of srv, closed when the
// test ends.
func newBackend(t testing.TB, srv *redistest.Server, opts Options) (*Backend, *redis.Client) {
	t.Helper()
	c := newClient(t, srv, 0)
	b, err := New(c, opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { b.Close() })
	return b, c
}

func isNotHeld(err error) bool { return errors.Is(err, driver.ErrNotHeld) }
