package goredis

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/fencedlock/fencedlock/driver"
	"github.com/fencedlock/fencedlock/internal/redistest"
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
			srv := redistest.Start(t)
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
		cl := redistest.StartCluster(t, 3)
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
