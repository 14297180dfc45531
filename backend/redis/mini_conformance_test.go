package redis

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/alicebob/miniredis/v2/server"
	"github.com/redis/rueidis"

	"github.com/fencedlock/fencedlock/conformance"
	"github.com/fencedlock/fencedlock/driver"
	"github.com/fencedlock/fencedlock/internal/rediscore"
	"github.com/fencedlock/fencedlock/internal/rediscore/rediscoretest"
	"github.com/fencedlock/fencedlock/internal/redisscript"
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

func (h *miniHarness) NewBackend(ctx context.Context) (driver.Backend, error) {
	b, err := New(h.client(), Options{})
	if err != nil {
		return nil, err
	}
	return miniBackend{b}, nil
}

// miniBackend is a Backend without the election capability: proclaim.lua
// computes holder ids with the bit library (LuaBitOp), which Redis has
// and miniredis's Lua lacks. The election properties run on redis-server
// in TestConformance (and TestConformance of backend/goredis).
type miniBackend struct{ *Backend }

// Proclaim shadows Backend.Proclaim, so that miniBackend is no
// driver.Elector.
func (miniBackend) Proclaim() {}

// NewDelayedBackend makes the harness a conformance.Delayer.
func (h *miniHarness) NewDelayedBackend(ctx context.Context, delay time.Duration) (driver.Backend, error) {
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
	return conformance.Config{ExpirySlack: 100 * time.Millisecond, QueuePlaceTTL: rediscore.FairMinEntryTTL}
}

// TestConformanceMiniredis runs the public suite on miniredis, whose keys
// expire only when told (FastForward). A ticker that fast-forwards would
// end leases early by as much as it runs late on a loaded machine (a TTL
// set just before a late tick loses the whole gap), which RenewTTL and
// ExpiryWithoutRenew rightly report; so the harness follows the real clock
// exactly instead: every command runs after a fast-forward to its own
// moment, one command at a time (see realClock).
func TestConformanceMiniredis(t *testing.T) {
	conformance.Run(t, func(t *testing.T) conformance.Harness {
		m := miniredis.RunT(t)
		realClock(m)
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

// realClock makes m's keys expire by the real clock: before each command
// it fast-forwards m by the time elapsed since the previous command, and
// runs the command while no other command can run (miniredis runs one at a
// time anyway), so that a TTL is counted down from the moment its command
// ran. Expired keys go at the next command, lazily, as on Redis. The
// redis.call of a Lua script runs inside its EVALSHA: it is recognised by
// its peer, which miniredis makes afresh with its context already set (a
// connection's peer has none before its first command).
func realClock(m *miniredis.Miniredis) {
	var (
		mu      sync.Mutex // held while a command runs
		last    = time.Now()
		running atomic.Pointer[server.Peer] // the peer whose command runs now
		pmu     sync.Mutex
		conns   = map[*server.Peer]bool{} // the connections' peers
	)
	srv := m.Server() // m.Server() is nil once m is closed
	srv.SetPreHook(func(c *server.Peer, cmd string, args ...string) bool {
		if running.Load() == c {
			return false // the command dispatched below: run it
		}
		pmu.Lock()
		conn := conns[c] || c.Ctx == nil
		conns[c] = conn
		pmu.Unlock()
		if !conn {
			return false // a script's redis.call: its EVALSHA holds the lock
		}
		mu.Lock()
		defer mu.Unlock()
		now := time.Now()
		m.FastForward(now.Sub(last))
		last = now
		running.Store(c)
		defer running.Store(nil)
		srv.Dispatch(c, append([]string{cmd}, args...))
		return true
	})
}

// SetKeys makes the harness a conformance.SetKeyer: rueidis runs
// miniredis as a Cluster, where a set must be in one hash slot.
func (h *miniHarness) SetKeys(prefix string, n int) []string {
	return rediscoretest.SameSlotKeys(redisscript.DefaultKeyPrefix, prefix, n)
}
