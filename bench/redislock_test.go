package bench

import (
	"context"
	"testing"
	"time"

	"github.com/bsm/redislock"
	goredislib "github.com/redis/go-redis/v9"
)

// bsm/redislock on a go-redis v9 client. Its blocking acquire is Obtain
// with a retry strategy; we use the documented ExponentialBackoff with its
// recommended 16 ms minimum (capped at 256 ms). No watchdog.

func init() {
	register(contender{
		name:        "redislock",
		server:      "redis",
		manualRenew: true,
		open: func(tb testing.TB, e *env, cfg clientConfig) lockClient {
			c := e.newGoRedis()
			return &redislockClient{c: c, rl: redislock.New(c), ttl: cfg.ttl}
		},
	})
}

type redislockClient struct {
	c   *goredislib.Client
	rl  *redislock.Client
	ttl time.Duration
}

func (r *redislockClient) acquire(ctx context.Context, key string) (heldLock, error) {
	opt := &redislock.Options{RetryStrategy: redislock.ExponentialBackoff(16*time.Millisecond, 256*time.Millisecond)}
	if _, ok := ctx.Deadline(); !ok {
		// Obtain gives up after one TTL when ctx has no deadline.
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, time.Hour)
		defer cancel()
	}
	l, err := r.rl.Obtain(ctx, key, r.ttl, opt)
	if err != nil {
		return nil, err
	}
	return redislockLock{l: l, ttl: r.ttl}, nil
}

func (r *redislockClient) close() { _ = r.c.Close() }

type redislockLock struct {
	l   *redislock.Lock
	ttl time.Duration
}

func (l redislockLock) Renew(ctx context.Context) error { return l.l.Refresh(ctx, l.ttl, nil) }

func (l redislockLock) Release(ctx context.Context) error { return l.l.Release(ctx) }

func (l redislockLock) Done() <-chan struct{} { return nil }
