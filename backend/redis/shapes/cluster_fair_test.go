package shapes_test

import (
	"context"
	"testing"

	"github.com/fencedlock/fencedlock/backend/redis"
	"github.com/fencedlock/fencedlock/conformance"
	"github.com/fencedlock/fencedlock/driver"
	"github.com/fencedlock/fencedlock/internal/rediscore"
	"github.com/fencedlock/fencedlock/internal/rediscore/rediscoretest"
	"github.com/fencedlock/fencedlock/internal/testserver"
	"github.com/redis/rueidis"
)

// clusterFairHarness runs the conformance suite against redis.Backend
// (whose waiters queue) on a 3-master Redis Cluster: the fair queue, its hand-off message and
// the waiters' clean-up must stay in the lock's hash slot.
type clusterFairHarness struct {
	t     *testing.T
	cl    *testserver.RedisCluster
	ops   rueidis.Client
	names *redis.Backend
	opts  redis.Options
}

func (h *clusterFairHarness) NewBackend(ctx context.Context) (driver.Backend, error) {
	return redis.New(h.cl.Client(h.t, nil), h.opts)
}

func (h *clusterFairHarness) Invalidate(ctx context.Context, key string) error {
	return h.ops.Do(ctx, h.ops.B().Del().Key(h.names.LockKey(key)).Build()).Error()
}

// Config: a fair waiter's queue entry lives at least
// rediscore.FairMinEntryTTL (SilentWaiter).
func (h *clusterFairHarness) Config() conformance.Config {
	return conformance.Config{QueuePlaceTTL: rediscore.FairMinEntryTTL}
}

// SetKeys makes the harness a conformance.SetKeyer: on Redis Cluster the
// keys of a set must be in one hash slot (AcquireMulti refuses others
// with ErrInvalid, which TestCluster checks).
func (h *clusterFairHarness) SetKeys(prefix string, n int) []string {
	p := h.opts.KeyPrefix
	if p == "" {
		p = redis.DefaultKeyPrefix
	}
	return rediscoretest.SameSlotKeys(p, prefix, n)
}

// TestClusterConformanceFair: the whole conformance suite, WaitAcquirer
// properties included, on Redis Cluster, with PUBLISH and with SPUBLISH.
// One cluster serves every property (their keys differ).
func TestClusterConformanceFair(t *testing.T) {
	cl := testserver.StartRedisCluster(t, 3)
	for _, sharded := range []bool{false, true} {
		name := "publish"
		if sharded {
			name = "spublish"
		}
		t.Run(name, func(t *testing.T) {
			opts := redis.Options{ShardedPubSub: sharded}
			conformance.Run(t, func(t *testing.T) conformance.Harness {
				c := cl.Client(t, nil)
				return &clusterFairHarness{t: t, cl: cl, ops: c, names: newBackend(t, c, opts), opts: opts}
			})
		})
	}
}
