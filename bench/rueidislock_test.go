package bench

import (
	"context"
	"testing"

	"github.com/redis/rueidis/rueidislock"
)

// rueidislock with its defaults (KeyMajority 2: three keys, two needed,
// waiters woken by client-side-caching invalidations) and with
// KeyMajority 1 (one key). It extends held locks by itself and has no
// manual renew; it grants no fencing token.

func init() {
	for _, km := range []struct {
		name     string
		majority int32
	}{{"rueidislock", 0}, {"rueidislock-km1", 1}} {
		register(contender{
			name:      km.name,
			server:    "redis",
			autoRenew: true,
			open: func(tb testing.TB, e *env, cfg clientConfig) lockClient {
				l, err := rueidislock.NewLocker(rueidislock.LockerOption{
					ClientOption: e.redisOpt,
					KeyMajority:  km.majority,
					KeyValidity:  cfg.ttl,
				})
				if err != nil {
					tb.Fatalf("bench: rueidislock: %v", err)
				}
				return rueidislockClient{l}
			},
		})
	}
}

type rueidislockClient struct{ l rueidislock.Locker }

func (r rueidislockClient) acquire(ctx context.Context, key string) (heldLock, error) {
	lctx, cancel, err := r.l.WithContext(ctx, key)
	if err != nil {
		return nil, err
	}
	return rueidislockLock{ctx: lctx, cancel: cancel}, nil
}

func (r rueidislockClient) close() { r.l.Close() }

type rueidislockLock struct {
	ctx    context.Context
	cancel context.CancelFunc
}

func (l rueidislockLock) Renew(context.Context) error { return errNoRenew }

func (l rueidislockLock) Release(context.Context) error {
	l.cancel() // deletes the keys and waits for it
	return nil
}

func (l rueidislockLock) Done() <-chan struct{} { return l.ctx.Done() }
