package bench

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

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

// rueidislockStuck bounds one rueidislock acquire: with client-side
// caching (its default) a waiter waits for an invalidation with no
// timeout, and one that misses it waits forever on a free key (seen in
// AcquireRelease at 64 goroutines with KeyMajority 1: a goroutine parked
// in WithContext for 9 minutes, the key free). The benchmark then fails
// that contender's row with errRueidislockStuck instead of hanging the run.
const rueidislockStuck = time.Minute

var errRueidislockStuck = errors.New("rueidislock: acquire still waiting after a minute (a missed client-side-caching invalidation: its wait has no timeout)")

func (r rueidislockClient) acquire(ctx context.Context, key string) (heldLock, error) {
	wctx, stop := context.WithCancelCause(ctx)
	t := time.AfterFunc(rueidislockStuck, func() { stop(errRueidislockStuck) })
	lctx, cancel, err := r.l.WithContext(wctx, key)
	t.Stop()
	if err != nil {
		if context.Cause(wctx) == errRueidislockStuck {
			return nil, fmt.Errorf("%w: key %q", errRueidislockStuck, key)
		}
		return nil, err
	}
	// The lock's context derives from wctx, which ends only if the minute
	// ran out in the instant WithContext returned.
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
