package bench

import (
	"context"
	"crypto/rand"
	"errors"
	"strconv"
	"testing"
	"time"

	"github.com/redis/rueidis"
)

// The raw baseline: the least a correct fenced Redis lock needs. Acquire is
// SET NX PX plus INCR of a fence counter in one script; release and renew
// are compare-and-act scripts. No watchdog, no loss notice, no input checks:
// the physical limit of the server and client the other Redis contenders
// are measured against. Its blocking acquire polls every millisecond.

var (
	rawAcquire = rueidis.NewLuaScript(`if redis.call('SET', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[2]) then
  return redis.call('INCR', KEYS[2])
end
return 0`)
	rawRelease = rueidis.NewLuaScript(`if redis.call('GET', KEYS[1]) == ARGV[1] then
  return redis.call('DEL', KEYS[1])
end
return 0`)
	rawRenew = rueidis.NewLuaScript(`if redis.call('GET', KEYS[1]) == ARGV[1] then
  return redis.call('PEXPIRE', KEYS[1], ARGV[2])
end
return 0`)
)

// rawPoll is the baseline's retry interval while the lock is held.
const rawPoll = time.Millisecond

func init() {
	register(contender{
		name:        baselineName,
		server:      "redis",
		manualRenew: true,
		autoRenew:   true, // with the renew loop a user would write
		open: func(tb testing.TB, e *env, cfg clientConfig) lockClient {
			return &rawClient{c: e.newRueidis(tb, nil), ttl: strconv.FormatInt(cfg.ttl.Milliseconds(), 10), period: cfg.ttl / 3, auto: cfg.keepAlive && !cfg.manual}
		},
	})
}

type rawClient struct {
	c      rueidis.Client
	ttl    string
	period time.Duration
	auto   bool
}

var errRawNotHeld = errors.New("raw: not held")

func (r *rawClient) acquire(ctx context.Context, key string) (heldLock, error) {
	h := &rawLock{r: r, keys: []string{"{" + key + "}", "{" + key + "}:fence"}, token: rand.Text()}
	args := []string{h.token, r.ttl}
	for {
		fence, err := rawAcquire.Exec(ctx, r.c, h.keys, args).AsInt64()
		if err != nil {
			return nil, err
		}
		if fence > 0 {
			h.fence = fence
			if r.auto {
				h.startRenewLoop()
			}
			return h, nil
		}
		t := time.NewTimer(rawPoll)
		select {
		case <-ctx.Done():
			t.Stop()
			return nil, ctx.Err()
		case <-t.C:
		}
	}
}

func (r *rawClient) close() { r.c.Close() }

type rawLock struct {
	r      *rawClient
	keys   []string
	token  string
	fence  int64
	stop   chan struct{} // closed by Release: the renew loop must exit
	exited chan struct{} // closed when the renew loop has exited
	lost   chan struct{} // closed when a renew found the lock gone
}

func (h *rawLock) Renew(ctx context.Context) error {
	n, err := rawRenew.Exec(ctx, h.r.c, h.keys[:1], []string{h.token, h.r.ttl}).AsInt64()
	if err != nil {
		return err
	}
	if n == 0 {
		return errRawNotHeld
	}
	return nil
}

func (h *rawLock) Release(ctx context.Context) error {
	if h.stop != nil {
		close(h.stop)
		<-h.exited
	}
	n, err := rawRelease.Exec(ctx, h.r.c, h.keys[:1], []string{h.token}).AsInt64()
	if err != nil {
		return err
	}
	if n == 0 {
		return errRawNotHeld
	}
	return nil
}

func (h *rawLock) Done() <-chan struct{} { return h.lost }

// startRenewLoop is the renew goroutine a user of a library without a
// watchdog writes: renew every TTL/3, give up (done closes) when a renew
// finds the lock gone.
func (h *rawLock) startRenewLoop() {
	h.stop, h.exited, h.lost = make(chan struct{}), make(chan struct{}), make(chan struct{})
	go func() {
		defer close(h.exited)
		t := time.NewTicker(h.r.period)
		defer t.Stop()
		for {
			select {
			case <-h.stop:
				return
			case <-t.C:
				if err := h.Renew(context.Background()); errors.Is(err, errRawNotHeld) {
					close(h.lost)
					return
				}
			}
		}
	}()
}
