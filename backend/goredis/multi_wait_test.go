package goredis

import (
	"errors"
	"testing"
	"time"

	"github.com/fencedlock/fencedlock/driver"
	"github.com/fencedlock/fencedlock/internal/testserver"
)

// TestMultiWaitReplicas: with WaitReplicas a set is confirmed as a single
// key is (as in backend/redis). With the replica, AcquireMulti and
// RenewMulti succeed; wanting 2 replicas of 1, AcquireMulti fails with
// ErrReplication and no key of the set stays held, and RenewMulti fails
// with ErrReplication, not a lost key.
func TestMultiWaitReplicas(t *testing.T) {
	primary := testserver.StartRedis(t)
	testserver.StartRedis(t, testserver.WithReplicaOf(primary))
	ctx := ctxT(t)
	b, c := newBackend(t, primary, Options{WaitReplicas: 1, WaitTimeout: 5 * time.Second})
	keys := []string{"m/a", "m/b", "m/c"}
	g, err := b.AcquireMulti(ctx, driver.MultiRequest{Keys: keys, Owner: owner(), TTL: time.Minute})
	if err != nil {
		t.Fatalf("acquire set with one replica: %v", err)
	}
	if _, err := b.RenewMulti(ctx, g, time.Minute); err != nil {
		t.Fatalf("renew set with one replica: %v", err)
	}
	b2, _ := newBackend(t, primary, Options{WaitReplicas: 2, WaitTimeout: 50 * time.Millisecond})
	other := []string{"m/x", "m/y"}
	_, err = b2.AcquireMulti(ctx, driver.MultiRequest{Keys: other, Owner: owner(), TTL: time.Minute})
	if !errors.Is(err, ErrReplication) || errors.Is(err, driver.ErrNotAcquired) {
		t.Fatalf("set wanting 2 replicas of 1: %v, want ErrReplication", err)
	}
	t.Logf("too few replicas: %v", err)
	for _, k := range other {
		if n := c.Exists(ctx, b2.LockKey(k)).Val(); n != 0 {
			t.Fatalf("%s held after the set's ErrReplication", k)
		}
	}
	_, err = b2.RenewMulti(ctx, g, time.Minute)
	var lost *driver.LostKeyError
	if !errors.Is(err, ErrReplication) || errors.As(err, &lost) {
		t.Fatalf("renew set wanting 2 replicas: %v, want ErrReplication", err)
	}
	if err := b.ReleaseMulti(ctx, g); err != nil {
		t.Fatalf("release of the set after the unconfirmed renew: %v", err)
	}
	for _, k := range keys {
		if n := c.Exists(ctx, b.LockKey(k)).Val(); n != 0 {
			t.Fatalf("%s held after ReleaseMulti", k)
		}
	}
}
