package goredis

import (
	"context"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/fencedlock/fencedlock/driver"
)

// Sets of keys on go-redis: those of backend/redis (the same scripts and
// core, internal/rediscore). On a *redis.ClusterClient every key of a set
// must be in one hash slot (else ErrInvalid, nothing sent). On a
// *redis.Ring, which runs a script on the shard of its first key and
// moves keys between shards, a set is one key (else ErrInvalid, nothing
// sent). WaitReplicas confirms a set's acquire and renew as a single
// key's.
var _ driver.MultiLocker = (*Backend)(nil)

// Cluster reports whether the client is a *redis.ClusterClient
// (rediscore.ClusterConn).
func (c conn) Cluster() bool {
	_, ok := c.b.c.(*redis.ClusterClient)
	return ok
}

// Ring reports whether the client is a *redis.Ring (rediscore.RingConn).
func (c conn) Ring() bool {
	_, ok := c.b.c.(*redis.Ring)
	return ok
}

// AcquireMulti takes every key of req.Keys, or none (see
// backend/redis.Backend.AcquireMulti).
func (b *Backend) AcquireMulti(ctx context.Context, req driver.MultiRequest) (driver.MultiGrant, error) {
	return b.core.AcquireMulti(ctx, req)
}

// RenewMulti extends every key of g if g.Owner still holds them all.
func (b *Backend) RenewMulti(ctx context.Context, g driver.MultiGrant, ttl time.Duration) (time.Duration, error) {
	return b.core.RenewMulti(ctx, g, ttl)
}

// ReleaseMulti deletes the keys of g that g.Owner holds.
func (b *Backend) ReleaseMulti(ctx context.Context, g driver.MultiGrant) error {
	return b.core.ReleaseMulti(ctx, g)
}
