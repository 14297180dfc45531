package goredis

import (
	"context"
	"testing"
	"time"

	"github.com/fencedlock/fencedlock/conformance"
	"github.com/fencedlock/fencedlock/driver"
	"github.com/fencedlock/fencedlock/internal/redisscript"
	"github.com/fencedlock/fencedlock/internal/redistest"
	"github.com/redis/go-redis/v9"
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

func (h *harness) NewBackend(ctx context.Context) (driver.Backend, error) {
	return New(h.newClient(h.t, 0), h.opts)
}

// NewDelayedBackend makes the harness a conformance.Delayer: the backend's
// client reads every response delay after redis-server sent it.
func (h *harness) NewDelayedBackend(ctx context.Context, delay time.Duration) (driver.Backend, error) {
	return New(h.newClient(h.t, delay), h.opts)
}

func (h *harness) Invalidate(ctx context.Context, key string) error {
	prefix := h.opts.KeyPrefix
	if prefix == "" {
		prefix = DefaultKeyPrefix
	}
	return h.ops.Del(ctx, redisscript.LockKey(prefix, key)).Err()
}

func (h *harness) Config() conformance.Config { return conformance.Config{} }

// TestConformance: the suite on a standalone redis-server.
func TestConformance(t *testing.T) {
	conformance.Run(t, func(t *testing.T) conformance.Harness {
		srv := redistest.Start(t)
		return &harness{
			t:         t,
			newClient: func(t *testing.T, d time.Duration) redis.UniversalClient { return newClient(t, srv, d) },
			ops:       newClient(t, srv, 0),
		}
	})
}

// TestConformanceCluster: the suite on a 3-master Redis Cluster through
// redis.ClusterClient, with sharded Pub/Sub (one cluster shared by every
// property: the suite gives each its own key prefix).
func TestConformanceCluster(t *testing.T) {
	cl := redistest.StartCluster(t, 3)
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
	primary := redistest.Start(t)
	redistest.Start(t, redistest.WithReplicaOf(primary))
	g := redistest.StartSentinels(t, primary, 3, redistest.SentinelOptions{})
	g.WaitReady(t, 1)
	conformance.Run(t, func(t *testing.T) conformance.Harness {
		return &harness{
			t:         t,
			newClient: func(t *testing.T, d time.Duration) redis.UniversalClient { return newFailoverClient(t, g, d) },
			ops:       newFailoverClient(t, g, 0),
		}
	})
}
