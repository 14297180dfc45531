package redistest

import (
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/rueidis"
)

// Cluster is a Redis Cluster of masters without replicas, created with
// `redis-cli --cluster create`, each node a Server in its own directory.
type Cluster struct {
	Nodes []*Server
}

// ClusterReadyTimeout bounds how long StartCluster waits for every node to
// report cluster_state:ok with all slots assigned.
const ClusterReadyTimeout = 30 * time.Second

// StartCluster starts masters (at least 3) cluster-enabled servers, joins
// them with redis-cli --cluster create and waits until every node sees a
// healthy cluster of all of them. Every node is stopped when the test ends.
func StartCluster(t testing.TB, masters int, opts ...Option) *Cluster {
	t.Helper()
	if masters < 3 {
		t.Fatalf("redistest: a cluster needs at least 3 masters, not %d", masters)
	}
	c := &Cluster{}
	args := []string{"--cluster", "create"}
	for range masters {
		s := Start(t, append([]Option{WithConfig(
			"cluster-enabled yes",
			"cluster-config-file nodes.conf",
			"cluster-node-timeout 5000",
		)}, opts...)...)
		c.Nodes = append(c.Nodes, s)
		args = append(args, s.Addr)
	}
	args = append(args, "--cluster-replicas", "0", "--cluster-yes")
	if out, err := c.Nodes[0].CLI(t, args...); err != nil {
		t.Fatalf("redistest: creating the cluster: %v\n%s", err, out)
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
				t.Fatalf("redistest: cluster not ready after %v: node %s:\n%s\n%s", ClusterReadyTimeout, s.Addr, info, nodes)
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
	return c
}

// Client returns a rueidis cluster client seeded with every node, closed at
// the end of the test. edit, if not nil, adjusts the options first.
func (c *Cluster) Client(t testing.TB, edit func(*rueidis.ClientOption)) rueidis.Client {
	t.Helper()
	opt := c.Nodes[0].ClientOption()
	opt.InitAddress = nil
	for _, s := range c.Nodes {
		opt.InitAddress = append(opt.InitAddress, s.Addr)
	}
	if edit != nil {
		edit(&opt)
	}
	cl, err := rueidis.NewClient(opt)
	if err != nil {
		t.Fatalf("redistest: connecting to the cluster: %v", err)
	}
	t.Cleanup(cl.Close)
	if cl.Mode() != rueidis.ClientModeCluster {
		t.Fatalf("redistest: client mode %q, want cluster", cl.Mode())
	}
	return cl
}

// KeySlot returns the hash slot of key, as CLUSTER KEYSLOT computes it.
func (c *Cluster) KeySlot(t testing.TB, key string) int {
	t.Helper()
	out, err := c.Nodes[0].CLI(t, "CLUSTER", "KEYSLOT", key)
	if err != nil {
		t.Fatalf("redistest: %v", err)
	}
	n, err := strconv.Atoi(strings.TrimSpace(out))
	if err != nil {
		t.Fatalf("redistest: CLUSTER KEYSLOT %q: %q", key, out)
	}
	return n
}

// NodeID returns the cluster node id of s.
func (c *Cluster) NodeID(t testing.TB, s *Server) string {
	t.Helper()
	out, err := s.CLI(t, "CLUSTER", "MYID")
	if err != nil {
		t.Fatalf("redistest: %v", err)
	}
	return strings.TrimSpace(out)
}

// Owner returns the node that serves slot, according to the first node's
// CLUSTER NODES (a slot being migrated is still served by its source).
func (c *Cluster) Owner(t testing.TB, slot int) *Server {
	t.Helper()
	return c.ownerFromNodes(t, slot)
}

// ownerFromNodes parses CLUSTER NODES of the first node.
func (c *Cluster) ownerFromNodes(t testing.TB, slot int) *Server {
	t.Helper()
	out, err := c.Nodes[0].CLI(t, "CLUSTER", "NODES")
	if err != nil {
		t.Fatalf("redistest: %v", err)
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
	t.Fatalf("redistest: no node serves slot %d:\n%s", slot, out)
	return nil
}
