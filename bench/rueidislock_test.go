package bench

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
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
				return newRueidislockClient(l, rueidislockStuck)
			},
		})
	}
}

// rueidislockClient is one rueidislock Locker, with a watchdog: with
// client-side caching (its default) a waiter waits for an invalidation
// with no timeout, and one that misses it waits forever on a free key
// (seen in AcquireRelease at 64 goroutines with KeyMajority 1: a goroutine
// parked in WithContext for 9 minutes, the key free). When acquires are in
// flight and none has returned for rueidislockStuck, the watchdog closes
// the Locker, which wakes every waiter with ErrLockerClosed, and the
// benchmark fails that row with errRueidislockStuck instead of hanging the
// run. An acquire costs the watchdog two atomic adds, a clock read and a
// store: no allocation counted against rueidislock.
type rueidislockClient struct {
	l         rueidislock.Locker
	inflight  atomic.Int64  // acquires in WithContext
	progress  atomic.Int64  // when an acquire last returned (or the client opened), UnixNano
	stuck     atomic.Bool   // the watchdog closed the Locker
	after     time.Duration // rueidislockStuck; shorter in its test
	done      chan struct{}
	closeOnce sync.Once
}

const rueidislockStuck = time.Minute

var errRueidislockStuck = errors.New("rueidislock: no acquire returned for rueidislockStuck while some waited (a missed client-side-caching invalidation: its wait has no timeout); the Locker was closed")

func newRueidislockClient(l rueidislock.Locker, after time.Duration) *rueidislockClient {
	r := &rueidislockClient{l: l, after: after, done: make(chan struct{})}
	r.progress.Store(time.Now().UnixNano())
	go func() {
		t := time.NewTicker(after / 12)
		defer t.Stop()
		for {
			select {
			case <-r.done:
				return
			case now := <-t.C:
				if r.inflight.Load() > 0 && now.UnixNano()-r.progress.Load() > int64(r.after) {
					r.stuck.Store(true)
					r.closeOnce.Do(r.l.Close)
					return
				}
			}
		}
	}()
	return r
}

func (r *rueidislockClient) acquire(ctx context.Context, key string) (heldLock, error) {
	r.inflight.Add(1)
	lctx, cancel, err := r.l.WithContext(ctx, key)
	r.progress.Store(time.Now().UnixNano())
	r.inflight.Add(-1)
	if err != nil {
		if r.stuck.Load() {
			return nil, fmt.Errorf("%w: key %q: %v", errRueidislockStuck, key, err)
		}
		return nil, err
	}
	return rueidislockLock{ctx: lctx, cancel: cancel}, nil
}

func (r *rueidislockClient) close() {
	close(r.done)
	r.closeOnce.Do(r.l.Close)
}

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

// TestRueidislockWatchdog: a rueidislock waiter that no acquire's return
// follows for the watchdog's limit is woken (the Locker closed) and fails
// with errRueidislockStuck, instead of hanging the benchmark. Here the
// waiter waits on a key another client holds, past a 300ms limit.
func TestRueidislockWatchdog(t *testing.T) {
	e := servers(t)
	open := func(after time.Duration) *rueidislockClient {
		l, err := rueidislock.NewLocker(rueidislock.LockerOption{ClientOption: e.redisOpt, KeyMajority: 1, KeyValidity: 10 * time.Second})
		if err != nil {
			t.Fatal(err)
		}
		return newRueidislockClient(l, after)
	}
	holder, waiter := open(time.Hour), open(300*time.Millisecond)
	defer holder.close()
	defer waiter.close()
	k := key("watchdog", "rueidislock", 0)
	h, err := holder.acquire(context.Background(), k)
	if err != nil {
		t.Fatal(err)
	}
	defer h.Release(context.Background())
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	start := time.Now()
	if _, err := waiter.acquire(ctx, k); !errors.Is(err, errRueidislockStuck) {
		t.Fatalf("acquire of a held key past the watchdog's limit: %v, want errRueidislockStuck", err)
	}
	t.Logf("woken after %v", time.Since(start))
}
