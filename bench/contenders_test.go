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
	renew  time.Duration // fencedlock's Options.RenewInterval; 0: the default (TTL/3)
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
		// fencedlock-etcd between the two Mutex variants: in every pass it
		// runs next to both of the libraries its ratios are taken against.
		"etcd-mutex": 7, "fencedlock-etcd": 8, "etcd-mutex-shared": 9,
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
	"pass number of a multi-pass run: odd passes run the b.N scenarios' contenders in reverse order; -1: registration order")

// passOrder returns the order in which a b.N scenario runs names in pass
// pass: the registration order, reversed in odd passes, so that the drift
// of the machine's load along a pass lands on the two sides of a
// comparison of neighbours in turn (ABBA), and the report's median over
// passes cancels it. (The ratio to the baseline is measured within each
// contender's sample, interleaved: pairedRatio.)
func passOrder[T any](names []T, pass int) []T {
	if pass%2 != 1 {
		return names
	}
	r := slices.Clone(names)
	slices.Reverse(r)
	return r
}

// TestPassOrder: odd passes reverse the order (ABBA), without changing
// the registration order.
func TestPassOrder(t *testing.T) {
	for _, tc := range []struct {
		names []string
		pass  int
		want  string
	}{
		{[]string{"B", "a", "b", "c"}, -1, "B a b c"},
		{[]string{"B", "a", "b", "c"}, 0, "B a b c"},
		{[]string{"B", "a", "b", "c"}, 1, "c b a B"},
		{[]string{"B", "a", "b", "c"}, 4, "B a b c"},
		{[]string{"B"}, 1, "B"},
	} {
		names := slices.Clone(tc.names)
		got := strings.Join(passOrder(names, tc.pass), " ")
		if got != tc.want || !slices.Equal(names, tc.names) {
			t.Errorf("passOrder(%v, %d) = %q, want %q (and its input unchanged: %v)", tc.names, tc.pass, got, tc.want, names)
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
