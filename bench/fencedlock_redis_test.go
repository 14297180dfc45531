package bench

import (
	"testing"

	"github.com/fencedlock/fencedlock"
	"github.com/fencedlock/fencedlock/backend/redis"
)

// fencedlock on its Redis backend (rueidis), default options except the
// TTL; the scenarios that renew by hand set ManualRenew. Registered twice:
// since issue 36 redis.New queues waiters on the server and each release
// hands the lock to the first one (before, redis.NewFair did), so
// fencedlock-redis-fair is the same backend, kept under that name for the
// report's fair rows until the report drops them.

func init() {
	for _, name := range []string{"fencedlock-redis", "fencedlock-redis-fair"} {
		register(contender{
			name:        name,
			server:      "redis",
			manualRenew: true,
			autoRenew:   true,
			open: func(tb testing.TB, e *env, cfg clientConfig) lockClient {
				c := e.newRueidis(tb, nil)
				b, err := redis.New(c, redis.Options{})
				if err != nil {
					tb.Fatalf("bench: %s backend: %v", name, err)
				}
				return &fencedClient{l: mustLocker(tb, b, fencedlock.Options{TTL: cfg.ttl, RenewInterval: cfg.renew, ManualRenew: cfg.manual}), closeClient: func() { b.Close(); c.Close() }}
			},
		})
	}
}
