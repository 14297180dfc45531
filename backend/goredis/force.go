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
	if len(vals) != 4 {
		return r, fmt.Errorf("redis: force release %q: unexpected reply of %d values", key, len(vals))
	}
	if owner, ok := replyString(vals[0]); ok {
		r.Held = true
		r.Holder = driver.HolderID(owner)
	}
	before, ok1 := replyString(vals[2])
	after, ok2 := vals[3].(int64)
	f, ok3 := redisscript.ParseFence(before)
	if !ok1 || !ok2 || !ok3 || after <= 0 || fencing.Token(after) <= f {
		return r, fmt.Errorf("redis: force release %q: unreadable fences in reply: %w", key, ErrCorrupt)
	}
	r.Before, r.After = f, fencing.Token(after)
	return r, nil
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
	if err := redisscript.CheckResourceKey(op, key, b.opts.KeyPrefix); err != nil {
		return err
	}
	if token == 0 {
		return fmt.Errorf("redis: %s %q: zero token: %w", op, key, fencing.ErrInvalidToken)
	}
	if holder == "" {
		return fmt.Errorf("redis: %s %q: empty holder id: %w", op, key, driver.ErrInvalid)
	}
	vals, err := b.run(ctx, fenceBarrierScript, []any{nil, nil, 1, key, token.String(), holder}).Slice()
	if err != nil {
		return wrap(op, key, err)
	}
	if len(vals) == 0 {
		return fmt.Errorf("redis: %s %q: empty reply", op, key)
	}
	if n, ok := vals[0].(int64); ok && n == 1 {
		return nil
	}
	if len(vals) != 3 {
		return fmt.Errorf("redis: %s %q: unexpected reply of %d values", op, key, len(vals))
	}
	fs, ok1 := replyString(vals[1])
	from, ok2 := replyString(vals[2])
	accepted, perr := fencing.ParseToken(fs)
	if !ok1 || !ok2 || perr != nil {
		return fmt.Errorf("redis: %s %q: unreadable fence record in reply: %w", op, key, ErrCorrupt)
	}
	return fmt.Errorf("redis: %s %q: %w", op, key, &fencing.StaleError{
		Token: token, Holder: holder, Accepted: accepted, AcceptedFrom: from,
	})
}

// replyString reads a string reply value (a nil, Lua false, is not one).
func replyString(v any) (string, bool) {
	s, ok, err := value{v}.Text()
	return s, ok && err == nil
}
