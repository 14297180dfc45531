package bench

import (
	"context"
	"errors"
	"flag"
	"slices"
	"strings"
	"testing"
	"time"
)

// A contender is one lock library in one configuration. Its constructor
// lives in the file named after the library; the scenarios in
// scenario_bench_test.go use only this interface.
type contender struct {
	// name is the sub-benchmark name (no slashes, no spaces).
	name string
	// server is "redis" or "etcd": which server the contender talks to.
	server string
	// open returns a new, independent lock client: what one process holds.
	open func(tb testing.TB, e *env, cfg clientConfig) lockClient
	// manualRenew: the library can renew a held lock on request.
	manualRenew bool
	// autoRenew: the library renews held locks by itself (or the contender's
	// constructor runs the renew loop a user of it would have to write).
	autoRenew bool
}

// clientConfig is what a scenario asks of a client.
type clientConfig struct {
	ttl    time.Duration // lease on the server
	manual bool          // the scenario renews by hand: keep any watchdog quiet
	// keepAlive: the scenario holds leases past their TTL (ManyLeases), so
	// contenders without a watchdog run the renew loop a user would write.
	// Elsewhere the raw baseline stays the bare minimum.
	keepAlive bool
}

// lockClient is one library client.
type lockClient interface {
	// acquire blocks until key is held or ctx ends, using the library's own
	// waiting strategy.
	acquire(ctx context.Context, key string) (heldLock, error)
	close()
}

// heldLock is one held lock.
type heldLock interface {
	Renew(ctx context.Context) error
	Release(ctx context.Context) error
	// Done is closed when the library reports the lock lost (or released);
	// nil if the library cannot tell.
	Done() <-chan struct{}
}

// errNoRenew is returned by Renew of libraries without a manual renew.
var errNoRenew = errors.New("bench: library has no manual renew")

// contenders lists every contender in report order. The raw baseline comes
// first: every ratio is relative to it.
var contenders []contender

func register(c contender) { contenders = append(contenders, c) }

// baselineName is the contender every ratio is computed against.
const baselineName = "raw-rueidis"

func init() {
	// Files register their contenders in init functions; fix the order here
	// so the report does not depend on file names.
	order := map[string]int{
		baselineName: 0, "fencedlock-redis": 1, "fencedlock-redis-fair": 1, "fencedlock-goredis": 2, "redsync": 3, "redislock": 4,
		"rueidislock": 5, "rueidislock-km1": 6,
		"fencedlock-etcd": 7, "etcd-mutex": 8, "etcd-mutex-shared": 9,
	}
	sortContenders = func() {
		for i := 1; i < len(contenders); i++ {
			for j := i; j > 0 && order[contenders[j].name] < order[contenders[j-1].name]; j-- {
				contenders[j], contenders[j-1] = contenders[j-1], contenders[j]
			}
		}
	}
}

var sortContenders func()

func allContenders() []contender {
	sortContenders()
	return contenders
}

// flagPass selects the order of the b.N scenarios (AcquireRelease, Renew,
// Overhead) for one pass of a multi-pass run (see passOrder); -1, the
// default, keeps the registration order. The report passes 0, 1, 2...
var flagPass = flag.Int("pass", -1,
	"pass number of a multi-pass run: run the baseline adjacent to every contender in the b.N scenarios, in an order that alternates with the pass (ABBA); -1: registration order, baseline once")

// passOrder returns the order in which a b.N scenario runs names (whose
// first element is the baseline every ratio is taken against) in pass
// pass. For pass < 0 it is names. Otherwise the baseline runs before
// every pair of the others and after the last one, so each contender runs
// right next to a baseline sample, and its ratio is taken against a
// baseline measured under the same load, seconds apart, rather than
// against one baseline sample a whole pass away:
//
//	pass 0: B a b B c d B e B
//	pass 1: B e B d c B b a B   (the reverse)
//
// Odd passes reverse the sequence, so a contender that runs just after a
// baseline in one pass runs just before one in the next (ABBA), and drift
// along a pass lands on the two sides of the ratio in turn.
func passOrder[T any](names []T, pass int) []T {
	if pass < 0 || len(names) < 2 {
		return names
	}
	base, others := names[0], names[1:]
	var seq []T
	for i := 0; i < len(others); i += 2 {
		seq = append(seq, base)
		seq = append(seq, others[i:min(i+2, len(others))]...)
	}
	seq = append(seq, base)
	if pass%2 == 1 {
		slices.Reverse(seq)
	}
	return seq
}

// TestPassOrder: in a pass, every contender runs right next to a baseline
// sample, and odd passes reverse the order (ABBA).
func TestPassOrder(t *testing.T) {
	for _, tc := range []struct {
		names []string
		pass  int
		want  string
	}{
		{[]string{"B", "a", "b", "c", "d", "e"}, -1, "B a b c d e"},
		{[]string{"B", "a", "b", "c", "d", "e"}, 0, "B a b B c d B e B"},
		{[]string{"B", "a", "b", "c", "d", "e"}, 1, "B e B d c B b a B"},
		{[]string{"B", "a", "b", "c", "d"}, 2, "B a b B c d B"},
		{[]string{"B", "a"}, 0, "B a B"},
		{[]string{"B", "a"}, 3, "B a B"},
		{[]string{"B"}, 0, "B"},
	} {
		got := strings.Join(passOrder(tc.names, tc.pass), " ")
		if got != tc.want {
			t.Errorf("passOrder(%v, %d) = %q, want %q", tc.names, tc.pass, got, tc.want)
		}
	}
}

// TestTrimmedRatio: the paired ratio is base over own time, leaving out
// the slowest rounds (both sides of each) so that a stall of the machine
// in one round does not move it.
func TestTrimmedRatio(t *testing.T) {
	var pts []pairTime
	for range 99 {
		pts = append(pts, pairTime{own: 100 * time.Microsecond, base: 90 * time.Microsecond})
	}
	// One round stalled 50 ms on the baseline's side: untrimmed, the
	// ratio would be (99*90+50000)/(100*100) = 5.89.
	pts = append(pts, pairTime{own: 100 * time.Microsecond, base: 50 * time.Millisecond})
	if r, ok := trimmedRatio(pts, 0); !ok || r < 5.88 || r > 5.9 {
		t.Errorf("untrimmed ratio %v, %v; want 5.89", r, ok)
	}
	if r, ok := trimmedRatio(pts, 0.01); !ok || r != 0.9 {
		t.Errorf("trimmed ratio %v, %v; want 0.9", r, ok)
	}
	if _, ok := trimmedRatio(nil, 0.01); ok {
		t.Errorf("ratio of no rounds")
	}
}
