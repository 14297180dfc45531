package redisscript

import (
	"fmt"

	"github.com/fencedlock/fencedlock/driver"
	"github.com/fencedlock/fencedlock/fencing"
)

// The scripts of an operator's forced release (see the backends'
// ForceRelease and FenceBarrier).
var (
	ForceReleaseLua = mustCompose("force_release.lua")
	FenceBarrierLua = mustCompose("fence_barrier.lua")
)

// SHA-1 digests of the forced-release scripts, in hex.
var (
	ForceReleaseSHA = sha1hex(ForceReleaseLua) // of ForceReleaseLua
	FenceBarrierSHA = sha1hex(FenceBarrierLua) // of FenceBarrierLua
)

// ReadForceRelease reads vals, the reply of force_release.lua for key:
// {owner or false, ttl, fence before, fence after}.
func ReadForceRelease(key string, vals []Value) (driver.ForceResult, error) {
	var r driver.ForceResult
	if len(vals) != 4 {
		return r, fmt.Errorf("redis: force release %q: unexpected reply of %d values", key, len(vals))
	}
	if owner, ok, err := vals[0].Text(); ok && err == nil {
		r.Held = true
		r.Holder = driver.HolderID(owner)
	}
	before, ok1, err1 := vals[2].Text()
	after, err2 := vals[3].Int()
	f, ok3 := ParseFence(before)
	if !ok1 || err1 != nil || err2 != nil || !ok3 || after <= 0 || fencing.Token(after) <= f {
		return r, fmt.Errorf("redis: force release %q: unreadable fences in reply: %w", key, ErrCorrupt)
	}
	r.Before, r.After = f, fencing.Token(after)
	return r, nil
}

// CheckFenceBarrier checks the arguments of FenceBarrier (op) of key, a
// guarded hash outside prefix (the backend's KeyPrefix), to token from
// holder. Its reply is read with [ReadFencedWrite].
func CheckFenceBarrier(op, key, prefix string, token fencing.Token, holder string) error {
	if err := CheckResourceKey(op, key, prefix); err != nil {
		return err
	}
	if token == 0 {
		return fmt.Errorf("redis: %s %q: zero token: %w", op, key, fencing.ErrInvalidToken)
	}
	if holder == "" {
		return fmt.Errorf("redis: %s %q: empty holder id: %w", op, key, driver.ErrInvalid)
	}
	return nil
}
