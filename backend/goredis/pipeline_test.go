package goredis

// go-redis's auto-pipeliner under the backend: concurrent commands share
// round trips, and a pipelined Acquire still ends with its context.

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/fencedlock/fencedlock"
	"github.com/fencedlock/fencedlock/driver"
	"github.com/fencedlock/fencedlock/internal/testserver"
	"github.com/redis/go-redis/v9"
)

// pipelineCounter is a go-redis hook that counts the pipelines of two
// or more scripts (EVALSHA, EVAL) the client sends, and the scripts in
// them.
type pipelineCounter struct{ pipelines, cmds atomic.Int64 }

func (p *pipelineCounter) DialHook(next redis.DialHook) redis.DialHook { return next }

func (p *pipelineCounter) ProcessHook(next redis.ProcessHook) redis.ProcessHook { return next }

func (p *pipelineCounter) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		n := 0
		for _, c := range cmds {
			if name := c.Name(); name == "evalsha" || name == "eval" {
				n++
			}
		}
		if n > 1 {
			p.pipelines.Add(1)
			p.cmds.Add(int64(n))
		}
		return next(ctx, cmds)
	}
}

// runConcurrently runs workers goroutines, each doing rounds of Acquire,
// Renew and Release on its own key, and checks every reply: fences
// strictly increase per key, a renewal and a release of a held lock
// succeed, and a second acquirer of a held key is refused.
func runConcurrently(t *testing.T, b *Backend, workers, rounds int) {
	t.Helper()
	ctx := ctxT(t)
	var wg sync.WaitGroup
	errs := make(chan error, workers)
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			key := fmt.Sprintf("pipelined/%d", w)
			var last int64
			for range rounds {
				g, err := b.Acquire(ctx, driver.AcquireRequest{Key: key, Owner: owner(), TTL: time.Minute})
				if err != nil {
					errs <- fmt.Errorf("%s: acquire: %w", key, err)
					return
				}
				if int64(g.Fence) <= last {
					errs <- fmt.Errorf("%s: fence %d after %d", key, g.Fence, last)
					return
				}
				last = int64(g.Fence)
				if _, err := b.Acquire(ctx, driver.AcquireRequest{Key: key, Owner: owner(), TTL: time.Minute}); !isHeld(err) {
					errs <- fmt.Errorf("%s: second acquirer of a held key: %v, want a HeldError", key, err)
					return
				}
				if _, err := b.Renew(ctx, g, time.Minute); err != nil {
					errs <- fmt.Errorf("%s: renew: %w", key, err)
					return
				}
				if err := b.Release(ctx, g); err != nil {
					errs <- fmt.Errorf("%s: release: %w", key, err)
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
}

// TestConcurrentCommandsPipelined: commands of concurrent calls beyond the
// client's pool size go out as pipelines (go-redis's autopipeliner), with
// the same replies as alone, on a server and on a Cluster, also right
// after SCRIPT FLUSH (every EVALSHA of a pipeline refused with NOSCRIPT is
// sent again as EVAL); up to the pool size, none does.
func TestConcurrentCommandsPipelined(t *testing.T) {
	const workers, rounds = 32, 30
	// Each round makes 4 commands per worker.
	for _, tc := range []struct {
		poolSize  int
		pipelined bool
	}{{4, true}, {2 * workers, false}} {
		t.Run(fmt.Sprintf("server/pool=%d", tc.poolSize), func(t *testing.T) {
			srv := testserver.StartRedis(t)
			c := redis.NewClient(&redis.Options{Addr: srv.Addr, PoolSize: tc.poolSize})
			defer c.Close()
			var pc pipelineCounter
			c.AddHook(&pc)
			b, err := New(c, Options{})
			if err != nil {
				t.Fatal(err)
			}
			defer b.Close()
			if err := c.ScriptFlush(ctxT(t)).Err(); err != nil {
				t.Fatal(err)
			}
			runConcurrently(t, b, workers, rounds)
			t.Logf("%d workers, pool of %d: %d pipelines of %d scripts (%d scripts in all, and the EVALs after NOSCRIPT)",
				workers, tc.poolSize, pc.pipelines.Load(), pc.cmds.Load(), workers*rounds*4)
			if got := pc.pipelines.Load() > 0; got != tc.pipelined {
				t.Errorf("%d concurrent callers, pool of %d: pipelined %v, want %v", workers, tc.poolSize, got, tc.pipelined)
			}
		})
	}
	t.Run("cluster", func(t *testing.T) {
		cl := testserver.StartRedisCluster(t, 3)
		o := &redis.ClusterOptions{PoolSize: 2}
		for _, s := range cl.Nodes {
			o.Addrs = append(o.Addrs, s.Addr)
		}
		c := redis.NewClusterClient(o)
		defer c.Close()
		b, err := New(c, Options{ShardedPubSub: true})
		if err != nil {
			t.Fatal(err)
		}
		defer b.Close()
		runConcurrently(t, b, workers, rounds)
	})
}

func isHeld(err error) bool {
	var he *driver.HeldError
	return errors.As(err, &he)
}

// TestPipelinedAcquireEndsWithItsContext: while the server is stopped
// (SIGSTOP), 64 TryAcquire calls with a 50ms context on a client with
// ContextTimeoutEnabled and a pool of 4 connections (60 of them go through
// go-redis's autopipeliner, whose blocking Process does not honour a
// context once the command is queued) all return with their context's
// error while the server is still stopped: the context bounds the attempt
// on every path, as the client asks, and as on backend/redis. The Locker's
// clean-up is bounded by its ReleaseTimeout (100ms here). The client's
// read timeout (30s) is longer than the wait (10s), so only the context
// can end the calls. After the server resumes, the client works.
func TestPipelinedAcquireEndsWithItsContext(t *testing.T) {
	const workers = 64
	srv := testserver.StartRedis(t)
	c := redis.NewClient(&redis.Options{Addr: srv.Addr, PoolSize: 4, ReadTimeout: 30 * time.Second, WriteTimeout: 30 * time.Second, ContextTimeoutEnabled: true})
	defer c.Close()
	b, err := New(c, Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	l, err := fencedlock.New(b, fencedlock.Options{TTL: 10 * time.Second, ReleaseTimeout: 100 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	// Start the autopipeliner and the pool's connections first.
	ctx0, cancel0 := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel0()
	runConcurrently(t, b, workers, 1)

	srv.Pause()
	resume := sync.OnceFunc(srv.Resume)
	defer resume()
	var (
		wg       sync.WaitGroup
		returned atomic.Int64
		ctxErrs  atomic.Int64
	)
	done := make(chan struct{})
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
			defer cancel()
			ls, err := l.TryAcquire(ctx, fmt.Sprintf("stalled/%d", w))
			returned.Add(1)
			if err == nil {
				t.Errorf("stalled/%d: acquired from a stopped server", w)
				ls.Release(ctx0)
				return
			}
			if errors.Is(err, context.DeadlineExceeded) {
				ctxErrs.Add(1)
			}
		}()
	}
	go func() { wg.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
	}
	t.Logf("server stopped: %d of %d calls with a 50ms context returned within 10s, %d with the context's error", returned.Load(), workers, ctxErrs.Load())
	if n := returned.Load(); n != workers {
		t.Errorf("server stopped: %d of %d calls with a 50ms context returned within 10s, want all", n, workers)
	}
	resume()
	<-done
	runConcurrently(t, b, workers, 2)
	// The clean-ups timed out while the server was stopped: a lock an
	// acquire took after the server resumed expires with its TTL (the
	// Locker logs it). Count them, for the record.
	held := 0
	for w := range workers {
		info, err := b.Inspect(ctx0, fmt.Sprintf("stalled/%d", w))
		if err != nil {
			t.Fatal(err)
		}
		if info.Held {
			held++
		}
	}
	t.Logf("after the server resumed: %d of %d keys held until their TTL ends", held, workers)
}
