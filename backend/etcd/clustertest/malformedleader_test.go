package clustertest

import (
	"context"
	"crypto/rand"
	"errors"
	"slices"
	"testing"
	"time"

	"google.golang.org/grpc"

	"github.com/fencedlock/fencedlock/backend/etcd"
	"github.com/fencedlock/fencedlock/driver"
)

// TestWatchLeaderMalformedRecord: an operator (or another program sharing
// the KeyPrefix) overwrites a live term's leader record with something
// that is not one. The watcher is told, not left believing in the term
// the record no longer vouches for: it receives a state with no leader,
// marked Missed; Leader returns an error wrapping driver.ErrPermanent.
// While the record stays malformed the watch reads nothing (it waits for
// the record to change: no polling), and once a new term proclaims, that
// term is delivered, marked Missed. Before the fix the watch re-read the
// state every 100 ms, failed, and delivered nothing, for as long as the
// record stayed malformed.
func TestWatchLeaderMalformedRecord(t *testing.T) {
	e := newEnv(t)
	var rc rpcCounter
	b := e.countedBackend(1, grpc.WithChainUnaryInterceptor(rc.intercept))
	h := e.backend(2)
	ctx := ctxFor(t, time.Minute)
	const key = "svc-malformed"
	campaign := func(value string) driver.Grant {
		t.Helper()
		g, err := h.Acquire(ctx, driver.AcquireRequest{Key: key, Owner: rand.Text(), TTL: 30 * time.Second})
		if err != nil {
			t.Fatal(err)
		}
		if err := h.Proclaim(ctx, key, g.Fence, driver.HolderID(g.Owner), []byte(value)); err != nil {
			t.Fatal(err)
		}
		return g
	}
	g := campaign("one")
	events, stop, err := b.WatchLeader(ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	defer stop()
	next := func(what string) driver.LeaderEvent {
		t.Helper()
		select {
		case ev, ok := <-events:
			if !ok {
				t.Fatalf("%s: the watch's channel closed", what)
			}
			return ev
		case <-time.After(30 * time.Second): // a bound on a failure, not a timing claim
			t.Fatalf("%s: no event within 30s", what)
		}
		panic("unreachable")
	}
	if ev := next("the first state"); !ev.Held || ev.Fence != g.Fence {
		t.Fatalf("first event %+v, want the term of fence %d", ev, g.Fence)
	}

	if _, err := e.admin.Put(ctx, etcd.DefaultKeyPrefix+"elections/"+key, "not a leader record"); err != nil {
		t.Fatal(err)
	}
	if ev := next("after the record was overwritten"); ev.Held || !ev.Missed {
		t.Fatalf("event %+v after the leader record was overwritten, want no leader, Missed", ev)
	}
	if _, err := b.Leader(ctx, key); !errors.Is(err, driver.ErrPermanent) {
		t.Fatalf("Leader with a malformed record: %v, want an error wrapping ErrPermanent", err)
	}
	// No polling while it stays malformed: nothing changes, nothing is read.
	rc.take()
	time.Sleep(time.Second)
	if calls := rc.take(); slices.Contains(calls, "Txn") || slices.Contains(calls, "Range") {
		t.Fatalf("the watch read the state %v in 1s while the record stayed malformed (a read every 100 ms before the fix)", calls)
	}

	if err := h.Release(ctx, g); err != nil {
		t.Fatal(err)
	}
	g2 := campaign("two")
	ev := next("after a new term proclaimed")
	for !ev.Held { // the end of the old term may come first
		ev = next("after a new term proclaimed")
	}
	if ev.Fence != g2.Fence || string(ev.Value) != "two" || !ev.Missed {
		t.Fatalf("event %+v, want the new term of fence %d, value \"two\", Missed", ev, g2.Fence)
	}
	if err := h.Release(context.Background(), g2); err != nil {
		t.Fatal(err)
	}
}
