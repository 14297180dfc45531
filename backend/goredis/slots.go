package goredis

import (
	"context"

	"github.com/redis/go-redis/v9"

	"github.com/fencedlock/fencedlock/driver"
)

// Semaphore permits in one round trip on go-redis: those of backend/redis
// (the same script and core, internal/rediscore).
var _ driver.SlotAcquirer = (*Backend)(nil)

// AcquireSlot makes one attempt to take the first free of keys, each as
// Acquire would take it, in one round trip (see [driver.SlotAcquirer]):
// a free slot whose queue has waiters is left to them, as Acquire leaves
// a free lock.
func (b *Backend) AcquireSlot(ctx context.Context, req driver.AcquireRequest, keys []string) (int, driver.Grant, error) {
	return b.core.AcquireSlot(ctx, req, keys, true)
}

// SlotsInOneStep reports whether AcquireSlot can take from keys: yes,
// except with Options.WaitReplicas or on a *redis.ClusterClient, where
// the lock keys of a semaphore's slots are in different hash slots
// (package semaphore then tries them one at a time).
func (b *Backend) SlotsInOneStep(keys []string) bool {
	_, cluster := b.c.(*redis.ClusterClient)
	return b.core.SlotsInOneStep(cluster, keys)
}
