package shapes_test

import (
	"context"
	"errors"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/fencedlock/fencedlock"
	"github.com/fencedlock/fencedlock/backend/redis"
	"github.com/fencedlock/fencedlock/driver"
	"github.com/fencedlock/fencedlock/fencing"
	"github.com/fencedlock/fencedlock/internal/testserver"
	"github.com/redis/rueidis"
)

func dbsize(t *testing.T, c rueidis.Client) int64 {
	t.Helper()
	n, err := do(c, "DBSIZE").AsInt64()
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// TestHostileInput feeds the backend, on a real redis-server, keys of
// another type, fence counters overwritten with garbage or with a smaller
// number, keys of every awkward size and byte, and out-of-range TTLs. Each
// is either handled correctly or refused with a clear error wrapping a
// sentinel, and nothing on the server is overwritten.
func TestHostileInput(t *testing.T) {
	srv := testserver.StartRedis(t)
	c := srv.Client(t, nil)
	b := newBackend(t, c, redis.Options{})
	l := newLocker(t, b, fencedlock.Options{TTL: 5 * time.Second})
	ctx := ctxT(t, 60*time.Second)

	t.Run("lock key of another type", func(t *testing.T) {
		lk := b.LockKey("typed")
		do(c, "RPUSH", lk, "precious")
		_, err := l.TryAcquire(ctx, "typed")
		if !errors.Is(err, redis.ErrCorrupt) || !strings.Contains(err.Error(), "WRONGTYPE") {
			t.Fatalf("acquire on a list: %v, want ErrCorrupt (WRONGTYPE)", err)
		}
		if _, err := b.Inspect(ctx, "typed"); !errors.Is(err, redis.ErrCorrupt) {
			t.Fatalf("inspect on a list: %v", err)
		}
		if v, _ := do(c, "LRANGE", lk, "0", "-1").AsStrSlice(); len(v) != 1 || v[0] != "precious" {
			t.Fatalf("list changed: %q", v)
		}
		if n, _ := do(c, "EXISTS", b.FenceKey("typed")).AsInt64(); n != 0 {
			t.Fatal("a fence counter was created for a refused acquire")
		}
	})

	t.Run("fence counter garbage", func(t *testing.T) {
		for _, bad := range []struct{ name, cmd, val string }{
			{"text", "SET", "abc"},
			{"negative", "SET", "-5"},
			{"leading zero", "SET", "007"},
			{"above 2^53 (beyond exact Lua numbers)", "SET", "9007199254740993"},
			{"a hash", "HSET", "f"},
		} {
			key := "garbage/" + bad.name
			fk := b.FenceKey(key)
			if bad.cmd == "HSET" {
				do(c, "HSET", fk, bad.val, "v")
			} else {
				do(c, "SET", fk, bad.val)
			}
			_, err := l.TryAcquire(ctx, key)
			if !errors.Is(err, redis.ErrCorrupt) {
				t.Fatalf("%s: acquire %v, want ErrCorrupt", bad.name, err)
			}
			if n, _ := do(c, "EXISTS", b.LockKey(key)).AsInt64(); n != 0 {
				t.Fatalf("%s: lock taken despite a corrupt counter", bad.name)
			}
			if bad.cmd == "SET" {
				if v, _ := do(c, "GET", fk).ToString(); v != bad.val {
					t.Fatalf("%s: counter overwritten with %q", bad.name, v)
				}
			}
			t.Logf("%s: %v", bad.name, err)
		}
	})

	t.Run("fence counter set smaller", func(t *testing.T) {
		// The backend cannot tell a counter set back by hand (or lost in a
		// failover) from a genuine one: fences go back. The guard's rule is
		// what keeps the resource safe.
		var guard fencing.Guard
		var last *fencedlock.Lease
		for range 5 {
			ls, err := l.TryAcquire(ctx, "rewound")
			if err != nil {
				t.Fatal(err)
			}
			if err := guard.Do(ls.Fence(), ls.Holder(), nil); err != nil {
				t.Fatalf("write with fence %d: %v", ls.Fence(), err)
			}
			if err := ls.Release(ctx); err != nil {
				t.Fatal(err)
			}
			last = ls
		}
		if last.Fence() != 5 {
			t.Fatalf("fence %d after 5 grants", last.Fence())
		}
		do(c, "SET", b.FenceKey("rewound"), "2")
		ls, err := l.TryAcquire(ctx, "rewound")
		if err != nil {
			t.Fatal(err)
		}
		if ls.Fence() != 3 {
			t.Fatalf("fence after rewinding the counter to 2: %d, want 3 (the documented behaviour)", ls.Fence())
		}
		written := false
		err = guard.Do(ls.Fence(), ls.Holder(), func() error { written = true; return nil })
		if !errors.Is(err, fencing.ErrStale) || written {
			t.Fatalf("guard accepted fence 3 after 5: %v (written %v)", err, written)
		}
		ls.Release(ctx)
		for ls.Fence() <= 5 { // grants 4, 5: rejected; 6: accepted
			if ls, err = l.TryAcquire(ctx, "rewound"); err != nil {
				t.Fatal(err)
			}
			err = guard.Do(ls.Fence(), ls.Holder(), nil)
			if (ls.Fence() <= 5) != errors.Is(err, fencing.ErrStale) {
				t.Fatalf("fence %d after 5: guard said %v", ls.Fence(), err)
			}
			ls.Release(ctx)
		}
	})

	t.Run("key sizes", func(t *testing.T) {
		before := dbsize(t, c)
		for _, n := range []int{0, 1025, 512 << 10, 1<<20 + 1} {
			key := strings.Repeat("k", n)
			_, err := l.TryAcquire(ctx, key)
			if !errors.Is(err, driver.ErrInvalid) {
				t.Fatalf("key of %d bytes: %v, want ErrInvalid", n, err)
			}
			if _, err := b.Inspect(ctx, key); !errors.Is(err, driver.ErrInvalid) {
				t.Fatalf("inspect key of %d bytes: %v, want ErrInvalid", n, err)
			}
			if n > 0 && !strings.Contains(err.Error(), "MaxKeyLen") {
				t.Fatalf("error does not say why: %v", err)
			}
		}
		if after := dbsize(t, c); after != before {
			t.Fatalf("refused keys changed the server: %d keys, was %d", after, before)
		}
		for _, n := range []int{1, driver.MaxKeyLen} {
			ls, err := l.TryAcquire(ctx, strings.Repeat("s", n))
			if err != nil {
				t.Fatalf("key of %d bytes: %v", n, err)
			}
			ls.Release(ctx)
		}
	})

	t.Run("binary keys", func(t *testing.T) {
		// Its own Locker and backend (closed in cleanup: Locker.Close
		// does not close it).
		b := newBackend(t, c, redis.Options{})
		l := mustLocker(t, b, fencedlock.Options{TTL: 5 * time.Second})
		defer l.Close()
		keys := []string{"\x00", "\xff\xfe", "a{b}c", "}{", "{", "%7B", "%", "%25", "\r\nPING\r\n", "with space", "ключ", "\x00{\x00}"}
		for _, k := range keys {
			ls, err := l.TryAcquire(ctx, k)
			if err != nil {
				t.Fatalf("%q: %v", k, err)
			}
			if ls.Fence() != 1 {
				t.Fatalf("%q: fence %d, want 1: keys collide", k, ls.Fence())
			}
			if n, _ := do(c, "EXISTS", b.LockKey(k)).AsInt64(); n != 1 {
				t.Fatalf("%q: lock key %q not on the server", k, b.LockKey(k))
			}
			if s1, s2 := slotOf(c, b.LockKey(k)), slotOf(c, b.FenceKey(k)); s1 != s2 {
				t.Fatalf("%q: lock and fence keys in slots %d and %d", k, s1, s2)
			}
		}
		for _, k := range keys {
			info, err := b.Inspect(ctx, k)
			if err != nil || !info.Held || info.Fence != 1 {
				t.Fatalf("%q: %+v, %v", k, info, err)
			}
		}
		l.Close() // releases them all
		for _, k := range keys {
			if n, _ := do(c, "EXISTS", b.LockKey(k)).AsInt64(); n != 0 {
				t.Fatalf("%q still locked after Close", k)
			}
		}
	})

	t.Run("TTLs", func(t *testing.T) {
		before := dbsize(t, c)
		lb := newBackend(t, c, redis.Options{})
		valid := mustLocker(t, lb, fencedlock.Options{})
		defer valid.Close()
		for _, ttl := range []time.Duration{time.Millisecond, driver.MinTTL - 1, -time.Second, math.MinInt64, driver.MaxTTL + 1, math.MaxInt64} {
			// Refused by New, and as a per-call option.
			if lt, err := fencedlock.New(lb, fencedlock.Options{TTL: ttl}); lt != nil || !errors.Is(err, driver.ErrInvalid) || !strings.Contains(err.Error(), "TTL") {
				t.Fatalf("New with TTL %v: %v, want ErrInvalid naming the TTL", ttl, err)
			}
			_, err := valid.TryAcquire(ctx, "ttl", fencedlock.WithTTL(ttl))
			if !errors.Is(err, driver.ErrInvalid) || !strings.Contains(err.Error(), "TTL") {
				t.Fatalf("WithTTL(%v): %v, want ErrInvalid naming the TTL", ttl, err)
			}
		}
		if after := dbsize(t, c); after != before {
			t.Fatalf("refused TTLs changed the server")
		}
		// Zero is not invalid: it means the documented default.
		lt := mustLocker(t, newBackend(t, c, redis.Options{}), fencedlock.Options{})
		defer lt.Close()
		ls, err := lt.TryAcquire(ctx, "ttl")
		if err != nil {
			t.Fatal(err)
		}
		pttl, _ := do(c, "PTTL", b.LockKey("ttl")).AsInt64()
		if pttl <= 0 || time.Duration(pttl)*time.Millisecond > fencedlock.DefaultTTL {
			t.Fatalf("TTL 0 gave a server TTL of %dms, want the default %v", pttl, fencedlock.DefaultTTL)
		}
		ls.Release(ctx)
	})
}

func slotOf(c rueidis.Client, key string) uint16 {
	cmd := c.B().Get().Key(key).Build()
	return cmd.Slot()
}

// FuzzRedisKeys drives keys, TTLs and key prefixes through the Locker and
// the Redis backend (on miniredis, for speed). Every input is either
// refused with ErrInvalid, leaving the server empty, or yields a lease
// whose two keys carry the prefix, share a hash slot and are the only keys
// written; releasing it leaves only the fence counter.
func FuzzRedisKeys(f *testing.F) {
	f.Add("orders", int64(0), "")
	f.Add("", int64(100), "p:")
	f.Add("{", int64(50), "")
	f.Add("}{%", int64(49), "x")
	f.Add("\x00\xff", int64(-1), "")
	f.Add(strings.Repeat("a", 1025), int64(1000), "")
	f.Add("k", int64(86400000), "{bad")
	f.Add("k", int64(86400001), "")
	f.Add("k", int64(math.MaxInt64/int64(time.Millisecond)), strings.Repeat("p", 257))
	m := miniredis.RunT(f)
	c, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: []string{m.Addr()}, DisableCache: true, ForceSingleClient: true})
	if err != nil {
		f.Fatal(err)
	}
	f.Cleanup(c.Close)
	f.Fuzz(func(t *testing.T, key string, ttlMs int64, prefix string) {
		m.FlushAll()
		b, err := redis.New(c, redis.Options{KeyPrefix: prefix})
		if err != nil {
			if !errors.Is(err, driver.ErrInvalid) {
				t.Fatalf("New(prefix %q): %v, want ErrInvalid", prefix, err)
			}
			return
		}
		// The TTL is a per-call option: refused by TryAcquire exactly as
		// New refuses it in Options.
		l := mustLocker(t, b, fencedlock.Options{})
		defer l.Close()
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		ls, err := l.TryAcquire(ctx, key, fencedlock.WithTTL(time.Duration(ttlMs)*time.Millisecond))
		lk, fk := b.LockKey(key), b.FenceKey(key)
		if errors.Is(err, fencedlock.ErrLateGrant) {
			// A short TTL on a loaded machine: the grant came back after
			// its local deadline and the Locker released it (CI, 117ms TTL,
			// reply after 174ms). The machine's speed, not the key's
			// handling; what the key left behind is still checked: only
			// the fence counter.
			if got := m.Keys(); len(got) != 1 || got[0] != fk {
				t.Fatalf("key %q ttl %dms: late grant left %q, want only %q", key, ttlMs, got, fk)
			}
			return
		}
		if err != nil {
			if !errors.Is(err, driver.ErrInvalid) {
				t.Fatalf("key %q ttl %dms: %v", key, ttlMs, err)
			}
			if keys := m.Keys(); len(keys) != 0 {
				t.Fatalf("refused input wrote %q", keys)
			}
			return
		}
		if got := m.Keys(); len(got) != 2 || !(got[0] == lk && got[1] == fk || got[0] == fk && got[1] == lk) {
			t.Fatalf("keys on the server %q, want %q and %q", got, lk, fk)
		}
		if !strings.HasPrefix(lk, b.Options().KeyPrefix) || slotOf(c, lk) != slotOf(c, fk) {
			t.Fatalf("lock key %q, fence key %q: prefix or slot differ", lk, fk)
		}
		if ls.Fence() != 1 {
			t.Fatalf("fence %d on an empty server", ls.Fence())
		}
		if err := ls.Release(ctx); err != nil {
			t.Fatal(err)
		}
		if got := m.Keys(); len(got) != 1 || got[0] != fk {
			t.Fatalf("after release: %q, want only %q", got, fk)
		}
	})
}
