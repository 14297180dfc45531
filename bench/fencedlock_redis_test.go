package bench

import (
	"testing"

	"github.com/fencedlock/fencedlock"
	"github.com/fencedlock/fencedlock/backend/redis"
	"github.com/redis/rueidis"
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
				b, c := e.newRedisBackend(tb)
				return &fencedClient{l: mustLocker(tb, b, fencedlock.Options{TTL: cfg.ttl, RenewInterval: cfg.renew, ManualRenew: cfg.manual}), closeClient: func() { b.Close(); c.Close() }}
			},
		})
	}
}

// newRedisBackend returns fencedlock's Redis backend with default options
// on a new rueidis client of its own, and that client: the caller closes
// both, the backend first.
func (e *env) newRedisBackend(tb testing.TB) (*redis.Backend, rueidis.Client) {
	tb.Helper()
	c := e.newRueidis(tb, nil)
	b, err := redis.New(c, redis.Options{})
	if err != nil {
		tb.Fatalf("bench: fencedlock redis backend: %v", err)
	}
	return b, c
}
