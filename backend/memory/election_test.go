package memory_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/fencedlock/fencedlock/backend/memory"
	"github.com/fencedlock/fencedlock/driver"
)

// TestWatchLeaderSlowReceiver: a watcher that does not receive while 200
// terms begin and end gets, once it receives, a backlog in order that ends
// with the current state, and the collapse of the backlog past its bound
// is marked Missed; nothing older follows anything newer.
func TestWatchLeaderSlowReceiver(t *testing.T) {
	s := memory.NewStore()
	b, w := s.Backend(), s.Backend()
	defer b.Close()
	defer w.Close()
	ctx := t.Context()
	events, stop, err := w.WatchLeader(ctx, "svc")
	if err != nil {
		t.Fatal(err)
	}
	defer stop()
	var last driver.Grant
	for i := range 200 {
		g, err := b.Acquire(ctx, driver.AcquireRequest{Key: "svc", Owner: fmt.Sprint("owner-", i), TTL: time.Minute})
		if err != nil {
			t.Fatal(err)
		}
		if err := b.Proclaim(ctx, "svc", g.Fence, driver.HolderID(g.Owner), []byte(fmt.Sprint(i))); err != nil {
			t.Fatal(err)
		}
		if i < 199 {
			if err := b.Release(ctx, g); err != nil {
				t.Fatal(err)
			}
		}
		last = g
	}
	var newest uint64
	missed := false
	timeout := time.After(time.Minute)
	for {
		var ev driver.LeaderEvent
		select {
		case ev = <-events:
		case <-timeout:
			t.Fatalf("the current term (fence %v) never delivered", last.Fence)
		}
		missed = missed || ev.Missed
		if ev.Held {
			if uint64(ev.Fence) <= newest {
				t.Fatalf("term %v delivered after term %v", ev.Fence, newest)
			}
			newest = uint64(ev.Fence)
			if ev.Fence == last.Fence {
				break
			}
		}
	}
	if !missed {
		t.Fatal("400 changes delivered to a watcher that did not receive, past a backlog of 64, without Missed")
	}
}
