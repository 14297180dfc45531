package redis

import (
	"context"
	"time"

	"github.com/redis/rueidis"

	"github.com/fencedlock/fencedlock/driver"
)

// Sets of keys (package multilock) on Redis: each key of a set is the
// lock of Acquire, and the whole set is taken, renewed and released by
// one script each (internal/redisscript/multi_*.lua). Written once in
// internal/rediscore for both clients. On Redis Cluster every key of a
// set must be in one hash slot (the lock key's hash tag is the escaped
// key, so in practice: keys whose slots agree); otherwise the error wraps
// [driver.ErrInvalid] and nothing is sent. With [Options.WaitReplicas] a
// set's acquire and renew are confirmed by WAIT as a single key's are: a
// set taken but not confirmed is released again and the error wraps
// [ErrReplication].
var _ driver.MultiLocker = (*Backend)(nil)

// Cluster reports whether the client talks to a Redis Cluster
// (rediscore.ClusterConn).
func (c conn) Cluster() bool { return c.b.c.Mode() == rueidis.ClientModeCluster }

// AcquireMulti takes every key of req.Keys with the next fence of each,
// or none: a *driver.HeldError names the first key held by another owner.
// See [driver.MultiLocker].
func (b *Backend) AcquireMulti(ctx context.Context, req driver.MultiRequest) (driver.MultiGrant, error) {
	return b.core.AcquireMulti(ctx, req)
}

// RenewMulti extends every key of g if g.Owner still holds them all;
// otherwise a *driver.LostKeyError names the key it lost.
func (b *Backend) RenewMulti(ctx context.Context, g driver.MultiGrant, ttl time.Duration) (time.Duration, error) {
	return b.core.RenewMulti(ctx, g, ttl)
}

// ReleaseMulti deletes the keys of g that g.Owner holds and wakes their
// waiters; a *driver.LostKeyError names a key it no longer held.
func (b *Backend) ReleaseMulti(ctx context.Context, g driver.MultiGrant) error {
	return b.core.ReleaseMulti(ctx, g)
}
