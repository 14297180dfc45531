package redis

import (
	"context"

	"github.com/redis/rueidis"

	"github.com/fencedlock/fencedlock/driver"
)

// Semaphore permits in one round trip (package semaphore): one script
// (internal/redisscript/slot_acquire.lua) takes the first free of a
// semaphore's slot locks. Written once in internal/rediscore for both
// clients.
var _ driver.SlotAcquirer = (*Backend)(nil)

// AcquireSlot makes one attempt to take the first free of keys, each as
// Acquire would take it, in one round trip (see [driver.SlotAcquirer]):
// a free slot whose queue has waiters is left to them, as Acquire leaves
// a free lock.
func (b *Backend) AcquireSlot(ctx context.Context, req driver.AcquireRequest, keys []string) (int, driver.Grant, error) {
	return b.core.AcquireSlot(ctx, req, keys, true)
}

// SlotsInOneStep reports whether AcquireSlot can take from keys: yes,
// except with Options.WaitReplicas or on a Redis Cluster, where the lock
// keys of a semaphore's slots are in different hash slots (package
// semaphore then tries them one at a time).
func (b *Backend) SlotsInOneStep(keys []string) bool {
	return b.core.SlotsInOneStep(b.c.Mode() == rueidis.ClientModeCluster, keys)
}
