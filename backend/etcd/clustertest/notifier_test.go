package clustertest

import (
	"context"
	"crypto/rand"
	"testing"
	"time"

	"github.com/fencedlock/fencedlock/driver"
)

// TestNotifier: the etcd Backend is a [driver.Notifier]. A Watch of a name
// (on member 0's client) is woken when another member's client releases
// the name's lock (its queue entry deleted) and when it releases a
// read-write lease of the name, as the driver's RWLocker contract asks of
// a Notifier; a stopped watch is not. Semaphore slots and multilock sets
// wait through it (multilocktest.ReleaseWakesWaiter runs in
// TestMultilock; the conformance suite's Notifier property in
// TestConformance).
func TestNotifier(t *testing.T) {
	e := newEnv(t)
	n, ok := driver.Backend(e.backend(0)).(driver.Notifier)
	if !ok {
		t.Fatal("the etcd Backend is no driver.Notifier: waiters of semaphores, sets and read-write locks poll")
	}
	holder := e.backend(1)
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()

	// watched takes key on holder for a new owner and starts a watch of it
	// on member 0's client.
	watched := func(t *testing.T, key string) (driver.Grant, <-chan struct{}, func()) {
		t.Helper()
		g, err := holder.Acquire(ctx, driver.AcquireRequest{Key: key, Owner: rand.Text(), TTL: 30 * time.Second})
		if err != nil {
			t.Fatal(err)
		}
		ch, stop, err := n.Watch(ctx, key)
		if err != nil {
			t.Fatal(err)
		}
		return g, ch, stop
	}

	t.Run("Lock", func(t *testing.T) {
		g, ch, stop := watched(t, "notify-lock")
		defer stop()
		woken(t, ch, func() error { return holder.Release(ctx, g) })
	})
	t.Run("RWLock", func(t *testing.T) {
		for _, m := range []driver.RWMode{driver.Read, driver.Write} {
			name := "notify-rw-" + m.String()
			g, err := holder.AcquireRW(ctx, driver.RWRequest{AcquireRequest: driver.AcquireRequest{Key: name, Owner: rand.Text(), TTL: 30 * time.Second}, Mode: m})
			if err != nil {
				t.Fatal(err)
			}
			ch, stop, err := n.Watch(ctx, name)
			if err != nil {
				t.Fatal(err)
			}
			woken(t, ch, func() error { return holder.ReleaseRW(ctx, g, m) })
			stop()
		}
	})
	t.Run("Stopped", func(t *testing.T) {
		g, ch, stop := watched(t, "notify-stopped")
		time.Sleep(300 * time.Millisecond)
		stop()
		select {
		case <-ch:
		default:
		}
		if err := holder.Release(ctx, g); err != nil {
			t.Fatal(err)
		}
		select {
		case <-ch:
			t.Fatal("a stopped watch was woken by a later release")
		case <-time.After(time.Second):
		}
	})
}

// woken waits up to 10s for a wake-up of ch after release ran; the watch
// was set up 300ms before, and what it said by then is dropped.
func woken(t *testing.T, ch <-chan struct{}, release func() error) {
	t.Helper()
	time.Sleep(300 * time.Millisecond)
	select {
	case <-ch:
	default:
	}
	if err := release(); err != nil {
		t.Fatal(err)
	}
	select {
	case <-ch:
	case <-time.After(10 * time.Second):
		t.Fatal("the watch was not woken by the release within 10s")
	}
}
