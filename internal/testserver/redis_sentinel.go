package testserver

import (
	"fmt"
	"net"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/redis/rueidis"
)

// SentinelOptions configures StartSentinels. Zero fields take the defaults
// noted.
//
// Split votes: Sentinel elects the sentinel that runs a failover by majority
// vote, one vote per sentinel and epoch, first come first served, and every
// sentinel that sees the master objectively down stands for election and
// votes for itself. When all of them see it down within the same few
// milliseconds (they notice a killed master together, and on a loaded
// machine they are scheduled in bursts), 3 sentinels vote 1-1-1, the
// election aborts after min(10s, failover-timeout) and no sentinel tries
// again before 2*failover-timeout: 40s here, longer than a test waits. It
// happened in 5 of 84 failovers of TestSentinelFailover with 3 or 4 such
// tests running at once on 2 cores. So only the first Quorum sentinels
// detect a down master after DownAfter; the others detect it after
// VoterDownAfter, and until then they only vote, for the first candidate
// that asks. With 3 sentinels and the default quorum (2) there are then at
// most 2 candidates for 3 votes, so one candidate has a majority.
type SentinelOptions struct {
	MasterName string // default "fencedlock"
	Quorum     int    // default a majority of the sentinels
	// DownAfter is down-after-milliseconds of the first Quorum sentinels,
	// the ones that may stand for election; default 500ms.
	DownAfter time.Duration
	// VoterDownAfter is down-after-milliseconds of the other sentinels;
	// default 20s, far beyond the election: with the default DownAfter
	// the leader was elected 0.7-1.1s after a kill on the loaded machine
	// (TestSentinelFailover prints it for every round).
	VoterDownAfter time.Duration
	// FailoverTimeout is failover-timeout; default 20s. Sentinel also waits
	// this long before "fixing" a replica that replicates from an address it
	// does not expect (a replica behind a fault proxy), so keep it longer
	// than the test.
	FailoverTimeout time.Duration
}

func (o SentinelOptions) resolve(n int) SentinelOptions {
	if o.MasterName == "" {
		o.MasterName = "fencedlock"
	}
	if o.Quorum == 0 {
		o.Quorum = n/2 + 1
	}
	if o.DownAfter == 0 {
		o.DownAfter = 500 * time.Millisecond
	}
	if o.VoterDownAfter == 0 {
		o.VoterDownAfter = 20 * time.Second
	}
	if o.FailoverTimeout == 0 {
		o.FailoverTimeout = 20 * time.Second
	}
	return o
}

// Sentinels is a group of redis-sentinel processes monitoring one master.
type Sentinels struct {
	Nodes      []*Redis
	MasterName string
}

// StartSentinels starts n redis-sentinel processes that monitor primary,
// each on a free port in its own directory (sentinel rewrites its config
// file), stopped when the test ends. It does not wait for them to discover
// each other or the replicas: see WaitReady.
func StartSentinels(t testing.TB, primary *Redis, n int, o SentinelOptions) *Sentinels {
	t.Helper()
	o = o.resolve(n)
	bin := Binary(t, "redis-sentinel")
	g := &Sentinels{MasterName: o.MasterName}
	for i := range n {
		downAfter := o.DownAfter
		if i >= o.Quorum {
			downAfter = o.VoterDownAfter
		}
		// Sentinel logs no "Ready to accept connections"; it monitors the
		// master once it listens.
		s := &Redis{t: t, bin: bin, Dir: t.TempDir(), readyLine: "+monitor master"}
		err := s.launch("sentinel.conf", func(port int) []string {
			name := o.MasterName
			lines := append(serverConf(port, s.Dir),
				fmt.Sprintf("sentinel monitor %s 127.0.0.1 %d %d", name, primary.Port, o.Quorum),
				fmt.Sprintf("sentinel down-after-milliseconds %s %d", name, downAfter.Milliseconds()),
				fmt.Sprintf("sentinel failover-timeout %s %d", name, o.FailoverTimeout.Milliseconds()),
				fmt.Sprintf("sentinel parallel-syncs %s 1", name),
			)
			if primary.password != "" {
				lines = append(lines, fmt.Sprintf("sentinel auth-pass %s %s", name, quote(primary.password)))
				if primary.user != "" {
					lines = append(lines, fmt.Sprintf("sentinel auth-user %s %s", name, primary.user))
				}
			}
			return lines
		})
		if err != nil {
			t.Fatalf("testserver: starting redis-sentinel: %v", err)
		}
		t.Cleanup(s.Stop)
		g.Nodes = append(g.Nodes, s)
	}
	return g
}

// SentinelReadyTimeout bounds WaitReady.
const SentinelReadyTimeout = 20 * time.Second

// WaitReady waits until every sentinel knows at least replicas replicas of
// the master and all the other sentinels (they find each other through
// hello messages every 2s), so that a failover can be authorized.
func (g *Sentinels) WaitReady(t testing.TB, replicas int) {
	t.Helper()
	deadline := time.Now().Add(SentinelReadyTimeout)
	for _, s := range g.Nodes {
		for {
			reps, err1 := s.CLI(t, "SENTINEL", "REPLICAS", g.MasterName)
			sens, err2 := s.CLI(t, "SENTINEL", "SENTINELS", g.MasterName)
			if err1 == nil && err2 == nil && countFields(reps, "flags") >= replicas &&
				countFields(sens, "flags") == len(g.Nodes)-1 && !strings.Contains(reps, "s_down") {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("testserver: sentinel %s not ready after %v:\nreplicas:\n%s\nsentinels:\n%s", s.Addr, SentinelReadyTimeout, reps, sens)
			}
			time.Sleep(100 * time.Millisecond)
		}
	}
}

// countFields counts the lines of redis-cli output equal to name (one per
// entry of a SENTINEL REPLICAS or SENTINELS reply).
func countFields(out, name string) int {
	n := 0
	for _, l := range strings.Split(out, "\n") {
		if strings.TrimSpace(l) == name {
			n++
		}
	}
	return n
}

// MasterAddr returns the master address the first sentinel reports.
func (g *Sentinels) MasterAddr(t testing.TB) string {
	t.Helper()
	out, err := g.Nodes[0].CLI(t, "SENTINEL", "GET-MASTER-ADDR-BY-NAME", g.MasterName)
	if err != nil {
		t.Fatalf("testserver: %v", err)
	}
	f := strings.Fields(out)
	if len(f) != 2 {
		t.Fatalf("testserver: SENTINEL GET-MASTER-ADDR-BY-NAME: %q", out)
	}
	return net.JoinHostPort(f[0], f[1])
}

// ClientOption returns rueidis options that find the master through the
// sentinels (rueidis's Sentinel option), with the data servers' credentials
// taken from primary.
func (g *Sentinels) ClientOption(primary *Redis) rueidis.ClientOption {
	opt := primary.ClientOption()
	opt.InitAddress = nil
	for _, s := range g.Nodes {
		opt.InitAddress = append(opt.InitAddress, s.Addr)
	}
	opt.Sentinel = rueidis.SentinelOption{MasterSet: g.MasterName, TopologyRefreshInterval: time.Second}
	return opt
}

// Client returns a sentinel-mode rueidis client, closed when the test ends.
func (g *Sentinels) Client(t testing.TB, primary *Redis, edit func(*rueidis.ClientOption)) rueidis.Client {
	t.Helper()
	return newClient(t, g.ClientOption(primary), edit, "the primary through the sentinels")
}

// Events returns the times at which the sentinels logged event (such as
// "+elected-leader", "+switch-master" or "-failover-abort-not-elected"),
// in order, read from the timestamps of their logs (millisecond precision).
func (g *Sentinels) Events(event string) []time.Time {
	var at []time.Time
	for _, s := range g.Nodes {
		for _, line := range strings.Split(s.Log(), "\n") {
			// 9582:X 01 Dec 2026 15:01:37.126 # +odown master fencedlock ...
			f := strings.Fields(line)
			if len(f) < 7 || f[6] != event {
				continue
			}
			ts, err := time.ParseInLocation("02 Jan 2006 15:04:05.000", strings.Join(f[1:5], " "), time.Local)
			if err == nil {
				at = append(at, ts)
			}
		}
	}
	slices.SortFunc(at, time.Time.Compare)
	return at
}
