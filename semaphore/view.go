package semaphore

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
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

// BackendName names the backend the view runs on in trace events (see
// [driver.Namer]), not this package.
func (v *view) BackendName() string { return driver.Name(v.b) }

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

// cleanUpParallel bounds the Releases a clean-up has in flight at once.
const cleanUpParallel = 16

// Release releases the slot lease g. A Grant of a view key and an owner
// only (the Locker's clean-up after an Acquire whose outcome is unknown)
// releases whatever slot that owner took: a clean-up Release of every
// slot key, each of which also makes a backend that remembers abandoned
// owners (Redis) refuse that owner's request if it arrives later. The
// slot keys are released up to cleanUpParallel at a time, not one after
// another: the clean-up runs within the Locker's ReleaseTimeout, and
// limit round trips in a row could outlast it before they reach the slot
// the owner took. A clean-up that ctx ends before every slot key was
// released reports ctx's error, never ErrNotHeld, so the Locker warns that
// a slot may stay taken until its TTL.
func (v *view) Release(ctx context.Context, g driver.Grant) error {
	name, limit, ok := parseViewKey(g.Key)
	if !ok || g.Fence != 0 {
		return v.b.Release(ctx, g)
	}
	errs := make([]error, limit)
	var (
		next atomic.Int64
		wg   sync.WaitGroup
	)
	for range min(limit, cleanUpParallel) {
		wg.Go(func() {
			for {
				slot := int(next.Add(1) - 1)
				if slot >= limit {
					return
				}
				if err := ctx.Err(); err != nil {
					errs[slot] = err
					continue
				}
				errs[slot] = v.b.Release(ctx, driver.Grant{Key: SlotKey(name, slot), Owner: g.Owner})
			}
		})
	}
	wg.Wait()
	var failed []error
	released := false
	for _, err := range errs {
		switch {
		case err == nil:
			released = true
		case !errors.Is(err, driver.ErrNotHeld):
			failed = append(failed, err)
		}
	}
	if len(failed) > 0 {
		return fmt.Errorf("semaphore: clean-up of %q: %d of %d slots not released: %w", name, len(failed), limit, errors.Join(failed...))
	}
	if !released {
		return fmt.Errorf("semaphore: clean-up of %q: no slot held: %w", name, driver.ErrNotHeld)
	}
	return nil
}

// Close does nothing: the backend belongs to the caller.
func (v *view) Close() error { return nil }
