package redisscript

import (
	"fmt"

	"github.com/fencedlock/fencedlock/driver"
)

// The scripts of sets of keys (driver.MultiLocker), composed as the others.
var (
	MultiAcquireLua = mustCompose("multi_acquire.lua") // take a set, all or nothing
	MultiRenewLua   = mustCompose("multi_renew.lua")   // renew a set, all or nothing
	MultiReleaseLua = mustCompose("multi_release.lua") // release the owner's keys of a set
)

// LostKey is the error of op (a set's renewal or release) on keys whose
// script (multi_renew.lua, multi_release.lua) replied n: nil for 0; for
// 1 <= n <= len(keys) a *driver.LostKeyError naming keys[n-1] (wrapping
// driver.ErrNotHeld); for -len(keys) <= n <= -1 the *driver.LostKeyError
// of keys[-n-1], which holds a value fencedlock did not write: the error
// then also wraps [ErrCorrupt] and driver.ErrPermanent, as the errors of a
// script refused with WRONGTYPE do.
func LostKey(op string, keys []string, n int64) error {
	switch {
	case n == 0:
		return nil
	case n >= 1 && n <= int64(len(keys)):
		return fmt.Errorf("redis: %s: %w", op, &driver.LostKeyError{Key: keys[n-1]})
	case n <= -1 && n >= -int64(len(keys)):
		return permanentError{fmt.Errorf("redis: %s: %w: %w (another type, or a string without a TTL; left as it is)",
			op, &driver.LostKeyError{Key: keys[-n-1]}, ErrCorrupt)}
	}
	return fmt.Errorf("redis: %s %q: unexpected reply %d", op, keys, n)
}
