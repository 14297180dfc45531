package goredis

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/fencedlock/fencedlock"
	"github.com/fencedlock/fencedlock/internal/redistest"
	"github.com/redis/go-redis/v9"
)

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
	srv := redistest.Start(t)
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
	resumed := false
	resume := func() {
		if !resumed {
			resumed = true
			srv.Resume()
		}
	}
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
