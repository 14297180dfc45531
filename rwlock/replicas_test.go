package rwlock_test

import (
	"context"
	"errors"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	goredislib "github.com/redis/go-redis/v9"

	"github.com/fencedlock/fencedlock"
	"github.com/fencedlock/fencedlock/backend/goredis"
	"github.com/fencedlock/fencedlock/backend/redis"
	"github.com/fencedlock/fencedlock/driver"
	"github.com/fencedlock/fencedlock/internal/locktest"
	"github.com/fencedlock/fencedlock/internal/testserver"
	"github.com/fencedlock/fencedlock/rwlock"
)

// replicaClients open a backend of each Redis client on srv, with
// WaitReplicas replicas and WaitTimeout timeout (0: the default).
var replicaClients = []struct {
	name string
	open func(t *testing.T, srv *testserver.Redis, replicas int, timeout time.Duration) driver.Backend
}{
	{"rueidis", func(t *testing.T, srv *testserver.Redis, replicas int, timeout time.Duration) driver.Backend {
		b, err := redis.New(srv.Client(t, nil), redis.Options{WaitReplicas: replicas, WaitTimeout: timeout})
		if err != nil {
			t.Fatal(err)
		}
		return b
	}},
	{"goredis", func(t *testing.T, srv *testserver.Redis, replicas int, timeout time.Duration) driver.Backend {
		c := goredislib.NewClient(&goredislib.Options{Addr: srv.Addr})
		t.Cleanup(func() { c.Close() })
		b, err := goredis.New(c, goredis.Options{WaitReplicas: replicas, WaitTimeout: timeout})
		if err != nil {
			t.Fatal(err)
		}
		return b
	}},
}

// TestRedisUnconfirmedGrantRetried: with WaitReplicas, a grant that too
// few replicas acknowledged is released again and the attempt fails with
// ErrReplication; the waiting RLock or Lock then tries again with the same
// owner token. That owner's next attempt must be able to take the name
// once the replicas acknowledge: the release of an unconfirmed grant is
// not the clean-up of an attempt whose outcome is unknown (the reply came
// back), so it must not mark the owner as abandoned, which refused every
// later attempt of it for five minutes (the wait ran until its context
// ended, with the replica long in sync).
func TestRedisUnconfirmedGrantRetried(t *testing.T) {
	for _, cl := range replicaClients {
		for _, m := range []rwlock.Mode{rwlock.Read, rwlock.Write} {
			t.Run(cl.name+"/"+m.String(), func(t *testing.T) {
				primary := testserver.StartRedis(t) // no replica yet: WAIT 1 counts none
				b := cl.open(t, primary, 1, 100*time.Millisecond)
				t.Cleanup(func() { b.Close() })
				failed := make(chan struct{})
				r, err := rwlock.New(b, fencedlock.Options{
					TTL:    5 * time.Second,
					Logger: slog.New(&signalHandler{substr: "attempt failed", ch: failed}),
				})
				if err != nil {
					t.Fatal(err)
				}
				t.Cleanup(func() { r.Close() })
				ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
				defer cancel()
				type result struct {
					l   *rwlock.Lease
					err error
				}
				done := make(chan result, 1)
				go func() {
					var res result
					if m == rwlock.Read {
						res.l, res.err = r.RLock(ctx, "unconfirmed")
					} else {
						res.l, res.err = r.Lock(ctx, "unconfirmed")
					}
					done <- res
				}()
				select {
				case <-failed: // the first attempt failed with ErrReplication
				case res := <-done:
					t.Fatalf("%v lock without a replica: %v, %v; want a retry after ErrReplication", m, res.l, res.err)
				}
				testserver.StartRedis(t, testserver.WithReplicaOf(primary))
				res := <-done
				if res.err != nil {
					t.Fatalf("%v lock after the replica came up: %v; want the same wait to take the name", m, res.err)
				}
				if err := res.l.Release(t.Context()); err != nil {
					t.Fatal(err)
				}
			})
		}
	}
}

// TestRedisIntentOutlivesWait: with WaitReplicas, each attempt of a
// waiting writer is its script followed by WAIT, which the server holds
// for up to WaitTimeout (DefaultWaitTimeout here) when the replicas do not
// acknowledge, also for a refused attempt, whose script wrote the intent.
// The intent must outlive that WAIT and the pause before the next
// attempt, or a reader slips in between two attempts of a writer that
// still waits (writer starvation). The writer's MaxRetryDelay of 50ms
// makes an intent of 350ms; no replica ever acknowledges; the readers
// wait for no replica (another process's options), so a TryRLock granted
// while the writer waits is what the server allowed. Before the fix the
// intent lapsed 350ms after each attempt's script, about 650ms before the
// next one, and a reader was granted within the first second.
func TestRedisIntentOutlivesWait(t *testing.T) {
	for _, cl := range replicaClients {
		t.Run(cl.name, func(t *testing.T) {
			srv := testserver.StartRedis(t) // no replica: WAIT 1 waits out its timeout
			readers := locktest.Open(t, cl.open(t, srv, 0, 0), fencedlock.Options{}, rwlock.New)
			writer := locktest.Open(t, cl.open(t, srv, 1, 0), fencedlock.Options{
				MinRetryDelay: time.Millisecond, MaxRetryDelay: 50 * time.Millisecond,
			}, rwlock.New)
			ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
			defer cancel()
			const n = "intent-wait"
			h, err := readers.RLock(ctx, n) // the writer waits behind it throughout
			if err != nil {
				t.Fatal(err)
			}
			defer h.Release(ctx)
			wctx, wcancel := context.WithCancel(ctx)
			defer wcancel()
			wdone := make(chan error, 1)
			go func() {
				w, err := writer.Lock(wctx, n)
				if err == nil {
					w.Release(ctx)
					err = errors.New("granted beside a reader")
				}
				wdone <- err
			}()
			for { // until the writer's first intent refuses readers (bounded by ctx)
				p, err := readers.TryRLock(ctx, n)
				if err != nil {
					break
				}
				p.Release(ctx)
				time.Sleep(5 * time.Millisecond)
			}
			start := time.Now()
			probes := 0
			for time.Since(start) < 3*redis.DefaultWaitTimeout { // three attempts' WAITs
				probes++
				if p, err := readers.TryRLock(ctx, n); err == nil {
					p.Release(ctx)
					t.Fatalf("a reader was granted %v after the writer's intent first refused one, while the writer still waits "+
						"(intent %v, WaitTimeout %v): the intent lapsed between two attempts", time.Since(start), writer.Intent(), redis.DefaultWaitTimeout)
				} else if !errors.Is(err, fencedlock.ErrNotAcquired) {
					t.Fatalf("TryRLock: %v", err)
				}
				time.Sleep(10 * time.Millisecond)
			}
			wcancel()
			if err := <-wdone; !errors.Is(err, fencedlock.ErrNotAcquired) {
				t.Fatalf("the waiting writer: %v, want ErrNotAcquired when its context ends", err)
			}
			t.Logf("%d readers refused over %v while the writer waited", probes, time.Since(start))
		})
	}
}

// signalHandler is a slog.Handler that closes ch at the first record whose
// message contains substr.
type signalHandler struct {
	substr string
	ch     chan struct{}
	once   sync.Once
}

func (h *signalHandler) Enabled(context.Context, slog.Level) bool { return true }

func (h *signalHandler) Handle(_ context.Context, r slog.Record) error {
	if strings.Contains(r.Message, h.substr) {
		h.once.Do(func() { close(h.ch) })
	}
	return nil
}

func (h *signalHandler) WithAttrs([]slog.Attr) slog.Handler { return h }
func (h *signalHandler) WithGroup(string) slog.Handler      { return h }
