package rwlock_test

import (
	"context"
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
	"github.com/fencedlock/fencedlock/internal/testserver"
	"github.com/fencedlock/fencedlock/rwlock"
)

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
	clients := []struct {
		name string
		open func(t *testing.T, srv *testserver.Redis) driver.Backend
	}{
		{"rueidis", func(t *testing.T, srv *testserver.Redis) driver.Backend {
			b, err := redis.New(srv.Client(t, nil), redis.Options{WaitReplicas: 1, WaitTimeout: 100 * time.Millisecond})
			if err != nil {
				t.Fatal(err)
			}
			return b
		}},
		{"goredis", func(t *testing.T, srv *testserver.Redis) driver.Backend {
			c := goredislib.NewClient(&goredislib.Options{Addr: srv.Addr})
			t.Cleanup(func() { c.Close() })
			b, err := goredis.New(c, goredis.Options{WaitReplicas: 1, WaitTimeout: 100 * time.Millisecond})
			if err != nil {
				t.Fatal(err)
			}
			return b
		}},
	}
	for _, cl := range clients {
		for _, m := range []rwlock.Mode{rwlock.Read, rwlock.Write} {
			t.Run(cl.name+"/"+m.String(), func(t *testing.T) {
				primary := testserver.StartRedis(t) // no replica yet: WAIT 1 counts none
				b := cl.open(t, primary)
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
