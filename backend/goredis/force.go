package goredis

import (
	"context"
	"fmt"

	"github.com/fencedlock/fencedlock/driver"
	"github.com/fencedlock/fencedlock/fencing"
	"github.com/fencedlock/fencedlock/internal/redisscript"
)

var (
	forceReleaseScript = script{redisscript.ForceReleaseSHA, redisscript.ForceReleaseLua}
	fenceBarrierScript = script{redisscript.FenceBarrierSHA, redisscript.FenceBarrierLua}
)

var _ driver.ForceReleaser = (*Backend)(nil)

// ForceRelease deletes the lock key whoever holds it and advances its fence
// counter, in one step (force_release.lua, the script of backend/redis): an
// operator's forced release (see [driver.ForceReleaser]). Write
// ForceResult.After to the hashes the lock guards with
// [Backend.FenceBarrier] so that the old holder's next [Backend.FencedSet]
// is rejected. A key fencedlock did not write returns an error wrapping
// [ErrCorrupt] and changes nothing.
func (b *Backend) ForceRelease(ctx context.Context, key string) (driver.ForceResult, error) {
	var r driver.ForceResult
	if b.closed.Load() {
		return r, errClosed("force release", key)
	}
	if err := driver.ValidateKey(key); err != nil {
		return r, fmt.Errorf("redis: force release: %w", err)
	}
	lk := b.LockKey(key)
	vals, err := b.run(ctx, forceReleaseScript, []any{nil, nil, 2, lk, lk + redisscript.FenceSuffix}).Slice()
	if err != nil {
		return r, wrap("force release", key, err)
	}
	return redisscript.ReadForceRelease(key, values(vals))
}

// FenceBarrier raises the fence record of key, a hash guarded by
// [Backend.FencedSet], to token from holder without writing any other
// field, if the fencing rule accepts it (fence_barrier.lua). A rejection
// returns an error wrapping a *[fencing.StaleError].
func (b *Backend) FenceBarrier(ctx context.Context, key string, token fencing.Token, holder string) error {
	const op = "fence barrier"
	if b.closed.Load() {
		return errClosed(op, key)
	}
	if err := redisscript.CheckFenceBarrier(op, key, b.opts.KeyPrefix, token, holder); err != nil {
		return err
	}
	vals, err := b.run(ctx, fenceBarrierScript, []any{nil, nil, 1, key, token.String(), holder}).Slice()
	if err != nil {
		return wrap(op, key, err)
	}
	return redisscript.ReadFencedWrite(op, key, token, holder, values(vals))
}
