package bench

import (
	"context"
	"errors"
	"math"
	"testing"

	"github.com/go-redsync/redsync/v4"
	"github.com/go-redsync/redsync/v4/redis/goredis/v9"
	goredislib "github.com/redis/go-redis/v9"
)

// redsync with one go-redis v9 pool and its default retry delays (random
// 50-250 ms). Tries are unlimited so that the blocking acquire waits as
// long as the scenario's context allows. No watchdog: the renew loop below
// is what a user has to write.

func init() {
	register(contender{
		name:        "redsync",
		server:      "redis",
		manualRenew: true,
		open: func(tb testing.TB, e *env, cfg clientConfig) lockClient {
			c := e.newGoRedis()
			return &redsyncClient{c: c, rs: redsync.New(goredis.NewPool(c)), opts: []redsync.Option{
				redsync.WithExpiry(cfg.ttl), redsync.WithTries(math.MaxInt32),
			}}
		},
	})
}

type redsyncClient struct {
	c    *goredislib.Client
	rs   *redsync.Redsync
	opts []redsync.Option
}

func (r *redsyncClient) acquire(ctx context.Context, key string) (heldLock, error) {
	m := r.rs.NewMutex(key, r.opts...)
	if err := m.LockContext(ctx); err != nil {
		return nil, err
	}
	return redsyncLock{m}, nil
}

func (r *redsyncClient) close() { _ = r.c.Close() }

type redsyncLock struct{ m *redsync.Mutex }

var errRedsyncNotHeld = errors.New("redsync: not held")

func (l redsyncLock) Renew(ctx context.Context) error {
	ok, err := l.m.ExtendContext(ctx)
	if err == nil && !ok {
		err = errRedsyncNotHeld
	}
	return err
}

func (l redsyncLock) Release(ctx context.Context) error {
	ok, err := l.m.UnlockContext(ctx)
	if err == nil && !ok {
		err = errRedsyncNotHeld
	}
	return err
}

func (l redsyncLock) Done() <-chan struct{} { return nil }
