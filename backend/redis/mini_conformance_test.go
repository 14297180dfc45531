package redis

import (
	"context"
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
	t   *testing.T
	m   *miniredis.Miniredis
	ops *Backend
}

func (h *miniHarness) client() rueidis.Client {
	c, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: []string{h.m.Addr()}, DisableCache: true})
	if err != nil {
		h.t.Fatal(err)
	}
	h.t.Cleanup(c.Close)
	return c
}

func (h *miniHarness) NewBackend(ctx context.Context) (fencedlock.Backend, error) {
	return New(h.client(), Options{})
}

// NewDelayedBackend makes the harness a conformance.Delayer.
func (h *miniHarness) NewDelayedBackend(ctx context.Context, delay time.Duration) (fencedlock.Backend, error) {
	c, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: []string{h.m.Addr()}, DisableCache: true, DialCtxFn: delayedDial(delay)})
	if err != nil {
		return nil, err
	}
	h.t.Cleanup(c.Close)
	return New(c, Options{})
}

func (h *miniHarness) Invalidate(ctx context.Context, key string) error {
	h.m.Del(h.ops.LockKey(key))
	return nil
}

func (h *miniHarness) Config() conformance.Config {
	return conformance.Config{ExpirySlack: 100 * time.Millisecond}
}

// TestConformanceMiniredis runs the public suite on miniredis, whose keys
// expire only when told: a ticker follows the real clock.
func TestConformanceMiniredis(t *testing.T) {
	conformance.Run(t, func(t *testing.T) conformance.Harness {
		m := miniredis.RunT(t)
		stop := make(chan struct{})
		done := make(chan struct{})
		go func() {
			defer close(done)
			last := time.Now()
			tk := time.NewTicker(5 * time.Millisecond)
			defer tk.Stop()
			for {
				select {
				case <-stop:
					return
				case now := <-tk.C:
					m.FastForward(now.Sub(last))
					last = now
				}
			}
		}()
		t.Cleanup(func() { close(stop); <-done })
		h := &miniHarness{t: t, m: m}
		ops, err := New(h.client(), Options{})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { ops.Close() })
		h.ops = ops
		return h
	})
}
