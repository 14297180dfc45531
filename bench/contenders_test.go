package bench

import (
	"context"
	"errors"
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
