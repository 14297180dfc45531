package shapes_test

import (
	"context"
	"errors"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/fencedlock/fencedlock"
	"github.com/fencedlock/fencedlock/backend/redis"
	"github.com/fencedlock/fencedlock/fencing"
	"github.com/fencedlock/fencedlock/internal/testserver"
	"github.com/redis/rueidis"
)

// keysOnEveryNode returns one lock name per node of cl, each served by a
// different node.
func keysOnEveryNode(t *testing.T, cl *testserver.RedisCluster, b *redis.Backend) map[*testserver.Redis]string {
	t.Helper()
	keys := make(map[*testserver.Redis]string)
	for i := 0; len(keys) < len(cl.Nodes) && i < 1000; i++ {
		k := "order/" + strconv.Itoa(i)
		n := cl.Owner(t, cl.KeySlot(t, b.LockKey(k)))
		if _, ok := keys[n]; !ok {
			keys[n] = k
		}
	}
	if len(keys) != len(cl.Nodes) {
		t.Fatalf("found keys for %d of %d nodes", len(keys), len(cl.Nodes))
	}
	return keys
}

func noCrossSlot(t *testing.T, err error) {
	t.Helper()
	if err != nil && strings.Contains(err.Error(), "CROSSSLOT") {
		t.Fatalf("CROSSSLOT: %v", err)
	}
}

// TestClusterAcquireRenewReleaseFence: on a 3-master cluster, locks whose
// keys live on different nodes are acquired, renewed, inspected and
// released; the fence counter sits on the same node as the lock and keeps
// increasing.
func TestClusterAcquireRenewReleaseFence(t *testing.T) {
	cl := testserver.StartRedisCluster(t, 3)
	b := newBackend(t, cl.Client(t, nil), redis.Options{ShardedPubSub: true})
	l := newLocker(t, b, fencedlock.Options{TTL: 2 * time.Second})
	ctx := ctxT(t, 30*time.Second)
	for node, key := range keysOnEveryNode(t, cl, b) {
		ls, err := l.TryAcquire(ctx, key)
		noCrossSlot(t, err)
		if err != nil {
			t.Fatalf("acquire %q: %v", key, err)
		}
		if err := ls.Renew(ctx); err != nil {
			t.Fatalf("renew %q: %v", key, err)
		}
		info, err := b.Inspect(ctx, key)
		if err != nil || !info.Held || info.Fence != ls.Fence() || info.Holder != ls.Holder() {
			t.Fatalf("inspect %q = %+v, %v; lease fence %d", key, info, err, ls.Fence())
		}
		for _, k := range []string{b.LockKey(key), b.FenceKey(key)} {
			if out, err := node.CLI(t, "EXISTS", k); err != nil || strings.TrimSpace(out) != "1" {
				t.Fatalf("%s not on node %s (slot owner): %q %v", k, node.Addr, out, err)
			}
		}
		// The fenced write, on a resource hash in whatever slot its name
		// falls in.
		res := "resource:" + key
		if err := b.FencedSet(ctx, res, "v1", ls.Fence(), ls.Holder()); err != nil {
			noCrossSlot(t, err)
			t.Fatalf("fenced write %q: %v", res, err)
		}
		if err := ls.Release(ctx); err != nil {
			t.Fatalf("release %q: %v", key, err)
		}
		ls2, err := l.TryAcquire(ctx, key)
		if err != nil {
			t.Fatalf("second acquire %q: %v", key, err)
		}
		if ls2.Fence() != ls.Fence()+1 {
			t.Fatalf("%q: fence %d after %d", key, ls2.Fence(), ls.Fence())
		}
		if err := b.FencedSet(ctx, res, "v2", ls2.Fence(), ls2.Holder()); err != nil {
			t.Fatalf("fenced write with the newer fence: %v", err)
		}
		if err := b.FencedSet(ctx, res, "late", ls.Fence(), ls.Holder()); !errors.Is(err, fencing.ErrStale) {
			t.Fatalf("fenced write with the older fence: %v, want ErrStale", err)
		}
		if rec, err := b.FencedGet(ctx, res); err != nil || rec.Value != "v2" || rec.Fence != ls2.Fence() {
			t.Fatalf("fenced get %q = %+v, %v", res, rec, err)
		}
		if err := ls2.Release(ctx); err != nil {
			t.Fatal(err)
		}
		t.Logf("key %q on node %s: fences %d, %d", key, node.Addr, ls.Fence(), ls2.Fence())
	}
}

func cliOK(t *testing.T, s *testserver.Redis, args ...string) string {
	t.Helper()
	out, err := s.CLI(t, args...)
	if err != nil || strings.HasPrefix(out, "ERR") || strings.HasPrefix(out, "(error)") {
		t.Fatalf("%s %v: %q %v", s.Addr, args, out, err)
	}
	return strings.TrimSpace(out)
}

// commandCalls returns cmdstat_<name> calls from INFO commandstats.
func commandCalls(t *testing.T, s *testserver.Redis, name string) int {
	t.Helper()
	out := cliOK(t, s, "INFO", "commandstats")
	for _, line := range strings.Split(out, "\n") {
		if rest, ok := strings.CutPrefix(strings.TrimSpace(line), "cmdstat_"+name+":calls="); ok {
			n, _ := strconv.Atoi(strings.SplitN(rest, ",", 2)[0])
			return n
		}
	}
	return 0
}

// TestClusterSlotMigrationKeepsLease migrates the slot of a held lock to
// another node while the watchdog keeps renewing: first only the lock key
// (the slot is MIGRATING/IMPORTING, renewals follow ASK redirects), then the
// fence key and the slot itself (MOVED). The lease is never lost, a
// contender is never granted the key meanwhile, and the fence counter
// arrives intact.
func TestClusterSlotMigrationKeepsLease(t *testing.T) {
	cl := testserver.StartRedisCluster(t, 3)
	b := newBackend(t, cl.Client(t, nil), redis.Options{ShardedPubSub: true})
	b2 := newBackend(t, cl.Client(t, nil), redis.Options{ShardedPubSub: true})
	holder := newLocker(t, b, fencedlock.Options{TTL: keptTTL})
	contender := newLocker(t, b2, fencedlock.Options{TTL: keptTTL})
	ctx := ctxT(t, 60*time.Second)

	key := "migrating-order"
	lk, fk := b.LockKey(key), b.FenceKey(key)
	slot := cl.KeySlot(t, lk)
	src := cl.Owner(t, slot)
	var dst *testserver.Redis
	for _, n := range cl.Nodes {
		if n != src {
			dst = n
			break
		}
	}
	srcID, dstID := cl.NodeID(t, src), cl.NodeID(t, dst)

	ls, err := holder.TryAcquire(ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	// held checks, until the watchdog renewed the lease twice since the
	// phase began, that the lease is kept and a contender refused.
	held := func(phase string) {
		t.Helper()
		attempts := 0
		var lastErr error
		defer func() { t.Logf("%s: %d contender attempts refused, last: %v", phase, attempts, lastErr) }()
		since, renewals := time.Now(), 0
		limit := since.Add(4 * keptTTL) // a renewal every keptTTL/3
		for renewals < 2 {
			if err := ls.Err(); err != nil {
				t.Fatalf("%s: lease lost: %v", phase, err)
			}
			if renewedSince(holder, ls, since) {
				since, renewals = time.Now(), renewals+1
			}
			if time.Now().After(limit) {
				t.Fatalf("%s: %d renewals in %v", phase, renewals, 4*keptTTL)
			}
			c, err := contender.TryAcquire(ctxT(t, 2*time.Second), key)
			noCrossSlot(t, err)
			if err == nil {
				c.Release(ctx)
				t.Fatalf("%s: contender granted %q (fence %d) while it is held", phase, key, c.Fence())
			}
			attempts++
			lastErr = err
			time.Sleep(100 * time.Millisecond)
		}
	}
	asksBefore := commandCalls(t, dst, "asking")

	cliOK(t, dst, "CLUSTER", "SETSLOT", strconv.Itoa(slot), "IMPORTING", srcID)
	cliOK(t, src, "CLUSTER", "SETSLOT", strconv.Itoa(slot), "MIGRATING", dstID)
	cliOK(t, src, "MIGRATE", "127.0.0.1", strconv.Itoa(dst.Port), "", "0", "5000", "KEYS", lk)
	// Half-migrated: the lock key is on dst, the fence key on src.
	held("half-migrated slot")
	asks := commandCalls(t, dst, "asking") - asksBefore
	if asks == 0 {
		t.Fatal("no ASKING reached the importing node: the renewals did not go through ASK redirects")
	}

	cliOK(t, src, "MIGRATE", "127.0.0.1", strconv.Itoa(dst.Port), "", "0", "5000", "KEYS", fk)
	for _, n := range []*testserver.Redis{dst, src} {
		cliOK(t, n, "CLUSTER", "SETSLOT", strconv.Itoa(slot), "NODE", dstID)
	}
	for _, n := range cl.Nodes {
		if n != src && n != dst {
			cliOK(t, n, "CLUSTER", "SETSLOT", strconv.Itoa(slot), "NODE", dstID)
		}
	}
	held("slot moved")
	for _, k := range []string{lk, fk} {
		if out := cliOK(t, dst, "EXISTS", k); out != "1" {
			t.Fatalf("%s not on the new owner after migration", k)
		}
	}
	info, err := b2.Inspect(ctx, key)
	if err != nil || !info.Held || info.Fence != ls.Fence() {
		t.Fatalf("inspect after migration = %+v, %v", info, err)
	}
	if err := ls.Release(ctx); err != nil {
		t.Fatalf("release after migration: %v", err)
	}
	next, err := contender.TryAcquire(ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	if next.Fence() != ls.Fence()+1 {
		t.Fatalf("fence after migration %d, want %d", next.Fence(), ls.Fence()+1)
	}
	t.Logf("slot %d moved %s -> %s while held: %d ASKING redirects served, lease kept, next fence %d",
		slot, src.Addr, dst.Addr, asks, next.Fence())
}

// TestClusterShardedWakeups: a waiter on a cluster is woken by the release
// through SPUBLISH/SSUBSCRIBE on the key's shard only. A classic subscriber
// to the same channel name on every node receives nothing; the same release
// with ShardedPubSub off reaches it (the broadcast the option avoids).
func TestClusterShardedWakeups(t *testing.T) {
	cl := testserver.StartRedisCluster(t, 3)
	holderB := newBackend(t, cl.Client(t, nil), redis.Options{ShardedPubSub: true})
	waiterB := newBackend(t, cl.Client(t, nil), redis.Options{ShardedPubSub: true})
	// A long TTL and retry delay: only the release message can wake the
	// waiter within its 10s.
	opts := fencedlock.Options{TTL: 30 * time.Second, MaxRetryDelay: 30 * time.Second}
	holder := newLocker(t, holderB, opts)
	waiter := newLocker(t, waiterB, opts)
	ctx := ctxT(t, 60*time.Second)

	key := "wake-me"
	ch := holderB.Channel(key)
	owner := cl.Owner(t, cl.KeySlot(t, ch))

	// Classic subscribers on every node.
	var classic atomic.Int64
	rctx, stopReceive := context.WithCancel(context.Background())
	done := make(chan struct{}, len(cl.Nodes))
	for _, n := range cl.Nodes {
		c, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: []string{n.Addr}, ForceSingleClient: true, DisableCache: true})
		if err != nil {
			t.Fatal(err)
		}
		go func() {
			defer func() { done <- struct{}{} }()
			_ = c.Receive(rctx, c.B().Subscribe().Channel(ch).Build(), func(rueidis.PubSubMessage) { classic.Add(1) })
		}()
		t.Cleanup(c.Close)
	}
	t.Cleanup(func() {
		stopReceive()
		for range cl.Nodes {
			<-done
		}
	})
	waitFor := func(what string, cond func() bool) {
		t.Helper()
		for i := 0; !cond(); i++ {
			if i > 200 {
				t.Fatalf("timed out waiting for %s", what)
			}
			time.Sleep(25 * time.Millisecond)
		}
	}
	count := func(n *testserver.Redis, args ...string) int {
		out := cliOK(t, n, args...)
		f := strings.Fields(out)
		v, _ := strconv.Atoi(f[len(f)-1])
		return v
	}
	waitFor("classic subscribers", func() bool {
		for _, n := range cl.Nodes {
			if count(n, "PUBSUB", "NUMSUB", ch) != 1 {
				return false
			}
		}
		return true
	})

	ls, err := holder.TryAcquire(ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	got := make(chan *fencedlock.Lease, 1)
	errc := make(chan error, 1)
	go func() {
		wctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		defer cancel()
		w, err := waiter.Acquire(wctx, key)
		if err != nil {
			errc <- err
			return
		}
		got <- w
	}()
	waitFor("the waiter's sharded subscription", func() bool { return count(owner, "PUBSUB", "SHARDNUMSUB", ch) == 1 })
	for _, n := range cl.Nodes {
		if n != owner && count(n, "PUBSUB", "SHARDNUMSUB", ch) != 0 {
			t.Fatalf("sharded subscription on %s, which does not serve the slot", n.Addr)
		}
	}
	if err := ls.Release(ctx); err != nil {
		t.Fatal(err)
	}
	var w *fencedlock.Lease
	select {
	case w = <-got:
	case err := <-errc:
		t.Fatalf("waiter not woken by the sharded release (TTL and retry delay 30s): %v", err)
	}
	if w.Fence() != ls.Fence()+1 {
		t.Fatalf("waiter fence %d after %d", w.Fence(), ls.Fence())
	}
	// Cluster-bus propagation of a classic PUBLISH takes milliseconds; give
	// it far more before concluding nothing was broadcast.
	time.Sleep(300 * time.Millisecond)
	if n := classic.Load(); n != 0 {
		t.Fatalf("sharded release reached %d classic subscribers", n)
	}

	// Control: the same release without ShardedPubSub is broadcast.
	if err := w.Release(ctx); err != nil {
		t.Fatal(err)
	}
	plain := newBackend(t, cl.Client(t, nil), redis.Options{})
	pl := newLocker(t, plain, opts)
	p, err := pl.TryAcquire(ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	if err := p.Release(ctx); err != nil {
		t.Fatal(err)
	}
	waitFor("the classic broadcast", func() bool { return classic.Load() == int64(len(cl.Nodes)) })
	t.Logf("sharded release: waiter woken, 0 of %d classic subscribers reached; PUBLISH control: %d reached",
		len(cl.Nodes), classic.Load())
}
