package rwlock_test

import (
	"testing"
	"time"

	goredislib "github.com/redis/go-redis/v9"

	"github.com/fencedlock/fencedlock"
	"github.com/fencedlock/fencedlock/backend/goredis"
	"github.com/fencedlock/fencedlock/backend/redis"
	"github.com/fencedlock/fencedlock/driver"
	"github.com/fencedlock/fencedlock/fencing"
	"github.com/fencedlock/fencedlock/internal/locktest"
	"github.com/fencedlock/fencedlock/internal/rwlocktest"
	"github.com/fencedlock/fencedlock/internal/testserver"
	"github.com/fencedlock/fencedlock/rwlock"
)

// TestRedisCluster runs the scenarios of internal/rwlocktest on a Redis
// Cluster of 3 masters with each client, releases published with SPUBLISH
// (Options.ShardedPubSub, as backend/redis's doc asks on a Cluster), every
// RWLock on a Backend of its own: the names' keys share their hash slot
// and the waiters are woken by sharded messages.
func TestRedisCluster(t *testing.T) {
	cl := testserver.StartRedisCluster(t, 3)
	clients := []struct {
		name string
		open func(t *testing.T) (driver.Backend, fencing.Store)
	}{
		{"rueidis", func(t *testing.T) (driver.Backend, fencing.Store) {
			b, err := redis.New(cl.Client(t, nil), redis.Options{ShardedPubSub: true})
			if err != nil {
				t.Fatal(err)
			}
			return b, redis.NewStore(b)
		}},
		{"goredis", func(t *testing.T) (driver.Backend, fencing.Store) {
			o := &goredislib.ClusterOptions{}
			for _, s := range cl.Nodes {
				o.Addrs = append(o.Addrs, s.Addr)
			}
			c := goredislib.NewClusterClient(o)
			t.Cleanup(func() { c.Close() })
			b, err := goredis.New(c, goredis.Options{ShardedPubSub: true})
			if err != nil {
				t.Fatal(err)
			}
			return b, goredis.NewStore(b)
		}},
	}
	for _, c := range clients {
		for _, sc := range rwlocktest.Scenarios(6, 15) {
			t.Run(c.name+"/"+sc.Name, func(t *testing.T) {
				b, store := c.open(t)
				t.Cleanup(func() { b.Close() })
				sc.Run(t, rwlocktest.Setup{
					New: func(t *testing.T, opts fencedlock.Options) *rwlock.RWLock {
						b, _ := c.open(t)
						return locktest.Open(t, b, opts, rwlock.New)
					},
					Backend: func(t *testing.T) driver.RWLocker {
						b, _ := c.open(t)
						t.Cleanup(func() { b.Close() })
						return b.(driver.RWLocker)
					},
					Store: store,
					TTL:   500 * time.Millisecond,
				})
			})
		}
	}
}
