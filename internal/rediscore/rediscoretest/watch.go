package rediscoretest

import (
	"context"
	"fmt"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/fencedlock/fencedlock/driver"
	"github.com/fencedlock/fencedlock/internal/rediscore"
	"github.com/fencedlock/fencedlock/internal/testserver"
	"github.com/redis/rueidis"
)

// WatchBackend is what the wake-up tests need of an adapter's Backend.
type WatchBackend interface {
	driver.Backend
	driver.Notifier
	Channel(key string) string
}

// WatchServer is the server a wake-up test runs on: a redis-server, or a
// Redis Cluster (then Redis is nil).
type WatchServer struct {
	Redis   *testserver.Redis
	Cluster *testserver.RedisCluster
}

// NewWatchBackend returns a Backend of the adapter on srv, with
// ShardedPubSub set to sharded and MaxShardedConns to maxConns (0: the
// default), closed when t ends, and the wake-up hubs it watches with.
type NewWatchBackend func(t *testing.T, srv WatchServer, sharded bool, maxConns int) (WatchBackend, *rediscore.Hubs)

// RunWatch runs the promises of the wake-up hub (rediscore.Hubs) on the
// adapter that newBackend makes, each on a server of its own; the server
// is observed (CLIENT LIST, PUBSUB NUMSUB) through a client of the
// test's own.
func RunWatch(t *testing.T, newBackend NewWatchBackend) {
	tests := []struct {
		name string
		run  func(*testing.T, NewWatchBackend)
	}{
		{"Multiplexed", testWatchMultiplexed},
		{"Churn", testWatchChurn},
		{"ConnectionLost", testWatchConnectionLost},
		{"ServerDown", testWatchServerDown},
		{"ShardedHubsReclaimed", testShardedHubsReclaimed},
		{"ShardedHubsReclaimedCluster", testShardedHubsReclaimedCluster},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) { tc.run(t, newBackend) })
	}
}

// testWatchMultiplexed: many watches on a few keys share one connection
// with one subscription per channel; a release wakes exactly the watchers
// of its key; the last stop unsubscribes.
func testWatchMultiplexed(t *testing.T, newBackend NewWatchBackend) {
	srv := testserver.StartRedis(t)
	b, _ := newBackend(t, WatchServer{Redis: srv}, false, 0)
	c := srv.Client(t, nil)
	ctx := ctxT(t)
	keys := []string{"a", "b}", "{c"}
	type w struct {
		key  string
		ch   <-chan struct{}
		stop func()
	}
	var ws []w
	for i := range 9 {
		k := keys[i%len(keys)]
		ch, stop, err := b.Watch(ctx, k)
		if err != nil {
			t.Fatal(err)
		}
		ws = append(ws, w{k, ch, stop})
	}
	clients := pubsubClients(t, c)
	if len(clients) != 1 || !strings.Contains(clients[0], " sub=3 ") {
		t.Fatalf("want one pubsub connection with 3 subscriptions, got %q", clients)
	}
	for _, k := range keys {
		if n := numsub(t, c, b.Channel(k)); n != 1 {
			t.Fatalf("channel of %q: %d subscribers, want 1", k, n)
		}
	}
	// Release "b}": its three watchers wake, the others don't.
	release(t, b, "b}")
	for _, x := range ws {
		if x.key == "b}" && !received(x.ch, 5*time.Second) {
			t.Fatalf("watcher of %q not woken", x.key)
		}
	}
	for _, x := range ws {
		if x.key != "b}" && received(x.ch, 20*time.Millisecond) {
			t.Fatalf("watcher of %q woken by the release of another key", x.key)
		}
	}
	for i, x := range ws {
		if i != 0 {
			x.stop()
		}
	}
	ws[0].stop()
	ws[0].stop() // a second call is harmless
	waitFor(t, 5*time.Second, "unsubscribes", func() bool {
		for _, k := range keys {
			if numsub(t, c, b.Channel(k)) != 0 {
				return false
			}
		}
		return true
	})
}

// testWatchChurn: concurrent watches and stops on few keys, each watch
// checked to be in effect when Watch returns (a publish right after it is
// delivered); at the end no subscription is left.
func testWatchChurn(t *testing.T, newBackend NewWatchBackend) {
	srv := testserver.StartRedis(t)
	b, _ := newBackend(t, WatchServer{Redis: srv}, false, 0)
	c := srv.Client(t, nil)
	ctx := ctxT(t)
	const goroutines, rounds = 8, 25
	errs := make(chan error, goroutines)
	for g := range goroutines {
		go func() {
			var err error
			for i := 0; i < rounds && err == nil; i++ {
				err = churnRound(ctx, b, c, fmt.Sprintf("churn-%d", (g+i)%3))
			}
			errs <- err
		}()
	}
	for range goroutines {
		if err := <-errs; err != nil {
			t.Error(err)
		}
	}
	waitFor(t, 5*time.Second, "no subscription left", func() bool {
		for i := range 3 {
			if numsub(t, c, b.Channel(fmt.Sprintf("churn-%d", i))) != 0 {
				return false
			}
		}
		return true
	})
}

// churnRound watches key, publishes on its channel as the release script
// does, and checks that the watcher got it.
func churnRound(ctx context.Context, b WatchBackend, c rueidis.Client, key string) error {
	ch, stop, err := b.Watch(ctx, key)
	if err != nil {
		return err
	}
	defer stop()
	if err := c.Do(ctx, c.B().Publish().Channel(b.Channel(key)).Message("released").Build()).Error(); err != nil {
		return err
	}
	if !received(ch, 5*time.Second) {
		return fmt.Errorf("watch of %q returned before it was in effect: publish not delivered", key)
	}
	return nil
}

// testWatchConnectionLost: when the subscription connection is killed, the
// watchers are woken (a release may have been missed) and their channels
// are subscribed again on a new connection, with and without sharding.
func testWatchConnectionLost(t *testing.T, newBackend NewWatchBackend) {
	srv := testserver.StartRedis(t)
	c := srv.Client(t, nil)
	ctx := ctxT(t)
	for _, sharded := range []bool{false, true} {
		b, _ := newBackend(t, WatchServer{Redis: srv}, sharded, 0)
		ch, stop, err := b.Watch(ctx, "k")
		if err != nil {
			t.Fatal(err)
		}
		if n := num(t, c, "CLIENT", "KILL", "TYPE", "pubsub"); n != 1 {
			t.Fatalf("sharded %v: killed %d pubsub connections, want 1", sharded, n)
		}
		if !received(ch, 5*time.Second) {
			t.Fatalf("sharded %v: watcher not woken by the loss of its connection", sharded)
		}
		// The hub subscribes again in the background: a release is
		// delivered once it has (go-redis may show a connection of its
		// own reconnection meanwhile, which the hub closes).
		waitFor(t, 10*time.Second, "a release delivered after resubscription", func() bool {
			release(t, b, "k")
			return received(ch, 100*time.Millisecond)
		})
		waitFor(t, 5*time.Second, "one subscribed connection", func() bool { return len(pubsubClients(t, c)) == 1 })
		stop()
		b.Close()
		waitFor(t, 5*time.Second, "no subscription left", func() bool { return len(pubsubClients(t, c)) == 0 })
	}
}

// testWatchServerDown: with the server gone, Watch fails with an error
// (the Locker then falls back to TTL hints) and nothing spins; after a
// restart, watching works again.
func testWatchServerDown(t *testing.T, newBackend NewWatchBackend) {
	srv := testserver.StartRedis(t)
	b, _ := newBackend(t, WatchServer{Redis: srv}, false, 0)
	ctx := ctxT(t)
	ch, stop, err := b.Watch(ctx, "k")
	if err != nil {
		t.Fatal(err)
	}
	srv.Kill()
	if !received(ch, 5*time.Second) {
		t.Fatal("watcher not woken when the server died")
	}
	stop()
	wctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	if _, _, err := b.Watch(wctx, "k"); err == nil {
		t.Fatal("Watch succeeded with the server down")
	} else {
		t.Logf("watch with the server down: %v", err)
	}
	srv.Restart()
	waitFor(t, 10*time.Second, "watch after restart", func() bool {
		_, stop, err := b.Watch(ctx, "k")
		if err == nil {
			stop()
		}
		return err == nil
	})
}

// CloseAtEnd fails t if err, the error of the constructor that made b,
// is not nil, and closes b when t ends.
func CloseAtEnd(t *testing.T, b io.Closer, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { b.Close() })
}

// release takes key and releases it: release.lua publishes on its channel.
func release(t *testing.T, b WatchBackend, key string) {
	t.Helper()
	ctx := ctxT(t)
	g, err := b.Acquire(ctx, driver.AcquireRequest{Key: key, Owner: fmt.Sprintf("watch-owner-%d", time.Now().UnixNano()), TTL: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	if err := b.Release(ctx, g); err != nil {
		t.Fatal(err)
	}
}

func received(ch <-chan struct{}, d time.Duration) bool {
	select {
	case <-ch:
		return true
	case <-time.After(d):
		return false
	}
}

// waitFor polls cond every 10ms for at most d.
func waitFor(t *testing.T, d time.Duration, what string, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(d); !cond(); time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %v waiting for %s", d, what)
		}
	}
}
