package redis

import (
	"context"
	"time"

	"github.com/fencedlock/fencedlock/driver"
)

// Read-write locks (package rwlock) on Redis: one script
// (internal/redisscript/rwlock.lua) for every step, keys beside the name's
// lock key (":rw:writer", ":rw:readers", ":rw:fences", ":rw:fence",
// ":rw:intents", ":rw:abandoned"; same hash slot), releases announced on
// the lock key's release channel. Written once in internal/rediscore for
// both clients.
var _ driver.RWLocker = (*Backend)(nil)

// AcquireRW makes one attempt to take req.Key in req.Mode (see
// [driver.RWLocker]): the grant's fence comes from the counter shared by
// readers and writers; a writer refused keeps its intent for req.Intent.
func (b *Backend) AcquireRW(ctx context.Context, req driver.RWRequest) (driver.Grant, error) {
	return b.core.AcquireRW(ctx, req)
}

// RenewRW extends g's lease of mode m to ttl if g.Owner still holds it;
// otherwise an error wrapping [driver.ErrNotHeld].
func (b *Backend) RenewRW(ctx context.Context, g driver.Grant, m driver.RWMode, ttl time.Duration) (time.Duration, error) {
	return b.core.RenewRW(ctx, g, m, ttl)
}

// ReleaseRW ends g's lease of mode m (and g.Owner's intent) and wakes the
// watchers of g.Key when the name may be free; an error wrapping
// [driver.ErrNotHeld] if g.Owner held no such lease.
func (b *Backend) ReleaseRW(ctx context.Context, g driver.Grant, m driver.RWMode) error {
	return b.core.ReleaseRW(ctx, g, m)
}

var _ driver.RWInspector = (*Backend)(nil)

// InspectRW reports the live writer, readers (holder ids, fences,
// remaining leases) and waiting writers' intents of the read-write lock
// name, and its last fence, without changing anything (one script call).
func (b *Backend) InspectRW(ctx context.Context, name string) (driver.RWInfo, error) {
	return b.core.InspectRW(ctx, name)
}
