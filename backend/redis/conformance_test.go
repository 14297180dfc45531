package redis

import (
	"context"
	"crypto/tls"
	"net"
	"testing"
	"time"

	"github.com/fencedlock/fencedlock/conformance"
	"github.com/fencedlock/fencedlock/driver"
	"github.com/fencedlock/fencedlock/internal/faultproxy"
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

func (h *harness) NewBackend(ctx context.Context) (driver.Backend, error) {
	c := h.srv.Client(h.t, nil)
	return New(c, Options{})
}

// NewDelayedBackend makes the harness a conformance.Delayer: the backend's
// client reads every response delay after redis-server sent it.
func (h *harness) NewDelayedBackend(ctx context.Context, delay time.Duration) (driver.Backend, error) {
	c := h.srv.Client(h.t, func(o *rueidis.ClientOption) { o.DialCtxFn = delayedDial(delay) })
	return New(c, Options{})
}

// delayedDial dials as rueidis would and delays what the connection reads.
func delayedDial(delay time.Duration) func(context.Context, string, *net.Dialer, *tls.Config) (net.Conn, error) {
	return func(ctx context.Context, addr string, d *net.Dialer, cfg *tls.Config) (net.Conn, error) {
		var c net.Conn
		var err error
		if cfg != nil {
			c, err = (&tls.Dialer{NetDialer: d, Config: cfg}).DialContext(ctx, "tcp", addr)
		} else {
			c, err = d.DialContext(ctx, "tcp", addr)
		}
		if err != nil {
			return nil, err
		}
		return conformance.DelayReads(c, delay), nil
	}
}

func (h *harness) Invalidate(ctx context.Context, key string) error {
	return h.c.Do(ctx, h.c.B().Del().Key(h.ops.LockKey(key)).Build()).Error()
}

func (h *harness) Config() conformance.Config { return conformance.Config{} }

// NewFaultyBackend makes the harness a conformance.FaultInjector: the
// backend's client talks to redis-server through a TCP proxy of its own.
func (h *harness) NewFaultyBackend(ctx context.Context) (driver.Backend, conformance.Faults, error) {
	px, err := faultproxy.New(h.srv.Addr)
	if err != nil {
		return nil, nil, err
	}
	h.t.Cleanup(func() { px.Close() })
	c := h.srv.Client(h.t, func(o *rueidis.ClientOption) { o.InitAddress = []string{px.Addr()} })
	b, err := New(c, Options{})
	return b, proxyFaults{px}, err
}

// proxyFaults is conformance.Faults on a faultproxy.Proxy.
type proxyFaults struct{ p *faultproxy.Proxy }

// Refuse resets the open connections and refuses new ones while on.
func (f proxyFaults) Refuse(on bool) {
	f.p.RefuseNew(on)
	if on {
		f.p.ResetAll()
	}
}

func (f proxyFaults) DelayReplies(d time.Duration) { f.p.SetReplyLatency(d) }
func (f proxyFaults) DropReplies(n int)            { f.p.CutReplies(n) }

// Corrupt makes the harness a conformance.Corrupter: key's lock becomes a
// hash, which the scripts never write.
func (h *harness) Corrupt(ctx context.Context, key string) error {
	lk := h.ops.LockKey(key)
	if err := h.c.Do(ctx, h.c.B().Del().Key(lk).Build()).Error(); err != nil {
		return err
	}
	return h.c.Do(ctx, h.c.B().Hset().Key(lk).FieldValue().FieldValue("foreign", "value").Build()).Error()
}

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
