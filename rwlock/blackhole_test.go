package rwlock_test

import (
	"context"
	"errors"
	"testing"
	"time"

	goredislib "github.com/redis/go-redis/v9"
	"github.com/redis/rueidis"

	"github.com/fencedlock/fencedlock"
	"github.com/fencedlock/fencedlock/backend/goredis"
	"github.com/fencedlock/fencedlock/backend/redis"
	"github.com/fencedlock/fencedlock/driver"
	"github.com/fencedlock/fencedlock/internal/faultproxy"
	"github.com/fencedlock/fencedlock/internal/locktest"
	"github.com/fencedlock/fencedlock/internal/testserver"
	"github.com/fencedlock/fencedlock/rwlock"
)

// TestRedisBlackholedWriterIntent: a writer waiting behind a reader loses
// its link to a real redis-server (a blackhole: nothing delivered, no
// error) and gives up; its removal of the intent cannot arrive. New
// readers, on a link of their own, are refused while its intent lasts and
// granted within RWLock.Intent of the moment the link went dark (its last attempt
// that reached the server came before). When the link heals, what it held
// (the attempt under way, the removal) arrives in order and keeps readers
// out no longer: the removal follows the attempt, or the attempt finds
// its owner abandoned and writes nothing. Both clients.
func TestRedisBlackholedWriterIntent(t *testing.T) {
	srv := testserver.StartRedis(t)
	for _, cl := range addrClients {
		t.Run(cl.name, func(t *testing.T) {
			p, err := faultproxy.New(srv.Addr)
			if err != nil {
				t.Fatal(err)
			}
			defer p.Close()
			opts := fencedlock.Options{MinRetryDelay: 50 * time.Millisecond, MaxRetryDelay: 50 * time.Millisecond, ReleaseTimeout: 100 * time.Millisecond}
			w := locktest.Open(t, cl.open(t, srv, p.Addr()), opts, rwlock.New)
			rl := locktest.Open(t, cl.open(t, srv, srv.Addr), fencedlock.Options{}, rwlock.New)
			intent := w.Intent() // 350ms
			n := "blackhole-" + cl.name
			h := lease(t, rl, rwlock.Read, n)
			wctx, cancel := context.WithCancel(t.Context())
			defer cancel()
			done := make(chan error, 1)
			go func() {
				_, err := w.Lock(wctx, n)
				done <- err
			}()
			waitRefused(t, rl, n)              // the writer's intent is on the server
			time.Sleep(120 * time.Millisecond) // a few attempts more
			p.Blackhole(true)
			dark := time.Now()
			time.Sleep(60 * time.Millisecond) // an attempt into the blackhole
			cancel()
			if err := <-done; !errors.Is(err, context.Canceled) {
				t.Fatalf("Lock behind a reader, ended: %v, want context.Canceled", err)
			}
			if err := h.Release(t.Context()); err != nil {
				t.Fatal(err)
			}
			// The last attempt that reached the server came at most
			// MaxRetryDelay (and a round trip) before dark.
			if r, err := rl.TryRLock(t.Context(), n); time.Since(dark) < intent-2*opts.MaxRetryDelay {
				wantNotAcquired(t, r, err, "TryRLock while the unreachable writer's intent lasts")
			} else if err == nil {
				_ = r.Release(t.Context()) // a loaded machine: too late to tell
			}
			waitGranted(t, rl, n, dark, intent)
			p.Heal()
			healed := time.Now()
			time.Sleep(100 * time.Millisecond) // what the link held arrives
			waitGranted(t, rl, n, healed, intent)
		})
	}
}

// waitRefused waits until a TryRLock of n is refused.
func waitRefused(t *testing.T, rl *rwlock.RWLock, n string) {
	t.Helper()
	for start := time.Now(); ; time.Sleep(5 * time.Millisecond) {
		r, err := rl.TryRLock(t.Context(), n)
		if err != nil {
			return
		}
		_ = r.Release(t.Context())
		if time.Since(start) > 10*time.Second {
			t.Fatalf("no writer's intent refused a reader of %q in %v", n, time.Since(start))
		}
	}
}

// waitGranted waits until a TryRLock of n is granted, which must be at
// most intent (plus what a loaded machine adds between the tries: 200ms)
// after from.
func waitGranted(t *testing.T, rl *rwlock.RWLock, n string, from time.Time, intent time.Duration) {
	t.Helper()
	for {
		r, err := rl.TryRLock(t.Context(), n)
		if err == nil {
			_ = r.Release(t.Context())
			t.Logf("a reader got in %v after the writer's last attempt could have reached the server (Intent %v)", time.Since(from).Round(time.Millisecond), intent)
			return
		}
		if time.Since(from) > intent+200*time.Millisecond {
			t.Fatalf("readers still refused %v after the writer's last attempt could have reached the server (Intent %v): %v", time.Since(from), intent, err)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// addrClients open a backend of each Redis client on srv at addr (srv's
// own address, or a proxy's in front of it); locktest.Open closes it.
var addrClients = []struct {
	name string
	open func(t *testing.T, srv *testserver.Redis, addr string) driver.Backend
}{
	{"rueidis", func(t *testing.T, srv *testserver.Redis, addr string) driver.Backend {
		c := srv.Client(t, func(o *rueidis.ClientOption) { o.InitAddress = []string{addr} })
		b, err := redis.New(c, redis.Options{})
		if err != nil {
			t.Fatal(err)
		}
		return b
	}},
	{"goredis", func(t *testing.T, _ *testserver.Redis, addr string) driver.Backend {
		c := goredislib.NewClient(&goredislib.Options{Addr: addr})
		t.Cleanup(func() { c.Close() })
		b, err := goredis.New(c, goredis.Options{})
		if err != nil {
			t.Fatal(err)
		}
		return b
	}},
}
