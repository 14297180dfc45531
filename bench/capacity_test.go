package bench

import (
	"context"
	"flag"
	"fmt"
	"sync/atomic"
	"testing"
	"time"
)

// Capacity: what a user of each library buys at concurrency 64, each
// library timed ALONE on the server for a fixed time, as opposed to the
// interleaved ratio of AcquireRelease (vs-base), which runs blocks of the
// library's and the baseline's operations in turn on the same server.
// When the single-threaded server is the bottleneck, each block of the
// interleaved measure waits behind the tail of the other library's
// commands, which pulls that ratio towards 1; a run of its own has no
// such neighbour.

var (
	flagCapacityDuration = flag.Duration("capacity-duration", 2*time.Second,
		"how long Capacity times each library alone in each repetition; -short uses 200ms")
	flagCapacityReps = flag.Int("capacity-reps", 9,
		"Capacity repetitions: each times every library once, odd ones in reverse order (ABBA); -short uses 2")
)

// capacityConc is the number of goroutines of Capacity (one client).
const capacityConc = 64

// capacityWarmup is how long a client runs the Capacity loop untimed
// before its window: connections dialled, scripts loaded, pools full.
const capacityWarmup = 200 * time.Millisecond

// capacityParams returns the window and repetitions of Capacity.
func capacityParams() (time.Duration, int) {
	if testing.Short() {
		return 200 * time.Millisecond, 2
	}
	return *flagCapacityDuration, max(*flagCapacityReps, 1)
}

// capacityResult is one timed run of one library.
type capacityResult struct {
	ops       int64
	elapsed   time.Duration
	commands  int64  // Redis commands in the window (Redis contenders)
	mallocs   uint64 // the process's allocations in the window
	bytes     uint64
	serverCPU time.Duration
	cpuOK     bool // serverCPU measured (the benchmark's own Redis server)
}

// runCapacity opens a client of c and runs conc goroutines, each on its
// own key, in a closed loop of acquire+release (AcquireRelease's
// operation) for d after a warm-up: the throughput of c alone. An
// operation that fails ends the run with its error.
func runCapacity(tb testing.TB, e *env, c contender, conc int, d time.Duration) (capacityResult, error) {
	tb.Helper()
	cl := c.open(tb, e, clientConfig{ttl: benchTTL})
	defer cl.close()
	setup := acquireReleaseOps(cl, "cap", c.name, conc)
	ops := make([]func(context.Context) error, conc)
	for i := range conc {
		ops[i], _ = setup(i) // acquire+release leaves nothing to clean up
	}
	if _, _, err := loopFor(ops, capacityWarmup); err != nil {
		return capacityResult{}, fmt.Errorf("warm-up: %w", err)
	}
	var res capacityResult
	var rc *redisCounter
	var cpu0 time.Duration
	if c.server == "redis" {
		rc = startRedisCounter(tb, e)
		if e.ownRedis {
			cpu0, res.cpuOK = serverCPU(e, "redis")
		}
	}
	m0 := readMem()
	n, elapsed, err := loopFor(ops, d)
	if err != nil {
		return capacityResult{}, err
	}
	m1 := readMem()
	res.ops, res.elapsed = n, elapsed
	res.mallocs, res.bytes = m1.mallocs-m0.mallocs, m1.bytes-m0.bytes
	if res.cpuOK {
		cpu1, ok := serverCPU(e, "redis")
		res.serverCPU, res.cpuOK = cpu1-cpu0, ok
	}
	if rc != nil {
		res.commands, _ = rc.stop(tb)
	}
	return res, nil
}

// loopFor runs ops[i] in a closed loop on goroutine i until d has passed
// (an operation started before then completes) and returns the operations
// completed and the time until the last one did.
func loopFor(ops []func(context.Context) error, d time.Duration) (int64, time.Duration, error) {
	var done atomic.Int64
	var failed atomic.Value
	start := time.Now()
	end := start.Add(d)
	parallel(len(ops), func(i int) {
		ctx := context.Background()
		for time.Now().Before(end) {
			if err := ops[i](ctx); err != nil {
				failed.CompareAndSwap(nil, err)
				return
			}
			done.Add(1)
		}
	})
	elapsed := time.Since(start)
	if err, _ := failed.Load().(error); err != nil {
		return 0, 0, err
	}
	return done.Load(), elapsed, nil
}

// BenchmarkCapacity: acquire+release at concurrency 64 (as
// AcquireRelease/conc=64: one client, 64 goroutines, a key each), every
// library timed alone for -capacity-duration, in -capacity-reps
// repetitions; within a repetition the libraries run in turn, odd
// repetitions in reverse order (passOrder: ABBA). Each sub-benchmark is one
// library in one repetition (go test numbers the repeats #01, #02...):
// ns/op is the window over the operations (the inverse of the
// throughput), rep the repetition, so that the report takes each
// library's ratio to the raw baseline within the same repetition. Run it
// with -benchtime 1x: the window, not b.N, sets the length.
func BenchmarkCapacity(b *testing.B) {
	e := serversDescribed(b)
	d, reps := capacityParams()
	for rep := range reps {
		for _, c := range passOrder(allContenders(), rep) {
			b.Run(fmt.Sprintf("conc=%d/lib=%s", capacityConc, c.name), func(b *testing.B) {
				b.Logf("capacity: %s alone, %d goroutines on one client, one key each, %v, repetition %d", c.name, capacityConc, d, rep)
				r, err := runCapacity(b, e, c, capacityConc, d)
				switch {
				case err != nil && ours(c):
					b.Fatalf("%s: %v", c.name, err)
				case err != nil:
					// A competitor's failure (rueidislock's missed
					// invalidation) is its finding: this repetition has
					// no sample of it, and the run goes on.
					b.Skipf("%s failed, no sample in repetition %d: %v", c.name, rep, err)
				}
				n := float64(max(r.ops, 1))
				b.ReportMetric(float64(r.elapsed.Nanoseconds())/n, "ns/op")
				b.ReportMetric(float64(rep), "rep")
				// Over the window, not the whole function as -benchmem
				// would (b.N is 1).
				b.ReportMetric(float64(r.mallocs)/n, "allocs/op")
				b.ReportMetric(float64(r.bytes)/n, "B/op")
				if r.commands > 0 {
					b.ReportMetric(float64(r.commands)/n, "cmds/op")
				}
				if r.cpuOK {
					b.ReportMetric(float64(r.serverCPU.Nanoseconds())/n, "server-cpu-ns/op")
				}
			})
		}
	}
}

// TestCapacity runs the Capacity loop of the baseline and of fencedlock,
// scaled down, against the real server: every operation succeeds and the
// counts add up. No speed is asserted (the benchmark measures it).
func TestCapacity(t *testing.T) {
	e := servers(t)
	for _, c := range allContenders() {
		if !ours(c) || c.server != "redis" {
			continue
		}
		t.Run(c.name, func(t *testing.T) {
			r, err := runCapacity(t, e, c, 4, 100*time.Millisecond)
			if err != nil {
				t.Fatal(err)
			}
			if r.ops == 0 || r.elapsed < 100*time.Millisecond {
				t.Errorf("%d operations in %v, want some in at least 100ms", r.ops, r.elapsed)
			}
			// Every acquire+release runs at least two commands.
			if r.commands < 2*r.ops {
				t.Errorf("%d Redis commands for %d acquire+release", r.commands, r.ops)
			}
			t.Logf("%d acquire+release in %v, %d commands", r.ops, r.elapsed, r.commands)
		})
	}
}
