package redis

import (
	"context"
	"errors"
	"fmt"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/fencedlock/fencedlock"
	"github.com/fencedlock/fencedlock/driver"
	"github.com/fencedlock/fencedlock/fencing"
	"github.com/fencedlock/fencedlock/internal/redisnames"
	"github.com/fencedlock/fencedlock/internal/redisscript"
	"github.com/fencedlock/fencedlock/internal/testserver"
	"github.com/redis/rueidis"
)

// TestRedisCLIEvalRelease runs the README's command line, with the
// committed script, from the repository root, with the real redis-cli:
// redis-cli --eval internal/redisscript/release.lua lock-key , token
func TestRedisCLIEvalRelease(t *testing.T) {
	srv := testserver.StartRedis(t)
	c := srv.Client(t, nil)
	root, err := filepath.Abs(filepath.Join("..", ".."))
	if err != nil {
		t.Fatal(err)
	}
	cli := testserver.Binary(t, "redis-cli")
	eval := func(token string) string {
		t.Helper()
		cmd := exec.Command(cli, "-p", strconv.Itoa(srv.Port),
			"--eval", "internal/redisscript/release.lua", "lock-key", ",", token)
		cmd.Dir = root
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("redis-cli --eval: %v: %s", err, out)
		}
		return strings.TrimSpace(string(out))
	}

	// The release is announced on lock-key:released.
	msgs := make(chan string, 4)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	subscribed := make(chan struct{})
	recvDone := make(chan error, 1)
	sub := srv.Client(t, nil)
	go func() {
		recvDone <- sub.Receive(rueidis.WithOnSubscriptionHook(ctx, func(rueidis.PubSubSubscription) { close(subscribed) }),
			sub.B().Subscribe().Channel("lock-key"+redisnames.ReleasedSuffix).Build(),
			func(m rueidis.PubSubMessage) { msgs <- m.Channel })
	}()
	<-subscribed

	do(t, c, "SET", "lock-key", "token")
	if got := eval("token"); got != "1" {
		t.Fatalf("release by the owner: %q, want 1", got)
	}
	if n := num(t, c, "EXISTS", "lock-key"); n != 0 {
		t.Fatal("lock-key still exists after release by its owner")
	}
	select {
	case ch := <-msgs:
		t.Logf("release published on %s", ch)
	case <-time.After(5 * time.Second):
		t.Fatal("no message on lock-key:released")
	}

	do(t, c, "SET", "lock-key", "other", "PX", "60000")
	if got := eval("token"); got != "0" {
		t.Fatalf("release by a non-owner: %q, want 0", got)
	}
	if v := str(t, c, "GET", "lock-key"); v != "other" {
		t.Fatalf("lock-key = %q after a non-owner's release, want other", v)
	}
	if pttl := num(t, c, "PTTL", "lock-key"); pttl <= 0 {
		t.Fatalf("PTTL %d after a non-owner's release: TTL changed", pttl)
	}
	do(t, c, "DEL", "lock-key")
	if got := eval("token"); got != "0" {
		t.Fatalf("release of an absent key: %q, want 0", got)
	}
	select {
	case ch := <-msgs:
		t.Fatalf("unexpected publish on %s by a release that deleted nothing", ch)
	default:
	}
	cancel()
	<-recvDone
}

// TestKeySlots checks, with CLUSTER KEYSLOT on a cluster-enabled
// redis-server, that the lock key and the fence key of awkward names share
// a hash slot, and that different names never share a lock key.
func TestKeySlots(t *testing.T) {
	srv := testserver.StartRedis(t, testserver.WithConfig("cluster-enabled yes", "cluster-config-file nodes.conf"))
	c := srv.Client(t, func(o *rueidis.ClientOption) { o.ForceSingleClient = true })
	b, err := New(c, Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	keys := []string{"orders", "}", "}{", "{", "{}", "a}b", "}abc{", "{a}b", "%7D", "%", "%25", "x{y}z}",
		" ", "a b", "\xff\xfe", "ключ", strings.Repeat("}", driver.MaxKeyLen)}
	seen := make(map[string]string)
	for _, k := range keys {
		lk, fk := b.LockKey(k), b.FenceKey(k)
		ls := num(t, c, "CLUSTER", "KEYSLOT", lk)
		fs := num(t, c, "CLUSTER", "KEYSLOT", fk)
		if ls != fs {
			t.Errorf("key %q: lock key %q in slot %d, fence key %q in slot %d", k, lk, ls, fk, fs)
		}
		// The tag is the escaped key: slot of the escaped key alone.
		if es := num(t, c, "CLUSTER", "KEYSLOT", redisscript.Escape(k)); es != ls {
			t.Errorf("key %q: slot %d, want the slot %d of its escaped form", k, ls, es)
		}
		if prev, dup := seen[lk]; dup {
			t.Errorf("keys %q and %q share lock key %q", prev, k, lk)
		}
		seen[lk] = k
	}
}

func TestOptions(t *testing.T) {
	_, _, c := newMini(t)
	for _, o := range []Options{
		{KeyPrefix: "a{b"}, {KeyPrefix: "}"}, {KeyPrefix: strings.Repeat("p", MaxKeyPrefixLen+1)},
		{WaitReplicas: -1}, {WaitTimeout: -time.Second},
	} {
		if _, err := New(c, o); !errors.Is(err, driver.ErrInvalid) {
			t.Errorf("New(%+v): %v, want ErrInvalid", o, err)
		}
	}
	if _, err := New(nil, Options{}); !errors.Is(err, driver.ErrInvalid) {
		t.Errorf("New(nil): %v, want ErrInvalid", err)
	}
	b, err := New(c, Options{WaitReplicas: 1})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	if o := b.Options(); o.KeyPrefix != DefaultKeyPrefix || o.WaitTimeout != DefaultWaitTimeout {
		t.Errorf("defaults not applied: %+v", o)
	}
	b2, err := New(c, Options{KeyPrefix: "app:locks:"})
	if err != nil {
		t.Fatal(err)
	}
	defer b2.Close()
	if got := b2.LockKey("orders"); got != "app:locks:{orders}" {
		t.Errorf("LockKey = %q", got)
	}
	if got := b2.Channel("a}"); got != "app:locks:{a%7D}:released" {
		t.Errorf("Channel = %q", got)
	}
}

// TestWrongType: a lock or fence key holding another type gives an error
// wrapping ErrCorrupt (not "held" or "not held") and nothing is changed.
func TestWrongType(t *testing.T) {
	b, c := startBackend(t)
	ctx := context.Background()
	lk, fk := b.LockKey("k"), b.FenceKey("k")
	do(t, c, "HSET", lk, "field", "value")
	req := driver.AcquireRequest{Key: "k", Owner: owner(), TTL: time.Second}
	_, err := b.Acquire(ctx, req)
	if !errors.Is(err, ErrCorrupt) || errors.Is(err, driver.ErrNotAcquired) {
		t.Fatalf("acquire on a hash: %v, want ErrCorrupt", err)
	}
	t.Logf("acquire on a hash: %v", err)
	g := driver.Grant{Key: "k", Owner: req.Owner}
	if _, err := b.Renew(ctx, g, time.Second); !errors.Is(err, ErrCorrupt) {
		t.Fatalf("renew on a hash: %v, want ErrCorrupt", err)
	}
	if err := b.Release(ctx, g); !errors.Is(err, ErrCorrupt) {
		t.Fatalf("release on a hash: %v, want ErrCorrupt", err)
	}
	if _, err := b.Inspect(ctx, "k"); !errors.Is(err, ErrCorrupt) {
		t.Fatalf("inspect on a hash: %v, want ErrCorrupt", err)
	}
	if v := str(t, c, "HGET", lk, "field"); v != "value" {
		t.Fatalf("hash changed: %q", v)
	}
	if n := num(t, c, "EXISTS", fk); n != 0 {
		t.Fatal("fence key created by a failed acquire")
	}
	if n := num(t, c, "PTTL", lk); n != -1 {
		t.Fatalf("hash got a TTL %d", n)
	}

	// Fence key of another type: no lock is left behind.
	do(t, c, "RPUSH", b.FenceKey("f"), "x")
	if _, err := b.Acquire(ctx, driver.AcquireRequest{Key: "f", Owner: owner(), TTL: time.Second}); !errors.Is(err, ErrCorrupt) {
		t.Fatalf("acquire with a list as fence counter: %v, want ErrCorrupt", err)
	}
	if n := num(t, c, "EXISTS", b.LockKey("f")); n != 0 {
		t.Fatal("lock left behind by a failed acquire")
	}
}

// TestCorruptFenceCounter: a fence counter that is not a decimal counter
// fails the acquire before anything is written.
func TestCorruptFenceCounter(t *testing.T) {
	b, c := startBackend(t)
	ctx := context.Background()
	for _, bad := range []string{"abc", "-5", "1.5", "0012", "+3", " 7", "", "9007199254740993", "12345678901234567", "9223372036854775807"} {
		key := "bad-" + bad
		fk := b.FenceKey(key)
		do(t, c, "SET", fk, bad)
		_, err := b.Acquire(ctx, driver.AcquireRequest{Key: key, Owner: owner(), TTL: time.Second})
		if !errors.Is(err, ErrCorrupt) {
			t.Errorf("fence counter %q: acquire %v, want ErrCorrupt", bad, err)
			continue
		}
		if n := num(t, c, "EXISTS", b.LockKey(key)); n != 0 {
			t.Errorf("fence counter %q: lock left behind", bad)
		}
		if v := str(t, c, "GET", fk); v != bad {
			t.Errorf("fence counter %q overwritten with %q", bad, v)
		}
		if _, err := b.Inspect(ctx, key); !errors.Is(err, ErrCorrupt) {
			t.Errorf("fence counter %q: inspect %v, want ErrCorrupt", bad, err)
		}
	}
	// Valid counters continue.
	for _, good := range []string{"0", "41", "999999999999999", "1234567890123456", "9007199254740991"} {
		key := "good-" + good
		do(t, c, "SET", b.FenceKey(key), good)
		g := acquire(t, b, key, time.Second)
		want, _ := strconv.ParseUint(good, 10, 64)
		if uint64(g.Fence) != want+1 {
			t.Errorf("counter %s: fence %d, want %d", good, g.Fence, want+1)
		}
	}
	// A foreign string lock without TTL is reported, not waited for forever.
	do(t, c, "SET", b.LockKey("nottl"), "someone")
	_, err := b.Acquire(ctx, driver.AcquireRequest{Key: "nottl", Owner: owner(), TTL: time.Second})
	if !errors.Is(err, ErrCorrupt) {
		t.Fatalf("lock without TTL: %v, want ErrCorrupt", err)
	}
	if v := str(t, c, "GET", b.LockKey("nottl")); v != "someone" {
		t.Fatalf("lock without TTL changed to %q", v)
	}
}

// TestScriptFlushRecovers: after SCRIPT FLUSH, every operation falls back
// from EVALSHA to EVAL and succeeds.
func TestScriptFlushRecovers(t *testing.T) {
	srv := testserver.StartRedis(t)
	b, c := newBackend(t, srv, Options{})
	ctx := context.Background()
	before := commandStats(t, c)["eval"]
	do(t, c, "SCRIPT", "FLUSH")
	g := acquire(t, b, "k", time.Second)
	do(t, c, "SCRIPT", "FLUSH")
	if _, err := b.Renew(ctx, g, 2*time.Second); err != nil {
		t.Fatalf("renew after SCRIPT FLUSH: %v", err)
	}
	do(t, c, "SCRIPT", "FLUSH")
	if info, err := b.Inspect(ctx, "k"); err != nil || !info.Held {
		t.Fatalf("inspect after SCRIPT FLUSH: %+v %v", info, err)
	}
	do(t, c, "SCRIPT", "FLUSH")
	if err := b.Release(ctx, g); err != nil {
		t.Fatalf("release after SCRIPT FLUSH: %v", err)
	}
	if n := num(t, c, "EXISTS", b.LockKey("k")); n != 0 {
		t.Fatal("lock not released")
	}
	if evals := commandStats(t, c)["eval"] - before; evals != 4 {
		t.Fatalf("%d EVAL fallbacks, want 4", evals)
	}
	// With WAIT (acquire pipelined by hand) too.
	bw, _ := newBackend(t, srv, Options{WaitReplicas: 1, WaitTimeout: 10 * time.Millisecond})
	do(t, c, "SCRIPT", "FLUSH")
	if _, err := bw.Acquire(ctx, driver.AcquireRequest{Key: "w", Owner: owner(), TTL: time.Second}); !errors.Is(err, ErrReplication) {
		t.Fatalf("acquire with WAIT after SCRIPT FLUSH: %v, want ErrReplication (no replica)", err)
	}
}

// TestClosed: a closed rueidis client and a closed Backend give errors
// wrapping ErrClosed.
func TestClosed(t *testing.T) {
	srv := testserver.StartRedis(t)
	b, c := openBackend(t, srv)
	defer b.Close()
	ctx := context.Background()
	g := acquire(t, b, "k", time.Second)
	c.Close()
	_, err := b.Acquire(ctx, driver.AcquireRequest{Key: "k2", Owner: owner(), TTL: time.Second})
	if !errors.Is(err, driver.ErrClosed) || !errors.Is(err, rueidis.ErrClosing) {
		t.Fatalf("acquire on a closed client: %v, want ErrClosed", err)
	}
	t.Logf("closed client: %v", err)
	if _, err := b.Renew(ctx, g, time.Second); !errors.Is(err, driver.ErrClosed) {
		t.Errorf("renew: %v", err)
	}
	if err := b.Release(ctx, g); !errors.Is(err, driver.ErrClosed) {
		t.Errorf("release: %v", err)
	}
	if _, err := b.Inspect(ctx, "k"); !errors.Is(err, driver.ErrClosed) {
		t.Errorf("inspect: %v", err)
	}
	if _, _, err := b.Watch(ctx, "k"); !errors.Is(err, driver.ErrClosed) {
		t.Errorf("watch: %v", err)
	}

	// A closed Backend on an open client.
	b2, c2 := newBackend(t, srv, Options{})
	if err := b2.Close(); err != nil {
		t.Fatal(err)
	}
	if err := b2.Close(); err != nil {
		t.Fatalf("second Close: %v", err)
	}
	if _, err := b2.Acquire(ctx, driver.AcquireRequest{Key: "k3", Owner: owner(), TTL: time.Second}); !errors.Is(err, driver.ErrClosed) {
		t.Errorf("acquire on a closed backend: %v", err)
	}
	if _, _, err := b2.Watch(ctx, "k3"); !errors.Is(err, driver.ErrClosed) {
		t.Errorf("watch on a closed backend: %v", err)
	}
	// Close left the caller's client open.
	if err := do(t, c2, "PING").Error(); err != nil {
		t.Fatalf("client unusable after Backend.Close: %v", err)
	}
}

// TestCancelledContext: a cancelled context fails the call with its error
// and leaves nothing on the server; a waiting Acquire ended by its context
// is both ErrNotAcquired and the context's error.
func TestCancelledContext(t *testing.T) {
	b, c := startBackend(t)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	_, err := b.Acquire(ctx, driver.AcquireRequest{Key: "k", Owner: owner(), TTL: time.Second})
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("acquire with a cancelled context: %v", err)
	}
	if n := num(t, c, "EXISTS", b.LockKey("k"), b.FenceKey("k")); n != 0 {
		t.Fatalf("%d keys left by a cancelled acquire", n)
	}
	if _, _, err := b.Watch(ctx, "k"); !errors.Is(err, context.Canceled) {
		t.Fatalf("watch with a cancelled context: %v", err)
	}

	holder := acquire(t, b, "k", 10*time.Second)
	locker := mustLocker(t, b, fencedlock.Options{TTL: time.Second})
	defer locker.Close()
	wctx, wcancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer wcancel()
	_, err = locker.Acquire(wctx, "k")
	if !errors.Is(err, driver.ErrNotAcquired) || !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("waiting acquire past its deadline: %v", err)
	}
	if info, err := b.Inspect(context.Background(), "k"); err != nil || info.Holder != driver.HolderID(holder.Owner) {
		t.Fatalf("holder changed: %+v %v", info, err)
	}
}

// TestWaiterWokenOnRelease: a waiter acquires promptly after a release,
// long before the holder's TTL would have expired. The TTL (20s) exceeds
// the waiter's deadline (10s), so only the release message can explain a
// success; the hand-off time is logged, not asserted.
func TestWaiterWokenOnRelease(t *testing.T) {
	srv := testserver.StartRedis(t)
	ba, c := newBackend(t, srv, Options{})
	bb, _ := newBackend(t, srv, Options{})
	la := mustLocker(t, ba, fencedlock.Options{TTL: 20 * time.Second})
	defer la.Close()
	lb := mustLocker(t, bb, fencedlock.Options{TTL: 20 * time.Second})
	defer lb.Close()
	a, err := la.TryAcquire(context.Background(), "orders")
	if err != nil {
		t.Fatal(err)
	}
	type result struct {
		lease *fencedlock.Lease
		err   error
		at    time.Time
	}
	got := make(chan result, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		l, err := lb.Acquire(ctx, "orders")
		got <- result{l, err, time.Now()}
	}()
	// Wait until the waiter's subscription is on the server.
	waitFor(t, 5*time.Second, "the waiter's subscription", func() bool {
		return numsub(t, c, ba.Channel("orders")) == 1
	})
	released := time.Now()
	if err := a.Release(context.Background()); err != nil {
		t.Fatal(err)
	}
	r := <-got
	if r.err != nil {
		t.Fatalf("waiter: %v", r.err)
	}
	if r.lease.Fence() <= a.Fence() {
		t.Fatalf("waiter's fence %d not above %d", r.lease.Fence(), a.Fence())
	}
	t.Logf("hand-off on release: %v (holder TTL was 20s)", r.at.Sub(released))
	if err := r.lease.Release(context.Background()); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 5*time.Second, "the unsubscribe", func() bool {
		return numsub(t, c, ba.Channel("orders")) == 0
	})
}

func numsub(t testing.TB, c rueidis.Client, channel string) int64 {
	t.Helper()
	vals, err := do(t, c, "PUBSUB", "NUMSUB", channel).ToArray()
	if err != nil || len(vals) != 2 {
		t.Fatalf("PUBSUB NUMSUB: %v %v", vals, err)
	}
	n, _ := vals[1].AsInt64()
	return n
}

// TestWaiterWithoutMessage: the holder crashes (never renews, never
// releases); its key expires on the server, which publishes nothing; the
// waiter acquires after the PTTL hint.
func TestWaiterWithoutMessage(t *testing.T) {
	srv := testserver.StartRedis(t)
	ba, _ := newBackend(t, srv, Options{})
	bb, _ := newBackend(t, srv, Options{})
	const ttl = 300 * time.Millisecond
	crashed := acquire(t, ba, "orders", ttl) // a Grant without a Locker: nobody renews it
	start := time.Now()

	// Count every message on the channel: there must be none.
	sub := srv.Client(t, nil)
	msgs := make(chan string, 4)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	subscribed := make(chan struct{})
	recvDone := make(chan error, 1)
	go func() {
		recvDone <- sub.Receive(rueidis.WithOnSubscriptionHook(ctx, func(rueidis.PubSubSubscription) { close(subscribed) }),
			sub.B().Subscribe().Channel(ba.Channel("orders")).Build(),
			func(m rueidis.PubSubMessage) { msgs <- m.Message })
	}()
	<-subscribed

	lb := mustLocker(t, bb, fencedlock.Options{TTL: time.Second})
	defer lb.Close()
	wctx, wcancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer wcancel()
	l, err := lb.Acquire(wctx, "orders")
	if err != nil {
		t.Fatal(err)
	}
	acquiredAfter := time.Since(start)
	if l.Fence() <= crashed.Fence {
		t.Fatalf("fence %d not above the crashed holder's %d", l.Fence(), crashed.Fence)
	}
	select {
	case m := <-msgs:
		t.Fatalf("a message %q was published although nobody released", m)
	default:
	}
	t.Logf("crashed holder's %v lease: waiter acquired %v after the crash, without a message", ttl, acquiredAfter)
	if err := l.Release(context.Background()); err != nil {
		t.Fatal(err)
	}
	cancel()
	<-recvDone
}

// TestFenceIncreasesAndSurvivesRelease: fences strictly increase across
// backends, releases and expiries; the counter has no TTL and is kept by
// release.
func TestFenceIncreasesAndSurvivesRelease(t *testing.T) {
	srv := testserver.StartRedis(t)
	b1, c := newBackend(t, srv, Options{})
	b2, _ := newBackend(t, srv, Options{})
	ctx := context.Background()
	var last fencing.Token
	for i := 0; i < 20; i++ {
		b := b1
		if i%2 == 1 {
			b = b2
		}
		g := acquire(t, b, "orders", time.Second)
		if g.Fence <= last {
			t.Fatalf("round %d: fence %d after %d", i, g.Fence, last)
		}
		last = g.Fence
		if err := b.Release(ctx, g); err != nil {
			t.Fatal(err)
		}
		if v := str(t, c, "GET", b.FenceKey("orders")); v != g.Fence.String() {
			t.Fatalf("after release: fence counter %q, want %d", v, g.Fence)
		}
		if pttl := num(t, c, "PTTL", b.FenceKey("orders")); pttl != -1 {
			t.Fatalf("fence counter has a TTL: %d", pttl)
		}
	}
	// Expiry too.
	g := acquire(t, b1, "orders", 50*time.Millisecond)
	waitFor(t, 5*time.Second, "expiry", func() bool { return num(t, c, "EXISTS", b1.LockKey("orders")) == 0 })
	g2 := acquire(t, b2, "orders", time.Second)
	if g2.Fence != g.Fence+1 {
		t.Fatalf("after expiry: fence %d, want %d", g2.Fence, g.Fence+1)
	}
	info, err := b1.Inspect(ctx, "orders")
	if err != nil || info.Fence != g2.Fence {
		t.Fatalf("inspect: %+v %v", info, err)
	}
}

// TestAcquireSameOwnerAgain: a retried acquire of the holder gets its fence
// again (no second increment) and a fresh TTL; another owner is refused
// with the holder's remaining TTL.
func TestAcquireSameOwnerAgain(t *testing.T) {
	b, c := startBackend(t)
	ctx := context.Background()
	req := driver.AcquireRequest{Key: "k", Owner: owner(), TTL: 500 * time.Millisecond}
	g1, err := b.Acquire(ctx, req)
	if err != nil {
		t.Fatal(err)
	}
	req.TTL = 30 * time.Second
	g2, err := b.Acquire(ctx, req)
	if err != nil {
		t.Fatal(err)
	}
	if g2.Fence != g1.Fence {
		t.Fatalf("same owner again: fence %d, want %d", g2.Fence, g1.Fence)
	}
	if pttl := num(t, c, "PTTL", b.LockKey("k")); pttl <= 500 {
		t.Fatalf("same owner again: PTTL %d, want the new 30s lease", pttl)
	}
	_, err = b.Acquire(ctx, driver.AcquireRequest{Key: "k", Owner: owner(), TTL: time.Second})
	var held *driver.HeldError
	if !errors.As(err, &held) || !errors.Is(err, driver.ErrNotAcquired) {
		t.Fatalf("other owner: %v, want *HeldError", err)
	}
	if held.RetryAfter <= 29*time.Second || held.RetryAfter > 30*time.Second || held.Key != "k" {
		t.Fatalf("HeldError %+v: RetryAfter should be the holder's PTTL (~30s)", held)
	}
}

// TestRenewAndReleaseNotHeld covers the ErrNotHeld paths.
func TestRenewAndReleaseNotHeld(t *testing.T) {
	b, c := startBackend(t)
	ctx := context.Background()
	g := acquire(t, b, "k", time.Second)
	d, err := b.Renew(ctx, g, 3*time.Second)
	if err != nil || d != 3*time.Second {
		t.Fatalf("renew: %v %v", d, err)
	}
	if pttl := num(t, c, "PTTL", b.LockKey("k")); pttl <= 1000 {
		t.Fatalf("PTTL %d after renew to 3s", pttl)
	}
	stranger := driver.Grant{Key: "k", Owner: "stranger"}
	if _, err := b.Renew(ctx, stranger, 10*time.Second); !isNotHeld(err) {
		t.Fatalf("stranger's renew: %v", err)
	}
	if pttl := num(t, c, "PTTL", b.LockKey("k")); pttl > 3000 {
		t.Fatalf("stranger's renew changed PTTL to %d", pttl)
	}
	if err := b.Release(ctx, stranger); !isNotHeld(err) {
		t.Fatalf("stranger's release: %v", err)
	}
	if err := b.Release(ctx, g); err != nil {
		t.Fatal(err)
	}
	if _, err := b.Renew(ctx, g, time.Second); !isNotHeld(err) {
		t.Fatalf("renew after release: %v", err)
	}
	if err := b.Release(ctx, g); !isNotHeld(err) {
		t.Fatalf("second release: %v", err)
	}
	// Renew rounds a sub-millisecond TTL up, never down.
	g = acquire(t, b, "k", time.Second)
	if d, err := b.Renew(ctx, g, 1500*time.Microsecond); err != nil || d != 2*time.Millisecond {
		t.Fatalf("renew 1.5ms: %v %v, want 2ms", d, err)
	}
}

// TestInspectNeverContainsToken: Inspect reports holder id, TTL and fence,
// never the owner token.
func TestInspectNeverContainsToken(t *testing.T) {
	b, _ := startBackend(t)
	ctx := context.Background()
	info, err := b.Inspect(ctx, "k")
	if err != nil || info.Held || info.Fence != 0 || info.Holder != "" {
		t.Fatalf("inspect of an unused key: %+v %v", info, err)
	}
	g := acquire(t, b, "k", 5*time.Second)
	info, err = b.Inspect(ctx, "k")
	if err != nil {
		t.Fatal(err)
	}
	if !info.Held || info.Fence != g.Fence || info.Holder != driver.HolderID(g.Owner) || info.TTL <= 0 || info.TTL > 5*time.Second {
		t.Fatalf("inspect: %+v", info)
	}
	for _, s := range []string{fmt.Sprintf("%+v", info), fmt.Sprintf("%#v", info), info.Holder} {
		if strings.Contains(s, g.Owner) {
			t.Fatalf("inspect output contains the owner token: %s", s)
		}
	}
	if err := b.Release(ctx, g); err != nil {
		t.Fatal(err)
	}
	info, err = b.Inspect(ctx, "k")
	if err != nil || info.Held || info.Fence != g.Fence || info.Holder != "" || info.TTL != 0 {
		t.Fatalf("inspect after release: %+v %v", info, err)
	}
	if _, err := b.Inspect(ctx, ""); !errors.Is(err, driver.ErrInvalid) {
		t.Fatalf("inspect of an empty key: %v", err)
	}
}

// TestRoundTrips counts, on the server, the commands each operation sends:
// INFO commandstats (calls of EVALSHA/EVAL) and MONITOR (every command a
// client sent, excluding those a script called). These are counts, not
// timings.
func TestRoundTrips(t *testing.T) {
	srv := testserver.StartRedis(t)
	b, c := newBackend(t, srv, Options{})
	ctx := context.Background()
	const n = 50
	// Warm up: connections and the server's script cache (the first run
	// of each script after a start or SCRIPT FLUSH is EVALSHA, NOSCRIPT,
	// then EVAL: two round trips, once).
	g := acquire(t, b, "warm", time.Second)
	if _, err := b.Renew(ctx, g, time.Second); err != nil {
		t.Fatal(err)
	}
	if err := b.Release(ctx, g); err != nil {
		t.Fatal(err)
	}
	mon := startMonitor(t, srv.Addr)
	mon.sync(t, c)

	measure := func(op string, fn func(i int)) {
		t.Helper()
		do(t, c, "CONFIG", "RESETSTAT")
		mon.sync(t, c)
		for i := 0; i < n; i++ {
			fn(i)
		}
		stats := commandStats(t, c)
		seen := mon.sync(t, c)
		var sent []string
		for _, name := range seen {
			// INFO is the test's own; the rest set up or check a
			// connection rueidis may (re)open meanwhile, not a cost per
			// operation.
			if name != "info" && !connectionCommand(name) {
				sent = append(sent, name)
			}
		}
		evalsha := stats["evalsha"]
		if evalsha != n || stats["eval"] != 0 {
			t.Errorf("%s: commandstats evalsha=%d eval=%d, want %d and 0", op, evalsha, stats["eval"], n)
		}
		if len(sent) != n {
			t.Errorf("%s: %d commands sent for %d operations: %v", op, len(sent), n, sent)
		}
		t.Logf("%s: %d ops -> commandstats evalsha=%d, MONITOR %d client commands: %.2f round trips per op",
			op, n, evalsha, len(sent), float64(len(sent))/n)
	}
	grants := make([]driver.Grant, n)
	measure("acquire", func(i int) { grants[i] = acquire(t, b, fmt.Sprintf("k%d", i), 10*time.Second) })
	measure("renew", func(i int) {
		if _, err := b.Renew(ctx, grants[i], 10*time.Second); err != nil {
			t.Fatal(err)
		}
	})
	measure("release", func(i int) {
		if err := b.Release(ctx, grants[i]); err != nil {
			t.Fatal(err)
		}
	})
	for i := range grants {
		grants[i] = acquire(t, b, fmt.Sprintf("k%d", i), 10*time.Second)
	}
	measure("acquire (held)", func(i int) {
		_, err := b.Acquire(ctx, driver.AcquireRequest{Key: fmt.Sprintf("k%d", i), Owner: owner(), TTL: time.Second})
		if !errors.Is(err, driver.ErrNotAcquired) {
			t.Fatal(err)
		}
	})
}

// TestWaitReplicas: with a replica, WAIT confirms the acquire; without
// enough replicas the acquire fails with ErrReplication and leaves no lock.
func TestWaitReplicas(t *testing.T) {
	primary, rc := startReplicated(t)
	ctx := context.Background()
	b, c := newBackend(t, primary, Options{WaitReplicas: 1, WaitTimeout: 5 * time.Second})
	g := acquire(t, b, "k", 10*time.Second)
	if v := str(t, rc, "GET", b.LockKey("k")); v != g.Owner {
		t.Fatal("lock not on the replica after a WAIT-confirmed acquire")
	}
	// Held: still a HeldError.
	if _, err := b.Acquire(ctx, driver.AcquireRequest{Key: "k", Owner: owner(), TTL: time.Second}); !errors.Is(err, driver.ErrNotAcquired) {
		t.Fatalf("held: %v", err)
	}
	b2, _ := newBackend(t, primary, Options{WaitReplicas: 2, WaitTimeout: 50 * time.Millisecond})
	_, err := b2.Acquire(ctx, driver.AcquireRequest{Key: "k2", Owner: owner(), TTL: 10 * time.Second})
	if !errors.Is(err, ErrReplication) || errors.Is(err, driver.ErrNotAcquired) {
		t.Fatalf("2 replicas wanted, 1 present: %v, want ErrReplication", err)
	}
	t.Logf("too few replicas: %v", err)
	if n := num(t, c, "EXISTS", b.LockKey("k2")); n != 0 {
		t.Fatal("lock left behind after ErrReplication")
	}
	// The same owner tries again (a Locker keeps its owner token across
	// attempts): once enough replicas acknowledge, it takes the key. The
	// release of the unconfirmed grant is not the clean-up of an attempt
	// whose outcome is unknown (its reply came back), which would refuse
	// the owner's attempts for AbandonTTL.
	again := owner()
	if _, err := b2.Acquire(ctx, driver.AcquireRequest{Key: "k3", Owner: again, TTL: 10 * time.Second}); !errors.Is(err, ErrReplication) {
		t.Fatalf("2 replicas wanted, 1 present: %v, want ErrReplication", err)
	}
	if _, err := b.Acquire(ctx, driver.AcquireRequest{Key: "k3", Owner: again, TTL: 10 * time.Second}); err != nil {
		t.Fatalf("the same owner's next attempt, with enough replicas: %v, want the key", err)
	}
	// The same for a set of keys (AcquireMulti).
	set := driver.MultiRequest{Keys: []string{"{s}a", "{s}b"}, Owner: owner(), TTL: 10 * time.Second}
	if _, err := b2.AcquireMulti(ctx, set); !errors.Is(err, ErrReplication) {
		t.Fatalf("a set, 2 replicas wanted, 1 present: %v, want ErrReplication", err)
	}
	if _, err := b.AcquireMulti(ctx, set); err != nil {
		t.Fatalf("the same owner's next attempt at the set, with enough replicas: %v, want the keys", err)
	}
	// Renew is confirmed the same way: with the replica it succeeds and
	// the replica has the new TTL; wanting 2 replicas it fails with
	// ErrReplication (a transient error, not ErrNotHeld), so the Locker
	// keeps its old deadline.
	if _, err := b.Renew(ctx, g, 30*time.Second); err != nil {
		t.Fatalf("renew with WAIT: %v", err)
	}
	if pttl := num(t, rc, "PTTL", b.LockKey("k")); pttl <= 10000 {
		t.Fatalf("replica PTTL %dms after a WAIT-confirmed renew to 30s", pttl)
	}
	if _, err := b2.Renew(ctx, g, 30*time.Second); !errors.Is(err, ErrReplication) || errors.Is(err, driver.ErrNotHeld) {
		t.Fatalf("renew wanting 2 replicas: %v, want ErrReplication", err)
	}
	other := g
	other.Owner = owner()
	if _, err := b.Renew(ctx, other, time.Second); !errors.Is(err, driver.ErrNotHeld) {
		t.Fatalf("renew of another owner with WAIT: %v, want ErrNotHeld", err)
	}
}
