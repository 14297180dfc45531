package redis

import (
	"context"
	"testing"

	"github.com/fencedlock/fencedlock"
	"github.com/fencedlock/fencedlock/conformance"
	"github.com/fencedlock/fencedlock/internal/redistest"
	"github.com/redis/rueidis"
)

// harness runs the public conformance suite against a real redis-server:
// every backend has its own rueidis client, as a separate process would.
type harness struct {
	t   *testing.T
	srv *redistest.Server
	c   rueidis.Client // the operator's client, for Invalidate
	ops *Backend       // for key names
}

func (h *harness) NewBackend(ctx context.Context) (fencedlock.Backend, error) {
	c := h.srv.Client(h.t, nil)
	return New(c, Options{})
}

func (h *harness) Invalidate(ctx context.Context, key string) error {
	return h.c.Do(ctx, h.c.B().Del().Key(h.ops.LockKey(key)).Build()).Error()
}

func (h *harness) Config() conformance.Config { return conformance.Config{} }

func TestConformance(t *testing.T) {
	conformance.Run(t, func(t *testing.T) conformance.Harness {
		srv := redistest.Start(t)
		c := srv.Client(t, nil)
		ops, err := New(c, Options{})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { ops.Close() })
		return &harness{t: t, srv: srv, c: c, ops: ops}
	})
}
