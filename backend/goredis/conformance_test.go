package goredis

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/fencedlock/fencedlock/conformance"
	"github.com/fencedlock/fencedlock/driver"
	"github.com/fencedlock/fencedlock/fencing"
	"github.com/fencedlock/fencedlock/internal/faultproxy"
	"github.com/fencedlock/fencedlock/internal/rediscore"
	"github.com/fencedlock/fencedlock/internal/rediscore/rediscoretest"
	"github.com/fencedlock/fencedlock/internal/redisnames"
	"github.com/fencedlock/fencedlock/internal/redisscript"
	"github.com/fencedlock/fencedlock/internal/testserver"
	"github.com/redis/go-redis/v9"
	"github.com/redis/rueidis"
)

// harness runs the public conformance suite against real redis-servers:
// every backend has its own go-redis client (newClient), as a separate
// process would.
type harness struct {
	t         *testing.T
	newClient func(t *testing.T, delay time.Duration) redis.UniversalClient
	opts      Options
	ops       redis.UniversalClient // the operator's client, for Invalidate
}

// newBackend returns a Backend on c.
func (h *harness) newBackend(c redis.UniversalClient) (driver.Backend, error) {
	return New(c, h.opts)
}

func (h *harness) NewBackend(ctx context.Context) (driver.Backend, error) {
	return h.newBackend(h.newClient(h.t, 0))
}

// NewDelayedBackend makes the harness a conformance.Delayer: the backend's
// client reads every response delay after redis-server sent it.
func (h *harness) NewDelayedBackend(ctx context.Context, delay time.Duration) (driver.Backend, error) {
	return h.newBackend(h.newClient(h.t, delay))
}

func (h *harness) Invalidate(ctx context.Context, key string) error {
	return h.ops.Del(ctx, h.lockKey(key)).Err()
}

// lockKey is the Redis key of key's lock.
func (h *harness) lockKey(key string) string {
	prefix := h.opts.KeyPrefix
	if prefix == "" {
		prefix = DefaultKeyPrefix
	}
	return redisscript.LockKey(prefix, key)
}

// CorruptNoExpiry makes the harness a conformance.ExpiryCorrupter: key's
// lock becomes a string, as the scripts write it, without a TTL (every
// lock they write has one).
func (h *harness) CorruptNoExpiry(ctx context.Context, key string) error {
	return h.ops.Set(ctx, h.lockKey(key), "foreign-owner", 0).Err()
}

// SetFenceRecord makes the harness a conformance.FenceCorrupter: it writes
// key's fence counter with the operator's client.
func (h *harness) SetFenceRecord(ctx context.Context, key string, rec conformance.FenceRecord) error {
	fk := h.lockKey(key) + redisnames.FenceSuffix
	if err := h.ops.Del(ctx, fk).Err(); err != nil || rec.Absent {
		return err
	}
	switch {
	case rec.Foreign:
		return h.ops.HSet(ctx, fk, "foreign", "value").Err()
	case rec.Expires:
		return h.ops.Set(ctx, fk, rec.Value, time.Hour).Err()
	}
	return h.ops.Set(ctx, fk, rec.Value, 0).Err()
}

// ReadFenceRecord describes key's fence counter: its type, its value
// (DUMP's serialization, any type) and whether it has a TTL.
func (h *harness) ReadFenceRecord(ctx context.Context, key string) (string, error) {
	fk := h.lockKey(key) + redisnames.FenceSuffix
	typ, err := h.ops.Type(ctx, fk).Result()
	if err != nil {
		return "", err
	}
	dump, err := h.ops.Dump(ctx, fk).Result()
	if err != nil && !errors.Is(err, redis.Nil) {
		return "", err
	}
	pttl, err := h.ops.PTTL(ctx, fk).Result()
	if err != nil {
		return "", err
	}
	return fmt.Sprintf("%s %q expires=%t", typ, dump, pttl >= 0), nil
}

// MaxFence is the backend's greatest fence.
func (h *harness) MaxFence() fencing.Token { return MaxFence }

// Config: a fair waiter's queue entry lives at least
// rediscore.FairMinEntryTTL (SilentWaiter).
func (h *harness) Config() conformance.Config {
	return conformance.Config{QueuePlaceTTL: rediscore.FairMinEntryTTL}
}

// faultyHarness is the harness on a standalone redis-server, also a
// conformance.FaultInjector.
type faultyHarness struct {
	*harness
	srv *testserver.Redis
	rc  rueidis.Client // the operator's client for Records
}

// Records makes the harness a conformance.RecordLister.
func (h faultyHarness) Records(ctx context.Context, key string) ([]conformance.Record, error) {
	return rediscoretest.Records(ctx, h.rc, h.lockKey(key))
}

// NewFaultyBackend makes the harness a conformance.FaultInjector: the
// backend's client talks to redis-server through a TCP proxy of its own.
func (h faultyHarness) NewFaultyBackend(ctx context.Context) (driver.Backend, conformance.Faults, error) {
	px, err := faultproxy.New(h.srv.Addr)
	if err != nil {
		return nil, nil, err
	}
	h.t.Cleanup(func() { px.Close() })
	c := redis.NewClient(&redis.Options{Addr: px.Addr()})
	h.t.Cleanup(func() { c.Close() })
	b, err := h.newBackend(c)
	return b, faultproxy.Faults{P: px}, err
}

// TestConformance: the suite on a standalone redis-server, with faults;
// the Backend's WaitAcquirer properties (FIFO, exclusive with Acquire,
// greater fence, a waiter past its TTL, cancelled waiters leave nothing)
// run on go-redis too.
func TestConformance(t *testing.T) {
	conformance.Run(t, func(t *testing.T) conformance.Harness {
		srv := testserver.StartRedis(t)
		return faultyHarness{&harness{
			t:         t,
			newClient: func(t *testing.T, d time.Duration) redis.UniversalClient { return newClient(t, srv, d) },
			ops:       newClient(t, srv, 0),
		}, srv, srv.Client(t, nil)}
	})
}

// TestConformanceCluster: the suite on a 3-master Redis Cluster through
// redis.ClusterClient, with sharded Pub/Sub (one cluster shared by every
// property: the suite gives each its own key prefix).
func TestConformanceCluster(t *testing.T) {
	cl := testserver.StartRedisCluster(t, 3)
	conformance.Run(t, func(t *testing.T) conformance.Harness {
		return &harness{
			t:         t,
			newClient: func(t *testing.T, d time.Duration) redis.UniversalClient { return newClusterClient(t, cl, d) },
			opts:      Options{ShardedPubSub: true},
			ops:       newClusterClient(t, cl, 0),
		}
	})
}

// TestConformanceSentinel: the suite through Sentinel (three sentinels
// monitoring a primary with one replica), through redis.NewFailoverClient.
func TestConformanceSentinel(t *testing.T) {
	primary := testserver.StartRedis(t)
	testserver.StartRedis(t, testserver.WithReplicaOf(primary))
	g := testserver.StartSentinels(t, primary, 3, testserver.SentinelOptions{})
	g.WaitReady(t, 1)
	conformance.Run(t, func(t *testing.T) conformance.Harness {
		return &harness{
			t:         t,
			newClient: func(t *testing.T, d time.Duration) redis.UniversalClient { return newFailoverClient(t, g, d) },
			ops:       newFailoverClient(t, g, 0),
		}
	})
}

// SetKeys makes the harness a conformance.SetKeyer: on Redis Cluster a
// set must be in one hash slot (keys of one slot do on any server).
func (h *harness) SetKeys(prefix string, n int) []string {
	p := h.opts.KeyPrefix
	if p == "" {
		p = redisscript.DefaultKeyPrefix
	}
	return rediscoretest.SameSlotKeys(p, prefix, n)
}
