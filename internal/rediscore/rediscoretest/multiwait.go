package rediscoretest

import (
	"context"
	"crypto/rand"
	"errors"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/fencedlock/fencedlock/driver"
	"github.com/fencedlock/fencedlock/internal/redisscript"
	"github.com/fencedlock/fencedlock/internal/testserver"
)

// runMultiWaitReplicas: with WaitReplicas a set of keys is confirmed by
// WAIT as a single key is. With the replica up, AcquireMulti and
// RenewMulti succeed and the replica holds every lock with the owner's
// token and the renewed TTL; a set overlapping a held key is
// ErrNotAcquired. Wanting 2 replicas of 1, AcquireMulti fails with
// ErrReplication (not ErrNotAcquired) and no key of the set stays held,
// and RenewMulti fails with ErrReplication (not a lost key), the set still
// released afterwards.
func runMultiWaitReplicas[C any](t *testing.T, a Adapter[C]) {
	primary := testserver.StartRedis(t)
	replica := testserver.StartRedis(t, testserver.WithReplicaOf(primary))
	ctx := context.Background()
	pc := a.local(t, primary)
	b := a.waiting(t, pc, 1, 5*time.Second)
	onPrimary := a.Fixture(b, pc).Do
	onReplica := a.Fixture(b, a.local(t, replica)).Do
	deadline := time.Now().Add(10 * time.Second)
	for {
		info, _ := onReplica(ctx, "INFO", "replication")
		if strings.Contains(info, "master_link_status:up") {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the replica did not sync in 10s: %q", info)
		}
		time.Sleep(20 * time.Millisecond)
	}
	m := multiLocker(t, b)
	keys := []string{"m/a", "m/b", "m/c"}
	g, err := m.AcquireMulti(ctx, driver.MultiRequest{Keys: keys, Owner: rand.Text(), TTL: 10 * time.Second})
	if err != nil {
		t.Fatalf("acquire set with one replica: %v", err)
	}
	if _, err := m.RenewMulti(ctx, g, 30*time.Second); err != nil {
		t.Fatalf("renew set with one replica: %v", err)
	}
	for _, k := range keys {
		if v, err := onReplica(ctx, "GET", b.LockKey(k)); err != nil || v != g.Owner {
			t.Fatalf("%s on the replica after a WAIT-confirmed set acquire: %v, want the owner", k, err)
		}
		pttl, err := onReplica(ctx, "PTTL", b.LockKey(k))
		if n, _ := strconv.Atoi(pttl); err != nil || n <= 10000 {
			t.Fatalf("%s: replica PTTL %s (%v) after a WAIT-confirmed renew to 30s", k, pttl, err)
		}
	}
	if _, err := m.AcquireMulti(ctx, driver.MultiRequest{Keys: []string{"m/x", "m/b"}, Owner: rand.Text(), TTL: time.Second}); !errors.Is(err, driver.ErrNotAcquired) {
		t.Fatalf("set with a held key: %v, want ErrNotAcquired", err)
	}

	b2 := a.waiting(t, pc, 2, 50*time.Millisecond)
	m2 := multiLocker(t, b2)
	other := []string{"m/x", "m/y"}
	_, err = m2.AcquireMulti(ctx, driver.MultiRequest{Keys: other, Owner: rand.Text(), TTL: 10 * time.Second})
	if !errors.Is(err, redisscript.ErrReplication) || errors.Is(err, driver.ErrNotAcquired) {
		t.Fatalf("set wanting 2 replicas of 1: %v, want ErrReplication", err)
	}
	t.Logf("too few replicas: %v", err)
	for _, k := range other {
		if n, err := onPrimary(ctx, "EXISTS", b.LockKey(k)); err != nil || n != "0" {
			t.Fatalf("%s held after the set's ErrReplication (EXISTS %s, %v)", k, n, err)
		}
	}
	_, err = m2.RenewMulti(ctx, g, 30*time.Second)
	var lost *driver.LostKeyError
	if !errors.Is(err, redisscript.ErrReplication) || errors.As(err, &lost) {
		t.Fatalf("renew set wanting 2 replicas: %v, want ErrReplication", err)
	}
	if err := m.ReleaseMulti(ctx, g); err != nil {
		t.Fatalf("release of the set after the unconfirmed renew: %v", err)
	}
	for _, k := range keys {
		if n, err := onPrimary(ctx, "EXISTS", b.LockKey(k)); err != nil || n != "0" {
			t.Fatalf("%s held after ReleaseMulti (EXISTS %s, %v)", k, n, err)
		}
	}
}

// multiLocker is b as a driver.MultiLocker.
func multiLocker(t *testing.T, b FullBackend) driver.MultiLocker {
	t.Helper()
	m, ok := b.(driver.MultiLocker)
	if !ok {
		t.Fatalf("%T is no driver.MultiLocker", b)
	}
	return m
}
