package goredis

// WaitReplicas: the script and WAIT as one pipeline, not sent again when
// its reply is lost, and sent to the key's node on a Cluster.

import (
	"context"
	"errors"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/fencedlock/fencedlock/driver"
	"github.com/fencedlock/fencedlock/internal/faultproxy"
	"github.com/fencedlock/fencedlock/internal/testserver"
	"github.com/redis/go-redis/v9"
)

// TestLostReplyWithWait: with WaitReplicas the script and WAIT go out as
// one pipeline; a pipeline whose reply was lost after the server ran the
// script is not sent again either (one EVALSHA on the server for an
// Acquire and for a Renew), and the error is the lost connection's, not
// ErrNotHeld or ErrNotAcquired. Each case has a client of its own: after
// a cut, the next one may hit the reply of the client's new connection
// instead of the script's.
func TestLostReplyWithWait(t *testing.T) {
	primary := testserver.StartRedis(t)
	testserver.StartRedis(t, testserver.WithReplicaOf(primary))
	p, err := faultproxy.New(primary.Addr)
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	admin, _ := newBackend(t, primary, Options{})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	evalshas := func() int64 {
		var n int64
		for _, line := range strings.Split(admin.c.Info(ctx, "commandstats").Val(), "\n") {
			if rest, ok := strings.CutPrefix(strings.TrimSpace(line), "cmdstat_evalsha:calls="); ok {
				n, _ = strconv.ParseInt(strings.SplitN(rest, ",", 2)[0], 10, 64)
			}
		}
		return n
	}
	for _, tc := range []struct {
		name string
		op   func(b *Backend, g driver.Grant) error
	}{
		{"acquire", func(b *Backend, _ driver.Grant) error {
			_, err := b.Acquire(ctx, driver.AcquireRequest{Key: "lost-acquire", Owner: owner(), TTL: time.Minute})
			return err
		}},
		{"renew", func(b *Backend, g driver.Grant) error { _, err := b.Renew(ctx, g, time.Minute); return err }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := redis.NewClient(&redis.Options{Addr: p.Addr()})
			defer c.Close()
			b, err := New(c, Options{WaitReplicas: 1, WaitTimeout: 5 * time.Second})
			if err != nil {
				t.Fatal(err)
			}
			defer b.Close()
			// Load the scripts, and let the replica acknowledge.
			g, err := b.Acquire(ctx, driver.AcquireRequest{Key: "warm-" + tc.name, Owner: owner(), TTL: time.Minute})
			if err != nil {
				t.Fatalf("warm-up acquire: %v", err)
			}
			if _, err := b.Renew(ctx, g, time.Minute); err != nil {
				t.Fatalf("warm-up renew: %v", err)
			}
			before, cuts := evalshas(), p.RepliesCut()
			p.CutReplies(1)
			err = tc.op(b, g)
			p.CutReplies(0)
			if p.RepliesCut() != cuts+1 {
				t.Fatalf("the proxy cut %d replies, want 1", p.RepliesCut()-cuts)
			}
			n := evalshas() - before
			t.Logf("%s, its pipeline's reply lost: %v; EVALSHA ran %d times", tc.name, err, n)
			if n != 1 {
				t.Errorf("EVALSHA ran %d times, want once: the pipeline was sent again after its reply was lost", n)
			}
			if err == nil || errors.Is(err, driver.ErrNotHeld) || errors.Is(err, driver.ErrNotAcquired) {
				t.Errorf("%v, want the unknown outcome of the lost reply", err)
			}
		})
	}
}

// TestClusterWaitOnKeysNode: on a 3-master Cluster (no replicas), with
// WaitReplicas the script and WAIT go to the node serving the key, for
// keys on every node: the script is applied there (no MOVED or CROSSSLOT),
// WAIT counts 0 replicas, the Acquire fails with ErrReplication and the
// lock is released again; without WaitReplicas the lock and fence keys
// sit on the slot's owner.
func TestClusterWaitOnKeysNode(t *testing.T) {
	cl := testserver.StartRedisCluster(t, 3)
	ctx := ctxT(t)
	b, err := New(newClusterClient(t, cl, 0), Options{WaitReplicas: 1, WaitTimeout: 50 * time.Millisecond, ShardedPubSub: true})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	plain, err := New(newClusterClient(t, cl, 0), Options{ShardedPubSub: true})
	if err != nil {
		t.Fatal(err)
	}
	defer plain.Close()
	seen := map[*testserver.Redis]bool{}
	for i := 0; len(seen) < len(cl.Nodes) && i < 1000; i++ {
		key := "order/" + strconv.Itoa(i)
		node := cl.Owner(t, cl.KeySlot(t, b.LockKey(key)))
		if seen[node] {
			continue
		}
		seen[node] = true
		_, err := b.Acquire(ctx, driver.AcquireRequest{Key: key, Owner: owner(), TTL: time.Minute})
		if !errors.Is(err, ErrReplication) {
			t.Fatalf("%q on %s: acquire with WaitReplicas 1 and no replica: %v, want ErrReplication", key, node.Addr, err)
		}
		if out, _ := node.CLI(t, "EXISTS", b.LockKey(key)); strings.TrimSpace(out) != "0" {
			t.Fatalf("%q: lock kept after ErrReplication", key)
		}
		g, err := plain.Acquire(ctx, driver.AcquireRequest{Key: key, Owner: owner(), TTL: time.Minute})
		if err != nil {
			t.Fatal(err)
		}
		for _, k := range []string{b.LockKey(key), b.FenceKey(key)} {
			if out, _ := node.CLI(t, "EXISTS", k); strings.TrimSpace(out) != "1" {
				t.Fatalf("%s not on %s, the slot's owner", k, node.Addr)
			}
		}
		if g.Fence != 2 {
			t.Fatalf("%q: fence %d, want 2 (the refused acquire counted 1)", key, g.Fence)
		}
		if err := plain.Release(ctx, g); err != nil {
			t.Fatal(err)
		}
	}
	if len(seen) != len(cl.Nodes) {
		t.Fatalf("keys found on %d of %d nodes", len(seen), len(cl.Nodes))
	}
}
