package redis

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/fencedlock/fencedlock"
	"github.com/fencedlock/fencedlock/internal/redistest"
	"github.com/redis/rueidis"
)

// pubsubClients returns the CLIENT LIST lines of connections with
// subscriptions.
func pubsubClients(t testing.TB, c rueidis.Client) []string {
	t.Helper()
	var out []string
	for _, line := range strings.Split(str(t, c, "CLIENT", "LIST", "TYPE", "pubsub"), "\n") {
		if strings.TrimSpace(line) != "" {
			out = append(out, strings.TrimSpace(line))
		}
	}
	return out
}

func received(ch <-chan struct{}, d time.Duration) bool {
	select {
	case <-ch:
		return true
	case <-time.After(d):
		return false
	}
}

// TestWatchMultiplexed: many watches on a few keys share one connection
// with one subscription per channel; a release wakes exactly the watchers
// of its key; the last stop unsubscribes.
func TestWatchMultiplexed(t *testing.T) {
	srv := redistest.Start(t)
	b, c := newBackend(t, srv, Options{})
	ctx := context.Background()
	keys := []string{"a", "b}", "{c"}
	type w struct {
		key  string
		ch   <-chan struct{}
		stop func()
	}
	var ws []w
	for i := 0; i < 9; i++ {
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
	g := acquire(t, b, "b}", time.Second)
	if err := b.Release(ctx, g); err != nil {
		t.Fatal(err)
	}
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
	// Stopping all but one watcher of "a" keeps its subscription.
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

// TestWatchChurn: concurrent watches and stops on few keys, each watch
// checked to be in effect when Watch returns (a release right after it is
// delivered); at the end no subscription is left.
func TestWatchChurn(t *testing.T) {
	srv := redistest.Start(t)
	b, c := newBackend(t, srv, Options{})
	pub, _ := newBackend(t, srv, Options{})
	ctx := context.Background()
	const goroutines, rounds = 8, 25
	var wg sync.WaitGroup
	errs := make(chan error, goroutines)
	for g := 0; g < goroutines; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < rounds; i++ {
				key := fmt.Sprintf("churn-%d", (g+i)%3)
				ch, stop, err := b.Watch(ctx, key)
				if err != nil {
					errs <- err
					return
				}
				// Publish as the release script does.
				if err := pub.c.Do(ctx, pub.c.B().Publish().Channel(b.Channel(key)).Message("released").Build()).Error(); err != nil {
					errs <- err
					stop()
					return
				}
				if !received(ch, 5*time.Second) {
					errs <- fmt.Errorf("watch of %q returned before it was in effect: publish not delivered", key)
					stop()
					return
				}
				stop()
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	waitFor(t, 5*time.Second, "no subscription left", func() bool {
		for i := 0; i < 3; i++ {
			if numsub(t, c, b.Channel(fmt.Sprintf("churn-%d", i))) != 0 {
				return false
			}
		}
		return true
	})
}

// TestWatchConnectionLost: when the subscription connection is killed, the
// watchers are woken (a release may have been missed) and their channels
// are subscribed again on a new connection.
func TestWatchConnectionLost(t *testing.T) {
	srv := redistest.Start(t)
	b, c := newBackend(t, srv, Options{})
	ctx := context.Background()
	ch, stop, err := b.Watch(ctx, "k")
	if err != nil {
		t.Fatal(err)
	}
	defer stop()
	if n := num(t, c, "CLIENT", "KILL", "TYPE", "pubsub"); n != 1 {
		t.Fatalf("killed %d pubsub connections, want 1", n)
	}
	if !received(ch, 5*time.Second) {
		t.Fatal("watcher not woken by the loss of its connection")
	}
	waitFor(t, 5*time.Second, "resubscription", func() bool { return numsub(t, c, b.Channel("k")) == 1 })
	g := acquire(t, b, "k", time.Second)
	if err := b.Release(ctx, g); err != nil {
		t.Fatal(err)
	}
	if !received(ch, 5*time.Second) {
		t.Fatal("release after resubscription not delivered")
	}
}

// TestWatchServerDown: with the server gone, Watch fails with an error
// (the Locker then falls back to TTL hints) and nothing spins; after a
// restart, watching works again.
func TestWatchServerDown(t *testing.T) {
	srv := redistest.Start(t)
	b, _ := newBackend(t, srv, Options{})
	ctx := context.Background()
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
	var werr error
	waitFor(t, 10*time.Second, "watch after restart", func() bool {
		var stop func()
		_, stop, werr = b.Watch(ctx, "k")
		if werr == nil {
			stop()
		}
		return werr == nil
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
