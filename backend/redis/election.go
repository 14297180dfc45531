package redis

import (
	"context"

	"github.com/fencedlock/fencedlock/driver"
	"github.com/fencedlock/fencedlock/fencing"
)

// Elections (package election) on Redis: a term is a lease of the
// election's lock, its fence the lock's fence; the leader's value is a
// hash beside the lock (lock key + ":leader", same hash slot) that
// outlives its term and is reported only with it (its fence and its
// owner's, as the record stores the SHA-1 of the owner token). Written once in
// internal/rediscore for both clients.
var _ driver.Elector = (*Backend)(nil)

// Proclaim stores value as the leader's value of the term of key with
// fence and holder id holder, if that lease still holds key, and wakes the
// watchers of key (internal/redisscript/proclaim.lua: the server computes
// the holder id of the owner token it holds; the token never leaves it).
// Otherwise it stores nothing and returns an error wrapping
// [driver.ErrNotHeld]. See [driver.Elector].
func (b *Backend) Proclaim(ctx context.Context, key string, fence fencing.Token, holder string, value []byte) error {
	return b.core.Proclaim(ctx, key, fence, holder, value)
}

// Leader reports key's current term: its fence, holder id, value and
// remaining lease, read in one step (leader.lua); Held is false when no
// lease holds key or its term has not been proclaimed yet.
func (b *Backend) Leader(ctx context.Context, key string) (driver.LeaderInfo, error) {
	return b.core.Leader(ctx, key)
}

// WatchLeader delivers key's state, then every change of leader, woken by
// the release channel of key (release and Proclaim publish on it; a term
// ending by expiry is seen at its expiry) with a Leader read after each
// wake-up; Missed is set when a read finds grants of key it did not see.
// See [driver.Elector].
func (b *Backend) WatchLeader(ctx context.Context, key string) (<-chan driver.LeaderEvent, func(), error) {
	return b.core.WatchLeader(ctx, key)
}
