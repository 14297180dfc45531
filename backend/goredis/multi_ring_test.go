package goredis

import (
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/fencedlock/fencedlock/driver"
	"github.com/fencedlock/fencedlock/internal/redisscript"
	"github.com/fencedlock/fencedlock/internal/testserver"
)

// TestMultiRingShards: a *redis.Ring runs a script on the shard of its
// first key's hash tag and moves keys between shards as shards come and
// go. A set of keys on two shards took the other shard's key on the wrong
// server, where a single-key lease of that key never looks: both held it.
// Every key's lock has a hash tag of its own (KeyPrefix refuses braces),
// and two keys on one shard today may be on two tomorrow, so a set of
// more than one key on a Ring is refused with ErrInvalid before anything
// is sent; a set of one key works.
func TestMultiRingShards(t *testing.T) {
	s1, s2 := testserver.StartRedis(t), testserver.StartRedis(t)
	ring := redis.NewRing(&redis.RingOptions{Addrs: map[string]string{"s1": s1.Addr, "s2": s2.Addr}})
	t.Cleanup(func() { ring.Close() })
	ctx := ctxT(t)
	shard := func(key string) string {
		c, err := ring.GetShardClientForKey(redisscript.LockKey(redisscript.DefaultKeyPrefix, key))
		if err != nil {
			t.Fatal(err)
		}
		return c.Options().Addr
	}
	// k0, a key on the other shard and one on the same shard.
	apart, along := "", ""
	for i := 1; (apart == "" || along == "") && i < 1000; i++ {
		k := fmt.Sprintf("k%d", i)
		if shard(k) != shard("k0") {
			apart = k
		} else {
			along = k
		}
	}
	if apart == "" || along == "" {
		t.Fatal("no keys found on both shards")
	}

	b, err := New(ring, Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { b.Close() })
	for _, other := range []string{apart, along} {
		single, err := b.Acquire(ctx, driver.AcquireRequest{Key: other, Owner: owner(), TTL: time.Minute})
		if err != nil {
			t.Fatal(err)
		}
		keys := []string{"k0", other}
		if g, err := b.AcquireMulti(ctx, driver.MultiRequest{Keys: keys, Owner: owner(), TTL: time.Minute}); !errors.Is(err, driver.ErrInvalid) {
			t.Errorf("set %q on a Ring, shards %s and %s, %q held by a single-key lease: %v (grant %v), want ErrInvalid",
				keys, shard("k0"), shard(other), other, err, g)
		}
		if info, err := b.Inspect(ctx, "k0"); err != nil || info.Held {
			t.Errorf("%q after the refused set: held %v (%v), want free", "k0", info.Held, err)
		}
		if err := b.Release(ctx, single); err != nil {
			t.Fatal(err)
		}
	}

	// A set of one key is one shard's: taken, excluding single-key leases.
	g, err := b.AcquireMulti(ctx, driver.MultiRequest{Keys: []string{apart}, Owner: owner(), TTL: time.Minute})
	if err != nil {
		t.Fatalf("a set of one key on a Ring: %v", err)
	}
	if _, err := b.Acquire(ctx, driver.AcquireRequest{Key: apart, Owner: owner(), TTL: time.Minute}); !errors.Is(err, driver.ErrNotAcquired) {
		t.Errorf("single-key acquire of %q held by a set: %v, want ErrNotAcquired", apart, err)
	}
	if _, err := b.RenewMulti(ctx, g, time.Minute); err != nil {
		t.Errorf("RenewMulti: %v", err)
	}
	if err := b.ReleaseMulti(ctx, g); err != nil {
		t.Errorf("ReleaseMulti: %v", err)
	}
}
