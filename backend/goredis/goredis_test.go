package goredis

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"strconv"
	"strings"
	"testing"
	"time"

	rbackend "github.com/fencedlock/fencedlock/backend/redis"
	"github.com/fencedlock/fencedlock/driver"
	"github.com/fencedlock/fencedlock/fencing"
	"github.com/fencedlock/fencedlock/internal/rediscore"
	"github.com/fencedlock/fencedlock/internal/rediscore/rediscoretest"
	"github.com/fencedlock/fencedlock/internal/redisnames"
	"github.com/fencedlock/fencedlock/internal/redisscript"
	"github.com/fencedlock/fencedlock/internal/testserver"
	"github.com/redis/go-redis/v9"
)

func owner() string {
	b := make([]byte, 16)
	rand.Read(b)
	return hex.EncodeToString(b)
}

func ctxT(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// TestSharedWithRueidisBackend: the two Redis backends share a store: the
// same key layout (escaping included), the same scripts and fences, and
// the same error values.
func TestSharedWithRueidisBackend(t *testing.T) {
	srv := testserver.StartRedis(t)
	g, _ := newBackend(t, srv, Options{KeyPrefix: "app:"})
	r, err := rbackend.New(srv.Client(t, nil), rbackend.Options{KeyPrefix: "app:"})
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	ctx := ctxT(t)
	for _, key := range []string{"orders", "a{b}%c", "x}{y"} {
		if g.LockKey(key) != r.LockKey(key) || g.FenceKey(key) != r.FenceKey(key) || g.Channel(key) != r.Channel(key) {
			t.Fatalf("%q: keys %q %q %q, backend/redis %q %q %q", key, g.LockKey(key), g.FenceKey(key), g.Channel(key), r.LockKey(key), r.FenceKey(key), r.Channel(key))
		}
		gr, err := r.Acquire(ctx, driver.AcquireRequest{Key: key, Owner: owner(), TTL: time.Minute})
		if err != nil {
			t.Fatal(err)
		}
		info, err := g.Inspect(ctx, key)
		if err != nil || !info.Held || info.Fence != gr.Fence || info.Holder != driver.HolderID(gr.Owner) {
			t.Fatalf("goredis Inspect of a lock taken by backend/redis: %+v, %v", info, err)
		}
		var held *driver.HeldError
		if _, err := g.Acquire(ctx, driver.AcquireRequest{Key: key, Owner: owner(), TTL: time.Minute}); !errors.As(err, &held) {
			t.Fatalf("goredis Acquire of a held key: %v", err)
		}
		if err := g.Release(ctx, gr); err != nil {
			t.Fatalf("goredis Release of backend/redis's grant: %v", err)
		}
		g2, err := g.Acquire(ctx, driver.AcquireRequest{Key: key, Owner: owner(), TTL: time.Minute})
		if err != nil || g2.Fence != gr.Fence+1 {
			t.Fatalf("goredis Acquire after: %+v, %v; want fence %d", g2, err, gr.Fence+1)
		}
	}
	for _, p := range [][2]error{{ErrCorrupt, rbackend.ErrCorrupt}, {ErrReplication, rbackend.ErrReplication},
		{ErrFenceExhausted, rbackend.ErrFenceExhausted}, {ErrEvictionPolicy, rbackend.ErrEvictionPolicy}} {
		if p[0] != p[1] {
			t.Errorf("%v is not backend/redis's variable", p[0])
		}
	}
	if MaxFence != rbackend.MaxFence || DefaultKeyPrefix != rbackend.DefaultKeyPrefix || FenceField != rbackend.FenceField {
		t.Error("constants differ from backend/redis")
	}
}

// TestErrors: WRONGTYPE and a corrupt or exhausted counter are permanent
// errors wrapping ErrCorrupt/ErrFenceExhausted; nothing is changed.
func TestErrors(t *testing.T) {
	srv := testserver.StartRedis(t)
	b, c := newBackend(t, srv, Options{})
	ctx := ctxT(t)
	req := func(key string) driver.AcquireRequest {
		return driver.AcquireRequest{Key: key, Owner: owner(), TTL: time.Minute}
	}
	c.HSet(ctx, b.LockKey("wrongtype"), "f", "v")
	_, err := b.Acquire(ctx, req("wrongtype"))
	if !errors.Is(err, ErrCorrupt) || !errors.Is(err, driver.ErrPermanent) {
		t.Fatalf("acquire of a hash: %v, want ErrCorrupt and ErrPermanent", err)
	}
	c.Set(ctx, b.FenceKey("corrupt"), "01", 0)
	if _, err := b.Acquire(ctx, req("corrupt")); !errors.Is(err, ErrCorrupt) || !errors.Is(err, driver.ErrPermanent) {
		t.Fatalf("acquire with counter 01: %v", err)
	}
	if n := c.Exists(ctx, b.LockKey("corrupt")).Val(); n != 0 {
		t.Fatal("lock written despite a corrupt counter")
	}
	c.Set(ctx, b.FenceKey("spent"), MaxFence.String(), 0)
	if _, err := b.Acquire(ctx, req("spent")); !errors.Is(err, ErrFenceExhausted) || !errors.Is(err, driver.ErrPermanent) {
		t.Fatalf("acquire at MaxFence: %v", err)
	}
	c.Set(ctx, b.FenceKey("inspect"), "x", 0)
	if _, err := b.Inspect(ctx, "inspect"); !errors.Is(err, ErrCorrupt) {
		t.Fatalf("inspect of a corrupt counter: %v", err)
	}
	if _, err := b.Renew(ctx, driver.Grant{Key: "free", Owner: owner()}, time.Second); !isNotHeld(err) {
		t.Fatalf("renew of a free key: %v", err)
	}
	if err := b.Release(ctx, driver.Grant{Key: "free", Owner: owner(), Fence: 1}); !isNotHeld(err) {
		t.Fatalf("release of a free key: %v", err)
	}
	cctx, cancel := context.WithCancel(ctx)
	cancel()
	if _, err := b.Acquire(cctx, req("cancelled")); !errors.Is(err, context.Canceled) {
		t.Fatalf("acquire with a cancelled ctx: %v", err)
	}
	// ACL refusal: permanent.
	c.Do(ctx, "ACL", "SETUSER", "limited", "on", ">pw", "~*", "+@all", "-evalsha", "-eval")
	lc := redis.NewClient(&redis.Options{Addr: srv.Addr, Username: "limited", Password: "pw"})
	defer lc.Close()
	lb, err := New(lc, Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer lb.Close()
	if _, err := lb.Acquire(ctx, req("acl")); !errors.Is(err, driver.ErrPermanent) || !strings.Contains(err.Error(), "NOPERM") {
		t.Fatalf("acquire without EVALSHA permission: %v, want NOPERM, ErrPermanent", err)
	}
}

// TestClosed: calls after Close, and after the client was closed, return
// ErrClosed; Close is idempotent.
func TestClosed(t *testing.T) {
	srv := testserver.StartRedis(t)
	b, _ := newBackend(t, srv, Options{})
	ctx := ctxT(t)
	_, stop, err := b.Watch(ctx, "k")
	if err != nil {
		t.Fatal(err)
	}
	stop()
	b.Close()
	b.Close()
	if _, err := b.Acquire(ctx, driver.AcquireRequest{Key: "k", Owner: owner(), TTL: time.Second}); !errors.Is(err, driver.ErrClosed) {
		t.Fatalf("acquire after Close: %v", err)
	}
	if _, _, err := b.Watch(ctx, "k"); !errors.Is(err, driver.ErrClosed) {
		t.Fatalf("watch after Close: %v", err)
	}
	if _, err := b.FencedGet(ctx, "r"); !errors.Is(err, driver.ErrClosed) {
		t.Fatalf("fenced get after Close: %v", err)
	}
	c := newClient(t, srv, 0)
	b2, err := New(c, Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer b2.Close()
	c.Close()
	if _, err := b2.Acquire(ctx, driver.AcquireRequest{Key: "k", Owner: owner(), TTL: time.Second}); !errors.Is(err, driver.ErrClosed) {
		t.Fatalf("acquire on a closed client: %v", err)
	}
}

// TestAcquireArrivingAfterItsCleanup: a Release of Grant{Key, Owner} (Fence
// 0) records the owner in the abandoned key with backend/redis's TTL, and
// that owner's later Acquire takes nothing (ErrNotAcquired).
func TestAcquireArrivingAfterItsCleanup(t *testing.T) {
	for _, sharded := range []bool{false, true} {
		srv := testserver.StartRedis(t)
		b, c := newBackend(t, srv, Options{ShardedPubSub: sharded})
		ctx := ctxT(t)
		abandoned := owner()
		if err := b.Release(ctx, driver.Grant{Key: "late", Owner: abandoned}); !isNotHeld(err) {
			t.Fatalf("clean-up of a free key: %v", err)
		}
		_, err := b.Acquire(ctx, driver.AcquireRequest{Key: "late", Owner: abandoned, TTL: time.Minute})
		if !errors.Is(err, driver.ErrNotAcquired) || errors.Is(err, driver.ErrPermanent) {
			t.Fatalf("sharded %v: late Acquire: %v, want ErrNotAcquired", sharded, err)
		}
		if n := c.Exists(ctx, b.LockKey("late")).Val(); n != 0 {
			t.Fatal("lock key written by the late Acquire")
		}
		ttl := c.PTTL(ctx, b.LockKey("late")+redisnames.AbandonedSuffix).Val()
		if ttl <= 0 || ttl > redisscript.AbandonTTL {
			t.Fatalf("abandoned record PTTL %v, want in (0, %v]", ttl, redisscript.AbandonTTL)
		}
		// An applied Acquire is undone by the clean-up too.
		o := owner()
		if _, err := b.Acquire(ctx, driver.AcquireRequest{Key: "late", Owner: o, TTL: time.Minute}); err != nil {
			t.Fatal(err)
		}
		if err := b.Release(ctx, driver.Grant{Key: "late", Owner: o}); err != nil {
			t.Fatalf("clean-up of an applied Acquire: %v", err)
		}
		if n := c.Exists(ctx, b.LockKey("late")).Val(); n != 0 {
			t.Fatal("lock key kept after its clean-up")
		}
	}
}

// TestEvictionPolicy: New refuses a server whose maxmemory-policy may
// evict, unless AllowEvictingPolicy.
func TestEvictionPolicy(t *testing.T) {
	srv := testserver.StartRedis(t, testserver.WithConfig("maxmemory-policy allkeys-lru"))
	c := newClient(t, srv, 0)
	if _, err := New(c, Options{}); !errors.Is(err, ErrEvictionPolicy) || !strings.Contains(err.Error(), "allkeys-lru") {
		t.Fatalf("New on allkeys-lru: %v, want ErrEvictionPolicy", err)
	}
	b, err := New(c, Options{AllowEvictingPolicy: true})
	if err != nil {
		t.Fatalf("New with AllowEvictingPolicy: %v", err)
	}
	b.Close()
	if _, err := New(nil, Options{}); !errors.Is(err, driver.ErrInvalid) {
		t.Fatalf("New(nil): %v", err)
	}
	if _, err := New(c, Options{KeyPrefix: "a{"}); !errors.Is(err, driver.ErrInvalid) {
		t.Fatalf("KeyPrefix with '{': %v", err)
	}
}

// TestWaitReplicas: with a replica, Acquire and Renew succeed after WAIT;
// asking for more replicas than exist fails with ErrReplication and leaves
// the key free.
func TestWaitReplicas(t *testing.T) {
	primary := testserver.StartRedis(t)
	replica := testserver.StartRedis(t, testserver.WithReplicaOf(primary))
	_ = replica
	ctx := ctxT(t)
	b, c := newBackend(t, primary, Options{WaitReplicas: 1, WaitTimeout: 5 * time.Second})
	g, err := b.Acquire(ctx, driver.AcquireRequest{Key: "w", Owner: owner(), TTL: time.Minute})
	if err != nil {
		t.Fatalf("acquire with one replica: %v", err)
	}
	if _, err := b.Renew(ctx, g, time.Minute); err != nil {
		t.Fatalf("renew with one replica: %v", err)
	}
	if err := b.Release(ctx, g); err != nil {
		t.Fatal(err)
	}
	b2, _ := newBackend(t, primary, Options{WaitReplicas: 2, WaitTimeout: 100 * time.Millisecond})
	start := time.Now()
	_, err = b2.Acquire(ctx, driver.AcquireRequest{Key: "w2", Owner: owner(), TTL: time.Minute})
	if !errors.Is(err, ErrReplication) {
		t.Fatalf("acquire waiting for 2 of 1 replicas: %v, want ErrReplication", err)
	}
	if n := c.Exists(ctx, b2.LockKey("w2")).Val(); n != 0 {
		t.Fatal("lock kept after ErrReplication")
	}
	// The same owner's next attempt takes the key once enough replicas
	// acknowledge (see backend/redis's TestWaitReplicas).
	again := owner()
	if _, err := b2.Acquire(ctx, driver.AcquireRequest{Key: "w3", Owner: again, TTL: time.Minute}); !errors.Is(err, ErrReplication) {
		t.Fatalf("acquire waiting for 2 of 1 replicas: %v, want ErrReplication", err)
	}
	if _, err := b.Acquire(ctx, driver.AcquireRequest{Key: "w3", Owner: again, TTL: time.Minute}); err != nil {
		t.Fatalf("the same owner's next attempt, with enough replicas: %v, want the key", err)
	}
	// Both replies came on one connection: WAIT counted this acquire's write.
	waits := 0
	for _, line := range strings.Split(c.Info(ctx, "commandstats").Val(), "\n") {
		if rest, ok := strings.CutPrefix(strings.TrimSpace(line), "cmdstat_wait:calls="); ok {
			waits, _ = strconv.Atoi(strings.SplitN(rest, ",", 2)[0])
		}
	}
	if waits < 3 {
		t.Fatalf("WAIT called %d times, want at least 3", waits)
	}
	t.Logf("ErrReplication after %v: %v", time.Since(start).Round(time.Millisecond), err)
}

// TestWatchWokenOnRelease: a release wakes a watcher, with and without
// ShardedPubSub; a killed subscription connection wakes it too; RetireFence
// and the guards work as in backend/redis.
func TestWatchWokenOnRelease(t *testing.T) {
	for _, sharded := range []bool{false, true} {
		srv := testserver.StartRedis(t)
		b, c := newBackend(t, srv, Options{ShardedPubSub: sharded})
		ctx := ctxT(t)
		g, err := b.Acquire(ctx, driver.AcquireRequest{Key: "k", Owner: owner(), TTL: time.Minute})
		if err != nil {
			t.Fatal(err)
		}
		ch, stop, err := b.Watch(ctx, "k")
		if err != nil {
			t.Fatal(err)
		}
		if err := b.Release(ctx, g); err != nil {
			t.Fatal(err)
		}
		select {
		case <-ch:
		case <-time.After(10 * time.Second):
			t.Fatalf("sharded %v: watcher not woken by the release", sharded)
		}
		// The subscription connection is killed: the watcher is woken.
		c.ClientKillByFilter(ctx, "TYPE", "pubsub")
		select {
		case <-ch:
		case <-time.After(10 * time.Second):
			t.Fatalf("sharded %v: watcher not woken by a lost connection", sharded)
		}
		stop()
		if f, err := b.RetireFence(ctx, "k"); err != nil || f != g.Fence {
			t.Fatalf("retire fence = %d, %v; want %d", f, err, g.Fence)
		}
	}
}

// TestWatch runs the promises of the wake-up hub (internal/rediscore)
// through go-redis, as backend/redis runs them through rueidis.
func TestWatch(t *testing.T) {
	rediscoretest.RunWatch(t, func(t *testing.T, srv rediscoretest.WatchServer, sharded bool, max int) (rediscoretest.WatchBackend, *rediscore.Hubs) {
		var c redis.UniversalClient
		if srv.Redis != nil {
			c = newClient(t, srv.Redis, 0)
		} else {
			c = newClusterClient(t, srv.Cluster, 0)
		}
		b, err := New(c, Options{ShardedPubSub: sharded, MaxShardedConns: max})
		rediscoretest.CloseAtEnd(t, b, err)
		return b, b.hubs
	})
}

// TestGuards: FencedSet/FencedHSet/FencedGet as in backend/redis.
func TestGuards(t *testing.T) {
	srv := testserver.StartRedis(t)
	b, c := newBackend(t, srv, Options{})
	ctx := ctxT(t)
	if err := b.FencedSet(ctx, "res", "v5", 5, "h5"); err != nil {
		t.Fatal(err)
	}
	if err := b.FencedHSet(ctx, "res", map[string]string{"a": "1"}, 5, "h5"); err != nil {
		t.Fatalf("same token, same holder: %v", err)
	}
	err := b.FencedSet(ctx, "res", "v4", 4, "h4")
	var se *fencing.StaleError
	if !errors.As(err, &se) || se.Accepted != 5 || se.AcceptedFrom != "h5" {
		t.Fatalf("older token: %v", err)
	}
	if err := b.FencedSet(ctx, "res", "x", 5, "other"); !errors.Is(err, fencing.ErrStale) {
		t.Fatalf("same token, other holder: %v", err)
	}
	rec, err := b.FencedGet(ctx, "res")
	if err != nil || rec != (fencing.Record{Value: "v5", Found: true, Fence: 5, Holder: "h5"}) {
		t.Fatalf("fenced get = %+v, %v", rec, err)
	}
	if c.HGet(ctx, "res", "a").Val() != "1" {
		t.Fatal("FencedHSet field missing")
	}
	if rec, err := b.FencedGet(ctx, "none"); err != nil || rec != (fencing.Record{}) {
		t.Fatalf("fenced get of a missing key = %+v, %v", rec, err)
	}
	if err := b.FencedSet(ctx, "res", "x", 0, "h"); !errors.Is(err, fencing.ErrInvalidToken) {
		t.Fatalf("zero token: %v", err)
	}
	if err := b.FencedSet(ctx, DefaultKeyPrefix+"x", "x", 1, "h"); !errors.Is(err, driver.ErrInvalid) {
		t.Fatalf("key inside the prefix: %v", err)
	}
	if err := b.FencedHSet(ctx, "res", map[string]string{FenceField: "9"}, 9, "h"); !errors.Is(err, driver.ErrInvalid) {
		t.Fatalf("reserved field: %v", err)
	}
	c.Set(ctx, "str", "plain", 0)
	if err := b.FencedSet(ctx, "str", "x", 1, "h"); !errors.Is(err, ErrCorrupt) {
		t.Fatalf("fenced set on a string: %v", err)
	}
	if _, err := b.FencedGet(ctx, "str"); !errors.Is(err, ErrCorrupt) {
		t.Fatalf("fenced get on a string: %v", err)
	}
	c.HSet(ctx, "bad", FenceField, "007")
	if _, err := b.FencedGet(ctx, "bad"); !errors.Is(err, ErrCorrupt) {
		t.Fatalf("fenced get of a corrupt record: %v", err)
	}
}

// TestCloseEndsPendingWatch: a Watch waiting for its subscription to be
// confirmed returns ErrClosed when the backend is closed, instead of
// waiting for its context.
func TestCloseEndsPendingWatch(t *testing.T) {
	srv := testserver.StartRedis(t)
	b, err := New(newClient(t, srv, time.Second), Options{}) // confirmations arrive 1s late
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	done := make(chan error, 1)
	go func() {
		_, stop, err := b.Watch(ctx, "k")
		if err == nil {
			stop()
		}
		done <- err
	}()
	time.Sleep(100 * time.Millisecond)
	start := time.Now()
	b.Close()
	// Close waits for the subscription connection's handshake, whose
	// replies are delayed too (about 2s).
	t.Logf("Close took %v", time.Since(start).Round(time.Millisecond))
	select {
	case err := <-done:
		if !errors.Is(err, driver.ErrClosed) {
			t.Fatalf("pending Watch after Close: %v, want ErrClosed", err)
		}
		t.Logf("pending Watch returned %v after Close: %v", time.Since(start).Round(time.Millisecond), err)
	case <-time.After(5 * time.Second):
		t.Fatal("pending Watch still waiting 5s after Close")
	}
}

// TestScriptFlushRecovers: after SCRIPT FLUSH (or a failover to a server
// that never saw the scripts) every call falls back to EVAL, with and
// without the WAIT pipeline.
func TestScriptFlushRecovers(t *testing.T) {
	primary := testserver.StartRedis(t)
	testserver.StartRedis(t, testserver.WithReplicaOf(primary))
	ctx := ctxT(t)
	for _, opts := range []Options{{}, {WaitReplicas: 1, WaitTimeout: 5 * time.Second}} {
		b, c := newBackend(t, primary, opts)
		if err := c.ScriptFlush(ctx).Err(); err != nil {
			t.Fatal(err)
		}
		g, err := b.Acquire(ctx, driver.AcquireRequest{Key: "flushed", Owner: owner(), TTL: time.Minute})
		if err != nil {
			t.Fatalf("%+v: acquire after SCRIPT FLUSH: %v", opts, err)
		}
		c.ScriptFlush(ctx)
		if _, err := b.Renew(ctx, g, time.Minute); err != nil {
			t.Fatalf("%+v: renew after SCRIPT FLUSH: %v", opts, err)
		}
		c.ScriptFlush(ctx)
		if _, err := b.Inspect(ctx, "flushed"); err != nil {
			t.Fatalf("inspect after SCRIPT FLUSH: %v", err)
		}
		c.ScriptFlush(ctx)
		if err := b.Release(ctx, g); err != nil {
			t.Fatalf("%+v: release after SCRIPT FLUSH: %v", opts, err)
		}
	}
}

// TestReleaseHandsOffToFairWaiter: a goredis Release hands the lock to the
// first waiter queued by backend/redis's Backend (wait.lua), in the
// same step, as backend/redis's release does; then an AcquireWait of the
// rueidis backend is granted by a goredis release.
func TestReleaseHandsOffToFairWaiter(t *testing.T) {
	srv := testserver.StartRedis(t)
	g, c := newBackend(t, srv, Options{})
	ctx := ctxT(t)
	const key = "fair"
	lk := g.LockKey(key)
	h, err := g.Acquire(ctx, driver.AcquireRequest{Key: key, Owner: owner(), TTL: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	w := owner()
	keys := []string{lk, lk + redisnames.FenceSuffix, lk + redisnames.AbandonedSuffix, lk + redisnames.QueueSuffix}
	if r, err := c.Eval(ctx, redisscript.WaitLua, keys, w, "30000", "30000").Slice(); err != nil || len(r) != 2 || r[0] != int64(h.Fence) {
		t.Fatalf("wait.lua = %v, %v; want {%d, pttl} (queued, the fence counter)", r, err, h.Fence)
	}
	if err := g.Release(ctx, h); err != nil {
		t.Fatal(err)
	}
	if got, err := c.Get(ctx, lk).Result(); err != nil || got != w {
		t.Fatalf("after a goredis release the lock holds %q (%v), want the queued waiter's token", got, err)
	}
	if pttl := c.PTTL(ctx, lk).Val(); pttl <= 29*time.Second {
		t.Fatalf("handed-off lock PTTL %v, want the waiter's 30s", pttl)
	}
	if f, err := c.Get(ctx, g.FenceKey(key)).Int64(); err != nil || f != int64(h.Fence)+1 {
		t.Fatalf("fence counter %d (%v), want %d", f, err, h.Fence+1)
	}
	if err := g.Release(ctx, driver.Grant{Key: key, Owner: w, Fence: h.Fence + 1}); err != nil {
		t.Fatal(err)
	}

	// A live backend/redis waiter, granted by a goredis release.
	r, err := rbackend.New(srv.Client(t, nil), rbackend.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	h, err = g.Acquire(ctx, driver.AcquireRequest{Key: key, Owner: owner(), TTL: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	res := rediscoretest.StartWait(ctx, r, driver.AcquireRequest{Key: key, Owner: owner(), TTL: time.Minute})
	for deadline := time.Now().Add(10 * time.Second); c.LLen(ctx, lk+redisnames.QueueSuffix).Val() != 1; time.Sleep(5 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the backend/redis waiter did not queue within 10s")
		}
	}
	if err := g.Release(ctx, h); err != nil {
		t.Fatal(err)
	}
	rediscoretest.WantHandOff(t, res, h.Fence+1, "a goredis release")
}
