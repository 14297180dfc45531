package redis

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/fencedlock/fencedlock/driver"
	"github.com/fencedlock/fencedlock/internal/redistest"
	"github.com/redis/rueidis"
)

// distinctSlotKeys returns n lock names whose channels are in n different
// hash slots.
func distinctSlotKeys(t testing.TB, b *Backend, n int) []string {
	t.Helper()
	seen := make(map[uint16]bool)
	var keys []string
	for i := 0; len(keys) < n && i < 100*n; i++ {
		k := fmt.Sprintf("slot-key-%d", i)
		cmd := b.c.B().Ssubscribe().Channel(b.Channel(k)).Build()
		s := cmd.Slot()
		if !seen[s] {
			seen[s] = true
			keys = append(keys, k)
		}
	}
	if len(keys) != n {
		t.Fatalf("found %d keys in distinct slots, want %d", len(keys), n)
	}
	return keys
}

// connectedClients returns INFO clients connected_clients of the server
// c talks to.
func connectedClients(t testing.TB, c rueidis.Client) int64 {
	return infoInt(t, c, "clients", "connected_clients")
}

// subscribedClients counts the connections with at least one
// subscription (CLIENT LIST fields sub, psub, ssub).
func subscribedClients(t testing.TB, c rueidis.Client) int {
	t.Helper()
	n := 0
	for _, line := range strings.Split(strings.TrimPrefix(str(t, c, "CLIENT", "LIST"), "txt:"), "\n") {
		for _, f := range strings.Fields(line) {
			name, v, _ := strings.Cut(f, "=")
			if (name == "sub" || name == "psub" || name == "ssub") && v != "0" {
				n++
				break
			}
		}
	}
	return n
}

// TestShardedHubsReclaimed: with ShardedPubSub a watch uses a subscription
// connection for its key's hash slot. Watching keys in 200 slots one after
// the other (watch, then stop) left 200 connections open. The connection
// of a slot nobody watches any more is now given back to rueidis's pool,
// unsubscribed, and reused, and the slots watched at once are bounded by
// MaxShardedConns: counted with INFO clients and CLIENT LIST on a real
// Redis 7 server (SSUBSCRIBE works on a standalone server too).
func TestShardedHubsReclaimed(t *testing.T) {
	srv := redistest.Start(t)
	_, c := newBackend(t, srv, Options{})
	const max = 4
	b, _ := newBackend(t, srv, Options{ShardedPubSub: true, MaxShardedConns: max})
	ctx := context.Background()
	base := connectedClients(t, c)
	const slots = 200
	keys := distinctSlotKeys(t, b, slots)
	for _, k := range keys {
		// A watch at the bound waits for the hub of an earlier one to
		// close: none fails.
		_, stop, err := b.Watch(ctx, k)
		if err != nil {
			t.Fatal(err)
		}
		stop()
	}
	peak := connectedClients(t, c) - base
	if peak > max {
		t.Fatalf("after watching %d slots one after the other: %d connections more than before, want at most %d", slots, peak, max)
	}
	// The hubs are closed in the background: wait, bounded.
	var subs int
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		b.hubsMu.Lock()
		hubs := len(b.hubs) + b.closing
		b.hubsMu.Unlock()
		if subs = subscribedClients(t, c); subs == 0 && hubs == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("every watch stopped: %d connections with subscriptions, %d hubs", subs, hubs)
		}
	}
	t.Logf("watched %d slots one after the other: at most %d connections more than before (bound %d), none subscribed at the end",
		slots, peak, max)

	// At once: max slots are watched, one more slot is refused, another
	// watch of a watched slot shares its connection.
	var stops []func()
	for _, k := range keys[:max] {
		_, stop, err := b.Watch(ctx, k)
		if err != nil {
			t.Fatal(err)
		}
		stops = append(stops, stop)
	}
	if _, _, err := b.Watch(ctx, keys[max]); !errors.Is(err, errTooManySlots) || !strings.Contains(err.Error(), "MaxShardedConns") {
		t.Fatalf("watch of slot %d with %d watched: %v", max+1, max, err)
	}
	_, stop, err := b.Watch(ctx, keys[0])
	if err != nil {
		t.Fatalf("second watch of a watched slot: %v", err)
	}
	stops = append(stops, stop)
	if subs := subscribedClients(t, c); subs != max {
		t.Fatalf("%d subscribed connections for %d slots watched", subs, max)
	}
	if n := connectedClients(t, c) - base; n > max {
		t.Fatalf("%d slots watched at once: %d connections more than before", max, n)
	}
	for _, stop := range stops {
		stop()
	}
	waitFor(t, 10*time.Second, "no subscribed connection", func() bool { return subscribedClients(t, c) == 0 })
}

// TestMaxShardedConnsOption: the default and the range of MaxShardedConns.
func TestMaxShardedConnsOption(t *testing.T) {
	b, _, c := newMini(t)
	if got := b.Options().MaxShardedConns; got != DefaultMaxShardedConns {
		t.Fatalf("default MaxShardedConns %d", got)
	}
	for _, n := range []int{-1, 16385} {
		if _, err := New(c, Options{ShardedPubSub: true, MaxShardedConns: n}); !errors.Is(err, driver.ErrInvalid) {
			t.Errorf("MaxShardedConns %d: %v, want ErrInvalid", n, err)
		}
	}
}

// TestShardedHubsReclaimedCluster: the same on a 3-master Redis Cluster,
// where each slot's subscription is made on the node serving it. After
// watching keys in 120 slots of all three nodes one after the other, the
// connections given back sit in rueidis's pool of each node (at most
// MaxShardedConns per node, as at most that many are in use at once), and
// none is subscribed.
func TestShardedHubsReclaimedCluster(t *testing.T) {
	cl := redistest.StartCluster(t, 3)
	c := cl.Client(t, nil)
	const max = 4
	b, err := New(c, Options{ShardedPubSub: true, MaxShardedConns: max})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { b.Close() })
	ctx := context.Background()
	clients := func() (total, subscribed int64) {
		for _, n := range cl.Nodes {
			nc := n.Client(t, nil)
			total += connectedClients(t, nc) - 1 // not nc itself
			subscribed += int64(subscribedClients(t, nc))
			nc.Close()
		}
		return total, subscribed
	}
	base, _ := clients()
	const slots = 120
	nodes := make(map[string]bool)
	for _, k := range distinctSlotKeys(t, b, slots) {
		_, stop, err := b.Watch(ctx, k)
		if err != nil {
			t.Fatal(err)
		}
		if len(nodes) < len(cl.Nodes) {
			nodes[cl.Owner(t, cl.KeySlot(t, b.Channel(k))).Addr] = true
		}
		stop()
	}
	if len(nodes) != len(cl.Nodes) {
		t.Fatalf("the watched slots are on %d of %d nodes", len(nodes), len(cl.Nodes))
	}
	var total, subscribed int64
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		total, subscribed = clients()
		b.hubsMu.Lock()
		hubs := len(b.hubs) + b.closing
		b.hubsMu.Unlock()
		if subscribed == 0 && hubs == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("every watch stopped: %d subscribed connections, %d hubs", subscribed, hubs)
		}
	}
	if total-base > max*int64(len(cl.Nodes)) {
		t.Fatalf("after watching %d slots: %d connections more than before on %d nodes, want at most %d", slots, total-base, len(cl.Nodes), max*len(cl.Nodes))
	}
	t.Logf("cluster: watched %d slots on %d nodes one after the other: %d connections more than before, none subscribed", slots, len(cl.Nodes), total-base)
}
