package goredis

import (
	"errors"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/fencedlock/fencedlock/driver"
	"github.com/fencedlock/fencedlock/internal/redistest"
)

// TestClusterWaitOnKeysNode: on a 3-master Cluster (no replicas), with
// WaitReplicas the script and WAIT go to the node serving the key, for
// keys on every node: the script is applied there (no MOVED or CROSSSLOT),
// WAIT counts 0 replicas, the Acquire fails with ErrReplication and the
// lock is released again; without WaitReplicas the lock and fence keys
// sit on the slot's owner.
func TestClusterWaitOnKeysNode(t *testing.T) {
	cl := redistest.StartCluster(t, 3)
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
	seen := map[*redistest.Server]bool{}
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
