package redis

import (
	"context"
	"crypto/tls"
	"fmt"
	"net"
	"testing"
	"time"

	"github.com/fencedlock/fencedlock/conformance"
	"github.com/fencedlock/fencedlock/driver"
	"github.com/fencedlock/fencedlock/fencing"
	"github.com/fencedlock/fencedlock/internal/faultproxy"
	"github.com/fencedlock/fencedlock/internal/rediscore"
	"github.com/fencedlock/fencedlock/internal/rediscore/rediscoretest"
	"github.com/fencedlock/fencedlock/internal/testserver"
	"github.com/redis/rueidis"
)

// harness runs the public conformance suite against a real redis-server:
// every backend has its own rueidis client, as a separate process would.
type harness struct {
	t   *testing.T
	srv *testserver.Redis
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

// Config: a fair waiter's queue entry lives at least
// rediscore.FairMinEntryTTL (SilentWaiter).
func (h *harness) Config() conformance.Config {
	return conformance.Config{QueuePlaceTTL: rediscore.FairMinEntryTTL}
}

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
	return b, faultproxy.Faults{P: px}, err
}

// Records makes the harness a conformance.RecordLister.
func (h *harness) Records(ctx context.Context, key string) ([]conformance.Record, error) {
	return rediscoretest.Records(ctx, h.c, h.ops.LockKey(key))
}

// Corrupt makes the harness a conformance.Corrupter: key's lock becomes a
// hash, which the scripts never write.
func (h *harness) Corrupt(ctx context.Context, key string) error {
	lk := h.ops.LockKey(key)
	if err := h.c.Do(ctx, h.c.B().Del().Key(lk).Build()).Error(); err != nil {
		return err
	}
	return h.c.Do(ctx, h.c.B().Hset().Key(lk).FieldValue().FieldValue("foreign", "value").Build()).Error()
}

// CorruptNoExpiry makes the harness a conformance.ExpiryCorrupter: key's
// lock becomes a string, as the scripts write it, without a TTL (every
// lock they write has one).
func (h *harness) CorruptNoExpiry(ctx context.Context, key string) error {
	return h.c.Do(ctx, h.c.B().Set().Key(h.ops.LockKey(key)).Value("foreign-owner").Build()).Error()
}

// SetFenceRecord makes the harness a conformance.FenceCorrupter: it writes
// key's fence counter (FenceKey) with the operator's client.
func (h *harness) SetFenceRecord(ctx context.Context, key string, rec conformance.FenceRecord) error {
	fk := h.ops.FenceKey(key)
	if err := h.c.Do(ctx, h.c.B().Del().Key(fk).Build()).Error(); err != nil || rec.Absent {
		return err
	}
	if rec.Foreign {
		return h.c.Do(ctx, h.c.B().Hset().Key(fk).FieldValue().FieldValue("foreign", "value").Build()).Error()
	}
	if rec.Expires {
		return h.c.Do(ctx, h.c.B().Set().Key(fk).Value(rec.Value).Px(time.Hour).Build()).Error()
	}
	return h.c.Do(ctx, h.c.B().Set().Key(fk).Value(rec.Value).Build()).Error()
}

// ReadFenceRecord describes key's fence counter: its type, its value
// (DUMP's serialization, any type) and whether it has a TTL.
func (h *harness) ReadFenceRecord(ctx context.Context, key string) (string, error) {
	fk := h.ops.FenceKey(key)
	typ, err := h.c.Do(ctx, h.c.B().Type().Key(fk).Build()).ToString()
	if err != nil {
		return "", err
	}
	dump, err := h.c.Do(ctx, h.c.B().Dump().Key(fk).Build()).ToString()
	if err != nil && !rueidis.IsRedisNil(err) {
		return "", err
	}
	pttl, err := h.c.Do(ctx, h.c.B().Pttl().Key(fk).Build()).AsInt64()
	if err != nil {
		return "", err
	}
	return fmt.Sprintf("%s %q expires=%t", typ, dump, pttl >= 0), nil
}

// RefuseWrites makes the harness a conformance.WriteRefuser: redis-server
// over its memory limit (maxmemory 1 byte, noeviction) refuses the first
// write of a script, SET NX included, with OOM, and still answers reads.
// The server is this harness's own (testserver.StartRedis per property),
// and the suite's properties run one at a time.
func (h *harness) RefuseWrites(ctx context.Context, on bool) error {
	limit := "0"
	if on {
		limit = "1"
	}
	cmd := h.c.B().ConfigSet().ParameterValue().ParameterValue("maxmemory-policy", "noeviction").ParameterValue("maxmemory", limit).Build()
	return h.c.Do(ctx, cmd).Error()
}

// MaxFence is the Redis backend's greatest fence.
func (h *harness) MaxFence() fencing.Token { return MaxFence }

func TestConformance(t *testing.T) {
	conformance.Run(t, func(t *testing.T) conformance.Harness {
		srv := testserver.StartRedis(t)
		c := srv.Client(t, nil)
		ops, err := New(c, Options{})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { ops.Close() })
		return &harness{t: t, srv: srv, c: c, ops: ops}
	})
}
