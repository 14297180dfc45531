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

// acquireExpired is a deliberately broken backend: the lease it grants
// has already expired on the server when Acquire returns.
type acquireExpired struct {
	*redis.Backend
	c rueidis.Client
}

func (b *acquireExpired) Acquire(ctx context.Context, req driver.AcquireRequest) (driver.Grant, error) {
	g, err := b.Backend.Acquire(ctx, req)
	if err != nil {
		return g, err
	}
	// Expire the key now; wait out the millisecond so it is gone.
	if err := b.c.Do(ctx, b.c.B().Pexpire().Key(b.LockKey(req.Key)).Milliseconds(1).Build()).Error(); err != nil {
		return g, err
	}
	time.Sleep(2 * time.Millisecond)
	return g, nil
}
