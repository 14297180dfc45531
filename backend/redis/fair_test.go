package redis

import (
	"context"
	"testing"
	"time"

	"github.com/fencedlock/fencedlock"
	"github.com/fencedlock/fencedlock/conformance"
	"github.com/fencedlock/fencedlock/internal/redistest"
	"github.com/redis/rueidis"
)

// fairHarness runs the conformance suite against FairBackend on a real
// redis-server, so that its WaitAcquirer properties (FIFO, exclusive with
// Acquire, greater fence, a waiter past its TTL, cancelled waiters leave
// nothing) run on Redis.
type fairHarness struct{ harness }

func (h *fairHarness) NewBackend(ctx context.Context) (fencedlock.Backend, error) {
	return NewFair(h.srv.Client(h.t, nil), Options{})
}

func (h *fairHarness) NewDelayedBackend(ctx context.Context, delay time.Duration) (fencedlock.Backend, error) {
	c := h.srv.Client(h.t, func(o *rueidis.ClientOption) { o.DialCtxFn = delayedDial(delay) })
	return NewFair(c, Options{})
}

func TestConformanceFair(t *testing.T) {
	conformance.Run(t, func(t *testing.T) conformance.Harness {
		srv := redistest.Start(t)
		c := srv.Client(t, nil)
		ops, err := New(c, Options{})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { ops.Close() })
		return &fairHarness{harness{t: t, srv: srv, c: c, ops: ops}}
	})
}
