package redis

import (
	"context"

	"github.com/fencedlock/fencedlock/driver"
	"github.com/fencedlock/fencedlock/fencing"
)

var _ driver.ForceReleaser = (*Backend)(nil)

// ForceRelease deletes the lock key whoever holds it and advances its fence
// counter, in one step (internal/redisscript/force_release.lua): an
// operator's forced release (see [driver.ForceReleaser]). The fence it
// consumes, ForceResult.After, is granted to no one: write it to the
// hashes the lock guards with [Backend.FenceBarrier] so that the old
// holder's next [Backend.FencedSet] is rejected. The old holder's next
// renewal reports the lease lost. Waiters are not woken: they find the key
// free at their next poll.
//
// A key fencedlock did not write returns an error wrapping [ErrCorrupt],
// a counter at [MaxFence] one wrapping [ErrFenceExhausted]; nothing is
// changed then.
func (b *Backend) ForceRelease(ctx context.Context, key string) (driver.ForceResult, error) {
	return b.core.ForceRelease(ctx, key)
}

// FenceBarrier raises the fence record of key, a hash guarded by
// [Backend.FencedSet] or [Backend.FencedHSet], to token from holder without
// writing any other field, if the fencing rule accepts it (one step,
// internal/redisscript/fence_barrier.lua). After it, a guarded write with
// a smaller token, or the same token from another holder, is rejected.
// An operator writes ForceResult.After from [Backend.ForceRelease] this way.
// Errors are those of FencedSet: a rejection wraps a *[fencing.StaleError].
func (b *Backend) FenceBarrier(ctx context.Context, key string, token fencing.Token, holder string) error {
	return b.store.FenceBarrier(ctx, key, token, holder)
}
