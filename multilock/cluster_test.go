package multilock_test

import (
	"context"
	"errors"
	"fmt"
	"testing"

	goredislib "github.com/redis/go-redis/v9"

	"github.com/fencedlock/fencedlock"
	"github.com/fencedlock/fencedlock/backend/goredis"
	"github.com/fencedlock/fencedlock/backend/redis"
	"github.com/fencedlock/fencedlock/driver"
	"github.com/fencedlock/fencedlock/internal/rediscore"
	"github.com/fencedlock/fencedlock/internal/redisscript"
	"github.com/fencedlock/fencedlock/internal/testserver"
	"github.com/fencedlock/fencedlock/multilock"
)

// sameSlot returns n keys whose lock keys share one Cluster hash slot.
func sameSlot(n int) []string {
	slot := func(k string) uint16 { return rediscore.HashSlot(redisscript.LockKey(redisscript.DefaultKeyPrefix, k)) }
	keys := []string{"c0"}
	for i := 1; len(keys) < n && i < 1<<22; i++ {
		if k := fmt.Sprintf("c%d", i); slot(k) == slot(keys[0]) {
			keys = append(keys, k)
		}
	}
	return keys
}

// TestCluster: on Redis Cluster (both clients) a set in one hash slot is
// taken and released whole; a set across slots fails with ErrInvalid
// before anything is sent.
func TestCluster(t *testing.T) {
	cl := testserver.StartRedisCluster(t, 3)
	backends := map[string]func(t *testing.T) driver.Backend{
		"rueidis": func(t *testing.T) driver.Backend {
			b, err := redis.New(cl.Client(t, nil), redis.Options{})
			if err != nil {
				t.Fatal(err)
			}
			return b
		},
		"go-redis": func(t *testing.T) driver.Backend {
			o := &goredislib.ClusterOptions{}
			for _, s := range cl.Nodes {
				o.Addrs = append(o.Addrs, s.Addr)
			}
			c := goredislib.NewClusterClient(o)
			t.Cleanup(func() { c.Close() })
			b, err := goredis.New(c, goredis.Options{})
			if err != nil {
				t.Fatal(err)
			}
			return b
		},
	}
	keys := sameSlot(4)
	if len(keys) != 4 {
		t.Fatalf("found only %q in one slot", keys)
	}
	for name, newBackend := range backends {
		t.Run(name, func(t *testing.T) {
			b := newBackend(t)
			defer b.Close()
			m, err := multilock.New(b, fencedlock.Options{})
			if err != nil {
				t.Fatal(err)
			}
			defer m.Close()
			ctx := context.Background()
			ls, err := m.TryAcquire(ctx, keys)
			if err != nil {
				t.Fatalf("one slot: %v", err)
			}
			if err := ls.Renew(ctx); err != nil {
				t.Fatal(err)
			}
			if err := ls.Release(ctx); err != nil {
				t.Fatal(err)
			}
			if _, err := m.TryAcquire(ctx, []string{"a", "b"}); !errors.Is(err, driver.ErrInvalid) {
				t.Fatalf("two slots: %v, want ErrInvalid", err)
			}
		})
	}
}
