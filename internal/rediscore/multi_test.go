package rediscore_test

import (
	"context"
	"crypto/rand"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/redis/rueidis"

	"github.com/fencedlock/fencedlock/backend/redis"
	"github.com/fencedlock/fencedlock/driver"
	"github.com/fencedlock/fencedlock/internal/backendtest"
	"github.com/fencedlock/fencedlock/internal/multilocktest"
	"github.com/fencedlock/fencedlock/internal/redisnames"
	"github.com/fencedlock/fencedlock/internal/redisscript"
	"github.com/fencedlock/fencedlock/internal/testserver"
)

// cli runs redis-cli on srv and returns its output, failing t on an error
// (redis-cli prints an error reply and exits 0: the caller checks).
func cli(t *testing.T, srv *testserver.Redis, args ...string) string {
	t.Helper()
	out, err := srv.CLI(t, args...)
	if err != nil {
		t.Fatal(err)
	}
	return strings.TrimSpace(out)
}

func lockKey(key string) string { return redisscript.LockKey(redisscript.DefaultKeyPrefix, key) }

// open returns a multilocktest.Backend of the Redis client cl on srv,
// closed when t ends.
func open(t *testing.T, cl backendtest.RedisClient, srv *testserver.Redis) multilocktest.Backend {
	b, _ := cl.Open(t, srv)
	t.Cleanup(func() { b.Close() })
	mb, ok := b.(multilocktest.Backend)
	if !ok {
		t.Fatalf("%s: %T is no multilocktest.Backend", cl.Name, b)
	}
	return mb
}

// TestMultiForeignValues runs multilocktest.ReplacedKeyNamed on both
// clients with every kind of value fencedlock does not write in a lock
// key: another type (a hash, a list) and a string without a TTL. The
// renewal and the release of a set holding one fail with a LostKeyError
// naming that key that also wraps ErrCorrupt (before multi_renew.lua and
// multi_release.lua checked, GET raised WRONGTYPE: an ErrCorrupt error
// naming no key, and the release deleted none of the owner's keys).
func TestMultiForeignValues(t *testing.T) {
	srv := testserver.StartRedis(t)
	for _, cl := range backendtest.RedisClients {
		for name, cmd := range map[string][]string{
			"hash":               {"HSET", "", "not", "ours"},
			"list":               {"LPUSH", "", "not ours"},
			"string without TTL": {"SET", "", "not ours"},
		} {
			t.Run(cl.Name+"/"+name, func(t *testing.T) {
				multilocktest.ReplacedKeyNamed(t, multilocktest.Setup{
					New: func(t *testing.T) multilocktest.Backend { return open(t, cl, srv) },
					Delete: func(t *testing.T, key string) {
						if out := cli(t, srv, "DEL", lockKey(key)); out != "1" {
							t.Fatalf("DEL %s: %s, want 1", lockKey(key), out)
						}
					},
					Corrupt: func(t *testing.T, key string) {
						args := append([]string{cmd[0], lockKey(key)}, cmd[2:]...)
						if out := cli(t, srv, args...); out != "1" && out != "OK" {
							t.Fatalf("%q: %s", args, out)
						}
					},
					Foreign: redisscript.ErrCorrupt,
				})
			})
		}
	}
}

// TestMultiForeignFenceCounter: a fence counter replaced by a hash while
// its set is held does not end the lease (the lock keys, which are the
// lease, are still the owner's, and the fences already granted stay
// valid): the renewal and the release succeed; the next acquire of the
// set is refused with ErrCorrupt and takes nothing.
func TestMultiForeignFenceCounter(t *testing.T) {
	srv := testserver.StartRedis(t)
	b := open(t, backendtest.RedisClients[0], srv)
	ctx := context.Background()
	ks := []string{"f0", "f1", "f2"}
	req := driver.MultiRequest{Keys: ks, Owner: rand.Text(), TTL: 5 * time.Second}
	g, err := b.AcquireMulti(ctx, req)
	if err != nil {
		t.Fatal(err)
	}
	fence := lockKey(ks[1]) + redisnames.FenceSuffix
	cli(t, srv, "DEL", fence)
	cli(t, srv, "HSET", fence, "not", "ours")
	if _, err := b.RenewMulti(ctx, g, g.TTL); err != nil {
		t.Errorf("RenewMulti with a foreign fence counter: %v, want renewed", err)
	}
	if err := b.ReleaseMulti(ctx, g); err != nil {
		t.Errorf("ReleaseMulti with a foreign fence counter: %v, want released", err)
	}
	if _, err := b.AcquireMulti(ctx, req); !errors.Is(err, redisscript.ErrCorrupt) || !errors.Is(err, driver.ErrPermanent) {
		t.Errorf("AcquireMulti with a foreign fence counter: %v, want ErrCorrupt, permanent", err)
	}
	for _, k := range ks {
		if out := cli(t, srv, "EXISTS", lockKey(k)); out != "0" {
			t.Errorf("%q held after the refused acquire (EXISTS %s)", k, out)
		}
	}
}

// TestMultiRefusedGETNotForeign: a GET the server refuses for another
// reason than the key's type (here an ACL without GET) is returned as
// the server's permission error, a permanent one, by the renewal and the release of
// a set: not reported as a lost key or a foreign value, and nothing is
// changed.
func TestMultiRefusedGETNotForeign(t *testing.T) {
	srv := testserver.StartRedis(t)
	b := open(t, backendtest.RedisClients[0], srv)
	cli(t, srv, "ACL", "SETUSER", "noget", "on", ">pw", "~*", "&*", "+@all", "-get")
	lb, err := redis.New(srv.Client(t, func(o *rueidis.ClientOption) { o.Username, o.Password = "noget", "pw" }), redis.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer lb.Close()
	ctx := context.Background()
	ks := []string{"a0", "a1"}
	g, err := b.AcquireMulti(ctx, driver.MultiRequest{Keys: ks, Owner: rand.Text(), TTL: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	_, err = lb.RenewMulti(ctx, g, time.Minute)
	checkRefused(t, "RenewMulti", err)
	checkRefused(t, "ReleaseMulti", lb.ReleaseMulti(ctx, g))
	for _, k := range ks {
		info, err := b.Inspect(ctx, k)
		if err != nil || !info.Held || info.TTL > g.TTL {
			t.Errorf("%q after the refused renewal and release: %+v, %v; want held, not extended", k, info, err)
		}
	}
}

// checkRefused fails t unless err is the server's refusal for missing
// permissions (redisscript.PermissionDenied), permanent, and no lost key.
func checkRefused(t *testing.T, op string, err error) {
	t.Helper()
	var lk *driver.LostKeyError
	if err == nil || !redisscript.PermissionDenied(err.Error()) || !errors.Is(err, driver.ErrPermanent) ||
		errors.As(err, &lk) || errors.Is(err, redisscript.ErrCorrupt) {
		t.Errorf("%s without GET permission: %v, want the server's permission refusal, permanent, no lost key, not ErrCorrupt", op, err)
	}
}

// TestMultiFirstKeyNamed: with two keys of a set gone, one deleted and
// one holding a foreign value, the renewal and the release name the first
// of them in the set's order, with ErrCorrupt only if that one is
// foreign; the release frees the keys still held either way.
func TestMultiFirstKeyNamed(t *testing.T) {
	srv := testserver.StartRedis(t)
	b := open(t, backendtest.RedisClients[0], srv)
	ctx := context.Background()
	for name, foreignFirst := range map[string]bool{"deleted first": false, "foreign first": true} {
		t.Run(name, func(t *testing.T) {
			ks := []string{name + "0", name + "1", name + "2", name + "3"}
			g, err := b.AcquireMulti(ctx, driver.MultiRequest{Keys: ks, Owner: rand.Text(), TTL: 5 * time.Second})
			if err != nil {
				t.Fatal(err)
			}
			foreign, deleted := ks[1], ks[2]
			if !foreignFirst {
				foreign, deleted = deleted, foreign
			}
			cli(t, srv, "DEL", lockKey(deleted))
			cli(t, srv, "DEL", lockKey(foreign))
			cli(t, srv, "LPUSH", lockKey(foreign), "not ours")
			_, err = b.RenewMulti(ctx, g, g.TTL)
			checkFirst(t, "RenewMulti", err, ks[1], foreignFirst)
			checkFirst(t, "ReleaseMulti", b.ReleaseMulti(ctx, g), ks[1], foreignFirst)
			for _, k := range []string{ks[0], ks[3]} {
				if out := cli(t, srv, "EXISTS", lockKey(k)); out != "0" {
					t.Errorf("%q after the release: EXISTS %s, want freed", k, out)
				}
			}
		})
	}
}

// checkFirst fails t unless err is a LostKeyError naming key, wrapping
// ErrCorrupt if and only if foreign.
func checkFirst(t *testing.T, op string, err error, key string, foreign bool) {
	t.Helper()
	var lk *driver.LostKeyError
	if !errors.As(err, &lk) || lk.Key != key || errors.Is(err, redisscript.ErrCorrupt) != foreign {
		t.Errorf("%s: %v, want a LostKeyError naming %q, ErrCorrupt %v", op, err, key, foreign)
	}
}

// TestMultiCleanupOverMaxmemory: the clean-up release of a set whose
// acquire had an unknown outcome (a MultiGrant without Fences) frees the
// owner's keys on a server over maxmemory (noeviction), as a release
// does, and still remembers the owner, so that its acquire arriving later
// takes nothing. Redis refuses a command that may grow memory only as a
// script's first write: multi_release.lua's SADD of the owner came before
// its DELs, and the whole clean-up failed with OOM, leaving the set held
// by nobody for a TTL.
func TestMultiCleanupOverMaxmemory(t *testing.T) {
	for _, cl := range backendtest.RedisClients {
		t.Run(cl.Name, func(t *testing.T) {
			srv := testserver.StartRedis(t)
			b := open(t, cl, srv)
			ctx := context.Background()
			req := driver.MultiRequest{Keys: []string{"oom0", "oom1", "oom2"}, Owner: rand.Text(), TTL: time.Minute}
			if _, err := b.AcquireMulti(ctx, req); err != nil { // its reply "lost"
				t.Fatal(err)
			}
			cli(t, srv, "CONFIG", "SET", "maxmemory", "1")
			if _, err := b.AcquireMulti(ctx, driver.MultiRequest{Keys: []string{"other"}, Owner: rand.Text(), TTL: time.Minute}); err == nil {
				t.Fatal("AcquireMulti over maxmemory succeeded: the server is not over maxmemory")
			}
			if err := b.ReleaseMulti(ctx, driver.MultiGrant{Keys: req.Keys, Owner: req.Owner}); err != nil {
				t.Errorf("clean-up release over maxmemory: %v, want nil", err)
			}
			for _, k := range req.Keys {
				if out := cli(t, srv, "EXISTS", lockKey(k)); out != "0" {
					t.Errorf("%q after the clean-up: EXISTS %s, want freed", k, out)
				}
			}
			cli(t, srv, "CONFIG", "SET", "maxmemory", "0")
			if _, err := b.AcquireMulti(ctx, req); err == nil || !strings.Contains(err.Error(), "FENCEDLOCK_ABANDONED") {
				t.Errorf("the owner's acquire after its clean-up: %v, want FENCEDLOCK_ABANDONED", err)
			}
			for _, k := range req.Keys {
				if out := cli(t, srv, "EXISTS", lockKey(k)); out != "0" {
					t.Errorf("%q after the abandoned acquire: EXISTS %s, want free", k, out)
				}
			}
		})
	}
}

// TestMultiAcquireForeignNamed: a set's acquire that finds a key of
// another type, in a lock or in a fence counter, fails with a permanent
// ErrCorrupt error that names that key (of up to MaxMultiKeys), as it did
// for a lock without a TTL, and takes nothing. GET's WRONGTYPE used to
// abort the script with an error naming no key.
func TestMultiAcquireForeignNamed(t *testing.T) {
	srv := testserver.StartRedis(t)
	ctx := context.Background()
	for _, cl := range backendtest.RedisClients {
		b := open(t, cl, srv)
		for name, suffix := range map[string]string{"lock": "", "fence counter": redisnames.FenceSuffix} {
			t.Run(cl.Name+"/"+name, func(t *testing.T) {
				ks := []string{cl.Name + name + "0", cl.Name + name + "1", cl.Name + name + "2"}
				foreign := lockKey(ks[1]) + suffix
				cli(t, srv, "LPUSH", foreign, "not ours")
				_, err := b.AcquireMulti(ctx, driver.MultiRequest{Keys: ks, Owner: rand.Text(), TTL: 5 * time.Second})
				if !errors.Is(err, redisscript.ErrCorrupt) || !errors.Is(err, driver.ErrPermanent) || err == nil || !strings.Contains(err.Error(), foreign) {
					t.Errorf("AcquireMulti with %s a list: %v, want a permanent ErrCorrupt naming it", foreign, err)
				}
				for _, k := range []string{ks[0], ks[2]} {
					if out := cli(t, srv, "EXISTS", lockKey(k), lockKey(k)+redisnames.FenceSuffix); out != "0" {
						t.Errorf("%q after the refused set: EXISTS %s, want untouched", k, out)
					}
				}
			})
		}
	}
}
