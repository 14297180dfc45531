package redis

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/fencedlock/fencedlock/driver"
	"github.com/fencedlock/fencedlock/internal/redisscript"
	"github.com/fencedlock/fencedlock/internal/testserver"
	"github.com/redis/rueidis"
)

// TestFenceCounterWithTTL: a fence counter given a TTL by hand would
// expire and restart the fences of its name at 1. The acquire refuses it
// with ErrCorrupt, names the problem, and changes nothing: no lock, the
// counter and its TTL as they were.
func TestFenceCounterWithTTL(t *testing.T) {
	b, c := startBackend(t)
	ctx := context.Background()
	g := acquire(t, b, "ttl", time.Minute)
	if err := b.Release(ctx, g); err != nil {
		t.Fatal(err)
	}
	fk := b.FenceKey("ttl")
	do(t, c, "PEXPIRE", fk, "600000")
	_, err := b.Acquire(ctx, driver.AcquireRequest{Key: "ttl", Owner: owner(), TTL: time.Minute})
	if !errors.Is(err, ErrCorrupt) || !strings.Contains(err.Error(), "TTL") {
		t.Fatalf("acquire with a counter that expires: %v, want ErrCorrupt naming the TTL", err)
	}
	t.Logf("counter with a TTL: %v", err)
	if n := num(t, c, "EXISTS", b.LockKey("ttl")); n != 0 {
		t.Fatal("lock taken despite the counter's TTL")
	}
	if v := str(t, c, "GET", fk); v != g.Fence.String() {
		t.Fatalf("counter changed to %s", v)
	}
	if pttl := num(t, c, "PTTL", fk); pttl <= 0 {
		t.Fatalf("counter's TTL changed: %d", pttl)
	}
	// Once the operator removed the TTL (PERSIST), fences continue.
	do(t, c, "PERSIST", fk)
	if g2 := acquire(t, b, "ttl", time.Minute); g2.Fence != g.Fence+1 {
		t.Fatalf("after PERSIST: fence %d, want %d", g2.Fence, g.Fence+1)
	}
}

// logRecorder is a slog.Handler keeping the messages and attributes it
// receives, for tests.
type logRecorder struct {
	mu   *sync.Mutex
	recs *[]string
}

func newLogRecorder() (*slog.Logger, func() []string) {
	h := logRecorder{mu: new(sync.Mutex), recs: new([]string)}
	return slog.New(h), func() []string {
		h.mu.Lock()
		defer h.mu.Unlock()
		return append([]string(nil), *h.recs...)
	}
}

func (h logRecorder) Enabled(context.Context, slog.Level) bool { return true }
func (h logRecorder) WithAttrs([]slog.Attr) slog.Handler       { return h }
func (h logRecorder) WithGroup(string) slog.Handler            { return h }
func (h logRecorder) Handle(_ context.Context, r slog.Record) error {
	line := r.Level.String() + " " + r.Message
	r.Attrs(func(a slog.Attr) bool {
		line += " " + a.String()
		return true
	})
	h.mu.Lock()
	*h.recs = append(*h.recs, line)
	h.mu.Unlock()
	return nil
}

// TestEvictionPolicy: New reads maxmemory-policy (INFO memory) and
// refuses every evicting policy with ErrEvictionPolicy, unless
// AllowEvictingPolicy, which logs a warning instead. noeviction passes
// silently.
func TestEvictionPolicy(t *testing.T) {
	srv := testserver.StartRedis(t)
	c := srv.Client(t, nil)
	for _, policy := range []string{"noeviction", "allkeys-lru", "allkeys-lfu", "allkeys-random", "volatile-lru", "volatile-lfu", "volatile-random", "volatile-ttl"} {
		do(t, c, "CONFIG", "SET", "maxmemory-policy", policy)
		log, records := newLogRecorder()
		b, err := New(c, Options{Logger: log})
		if policy == "noeviction" {
			if err != nil || len(records()) != 0 {
				t.Fatalf("noeviction: %v %v", err, records())
			}
			b.Close()
			continue
		}
		if !errors.Is(err, ErrEvictionPolicy) || !strings.Contains(err.Error(), policy) {
			if b != nil {
				b.Close()
			}
			t.Fatalf("%s: New: %v, want ErrEvictionPolicy naming the policy", policy, err)
		}
		t.Logf("%s: %v", policy, err)
		b, err = New(c, Options{Logger: log, AllowEvictingPolicy: true})
		if err != nil {
			t.Fatalf("%s with AllowEvictingPolicy: %v", policy, err)
		}
		b.Close()
		if recs := records(); len(recs) != 1 || !strings.HasPrefix(recs[0], "WARN") || !strings.Contains(recs[0], policy) {
			t.Fatalf("%s with AllowEvictingPolicy: logged %q, want one warning", policy, recs)
		}
	}
}

// TestEvictionPolicyUnreadable: a user without INFO (a least-privilege
// ACL) cannot read the policy: New works and logs a warning saying so.
func TestEvictionPolicyUnreadable(t *testing.T) {
	srv := testserver.StartRedis(t, testserver.WithConfig("maxmemory-policy allkeys-lru",
		"user locker on >pw ~* &* +@all -info", "user default on nopass ~* &* +@all"))
	c := srv.Client(t, func(o *rueidis.ClientOption) { o.Username, o.Password = "locker", "pw" })
	log, records := newLogRecorder()
	b, err := New(c, Options{Logger: log})
	if err != nil {
		t.Fatalf("New without INFO: %v", err)
	}
	b.Close()
	if recs := records(); len(recs) != 1 || !strings.Contains(recs[0], "maxmemory-policy") || !strings.HasPrefix(recs[0], "WARN") {
		t.Fatalf("logged %q, want one warning about the unreadable policy", recs)
	}
	t.Logf("%s", records()[0])
}

// infoInt reads an integer field of INFO section.
func infoInt(t testing.TB, c rueidis.Client, section, field string) int64 {
	t.Helper()
	v, err := strconv.ParseInt(redisscript.InfoField(str(t, c, "INFO", section), field), 10, 64)
	if err != nil {
		t.Fatalf("INFO %s %s: %v", section, field, err)
	}
	return v
}

// TestFenceCounterGrowth measures what a lock name leaves behind on a real
// server after it was released: its fence counter, forever. The figures
// are in the package documentation ("Memory").
func TestFenceCounterGrowth(t *testing.T) {
	b, c := startBackend(t)
	ctx := context.Background()
	const names = 20000
	before := infoInt(t, c, "memory", "used_memory")
	for i := 0; i < names; i++ {
		g := acquire(t, b, fmt.Sprintf("orders-%06d", i), time.Minute)
		if err := b.Release(ctx, g); err != nil {
			t.Fatal(err)
		}
	}
	after := infoInt(t, c, "memory", "used_memory")
	if n := num(t, c, "DBSIZE"); n != names {
		t.Fatalf("%d keys after %d names were released, want %d counters", n, names, names)
	}
	if n := num(t, c, "EXISTS", b.LockKey("orders-000000")); n != 0 {
		t.Fatal("lock key left behind")
	}
	usage := num(t, c, "MEMORY", "USAGE", b.FenceKey("orders-000000"))
	perName := float64(after-before) / names
	if usage <= 0 || perName <= 0 {
		t.Fatalf("MEMORY USAGE %d, used_memory %d -> %d", usage, before, after)
	}
	t.Logf("%d names acquired and released: %d counters left; used_memory %d -> %d (+%d B, %.1f B per name); "+
		"MEMORY USAGE of counter %q: %d B (key of %d bytes)",
		names, names, before, after, after-before, perName, b.FenceKey("orders-000000"), usage, len(b.FenceKey("orders-000000")))
	// Retiring the names gives the memory back.
	for i := 0; i < names; i++ {
		if last, err := b.RetireFence(ctx, fmt.Sprintf("orders-%06d", i)); err != nil || last != 1 {
			t.Fatalf("retire %d: %d %v", i, last, err)
		}
	}
	retired := infoInt(t, c, "memory", "used_memory")
	if n := num(t, c, "DBSIZE"); n != 0 || retired >= after {
		t.Fatalf("after retiring every name: %d keys, used_memory %d", n, retired)
	}
	t.Logf("after RetireFence of every name: 0 keys, used_memory %d (%+d B from before the names)", retired, retired-before)
}

// TestRetireFence: RetireFence deletes the counter of a free name and
// returns its last fence; it refuses a held name and a counter fencedlock
// did not write, changing nothing; restoring the counter (SET NX) before
// reusing the name keeps its fences monotonic. By hand too, with redis-cli
// --eval as the script's header shows.
func TestRetireFence(t *testing.T) {
	srv := testserver.StartRedis(t)
	b, c := newBackend(t, srv, Options{})
	ctx := context.Background()
	g := acquireNth(t, b, "old", 3)
	fk := b.FenceKey("old")
	var held *driver.HeldError
	if _, err := b.RetireFence(ctx, "old"); !errors.As(err, &held) || held.RetryAfter <= 0 {
		t.Fatalf("retire of a held name: %v, want HeldError", err)
	}
	if v := str(t, c, "GET", fk); v != "3" {
		t.Fatalf("counter after refused retire: %q", v)
	}
	if err := b.Release(ctx, g); err != nil {
		t.Fatal(err)
	}
	last, err := b.RetireFence(ctx, "old")
	if err != nil || last != 3 || num(t, c, "EXISTS", fk) != 0 {
		t.Fatalf("retire: %d %v", last, err)
	}
	if last, err := b.RetireFence(ctx, "old"); err != nil || last != 0 {
		t.Fatalf("retire again: %d %v", last, err)
	}
	do(t, c, "SET", fk, last.String(), "NX")
	if g := acquire(t, b, "old", time.Minute); g.Fence != 4 {
		t.Fatalf("after restoring the counter: fence %d, want 4", g.Fence)
	}
	do(t, c, "SET", b.FenceKey("bad"), "abc")
	if _, err := b.RetireFence(ctx, "bad"); !errors.Is(err, ErrCorrupt) || str(t, c, "GET", b.FenceKey("bad")) != "abc" {
		t.Fatalf("retire of a corrupt counter: %v", err)
	}
	g2 := acquire(t, b, "hand", time.Minute)
	if err := b.Release(ctx, g2); err != nil {
		t.Fatal(err)
	}
	if out := evalByHand(t, srv, "retire.lua", b.LockKey("hand"), b.FenceKey("hand")); out != "1" || num(t, c, "EXISTS", b.FenceKey("hand")) != 0 {
		t.Fatalf("retire.lua by hand printed %q", out)
	}
}

// fillUntil writes 1 KiB values to new keys (with a TTL if volatile) until
// stop returns true, a write fails, or 40 times maxmemory was written. It
// returns how many writes succeeded and the error that ended it, if any.
func fillUntil(t testing.TB, c rueidis.Client, maxmemory int64, volatile bool, stop func() bool) (int, error) {
	t.Helper()
	val := strings.Repeat("x", 1024)
	limit := int(40 * maxmemory / 1024)
	ctx := context.Background()
	for i := 0; i < limit; i++ {
		cmd := c.B().Set().Key(fmt.Sprintf("filler:%d", i)).Value(val).Build()
		if volatile {
			cmd = c.B().Set().Key(fmt.Sprintf("filler:%d", i)).Value(val).Ex(time.Hour).Build()
		}
		if err := c.Do(ctx, cmd).Error(); err != nil {
			return i, err
		}
		if i%64 == 0 && stop() {
			return i + 1, nil
		}
	}
	return limit, nil
}

// exists reports whether key exists without touching its LRU clock
// (OBJECT does not count as an access), so the check does not keep the
// key from being evicted.
func exists(t testing.TB, c rueidis.Client, key string) bool {
	t.Helper()
	err := c.Do(context.Background(), c.B().ObjectEncoding().Key(key).Build()).Error()
	if err != nil && !rueidis.IsRedisNil(err) {
		t.Fatalf("OBJECT ENCODING %s: %v", key, err)
	}
	return err == nil
}

// TestEvictionBehaviour shows on a real server with a small maxmemory why
// New refuses evicting policies: a lock held for a minute is taken by a
// second owner while the first still runs. Under allkeys-lru the fence
// counter goes too and the second holder's fence restarts at 1; under
// volatile-lru the lock keys are the only keys with a TTL, so they are the
// first evicted even when no data key has a TTL (the counter, without
// TTL, stays: fences remain monotonic); under noeviction writes fail with
// OOM and the lock and counter stay, and release still works.
func TestEvictionBehaviour(t *testing.T) {
	for _, policy := range []string{"allkeys-lru", "volatile-lru", "noeviction"} {
		t.Run(policy, func(t *testing.T) {
			srv := testserver.StartRedis(t, testserver.WithConfig("maxmemory-policy "+policy))
			b, c := newBackend(t, srv, Options{AllowEvictingPolicy: true})
			ctx := context.Background()
			first := acquireNth(t, b, "victim", 6)
			maxmemory := infoInt(t, c, "memory", "used_memory") + 1<<20
			do(t, c, "CONFIG", "SET", "maxmemory", strconv.FormatInt(maxmemory, 10))
			lk, fk := b.LockKey("victim"), b.FenceKey("victim")
			n, err := fillUntil(t, c, maxmemory, false, func() bool { return !exists(t, c, lk) && (policy != "allkeys-lru" || !exists(t, c, fk)) })
			evicted := infoInt(t, c, "stats", "evicted_keys")
			lockLeft, counterLeft := exists(t, c, lk), exists(t, c, fk)
			t.Logf("%s, maxmemory %d: %d KiB written (ended by: %v); evicted_keys %d; lock key present %v, counter present %v",
				policy, maxmemory, n, err, evicted, lockLeft, counterLeft)
			if policy == "volatile-lru" && err != nil {
				// The fill stopped at OOM, with nothing left to evict: the
				// server refuses every write that needs memory (a free lock
				// too; see TestAcquireAtOOM) until some is freed, as an
				// application would by deleting data.
				for i := 0; i < min(n, 256); i++ {
					do(t, c, "DEL", fmt.Sprintf("filler:%d", i))
				}
			}
			second, aerr := b.Acquire(ctx, driver.AcquireRequest{Key: "victim", Owner: owner(), TTL: time.Minute})
			switch policy {
			case "allkeys-lru":
				if lockLeft || counterLeft || aerr != nil || second.Fence >= first.Fence {
					t.Fatalf("allkeys-lru: lock %v counter %v; second acquire %+v %v", lockLeft, counterLeft, second.Fence, aerr)
				}
				t.Logf("allkeys-lru: the first holder (fence %d, lease of 1 min) still runs; a second owner acquired with fence %d", first.Fence, second.Fence)
			case "volatile-lru":
				if lockLeft || !counterLeft || aerr != nil || second.Fence != first.Fence+1 || err == nil || !strings.Contains(err.Error(), "OOM") {
					t.Fatalf("volatile-lru: lock %v counter %v fill ended by %v; second acquire %+v %v", lockLeft, counterLeft, err, second.Fence, aerr)
				}
				t.Logf("volatile-lru: the lock key was evicted (the only key with a TTL) then writes failed with OOM; the first holder (fence %d) still runs; a second owner acquired with fence %d", first.Fence, second.Fence)
			case "noeviction":
				if !lockLeft || !counterLeft || evicted != 0 || err == nil || !strings.Contains(err.Error(), "OOM") {
					t.Fatalf("noeviction: lock %v counter %v evicted %d, fill ended by %v", lockLeft, counterLeft, evicted, err)
				}
				var held *driver.HeldError
				if !errors.As(aerr, &held) {
					t.Fatalf("noeviction at OOM: second acquire of the held lock: %v, want HeldError", aerr)
				}
				// A free lock: granted (fence 1) while memory allows, or
				// refused with OOM with nothing written. Never a lost key.
				og, oerr := b.Acquire(ctx, driver.AcquireRequest{Key: "other", Owner: owner(), TTL: time.Minute})
				switch {
				case oerr == nil && og.Fence == 1:
				case oerr != nil && strings.Contains(oerr.Error(), "OOM") && !exists(t, c, b.LockKey("other")) && !exists(t, c, b.FenceKey("other")):
				default:
					t.Fatalf("noeviction at OOM: acquire of a free lock: %+v %v", og.Fence, oerr)
				}
				if err := b.Release(ctx, first); err != nil {
					t.Fatalf("noeviction at OOM: release: %v", err)
				}
				if exists(t, c, lk) || !exists(t, c, fk) {
					t.Fatal("noeviction at OOM: release did not delete the lock key, or the counter went")
				}
				t.Logf("noeviction at OOM: nothing evicted; acquire of a free lock: fence %d, err %v; release works", og.Fence, oerr)
			}
		})
	}
}

// acquireNth acquires key n times for a minute, releasing each grant
// before the next, and returns the last grant, held: its fence is the
// n-th of a new key.
func acquireNth(t testing.TB, b *Backend, key string, n int) driver.Grant {
	t.Helper()
	g := acquire(t, b, key, time.Minute)
	for range n - 1 {
		if err := b.Release(context.Background(), g); err != nil {
			t.Fatal(err)
		}
		g = acquire(t, b, key, time.Minute)
	}
	return g
}
