package semaphore

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/fencedlock/fencedlock/driver"
)

// viewSep separates a semaphore's name from its limit in a view key (see
// viewKey). No slot key ends with viewSep and digits only.
const viewSep = "\x00"

// viewKey is the key a Semaphore's slot Locker acquires for a permit of
// name among limit slots. The view turns it into the slot keys; the
// lease's key is the slot key taken.
func viewKey(name string, limit int) string {
	return name + viewSep + strconv.Itoa(limit)
}

// parseViewKey returns the name and limit of a view key.
func parseViewKey(key string) (name string, limit int, ok bool) {
	i := strings.LastIndex(key, viewSep)
	if i < 0 {
		return "", 0, false
	}
	limit, err := strconv.Atoi(key[i+len(viewSep):])
	if err != nil || limit < 1 || limit > MaxLimit {
		return "", 0, false
	}
	return key[:i], limit, true
}

// slotKeys returns the slot keys of name below limit, in slot order.
func slotKeys(name string, limit int) []string {
	keys := make([]string, limit)
	for slot := range keys {
		keys[slot] = SlotKey(name, slot)
	}
	return keys
}

// slotOf returns the slot of a slot key of name.
func slotOf(name, key string) int {
	slot, _ := strconv.Atoi(strings.TrimPrefix(key, name+slotSep))
	return slot
}

// view is the [driver.Backend] of a Semaphore's permits on a
// [driver.SlotAcquirer]: a root Locker runs it, so that a permit taken in
// one step is a Lease with the lock's watchdog, loss reporting and
// late-grant refusal as they are. Its Acquire of a view key takes the
// first free slot key in one step; the Grant names that slot key, so
// Renew and Release pass it to the backend unchanged.
type view struct {
	b  driver.Backend
	sa driver.SlotAcquirer
}

// Acquire takes the first free slot of the view key req.Key.
func (v *view) Acquire(ctx context.Context, req driver.AcquireRequest) (driver.Grant, error) {
	name, limit, ok := parseViewKey(req.Key)
	if !ok {
		return driver.Grant{}, fmt.Errorf("semaphore: %q is not a permit's key: %w", req.Key, driver.ErrInvalid)
	}
	_, g, err := v.sa.AcquireSlot(ctx, req, slotKeys(name, limit))
	return g, err
}

// Renew renews the slot lease g.
func (v *view) Renew(ctx context.Context, g driver.Grant, ttl time.Duration) (time.Duration, error) {
	return v.b.Renew(ctx, g, ttl)
}

// Release releases the slot lease g. A Grant of a view key and an owner
// only (the Locker's clean-up after an Acquire whose outcome is unknown)
// releases whatever slot that owner took: a clean-up Release of every
// slot key, each of which also makes a backend that remembers abandoned
// owners (Redis) refuse that owner's request if it arrives later.
func (v *view) Release(ctx context.Context, g driver.Grant) error {
	name, limit, ok := parseViewKey(g.Key)
	if !ok || g.Fence != 0 {
		return v.b.Release(ctx, g)
	}
	var errs []error
	released := false
	for slot := range limit {
		err := v.b.Release(ctx, driver.Grant{Key: SlotKey(name, slot), Owner: g.Owner})
		switch {
		case err == nil:
			released = true
		case !errors.Is(err, driver.ErrNotHeld):
			errs = append(errs, err)
		}
		if ctx.Err() != nil {
			break
		}
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("semaphore: clean-up of %q: %w", name, err)
	}
	if !released {
		return fmt.Errorf("semaphore: clean-up of %q: no slot held: %w", name, driver.ErrNotHeld)
	}
	return nil
}

// Close does nothing: the backend belongs to the caller.
func (v *view) Close() error { return nil }
