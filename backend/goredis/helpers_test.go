package goredis

import (
	"context"
	"errors"
	"io"
	"net"
	"strconv"
	"testing"
	"time"

	"github.com/fencedlock/fencedlock/conformance"
	"github.com/fencedlock/fencedlock/driver"
	"github.com/fencedlock/fencedlock/internal/rediscore/rediscoretest"
	"github.com/fencedlock/fencedlock/internal/testserver"
	"github.com/redis/go-redis/v9"
)

// newClient returns a go-redis client of srv, closed when the test ends.
// delay, if positive, delays everything the client reads by that much.
func newClient(t testing.TB, srv *testserver.Redis, delay time.Duration) *redis.Client {
	t.Helper()
	return closeWithTest(t, redis.NewClient(&redis.Options{Addr: srv.Addr, Dialer: delayedDialer(delay)}))
}

// delayedDialer dials TCP and delays what the connection reads; with no
// delay it is nil: the client's own dialer.
func delayedDialer(delay time.Duration) func(ctx context.Context, network, addr string) (net.Conn, error) {
	if delay <= 0 {
		return nil
	}
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
func newClusterClient(t testing.TB, cl *testserver.RedisCluster, delay time.Duration) *redis.ClusterClient {
	t.Helper()
	return closeWithTest(t, redis.NewClusterClient(&redis.ClusterOptions{Addrs: addrs(cl.Nodes), Dialer: delayedDialer(delay)}))
}

// newFailoverClient returns a go-redis client that finds the master of g
// through its sentinels, closed when the test ends.
func newFailoverClient(t testing.TB, g *testserver.Sentinels, delay time.Duration) *redis.Client {
	t.Helper()
	o := &redis.FailoverOptions{MasterName: g.MasterName, SentinelAddrs: addrs(g.Nodes), Dialer: delayedDialer(delay)}
	return closeWithTest(t, redis.NewFailoverClient(o))
}

// addrs are the addresses of nodes.
func addrs(nodes []*testserver.Redis) []string {
	a := make([]string, len(nodes))
	for i, s := range nodes {
		a[i] = s.Addr
	}
	return a
}

// closeWithTest returns c, closed when the test ends.
func closeWithTest[C io.Closer](t testing.TB, c C) C {
	t.Cleanup(func() { c.Close() })
	return c
}

// newBackend returns a Backend on its own client of srv, closed when the
// test ends.
func newBackend(t testing.TB, srv *testserver.Redis, opts Options) (*Backend, *redis.Client) {
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

// adapter is this backend's constructors for the test bodies both Redis
// adapters run (internal/rediscore/rediscoretest): go-redis clients with
// their default options.
var adapter = rediscoretest.Adapter[redis.UniversalClient]{
	Client: func(t testing.TB, addr, user, password string) redis.UniversalClient {
		return closeWithTest(t, redis.NewClient(&redis.Options{Addr: addr, Username: user, Password: password}))
	},
	Cluster: func(t testing.TB, cl *testserver.RedisCluster) redis.UniversalClient {
		return newClusterClient(t, cl, 0)
	},
	Sentinel: func(t testing.TB, g *testserver.Sentinels, _ *testserver.Redis) redis.UniversalClient {
		return newFailoverClient(t, g, 0)
	},
	New: func(c redis.UniversalClient, replicas int, timeout time.Duration) (rediscoretest.FullBackend, error) {
		return New(c, Options{WaitReplicas: replicas, WaitTimeout: timeout})
	},
	Fixture: fixture,
}

// fixture is the Store of b (a *Backend), whose client is c, for the
// shared tests.
func fixture(b rediscoretest.FullBackend, c redis.UniversalClient) rediscoretest.Fixture {
	do := func(ctx context.Context, args ...string) (string, error) {
		cmd := make([]any, len(args))
		for i, a := range args {
			cmd[i] = a
		}
		v, err := c.Do(ctx, cmd...).Result()
		if err != nil {
			return "", err
		}
		if n, ok := v.(int64); ok {
			return strconv.FormatInt(n, 10), nil
		}
		s, _ := v.(string)
		return s, nil
	}
	return rediscoretest.Fixture{Store: NewStore(b.(*Backend)), Do: do}
}

// TestCore runs the test bodies both Redis adapters run
// (internal/rediscore/rediscoretest.Run) on this one's adapter.
func TestCore(t *testing.T) { rediscoretest.Run(t, adapter) }

// BenchmarkCore runs the microbenchmarks both Redis adapters run
// (internal/rediscore/rediscoretest.RunBenchmarks) on this one's adapter.
func BenchmarkCore(b *testing.B) { rediscoretest.RunBenchmarks(b, adapter) }
