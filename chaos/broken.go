package chaos

import (
	"context"
	"fmt"
	"time"

	"github.com/fencedlock/fencedlock/backend/redis"
	"github.com/fencedlock/fencedlock/driver"
	"github.com/redis/rueidis"
)

// releaseNoOwner is a deliberately broken backend: its Release deletes the
// lock key (and wakes waiters) without checking the owner.
type releaseNoOwner struct {
	*redis.Backend
	c rueidis.Client
}

func (b *releaseNoOwner) Release(ctx context.Context, g driver.Grant) error {
	cmds := rueidis.Commands{
		b.c.B().Del().Key(b.LockKey(g.Key)).Build(),
		b.c.B().Publish().Channel(b.Channel(g.Key)).Message("released").Build(),
	}
	for _, r := range b.c.DoMulti(ctx, cmds...) {
		if err := r.Error(); err != nil {
			return err
		}
	}
	return nil
}

// renewAnyOwner is a deliberately broken backend: its Renew extends the
// lock key whoever holds it (PEXPIRE without the owner check).
type renewAnyOwner struct {
	*redis.Backend
	c rueidis.Client
}

func (b *renewAnyOwner) Renew(ctx context.Context, g driver.Grant, ttl time.Duration) (time.Duration, error) {
	n, err := b.c.Do(ctx, b.c.B().Pexpire().Key(b.LockKey(g.Key)).Milliseconds(ttl.Milliseconds()).Build()).AsInt64()
	if err != nil {
		return 0, err
	}
	if n != 1 {
		return 0, fmt.Errorf("chaos: renew-any-owner: no key: %w", driver.ErrNotHeld)
	}
	return ttl, nil
}

// acquireExpired is a deliberately broken backend: every lease it grants
// (Acquire, and AcquireWait and AcquireWaitHeld, the queued waiter's
// ways to a grant) has already expired on the server when the call
// returns.
//
// It also wakes the waiters, as a lock that the server lets go of
// without a release would if its expiry were announced: otherwise a
// queued waiter retries only at its own timer, which on a loaded machine
// can come after the broken holder's first renewal found no key and
// ended its lease, and the control saw no overlap to report (seed 1 at a
// load average of 10: 0 breaks over 91 operations, when only Acquire was
// broken and woke nobody).
type acquireExpired struct {
	*redis.Backend
	c rueidis.Client
}

func (b *acquireExpired) Acquire(ctx context.Context, req driver.AcquireRequest) (driver.Grant, error) {
	return b.expire(ctx, req.Key)(b.Backend.Acquire(ctx, req))
}

func (b *acquireExpired) AcquireWait(ctx context.Context, req driver.AcquireRequest) (driver.Grant, error) {
	return b.expire(ctx, req.Key)(b.Backend.AcquireWait(ctx, req))
}

func (b *acquireExpired) AcquireWaitHeld(ctx context.Context, req driver.AcquireRequest) (driver.Grant, error) {
	return b.expire(ctx, req.Key)(b.Backend.AcquireWaitHeld(ctx, req))
}

// expire returns what expires key on the server after a grant of it
// (and wakes its waiters) before passing the grant on.
func (b *acquireExpired) expire(ctx context.Context, key string) func(driver.Grant, error) (driver.Grant, error) {
	return func(g driver.Grant, err error) (driver.Grant, error) {
		if err != nil {
			return g, err
		}
		// Expire the key now; wait out the millisecond so it is gone.
		if err := b.c.Do(ctx, b.c.B().Pexpire().Key(b.LockKey(key)).Milliseconds(1).Build()).Error(); err != nil {
			return g, err
		}
		time.Sleep(2 * time.Millisecond)
		return g, b.c.Do(ctx, b.c.B().Publish().Channel(b.Channel(key)).Message("released").Build()).Error()
	}
}
