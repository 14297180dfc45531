package bench

import (
	"testing"

	"github.com/fencedlock/fencedlock"
	"github.com/fencedlock/fencedlock/backend/goredis"
)

// fencedlock on its go-redis backend, on the same go-redis v9 client
// options as redsync and redislock, default options except the TTL. The
// backend sends the commands in flight beyond the client's PoolSize
// through the client's own autopipeliner (default options), which the
// other two do not use.

func init() {
	register(contender{
		name:        "fencedlock-goredis",
		server:      "redis",
		manualRenew: true,
		autoRenew:   true,
		open: func(tb testing.TB, e *env, cfg clientConfig) lockClient {
			c := e.newGoRedis()
			b, err := goredis.New(c, goredis.Options{})
			if err != nil {
				tb.Fatalf("bench: fencedlock goredis backend: %v", err)
			}
			return &fencedClient{l: mustLocker(tb, b, fencedlock.Options{TTL: cfg.ttl, RenewInterval: cfg.renew, ManualRenew: cfg.manual}), closeClient: func() { b.Close(); c.Close() }}
		},
	})
}
