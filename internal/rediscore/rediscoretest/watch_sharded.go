package rediscoretest

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/fencedlock/fencedlock/internal/rediscore"
	"github.com/fencedlock/fencedlock/internal/redisscript"
	"github.com/fencedlock/fencedlock/internal/testserver"
	"github.com/redis/rueidis"
)

// testShardedHubsReclaimed: with ShardedPubSub a watch uses a subscription
// connection for its key's hash slot. Watching keys in 200 slots one after
// the other (watch, then stop) once left 200 connections open. The
// connection of a slot nobody watches any more is closed (or given back
// to the client's pool, unsubscribed), and the slots watched at once are
// bounded by MaxShardedConns: counted with INFO clients and CLIENT LIST
// on a real Redis 7 server (SSUBSCRIBE works on a standalone server too).
func testShardedHubsReclaimed(t *testing.T, newBackend NewWatchBackend) {
	srv := testserver.StartRedis(t)
	c := srv.Client(t, nil)
	const max = 4
	b, hubs := newBackend(t, WatchServer{Redis: srv}, true, max)
	ctx := ctxT(t)
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
	waitFor(t, 10*time.Second, "no subscribed connection, no hub", func() bool {
		return subscribedClients(t, c) == 0 && hubs.Conns() == 0
	})
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
	if _, _, err := b.Watch(ctx, keys[max]); !errors.Is(err, rediscore.ErrTooManySlots) || !strings.Contains(err.Error(), "MaxShardedConns") {
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

// testShardedHubsReclaimedCluster: the same on a 3-master Redis Cluster,
// where each slot's subscription is made on the node serving it. After
// watching keys in 120 slots of all three nodes one after the other, at
// most MaxShardedConns connections per node are left (as at most that
// many are in use at once), and none is subscribed.
func testShardedHubsReclaimedCluster(t *testing.T, newBackend NewWatchBackend) {
	cl := testserver.StartRedisCluster(t, 3)
	const max = 4
	b, hubs := newBackend(t, WatchServer{Cluster: cl}, true, max)
	ctx := ctxT(t)
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
	waitFor(t, 10*time.Second, "no subscribed connection, no hub", func() bool {
		total, subscribed = clients()
		return subscribed == 0 && hubs.Conns() == 0
	})
	if total-base > max*int64(len(cl.Nodes)) {
		t.Fatalf("after watching %d slots: %d connections more than before on %d nodes, want at most %d", slots, total-base, len(cl.Nodes), max*len(cl.Nodes))
	}
	t.Logf("cluster: watched %d slots on %d nodes one after the other: %d connections more than before, none subscribed", slots, len(cl.Nodes), total-base)
}

// distinctSlotKeys returns n lock names whose channels are in n different
// hash slots.
func distinctSlotKeys(t *testing.T, b WatchBackend, n int) []string {
	t.Helper()
	seen := make(map[uint16]bool)
	var keys []string
	for i := 0; len(keys) < n && i < 100*n; i++ {
		k := fmt.Sprintf("slot-key-%d", i)
		if s := rediscore.HashSlot(b.Channel(k)); !seen[s] {
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
func connectedClients(t *testing.T, c rueidis.Client) int64 {
	t.Helper()
	v, err := strconv.ParseInt(redisscript.InfoField(str(t, c, "INFO", "clients"), "connected_clients"), 10, 64)
	if err != nil {
		t.Fatalf("INFO clients connected_clients: %v", err)
	}
	return v
}

// subscribedClients counts the connections with at least one
// subscription (CLIENT LIST fields sub, psub, ssub).
func subscribedClients(t *testing.T, c rueidis.Client) int {
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

// pubsubClients returns the CLIENT LIST lines of connections with
// subscriptions.
func pubsubClients(t *testing.T, c rueidis.Client) []string {
	t.Helper()
	var out []string
	for _, line := range strings.Split(strings.TrimPrefix(str(t, c, "CLIENT", "LIST", "TYPE", "pubsub"), "txt:"), "\n") {
		if strings.TrimSpace(line) != "" {
			out = append(out, strings.TrimSpace(line))
		}
	}
	return out
}

// numsub returns PUBSUB NUMSUB of channel.
func numsub(t *testing.T, c rueidis.Client, channel string) int64 {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	vals, err := c.Do(ctx, c.B().PubsubNumsub().Channel(channel).Build()).ToArray()
	if err != nil || len(vals) != 2 {
		t.Fatalf("PUBSUB NUMSUB: %v %v", vals, err)
	}
	n, _ := vals[1].AsInt64()
	return n
}

// do sends args as one command on c, bounded by 5 s.
func do(c rueidis.Client, args ...string) rueidis.RedisResult {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	return c.Do(ctx, c.B().Arbitrary(args...).Build())
}

func str(t *testing.T, c rueidis.Client, args ...string) string {
	s, err := do(c, args...).ToString()
	check(t, args, err)
	return s
}

func num(t *testing.T, c rueidis.Client, args ...string) int64 {
	n, err := do(c, args...).AsInt64()
	check(t, args, err)
	return n
}

func check(t *testing.T, cmd []string, err error) {
	if err != nil {
		t.Helper()
		t.Fatalf("%v: %v", cmd, err)
	}
}
