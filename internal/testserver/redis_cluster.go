package testserver

import (
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/rueidis"
)

// RedisCluster is a Redis Cluster of masters without replicas, created with
// `redis-cli --cluster create`, each node a Redis in its own directory.
type RedisCluster struct {
	Nodes []*Redis
}

// ClusterReadyTimeout bounds how long StartRedisCluster waits for every node to
// report cluster_state:ok with all slots assigned.
const ClusterReadyTimeout = 30 * time.Second

// StartRedisCluster starts masters (at least 3) cluster-enabled servers, joins
// them with redis-cli --cluster create and waits until every node sees a
// healthy cluster of all of them. Every node is stopped when the test ends.
func StartRedisCluster(t testing.TB, masters int, opts ...RedisOption) *RedisCluster {
	t.Helper()
	if masters < 3 {
		t.Fatalf("testserver: a cluster needs at least 3 masters, not %d", masters)
	}
	c := &RedisCluster{}
	args := []string{"--cluster", "create"}
	for range masters {
		s := StartRedis(t, append([]RedisOption{WithConfig(
			"cluster-enabled yes",
			"cluster-config-file nodes.conf",
			"cluster-node-timeout 5000",
		)}, opts...)...)
		c.Nodes = append(c.Nodes, s)
		args = append(args, s.Addr)
	}
	args = append(args, "--cluster-replicas", "0", "--cluster-yes")
	if out, err := c.Nodes[0].CLI(t, args...); err != nil {
		t.Fatalf("testserver: creating the cluster: %v\n%s", err, out)
	}
	deadline := time.Now().Add(ClusterReadyTimeout)
	for _, s := range c.Nodes {
		for {
			info, err := s.CLI(t, "CLUSTER", "INFO")
			nodes, err2 := s.CLI(t, "CLUSTER", "NODES")
			if err == nil && err2 == nil && strings.Contains(info, "cluster_state:ok") &&
				strings.Contains(info, "cluster_slots_ok:16384") &&
				strings.Count(strings.TrimSpace(nodes), "\n")+1 == masters &&
				!strings.Contains(nodes, "handshake") && !strings.Contains(nodes, "noaddr") {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("testserver: cluster not ready after %v: node %s:\n%s\n%s", ClusterReadyTimeout, s.Addr, info, nodes)
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
	return c
}

// Client returns a rueidis cluster client seeded with every node, closed at
// the end of the test. edit, if not nil, adjusts the options first.
func (c *RedisCluster) Client(t testing.TB, edit func(*rueidis.ClientOption)) rueidis.Client {
	t.Helper()
	opt := c.Nodes[0].ClientOption()
	opt.InitAddress = nil
	for _, s := range c.Nodes {
		opt.InitAddress = append(opt.InitAddress, s.Addr)
	}
	cl := newClient(t, opt, edit, "the cluster")
	if cl.Mode() != rueidis.ClientModeCluster {
		t.Fatalf("testserver: client mode %q, want cluster", cl.Mode())
	}
	return cl
}

// KeySlot returns the hash slot of key, as CLUSTER KEYSLOT computes it.
func (c *RedisCluster) KeySlot(t testing.TB, key string) int {
	t.Helper()
	out, err := c.Nodes[0].CLI(t, "CLUSTER", "KEYSLOT", key)
	if err != nil {
		t.Fatalf("testserver: %v", err)
	}
	n, err := strconv.Atoi(strings.TrimSpace(out))
	if err != nil {
		t.Fatalf("testserver: CLUSTER KEYSLOT %q: %q", key, out)
	}
	return n
}

// NodeID returns the cluster node id of s.
func (c *RedisCluster) NodeID(t testing.TB, s *Redis) string {
	t.Helper()
	out, err := s.CLI(t, "CLUSTER", "MYID")
	if err != nil {
		t.Fatalf("testserver: %v", err)
	}
	return strings.TrimSpace(out)
}

// Owner returns the node that serves slot, according to the first node's
// CLUSTER NODES (a slot being migrated is still served by its source).
func (c *RedisCluster) Owner(t testing.TB, slot int) *Redis {
	t.Helper()
	return c.ownerFromNodes(t, slot)
}

// ownerFromNodes parses CLUSTER NODES of the first node.
func (c *RedisCluster) ownerFromNodes(t testing.TB, slot int) *Redis {
	t.Helper()
	out, err := c.Nodes[0].CLI(t, "CLUSTER", "NODES")
	if err != nil {
		t.Fatalf("testserver: %v", err)
	}
	for _, line := range strings.Split(strings.TrimSpace(out), "\n") {
		f := strings.Fields(line)
		if len(f) < 9 {
			continue
		}
		for _, r := range f[8:] {
			if strings.HasPrefix(r, "[") {
				continue // a slot being imported or migrated
			}
			lo, hi, ok := strings.Cut(r, "-")
			if !ok {
				hi = lo
			}
			a, err1 := strconv.Atoi(lo)
			b, err2 := strconv.Atoi(hi)
			if err1 == nil && err2 == nil && a <= slot && slot <= b {
				addr, _, _ := strings.Cut(f[1], "@")
				for _, s := range c.Nodes {
					if s.Addr == addr {
						return s
					}
				}
			}
		}
	}
	t.Fatalf("testserver: no node serves slot %d:\n%s", slot, out)
	return nil
}
