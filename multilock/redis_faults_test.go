package multilock_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	goredislib "github.com/redis/go-redis/v9"
	"github.com/redis/rueidis"

	"github.com/fencedlock/fencedlock"
	"github.com/fencedlock/fencedlock/backend/goredis"
	"github.com/fencedlock/fencedlock/backend/redis"
	"github.com/fencedlock/fencedlock/driver"
	"github.com/fencedlock/fencedlock/internal/faultproxy"
	"github.com/fencedlock/fencedlock/internal/multilocktest"
	"github.com/fencedlock/fencedlock/internal/testserver"
	"github.com/fencedlock/fencedlock/multilock"
)

// openVia opens a Backend of the Redis client named name whose client
// dials addr (a faultproxy in front of srv), closed when t ends.
func openVia(t *testing.T, name, addr string, srv *testserver.Redis) multilocktest.Backend {
	t.Helper()
	var (
		b   multilocktest.Backend
		err error
	)
	switch name {
	case "rueidis":
		b, err = redis.New(srv.Client(t, func(o *rueidis.ClientOption) { o.InitAddress = []string{addr} }), redis.Options{})
	case "goredis":
		c := goredislib.NewClient(&goredislib.Options{Addr: addr})
		t.Cleanup(func() { c.Close() })
		b, err = goredis.New(c, goredis.Options{})
	default:
		t.Fatalf("no Redis client %q", name)
	}
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { b.Close() })
	return b
}

// TestRedisReplyLost: a set's acquire applied by the server whose reply
// the network lost (a faultproxy cuts it, resetting the connection) fails
// with a transient error (neither permanent nor "held"), the Locker's
// clean-up frees every key of the set, and another owner takes the set at
// once with fences above the lost grant's, on both clients.
func TestRedisReplyLost(t *testing.T) {
	for _, client := range []string{"rueidis", "goredis"} {
		t.Run(client, func(t *testing.T) {
			srv := testserver.StartRedis(t)
			px, err := faultproxy.New(srv.Addr)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { px.Close() })
			b := openVia(t, client, px.Addr(), srv)
			direct := openRedis(t, client, srv)
			opts := fencedlock.Options{TTL: 30 * time.Second, ReleaseTimeout: 5 * time.Second}
			m, err := multilock.New(b, opts)
			if err != nil {
				t.Fatal(err)
			}
			defer m.Close()
			other, err := multilock.New(direct, opts)
			if err != nil {
				t.Fatal(err)
			}
			defer other.Close()
			ctx := context.Background()
			applied := 0
			for i := range 5 {
				ks := []string{fmt.Sprintf("r%d/a", i), fmt.Sprintf("r%d/b", i), fmt.Sprintf("r%d/c", i)}
				warm, err := m.TryAcquire(ctx, []string{"warm"}) // the connection carries a request
				if err != nil {
					t.Fatal(err)
				}
				if err := warm.Release(ctx); err != nil {
					t.Fatal(err)
				}
				px.CutReplies(1)
				actx, cancel := context.WithTimeout(ctx, time.Second)
				ls, err := m.TryAcquire(actx, ks)
				cancel()
				t.Logf("round %d: cut %d, %v", i, px.RepliesCut(), err)
				if err == nil {
					ls.Release(ctx)
					continue
				}
				var he *driver.HeldError
				if errors.Is(err, driver.ErrPermanent) || errors.As(err, &he) {
					t.Errorf("TryAcquire whose reply was lost: %v, want a transient error or the context's, not permanent nor held", err)
				}
				for _, k := range ks {
					if info, err := direct.Inspect(ctx, k); err != nil || info.Held {
						t.Errorf("%q after the acquire whose reply was lost: held %v (%v), want freed by the clean-up", k, info.Held, err)
					}
				}
				ols, err := other.TryAcquire(ctx, ks)
				if err != nil {
					t.Fatalf("another owner's TryAcquire after the clean-up: %v", err)
				}
				if ols.Fences()[0] == 2 { // the lost acquire took fence 1
					applied++
				}
				ols.Release(ctx)
			}
			if applied == 0 {
				t.Fatal("no acquire whose reply was cut had been applied: the test cut something else")
			}
		})
	}
}
