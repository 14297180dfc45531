package otelfencedlock_test

import (
	"context"
	"testing"
	"time"

	"github.com/fencedlock/fencedlock/backend/redis"
	"github.com/fencedlock/fencedlock/driver"
	"github.com/fencedlock/fencedlock/internal/testserver"
	"github.com/fencedlock/fencedlock/locktrace"
)

// redisStore runs the scenarios on a real redis-server with the rueidis
// backend (a Notifier: waiters are woken by release notifications).
func redisStore(t *testing.T) store {
	srv := testserver.StartRedis(t)
	admin := srv.Client(t, nil)
	return store{
		name: "redis",
		backend: func(t *testing.T) driver.Backend {
			b, err := redis.New(srv.Client(t, nil), redis.Options{})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { b.Close() })
			return b
		},
		del: func(t *testing.T, key string) {
			b, err := redis.New(admin, redis.Options{})
			if err != nil {
				t.Fatal(err)
			}
			defer b.Close()
			n, err := admin.Do(context.Background(), admin.B().Del().Key(b.LockKey(key)).Build()).AsInt64()
			if err != nil || n != 1 {
				t.Fatalf("DEL %s: %d, %v", b.LockKey(key), n, err)
			}
		},
		// redis.New queues waiters on the server (a WaitAcquirer): a
		// waiter behind a holder is reported queued once, and the
		// release hands the key to it.
		waitKind:    locktrace.WaitQueued,
		waitsBefore: 1,
		ttl:         3 * time.Second,
	}
}

func TestRedisHandOff(t *testing.T) { handOff(t, redisStore(t)) }

func TestRedisLostByDel(t *testing.T) { lostByDel(t, redisStore(t)) }
