package goredis

import (
	"context"
	"fmt"
	"runtime"
	"sync/atomic"
	"testing"
	"time"

	"github.com/fencedlock/fencedlock"
	"github.com/fencedlock/fencedlock/internal/hostiletest"
	"github.com/fencedlock/fencedlock/internal/redisscript"
	"github.com/fencedlock/fencedlock/internal/testserver"
	"github.com/redis/go-redis/v9"
)

// TestCancelledAcquiresLeaveNoOrphan: 64 goroutines on a client with a
// pool of 4 connections (so most commands go through go-redis's
// autopipeliner) call Acquire and TryAcquire with contexts that end at
// random points: already ended, after a few microseconds (while the
// command is queued in the pipeline or its reply in flight), after some
// milliseconds, or cancelled from another goroutine; meanwhile the server
// stalls now and then (CLIENT PAUSE WRITE). After every call has returned,
// every key is free or held by a Lease the test got back: no lock is held
// by an owner token nobody has, neither at once nor after the queued
// requests have had time to arrive. No goroutine is left behind and the
// client still works. The seed is logged; FENCEDLOCK_SEED repeats it.
func TestCancelledAcquiresLeaveNoOrphan(t *testing.T) {
	// With ContextTimeoutEnabled, a pipelined command's wait ends with its
	// context while the command may still be written and run: the
	// Locker's clean-up must make it take nothing.
	for _, ctxTimeouts := range []bool{false, true} {
		t.Run(fmt.Sprintf("ContextTimeoutEnabled=%v", ctxTimeouts), func(t *testing.T) {
			srv := testserver.StartRedis(t)
			base := runtime.NumGoroutine()
			c := redis.NewClient(&redis.Options{Addr: srv.Addr, PoolSize: 4, ContextTimeoutEnabled: ctxTimeouts})
			b, err := New(c, Options{})
			if err != nil {
				t.Fatal(err)
			}
			l, err := fencedlock.New(b, fencedlock.Options{TTL: 10 * time.Second})
			if err != nil {
				t.Fatal(err)
			}
			var pc pipelineCounter
			c.AddHook(&pc)
			var ac abandonCounter
			c.AddHook(&ac)
			hostiletest.Cancels(t, l, b.Inspect, func(ms int) error {
				return c.Do(context.Background(), "client", "pause", ms, "write").Err()
			})
			t.Logf("%d pipelines of %d scripts; %d clean-up releases (abandon mark), %d of them pipelined, %d deleting a lock taken",
				pc.pipelines.Load(), pc.cmds.Load(), ac.alone.Load()+ac.piped.Load(), ac.piped.Load(), ac.deleted.Load())
			if pc.pipelines.Load() == 0 || ac.alone.Load()+ac.piped.Load() == 0 {
				t.Error("no pipeline or no clean-up was sent: the test did not exercise them")
			}
			l.Close()
			b.Close()
			c.Close()
			hostiletest.CheckGoroutines(t, base)
		})
	}
}

// abandonCounter is a go-redis hook that counts the releases with the
// abandon mark (the Locker's clean-up after an acquire of unknown outcome)
// sent alone and in pipelines.
type abandonCounter struct{ alone, piped, deleted atomic.Int64 }

// done counts a clean-up that deleted a lock: its acquire had been applied.
func (p *abandonCounter) done(c redis.Cmder) {
	if ic, ok := c.(*redis.IntCmd); ok && ic.Err() == nil && ic.Val() == 1 {
		p.deleted.Add(1)
	}
}

func isCleanup(c redis.Cmder) bool {
	a := c.Args()
	if len(a) != 10 || (a[1] != redisscript.ReleaseSHA && a[1] != redisscript.ReleaseLua) {
		return false
	}
	s, ok := a[9].(*string)
	return ok && *s != ""
}

func (p *abandonCounter) DialHook(next redis.DialHook) redis.DialHook { return next }

func (p *abandonCounter) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, c redis.Cmder) error {
		if !isCleanup(c) {
			return next(ctx, c)
		}
		p.alone.Add(1)
		err := next(ctx, c)
		p.done(c)
		return err
	}
}

func (p *abandonCounter) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		var cleanups []redis.Cmder
		for _, c := range cmds {
			if isCleanup(c) {
				p.piped.Add(1)
				cleanups = append(cleanups, c)
			}
		}
		err := next(ctx, cmds)
		for _, c := range cleanups {
			p.done(c)
		}
		return err
	}
}
