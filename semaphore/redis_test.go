package semaphore_test

import (
	"testing"
	"time"

	"github.com/fencedlock/fencedlock"
	"github.com/fencedlock/fencedlock/backend/redis"
	"github.com/fencedlock/fencedlock/internal/backendtest"
	"github.com/fencedlock/fencedlock/internal/locktest"
	"github.com/fencedlock/fencedlock/internal/semaphoretest"
	"github.com/fencedlock/fencedlock/internal/testserver"
	"github.com/fencedlock/fencedlock/semaphore"
)

// redisSetup runs the scenarios on a real redis-server: each Semaphore on
// a Backend with a client of its own, as processes sharing one server.
func redisSetup(t *testing.T) semaphoretest.Setup {
	srv := testserver.StartRedis(t)
	newBackend := func(t *testing.T) *redis.Backend {
		t.Helper()
		b, err := redis.New(srv.Client(t, nil), redis.Options{})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { b.Close() })
		return b
	}
	return semaphoretest.Setup{
		New: func(t *testing.T, opts fencedlock.Options) *semaphore.Semaphore {
			return locktest.Open(t, newBackend(t), opts, semaphore.New)
		},
		Store: redis.NewStore(newBackend(t)),
		TTL:   time.Second,
		FIFO:  true,
	}
}

func TestRedisLimitNeverExceeded(t *testing.T) {
	semaphoretest.LimitNeverExceeded(t, redisSetup(t), 3, 8, 10)
}

func TestRedisLimitsDisagree(t *testing.T) {
	semaphoretest.LimitsDisagree(t, redisSetup(t), 2, 4, 8, 10)
}

func TestRedisLowerLimitWaitsForLowSlots(t *testing.T) {
	semaphoretest.LowerLimitWaitsForLowSlots(t, redisSetup(t))
}

func TestRedisPausedHolderWriteRefused(t *testing.T) {
	semaphoretest.PausedHolderWriteRefused(t, redisSetup(t))
}

func TestRedisCrashedPermitReturns(t *testing.T) {
	semaphoretest.CrashedPermitReturns(t, redisSetup(t))
}

func TestRedisCancelledAcquireLeavesNothing(t *testing.T) {
	semaphoretest.CancelledAcquireLeavesNothing(t, redisSetup(t))
}

func TestRedisReleaseWakesWaiter(t *testing.T) {
	semaphoretest.ReleaseWakesWaiter(t, redisSetup(t))
}

// TestRedisWaitersInOrder runs WaitersInOrder on each Redis client: the
// waiters queue on QueueKey in the server's queue of the lock.
func TestRedisWaitersInOrder(t *testing.T) {
	for _, c := range backendtest.RedisClients {
		t.Run(c.Name, func(t *testing.T) {
			srv := testserver.StartRedis(t)
			semaphoretest.WaitersInOrder(t, semaphoretest.Setup{
				New: func(t *testing.T, opts fencedlock.Options) *semaphore.Semaphore {
					return newSem(t, openSlots(t, c, srv), opts)
				},
				FIFO: true,
			}, 5)
		})
	}
}

// TestRedisLimitsDisagreeAcrossPaths: callers of limit 1 (each attempt one
// acquire.lua of slot 0) and of limit 3 (one slot_acquire.lua of slots
// 0..2) contend for one name: the two paths share slot 0's lock and fence
// counter, so never two valid permits of slot 0, never more than 3 in all,
// and slot 0's fences increase whichever path granted them.
func TestRedisLimitsDisagreeAcrossPaths(t *testing.T) {
	semaphoretest.LimitsDisagree(t, redisSetup(t), 1, 3, 8, 10)
}
