package rediscore

import (
	"context"
	"fmt"

	"github.com/fencedlock/fencedlock/driver"
	"github.com/fencedlock/fencedlock/fencing"
	"github.com/fencedlock/fencedlock/internal/redisnames"
	"github.com/fencedlock/fencedlock/internal/redisscript"
)

// ForceRelease deletes the lock key whoever holds it and advances its
// fence counter, in one step (force_release.lua); see the adapters'
// Backend.ForceRelease.
func (b *Backend) ForceRelease(ctx context.Context, key string) (driver.ForceResult, error) {
	const op = "force release"
	var r driver.ForceResult
	c := b.c
	if c.Closed() {
		return r, redisscript.ErrClosed(op, key)
	}
	if err := driver.ValidateKey(key); err != nil {
		return r, fmt.Errorf("redis: force release: %w", err)
	}
	lockKey := redisscript.LockKey(b.opts.KeyPrefix, key)
	vals, err := c.Eval(ctx, forceReleaseScript, []string{lockKey, lockKey + redisnames.FenceSuffix}, nil)
	if err != nil {
		return r, c.Wrap(op, key, err)
	}
	return redisscript.ReadForceRelease(key, vals)
}

// FenceBarrier raises the fence record of key to token from holder
// without writing any other field, if the fencing rule accepts it
// (fence_barrier.lua); a rejection returns an error wrapping a
// *[fencing.StaleError].
func (s *Store) FenceBarrier(ctx context.Context, key string, token fencing.Token, holder string) error {
	const op = "fence barrier"
	if s.c.Closed() {
		return redisscript.ErrClosed(op, key)
	}
	if err := redisscript.CheckFenceBarrier(op, key, s.prefix, token, holder); err != nil {
		return err
	}
	vals, err := s.c.Eval(ctx, fenceBarrierScript, []string{key}, []string{token.String(), holder})
	if err != nil {
		return s.c.Wrap(op, key, err)
	}
	return redisscript.ReadFencedWrite(op, key, token, holder, vals)
}
