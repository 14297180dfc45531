package redis

// Backend.Watch: the wake-up of a release, a hand-off through the Locker
// on miniredis, and a Watch on a client already closed.

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/fencedlock/fencedlock"
	"github.com/fencedlock/fencedlock/driver"
	"github.com/fencedlock/fencedlock/internal/rediscore"
	"github.com/fencedlock/fencedlock/internal/rediscore/rediscoretest"
	"github.com/fencedlock/fencedlock/internal/testserver"
)

// TestWatch runs the promises of the wake-up hub (internal/rediscore)
// through rueidis: watches multiplexed on one connection, churn, a lost
// connection, a server down, sharded hubs reclaimed (on a Cluster too).
func TestWatch(t *testing.T) {
	rediscoretest.RunWatch(t, func(t *testing.T, srv rediscoretest.WatchServer, sharded bool, max int) (rediscoretest.WatchBackend, *rediscore.Hubs) {
		o := Options{ShardedPubSub: sharded, MaxShardedConns: max}
		if srv.Redis != nil {
			b, _ := newBackend(t, srv.Redis, o)
			return b, b.hubs
		}
		b, err := New(srv.Cluster.Client(t, nil), o)
		rediscoretest.CloseAtEnd(t, b, err)
		return b, b.hubs
	})
}

// TestLockerHandOffMini: the Locker's waiting Acquire on the miniredis
// fast path, with the release notification.
func TestLockerHandOffMini(t *testing.T) {
	b, _, _ := newMini(t)
	locker := mustLocker(t, b, fencedlock.Options{TTL: 10 * time.Second})
	defer locker.Close()
	a, err := locker.TryAcquire(context.Background(), "k")
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		l, err := locker.Acquire(ctx, "k")
		if err == nil {
			err = l.Release(context.Background())
		}
		done <- err
	}()
	time.Sleep(50 * time.Millisecond) // let the waiter subscribe; the outcome does not depend on it
	if err := a.Release(context.Background()); err != nil {
		t.Fatal(err)
	}
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}

// TestWatchOnClosedClient: a Watch on a closed rueidis client fails with
// an error wrapping ErrClosed, whichever comes first: the SUBSCRIBE's own
// error, or the subscription connection's monitor giving the dedicated
// connection back (rueidis then reports ErrDedicatedClientRecycled, which
// TestClosed once got under load). 100 rounds.
func TestWatchOnClosedClient(t *testing.T) {
	srv := testserver.StartRedis(t)
	ctx := context.Background()
	recycled := 0
	for i := range 100 {
		b, c := openBackend(t, srv)
		c.Close()
		_, _, err := b.Watch(ctx, "k")
		b.Close()
		if err != nil && strings.Contains(err.Error(), "subscription connection lost") {
			recycled++
		}
		if !errors.Is(err, driver.ErrClosed) {
			t.Fatalf("round %d: watch on a closed client: %v, want ErrClosed", i, err)
		}
	}
	t.Logf("100 watches on closed clients: ErrClosed each time (%d after the connection was given back)", recycled)
}
