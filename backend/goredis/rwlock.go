package goredis

import (
	"context"
	"time"

	"github.com/fencedlock/fencedlock/driver"
)

// Read-write locks on go-redis: those of backend/redis (the same script
// and core, internal/rediscore).
var _ driver.RWLocker = (*Backend)(nil)

// AcquireRW makes one attempt to take req.Key in req.Mode (see
// backend/redis.Backend.AcquireRW).
func (b *Backend) AcquireRW(ctx context.Context, req driver.RWRequest) (driver.Grant, error) {
	return b.core.AcquireRW(ctx, req)
}

// RenewRW extends g's lease of mode m if g.Owner still holds it.
func (b *Backend) RenewRW(ctx context.Context, g driver.Grant, m driver.RWMode, ttl time.Duration) (time.Duration, error) {
	return b.core.RenewRW(ctx, g, m, ttl)
}

// ReleaseRW ends g's lease of mode m and wakes the name's watchers.
func (b *Backend) ReleaseRW(ctx context.Context, g driver.Grant, m driver.RWMode) error {
	return b.core.ReleaseRW(ctx, g, m)
}

var _ driver.RWInspector = (*Backend)(nil)

// InspectRW reports the state of the read-write lock name without
// changing it (see backend/redis.Backend.InspectRW).
func (b *Backend) InspectRW(ctx context.Context, name string) (driver.RWInfo, error) {
	return b.core.InspectRW(ctx, name)
}
