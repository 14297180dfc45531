package rediscore

import (
	"context"
	"errors"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/fencedlock/fencedlock/driver"
	"github.com/fencedlock/fencedlock/internal/redisnames"
)

var quiet = slog.New(slog.DiscardHandler)

func woken(w *Watcher, d time.Duration) bool {
	select {
	case <-w.C():
		return true
	case <-time.After(d):
		return false
	}
}

// mustWatch watches channel through hs; the watch stops when t ends.
func mustWatch(t *testing.T, hs *Hubs, channel, id string) *Watcher {
	t.Helper()
	w, stop, err := hs.Watch(context.Background(), "k", channel, id)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(stop)
	return w
}

// TestHubHandOff: a hand-off message ("granted <id> <fence>") wakes the
// waiter it names, with its fence, and no one else; any other message
// wakes every watcher of the channel; one SUBSCRIBE serves them all.
func TestHubHandOff(t *testing.T) {
	ps := newFake(false)
	hs := NewHubs(ps, quiet, false, 0)
	defer hs.Close()
	a, b, plain := mustWatch(t, hs, "ch", "id-a"), mustWatch(t, hs, "ch", "id-b"), mustWatch(t, hs, "ch", "")
	c := ps.dials()[0]
	if subs, _ := c.counts("ch"); subs != 1 || len(ps.dials()) != 1 {
		t.Fatalf("%d SUBSCRIBEs on %d connections for 3 watchers of one channel, want 1 on 1", subs, len(ps.dials()))
	}
	c.onMessage("ch", redisnames.GrantedPrefix+"id-b 42")
	if !woken(b, time.Second) || b.Fence() != 42 {
		t.Fatalf("named waiter: fence %d", b.Fence())
	}
	if woken(a, 20*time.Millisecond) || woken(plain, 0) || a.Fence() != 0 {
		t.Fatal("a hand-off woke a watcher it does not name")
	}
	c.onMessage("ch", "released")
	for _, w := range []*Watcher{a, b, plain} {
		if !woken(w, time.Second) {
			t.Fatal("a release did not wake every watcher")
		}
	}
	c.onMessage("other", "released") // a channel not watched: ignored
}

// TestHubLinger: a fair-queue waiter's channel stays subscribed for
// lingerFor after its last watch stopped (a waiter then finds it
// subscribed and sends no SUBSCRIBE), and is unsubscribed after; a plain
// watch's channel is unsubscribed at once.
func TestHubLinger(t *testing.T) {
	ps := newFake(false)
	hs := NewHubs(ps, quiet, false, 0)
	defer hs.Close()
	ctx := context.Background()
	start := time.Now()
	for _, id := range []string{"id", "id2"} {
		_, stop, err := hs.Watch(ctx, "k", "fair", id)
		if err != nil {
			t.Fatal(err)
		}
		stop()
		if !hs.Subscribed([]byte("fair")) {
			t.Fatal("fair channel not lingering after its last watch")
		}
	}
	c := ps.dials()[0]
	if subs, unsubs := c.counts("fair"); subs != 1 || unsubs != 0 {
		t.Fatalf("watched again while lingering: %d SUBSCRIBEs, %d UNSUBSCRIBEs; want 1, 0", subs, unsubs)
	}
	ps.await(t, "unsub fair")
	if d := time.Since(start); d < lingerFor {
		t.Fatalf("unsubscribed %v after the first watch stopped, want at least %v", d, lingerFor)
	}
	_, stop, err := hs.Watch(ctx, "k", "plain", "")
	if err != nil {
		t.Fatal(err)
	}
	stop()
	ps.await(t, "unsub plain")
}

// TestHubConnectionLost: a connection that worked and is lost wakes its
// watchers, and the hub subscribes them again on a new connection; a
// connection that never worked (the server is down) triggers nothing, so
// nothing spins.
func TestHubConnectionLost(t *testing.T) {
	ps := newFake(false)
	hs := NewHubs(ps, quiet, false, 0)
	defer hs.Close()
	w := mustWatch(t, hs, "ch", "")
	ps.await(t, "sub ch")
	ps.dials()[0].end(errors.New("connection reset"))
	if !woken(w, time.Second) {
		t.Fatal("watcher not woken by the loss of its connection")
	}
	ps.await(t, "dial")
	ps.await(t, "sub ch")
	ps.dials()[1].onMessage("ch", "released")
	if !woken(w, time.Second) {
		t.Fatal("not woken through the new connection")
	}

	// A connection on which no SUBSCRIBE succeeded: its loss dials nothing.
	ps2 := newFake(true)
	hs2 := NewHubs(ps2, quiet, false, 0)
	defer hs2.Close()
	done := make(chan error, 1)
	go func() {
		_, _, err := hs2.Watch(context.Background(), "k", "ch", "")
		done <- err
	}()
	ps2.await(t, "dial")
	ps2.dials()[0].end(errors.New("connection refused"))
	if err := <-done; err == nil || !strings.Contains(err.Error(), "subscription connection lost") {
		t.Fatalf("watch on a connection lost before its confirmation: %v", err)
	}
	time.Sleep(50 * time.Millisecond)
	if n := len(ps2.dials()); n != 1 {
		t.Fatalf("%d connections dialed after a connection that never worked was lost, want 1", n)
	}
}

// TestHubCloseEndsPendingWatch: a Watch waiting for its confirmation
// returns an error wrapping ErrClosed when the hubs are closed; a Watch
// after Close too.
func TestHubCloseEndsPendingWatch(t *testing.T) {
	ps := newFake(true)
	hs := NewHubs(ps, quiet, false, 0)
	done := make(chan error, 1)
	go func() {
		_, _, err := hs.Watch(context.Background(), "k", "ch", "")
		done <- err
	}()
	ps.await(t, "dial")
	hs.Close()
	if err := <-done; !errors.Is(err, driver.ErrClosed) {
		t.Fatalf("pending watch after Close: %v, want ErrClosed", err)
	}
	if _, _, err := hs.Watch(context.Background(), "k", "ch", ""); !errors.Is(err, driver.ErrClosed) {
		t.Fatalf("watch after Close: %v, want ErrClosed", err)
	}
	hs.Close() // idempotent
}

// TestHubsShardedBound: with sharded hubs, one connection per hash slot
// watched; at maxConns slots a Watch of one more fails at once
// (ErrTooManySlots) while none is being given back, and otherwise waits
// for one (bounded by its context).
func TestHubsShardedBound(t *testing.T) {
	ps := newFake(false)
	hs := NewHubs(ps, quiet, true, 2)
	defer hs.Close()
	ctx := context.Background()
	mustWatch(t, hs, "{a}", "")
	mustWatch(t, hs, "x{a}", "") // the same slot: the same hub
	_, stopB, err := hs.Watch(ctx, "b", "{b}", "")
	if err != nil {
		t.Fatal(err)
	}
	if n := hs.Conns(); n != 2 || len(ps.dials()) != 2 {
		t.Fatalf("%d hubs, %d connections for 2 slots", n, len(ps.dials()))
	}
	if _, _, err := hs.Watch(ctx, "c", "{c}", ""); !errors.Is(err, ErrTooManySlots) {
		t.Fatalf("third slot at the bound: %v, want ErrTooManySlots", err)
	}
	stopB()
	// {b}'s hub is closing or closed: a third slot gets a connection.
	wctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	_, stopC, err := hs.Watch(wctx, "c", "{c}", "")
	if err != nil {
		t.Fatalf("third slot after one was given back: %v", err)
	}
	stopC()
	if HashSlot("{a}") != HashSlot("x{a}") || HashSlot("123456789") != 12739 {
		t.Fatal("HashSlot: hash tags or CRC16 wrong")
	}
}
