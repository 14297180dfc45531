package multilock_test

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/fencedlock/fencedlock"
	"github.com/fencedlock/fencedlock/driver"
	"github.com/fencedlock/fencedlock/internal/backendtest"
	"github.com/fencedlock/fencedlock/internal/multilocktest"
	"github.com/fencedlock/fencedlock/internal/redisnames"
	"github.com/fencedlock/fencedlock/internal/redisscript"
	"github.com/fencedlock/fencedlock/internal/testserver"
	"github.com/fencedlock/fencedlock/multilock"
)

// redisSetup runs the scenarios on a real redis-server, each client a
// Backend of its own of the Redis client named client, as processes
// sharing the server.
func redisSetup(t *testing.T, client string) multilocktest.Setup {
	srv := testserver.StartRedis(t)
	cli := func(t *testing.T, args ...string) string {
		t.Helper()
		out, err := srv.CLI(t, args...)
		if err != nil {
			t.Fatal(err)
		}
		return strings.TrimSpace(out)
	}
	lockKey := func(key string) string { return redisscript.LockKey(redisscript.DefaultKeyPrefix, key) }
	return multilocktest.Setup{
		New: func(t *testing.T) multilocktest.Backend { return openRedis(t, client, srv) },
		Delete: func(t *testing.T, key string) {
			if out := cli(t, "DEL", lockKey(key)); out != "1" {
				t.Fatalf("DEL %s: %s, want 1", lockKey(key), out)
			}
		},
		Corrupt: func(t *testing.T, key string) {
			cli(t, "HSET", lockKey(key), "not", "ours")
		},
		Foreign:  redisscript.ErrCorrupt,
		Abandons: true,
	}
}

// openRedis opens a Backend of the Redis client named name (of
// backendtest.RedisClients: "rueidis" or "goredis") on srv, closed when t
// ends.
func openRedis(t *testing.T, name string, srv *testserver.Redis) multilocktest.Backend {
	t.Helper()
	for _, cl := range backendtest.RedisClients {
		if cl.Name != name {
			continue
		}
		b, _ := cl.Open(t, srv)
		t.Cleanup(func() { b.Close() })
		mb, ok := b.(multilocktest.Backend)
		if !ok {
			t.Fatalf("%s: %T is no multilocktest.Backend", name, b)
		}
		return mb
	}
	t.Fatalf("no Redis client %q in backendtest.RedisClients", name)
	return nil
}

func TestRedis(t *testing.T)   { multilocktest.Run(t, redisSetup(t, "rueidis")) }
func TestGoRedis(t *testing.T) { multilocktest.Run(t, redisSetup(t, "goredis")) }

// TestRedisCorruptCounterTakesNothing: a fence counter of one key that
// fencedlock did not write (not a number; a TTL on it) fails the set's
// acquire with a permanent error before anything is written: no key of
// the set is taken, no other counter moves.
func TestRedisCorruptCounterTakesNothing(t *testing.T) {
	srv := testserver.StartRedis(t)
	b := openRedis(t, "rueidis", srv)
	m, err := multilock.New(b, fencedlock.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	fenceKey := func(k string) string {
		return redisscript.LockKey(redisscript.DefaultKeyPrefix, k) + redisnames.FenceSuffix
	}
	for name, c := range map[string]struct {
		prefix string   // the set is prefix+"0", +"1", +"2"; +"1"'s counter is corrupt
		value  []string // SET's arguments after the key
	}{
		"not a number": {"c", []string{"twelve"}},
		"with a TTL":   {"t", []string{"5", "EX", "600"}},
	} {
		keys := []string{c.prefix + "0", c.prefix + "1", c.prefix + "2"}
		if _, err := srv.CLI(t, append([]string{"SET", fenceKey(keys[1])}, c.value...)...); err != nil {
			t.Fatal(err)
		}
		_, err := m.TryAcquire(context.Background(), keys)
		if err == nil || errors.Is(err, fencedlock.ErrNotAcquired) || !errors.Is(err, driver.ErrPermanent) {
			t.Errorf("%s: TryAcquire: %v, want a permanent error", name, err)
		}
		for _, k := range []string{keys[0], keys[2]} {
			if info, err := b.Inspect(context.Background(), k); err != nil || info.Held || info.Fence != 0 {
				t.Errorf("%s: %q after the refused set: held %v, fence %d, err %v; want untouched", name, k, info.Held, info.Fence, err)
			}
		}
	}
}
