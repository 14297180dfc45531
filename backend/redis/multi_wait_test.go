package redis

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/fencedlock/fencedlock/driver"
	"github.com/fencedlock/fencedlock/internal/testserver"
)

// TestMultiWaitReplicas: with WaitReplicas a set is confirmed as a single
// key is. With the replica up, AcquireMulti and RenewMulti succeed and the
// replica has every lock with the renewed TTL; wanting 2 replicas of 1,
// AcquireMulti fails with ErrReplication (not ErrNotAcquired) and no key of
// the set stays held, and RenewMulti fails with ErrReplication (not a
// lost key), the set still held.
func TestMultiWaitReplicas(t *testing.T) {
	primary := testserver.StartRedis(t)
	replica := testserver.StartRedis(t, testserver.WithReplicaOf(primary))
	rc := replica.Client(t, nil)
	waitFor(t, 10*time.Second, "replica sync", func() bool {
		return strings.Contains(str(t, rc, "INFO", "replication"), "master_link_status:up")
	})
	ctx := context.Background()
	b, c := newBackend(t, primary, Options{WaitReplicas: 1, WaitTimeout: 5 * time.Second})
	keys := []string{"m/a", "m/b", "m/c"}
	g, err := b.AcquireMulti(ctx, driver.MultiRequest{Keys: keys, Owner: owner(), TTL: 10 * time.Second})
	if err != nil {
		t.Fatalf("acquire set with one replica: %v", err)
	}
	for _, k := range keys {
		if v := str(t, rc, "GET", b.LockKey(k)); v != g.Owner {
			t.Fatalf("%s: %q on the replica after a WAIT-confirmed set acquire, want the owner", k, v)
		}
	}
	if _, err := b.RenewMulti(ctx, g, 30*time.Second); err != nil {
		t.Fatalf("renew set with one replica: %v", err)
	}
	for _, k := range keys {
		if pttl := num(t, rc, "PTTL", b.LockKey(k)); pttl <= 10000 {
			t.Fatalf("%s: replica PTTL %dms after a WAIT-confirmed renew to 30s", k, pttl)
		}
	}
	if _, err := b.AcquireMulti(ctx, driver.MultiRequest{Keys: []string{"m/x", "m/b"}, Owner: owner(), TTL: time.Second}); !errors.Is(err, driver.ErrNotAcquired) {
		t.Fatalf("set with a held key: %v, want ErrNotAcquired", err)
	}

	b2, _ := newBackend(t, primary, Options{WaitReplicas: 2, WaitTimeout: 50 * time.Millisecond})
	other := []string{"m/x", "m/y"}
	_, err = b2.AcquireMulti(ctx, driver.MultiRequest{Keys: other, Owner: owner(), TTL: 10 * time.Second})
	if !errors.Is(err, ErrReplication) || errors.Is(err, driver.ErrNotAcquired) {
		t.Fatalf("set wanting 2 replicas of 1: %v, want ErrReplication", err)
	}
	t.Logf("too few replicas: %v", err)
	for _, k := range other {
		if n := num(t, c, "EXISTS", b.LockKey(k)); n != 0 {
			t.Fatalf("%s held after the set's ErrReplication", k)
		}
	}
	_, err = b2.RenewMulti(ctx, g, 30*time.Second)
	var lost *driver.LostKeyError
	if !errors.Is(err, ErrReplication) || errors.As(err, &lost) {
		t.Fatalf("renew set wanting 2 replicas: %v, want ErrReplication", err)
	}
	if err := b.ReleaseMulti(ctx, g); err != nil {
		t.Fatalf("release of the set after the unconfirmed renew: %v", err)
	}
}
