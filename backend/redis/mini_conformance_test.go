package redis

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/rueidis"

	"github.com/fencedlock/fencedlock"
	"github.com/fencedlock/fencedlock/conformance"
)

// miniHarness runs the conformance suite on miniredis: the fast path, not
// the evidence (TestConformance runs it on a real redis-server).
type miniHarness struct {
	t     *testing.T
	m     *miniredis.Miniredis
	ops   *Backend
	clock *miniClock
}

// miniClock moves miniredis's clock, whose keys expire only when told,
// with the real clock: right before every command a client sends (see
// clockClient), by the real time since the previous move. A key set by a
// command so expires no earlier than its TTL after that command was sent
// (the move before it happened later than the send), and is seen expired
// by the first command after that. A ticker moving the clock instead
// expired keys early when a tick came late on a loaded machine: it
// counted the time before the key was set.
type miniClock struct {
	m    *miniredis.Miniredis
	mu   sync.Mutex
	last time.Time
}

func (c *miniClock) move() {
	c.mu.Lock()
	defer c.mu.Unlock()
	now := time.Now()
	c.m.FastForward(now.Sub(c.last))
	c.last = now
}

// clockClient moves the clock before every Do and DoMulti (the scripts run
// through Do; WAIT pipelines through DoMulti).
type clockClient struct {
	rueidis.Client
	clock *miniClock
}

func (c clockClient) Do(ctx context.Context, cmd rueidis.Completed) rueidis.RedisResult {
	c.clock.move()
	return c.Client.Do(ctx, cmd)
}

func (c clockClient) DoMulti(ctx context.Context, cmds ...rueidis.Completed) []rueidis.RedisResult {
	c.clock.move()
	return c.Client.DoMulti(ctx, cmds...)
}

func (h *miniHarness) client() rueidis.Client {
	c, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: []string{h.m.Addr()}, DisableCache: true})
	if err != nil {
		h.t.Fatal(err)
	}
	h.t.Cleanup(c.Close)
	return clockClient{Client: c, clock: h.clock}
}

func (h *miniHarness) NewBackend(ctx context.Context) (fencedlock.Backend, error) {
	return New(h.client(), Options{})
}

func (h *miniHarness) Invalidate(ctx context.Context, key string) error {
	h.m.Del(h.ops.LockKey(key))
	return nil
}

func (h *miniHarness) Config() conformance.Config {
	return conformance.Config{ExpirySlack: 100 * time.Millisecond}
}

// TestConformanceMiniredis runs the public suite on miniredis, whose clock
// follows the real one (miniClock).
func TestConformanceMiniredis(t *testing.T) {
	conformance.Run(t, func(t *testing.T) conformance.Harness {
		m := miniredis.RunT(t)
		h := &miniHarness{t: t, m: m, clock: &miniClock{m: m, last: time.Now()}}
		ops, err := New(h.client(), Options{})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { ops.Close() })
		h.ops = ops
		return h
	})
}
