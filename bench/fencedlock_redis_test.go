package bench

import (
	"testing"

	"github.com/fencedlock/fencedlock"
	"github.com/fencedlock/fencedlock/backend/redis"
)

// fencedlock on its Redis backend (rueidis), default options except the
// TTL; the scenarios that renew by hand set ManualRenew.

func init() {
	register(contender{
		name:        "fencedlock-redis",
		server:      "redis",
		manualRenew: true,
		autoRenew:   true,
		open: func(tb testing.TB, e *env, cfg clientConfig) lockClient {
			c := e.newRueidis(tb, nil)
			b, err := redis.New(c, redis.Options{})
			if err != nil {
				tb.Fatalf("bench: fencedlock redis backend: %v", err)
			}
			return &fencedClient{l: mustLocker(tb, b, fencedlock.Options{TTL: cfg.ttl, RenewInterval: cfg.renew, ManualRenew: cfg.manual}), closeClient: func() { b.Close(); c.Close() }}
		},
	})
}

// fencedlock on its Redis backend with the fair queue: waiters queue on
// the server and each release hands the lock to the first one, waking it
// alone. redis.New does so since issue 36 (before, redis.NewFair did): the
// same backend as fencedlock-redis, kept under this name for the report's
// fair rows until the report drops them.

func init() {
	register(contender{
		name:        "fencedlock-redis-fair",
		server:      "redis",
		manualRenew: true,
		autoRenew:   true,
		open: func(tb testing.TB, e *env, cfg clientConfig) lockClient {
			c := e.newRueidis(tb, nil)
			b, err := redis.New(c, redis.Options{})
			if err != nil {
				tb.Fatalf("bench: fencedlock redis fair backend: %v", err)
			}
			return &fencedClient{l: mustLocker(tb, b, fencedlock.Options{TTL: cfg.ttl, RenewInterval: cfg.renew, ManualRenew: cfg.manual}), closeClient: func() { b.Close(); c.Close() }}
		},
	})
}
