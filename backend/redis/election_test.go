package redis

import (
	"context"
	"crypto/sha1"
	"encoding/hex"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/fencedlock/fencedlock/driver"
	"github.com/fencedlock/fencedlock/internal/redisnames"
)

// TestProclaimHolderIDs: proclaim.lua computes the holder id of the owner
// token the lock holds (SHA-256 in Lua, LuaBitOp) as driver.HolderID does,
// for tokens whose padding falls on each side of a 64-byte block boundary
// and for bytes above 0x7f and zero: the holder's Proclaim is accepted, a
// holder id one character off is refused, and the leader record holds the
// holder id, value and the token's SHA-1, never the token.
func TestProclaimHolderIDs(t *testing.T) {
	b, c := startBackend(t)
	ctx := context.Background()
	for i, n := range []int{1, 8, 55, 56, 57, 63, 64, 65, 119, 120, 200, 1000} {
		tok := strings.Repeat(string(rune('a'+i)), n)
		if n >= 8 {
			tok = tok[:n-4] + "\x00\xff\x80\x7f"
		}
		key := fmt.Sprint("holder-", n)
		g, err := b.Acquire(ctx, driver.AcquireRequest{Key: key, Owner: tok, TTL: time.Minute})
		if err != nil {
			t.Fatalf("acquire %q: %v", key, err)
		}
		hid := driver.HolderID(tok)
		off := hid[:15] + string("01"[(hid[15]-'0'+1)%2])
		if err := b.Proclaim(ctx, key, g.Fence, off, []byte("v")); !errors.Is(err, driver.ErrNotHeld) {
			t.Fatalf("token of %d bytes: Proclaim with holder id %s (the holder's is %s): %v, want ErrNotHeld", n, off, hid, err)
		}
		if err := b.Proclaim(ctx, key, g.Fence, hid, []byte("value\x00"+key)); err != nil {
			t.Fatalf("token of %d bytes: Proclaim with its holder id %s: %v", n, hid, err)
		}
		info, err := b.Leader(ctx, key)
		if err != nil || !info.Held || info.Fence != g.Fence || info.Holder != hid || string(info.Value) != "value\x00"+key || info.TTL <= 0 || info.TTL > time.Minute {
			t.Fatalf("token of %d bytes: Leader = %+v, %v; want fence %v, holder %s, its value, a TTL up to 1m", n, info, err, g.Fence, hid)
		}
		rec := do(t, c, "HGETALL", b.LockKey(key)+":leader")
		vals, err := rec.AsStrMap()
		if err != nil {
			t.Fatal(err)
		}
		for f, v := range vals {
			if v == tok || (n >= 8 && strings.Contains(v, tok)) { // a 1-byte token may be in a hex id
				t.Fatalf("the leader record's field %s holds the owner token", f)
			}
		}
		if sum := sha1.Sum([]byte(tok)); len(vals) != 4 || vals["holder"] != hid || vals["fence"] != fmt.Sprint(g.Fence) || vals["owner"] != hex.EncodeToString(sum[:]) {
			t.Fatalf("leader record = %q, want fence %v, holder %s, value and the SHA-1 of the owner token", vals, g.Fence, hid)
		}
	}
}

// TestWatchLeaderEndsAndMissed: a term that ends without a message (its
// key deleted, as by expiry) followed by the next term is delivered as
// its end, then the next term, without Missed (nothing was lost); terms
// led and ended while the watcher does not receive are reported by one
// event with the state now and Missed (the counter shows grants the
// watch never saw).
func TestWatchLeaderEndsAndMissed(t *testing.T) {
	b, c := startBackend(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	const key = "watched"
	lead := func(v string) driver.Grant {
		t.Helper()
		g := acquire(t, b, key, time.Minute)
		if err := b.Proclaim(ctx, key, g.Fence, driver.HolderID(g.Owner), []byte(v)); err != nil {
			t.Fatal(err)
		}
		return g
	}
	recv := func(events <-chan driver.LeaderEvent) driver.LeaderEvent {
		t.Helper()
		return nextLeaderEvent(t, ctx, events)
	}
	events, stop, err := b.WatchLeader(ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	defer stop()
	// Not received yet: the watch holds its first event while two terms
	// come and go.
	for _, v := range []string{"a", "b"} {
		if err := b.Release(ctx, lead(v)); err != nil {
			t.Fatal(err)
		}
	}
	if ev := recv(events); ev.Held || ev.Missed {
		t.Fatalf("first event %+v, want the state when the watch began: no leader", ev)
	}
	if ev := recv(events); ev.Held || !ev.Missed {
		t.Fatalf("event after two unseen terms %+v, want no leader, Missed", ev)
	}
	ga := lead("c")
	if ev := recv(events); !ev.Held || ev.Fence != ga.Fence || ev.Missed {
		t.Fatalf("event %+v, want the term of fence %v", ev, ga.Fence)
	}
	do(t, c, "DEL", b.LockKey(key)) // ends the term without a message
	gb := lead("d")
	if ev := recv(events); ev.Held || ev.Missed {
		t.Fatalf("event %+v, want the end of the term of fence %v", ev, ga.Fence)
	}
	if ev := recv(events); !ev.Held || ev.Fence != gb.Fence || string(ev.Value) != "d" || ev.Missed {
		t.Fatalf("event %+v, want the term of fence %v, value d, not Missed", ev, gb.Fence)
	}
	stop()
	for range events { // closed by stop
	}
}

// TestProclaimWaitReplicas: with WaitReplicas, Proclaim is confirmed by
// WAIT as Acquire is: with the replica the record is on it when Proclaim
// returns; wanting 2 replicas of 1 it fails with ErrReplication, not
// ErrNotHeld.
func TestProclaimWaitReplicas(t *testing.T) {
	primary, rc := startReplicated(t)
	ctx := context.Background()
	b, _ := newBackend(t, primary, Options{WaitReplicas: 1, WaitTimeout: 5 * time.Second})
	g := acquire(t, b, "k", 10*time.Second)
	if err := b.Proclaim(ctx, "k", g.Fence, driver.HolderID(g.Owner), []byte("v")); err != nil {
		t.Fatalf("Proclaim with WAIT: %v", err)
	}
	if v := str(t, rc, "HGET", b.LockKey("k")+":leader", "value"); v != "v" {
		t.Fatalf("leader value on the replica after a WAIT-confirmed Proclaim: %q", v)
	}
	b2, _ := newBackend(t, primary, Options{WaitReplicas: 2, WaitTimeout: 50 * time.Millisecond})
	err := b2.Proclaim(ctx, "k", g.Fence, driver.HolderID(g.Owner), []byte("w"))
	if !errors.Is(err, ErrReplication) || errors.Is(err, driver.ErrNotHeld) {
		t.Fatalf("Proclaim wanting 2 replicas of 1: %v, want ErrReplication", err)
	}
}

// TestWatchLeaderLeaseNotYetProclaimed: a watcher woken while a term's
// lease is granted but its value not yet stored (Campaign acquires, then
// Proclaims) reads no leader and must deliver nothing then: that grant is
// the next term, delivered once proclaimed, without Missed. A loaded run
// once delivered "no leader, Missed" there (TestWatchLeaderEndsAndMissed:
// "event {... Held:false ... Missed:true}, want the term of fence 3").
func TestWatchLeaderLeaseNotYetProclaimed(t *testing.T) {
	b, c := startBackend(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	const key = "pending"
	events, stop, err := b.WatchLeader(ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	defer stop()
	next := func() driver.LeaderEvent {
		t.Helper()
		return nextLeaderEvent(t, ctx, events)
	}
	if ev := next(); ev.Held || ev.Missed {
		t.Fatalf("first event %+v, want no leader", ev)
	}
	g := acquire(t, b, key, time.Minute)
	// Wake the watcher now, between the grant and the Proclaim.
	do(t, c, "PUBLISH", b.LockKey(key)+redisnames.ReleasedSuffix, "released")
	select {
	case ev := <-events:
		t.Fatalf("event %+v while the term's value was not stored yet, want none", ev)
	case <-time.After(500 * time.Millisecond):
	}
	if err := b.Proclaim(ctx, key, g.Fence, driver.HolderID(g.Owner), []byte("v")); err != nil {
		t.Fatal(err)
	}
	if ev := next(); !ev.Held || ev.Fence != g.Fence || ev.Missed {
		t.Fatalf("event %+v, want the term of fence %v, not Missed", ev, g.Fence)
	}
}

// nextLeaderEvent returns the next event of events, failing t if none
// comes before ctx ends.
func nextLeaderEvent(t *testing.T, ctx context.Context, events <-chan driver.LeaderEvent) driver.LeaderEvent {
	t.Helper()
	select {
	case ev := <-events:
		return ev
	case <-ctx.Done():
		t.Fatal("no event within a minute")
	}
	return driver.LeaderEvent{}
}
