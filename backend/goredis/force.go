package goredis

import (
	"context"

	"github.com/fencedlock/fencedlock/driver"
	"github.com/fencedlock/fencedlock/fencing"
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
	return b.core.ForceRelease(ctx, key)
}

// FenceBarrier raises the fence record of key, a hash guarded by
// [Backend.FencedSet], to token from holder without writing any other
// field, if the fencing rule accepts it (fence_barrier.lua). A rejection
// returns an error wrapping a *[fencing.StaleError].
func (b *Backend) FenceBarrier(ctx context.Context, key string, token fencing.Token, holder string) error {
	return b.store.FenceBarrier(ctx, key, token, holder)
}
