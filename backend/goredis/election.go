package goredis

import (
	"context"

	"github.com/fencedlock/fencedlock/driver"
	"github.com/fencedlock/fencedlock/fencing"
)

// Elections on go-redis: those of backend/redis (the same scripts and
// core, internal/rediscore).
var _ driver.Elector = (*Backend)(nil)

// Proclaim stores value as the leader's value of key's term of fence and
// holder, if that lease still holds key (proclaim.lua); otherwise an error
// wrapping [driver.ErrNotHeld]. See backend/redis.Backend.Proclaim.
func (b *Backend) Proclaim(ctx context.Context, key string, fence fencing.Token, holder string, value []byte) error {
	return b.core.Proclaim(ctx, key, fence, holder, value)
}

// Leader reports key's current term, read in one step (leader.lua).
func (b *Backend) Leader(ctx context.Context, key string) (driver.LeaderInfo, error) {
	return b.core.Leader(ctx, key)
}

// WatchLeader delivers key's state, then every change of leader (see
// backend/redis.Backend.WatchLeader).
func (b *Backend) WatchLeader(ctx context.Context, key string) (<-chan driver.LeaderEvent, func(), error) {
	return b.core.WatchLeader(ctx, key)
}
