package bench

import (
	"cmp"
	"context"
	"crypto/rand"
	"errors"
	"flag"
	"fmt"
	"os"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/fencedlock/fencedlock"
)

// benchTTL is the lease of every scenario except ManyLeases.
const benchTTL = 10 * time.Second

// manyTTL is the lease in ManyLeases at the size every contender runs
// (-leases): short, so that renewals happen.
const manyTTL = 3 * time.Second

// contendedWorkers is the number of clients fighting for one key.
const contendedWorkers = 16

// handoffHold is how long the holder keeps the lock in Handoff before
// releasing it, so that the waiter is really waiting.
const handoffHold = 5 * time.Millisecond

var runID = rand.Text()[:8]

// key returns a key unique to this run, scenario and contender.
func key(scenario, lib string, i int) string {
	return fmt.Sprintf("fencedlock-bench:%s:%s:%s:%d", runID, scenario, lib, i)
}

func TestMain(m *testing.M) {
	if dir := os.Getenv(etcdChildEnv); dir != "" {
		os.Exit(runEtcdChild(dir))
	}
	if spec := os.Getenv(pongChildEnv); spec != "" {
		os.Exit(runPongChild(spec))
	}
	code := m.Run()
	stopEnv()
	os.Exit(code)
}

func scenarioDuration() time.Duration {
	if testing.Short() {
		return 200 * time.Millisecond
	}
	return *flagDuration
}

var describeOnce sync.Once

// serversDescribed is servers, printing the servers' description once.
func serversDescribed(b *testing.B) *env {
	e := servers(b)
	describeOnce.Do(func() {
		// "key: value" lines: benchstat keeps them as configuration.
		fmt.Printf("redis: %s\netcd: %s\n", e.describeRedis(), e.describeEtcd())
	})
	return e
}

// forEach runs one sub-benchmark per contender.
func forEach(b *testing.B, want func(contender) bool, fn func(b *testing.B, e *env, c contender)) {
	e := serversDescribed(b)
	for _, c := range allContenders() {
		if want != nil && !want(c) {
			continue
		}
		b.Run("lib="+c.name, func(b *testing.B) { fn(b, e, c) })
	}
}

// forEachPass is forEach for the b.N scenarios: the contenders wanted run
// in the order passOrder gives for -pass.
func forEachPass(b *testing.B, want func(contender) bool, fn func(b *testing.B, e *env, c contender)) {
	var cs []contender
	for _, c := range allContenders() {
		if want == nil || want(c) {
			cs = append(cs, c)
		}
	}
	cs = passOrder(cs, *flagPass)
	e := serversDescribed(b)
	for _, c := range cs {
		b.Run("lib="+c.name, func(b *testing.B) { fn(b, e, c) })
	}
}

// opSetup returns, for goroutine i of a b.N scenario at concurrency conc
// on client cl (named name in keys), its operation and what undoes it.
type opSetup func(b *testing.B, cl lockClient, name string, conc int) func(i int) (func(context.Context) error, func())

// runHotPath runs a b.N scenario at concurrencies 1 and 64 for each
// contender want admits (nil: all), on a client configured as cfg, with
// the baseline paired in (see pairedBaseline). logf, given the
// concurrency and the contender's name, says what runs.
func runHotPath(b *testing.B, want func(contender) bool, logf string, cfg clientConfig, setup opSetup) {
	for _, conc := range []int{1, 64} {
		b.Run(fmt.Sprintf("conc=%d", conc), func(b *testing.B) {
			forEachPass(b, want, func(b *testing.B, e *env, c contender) {
				b.Logf(logf, conc, c.name)
				cl := c.open(b, e, cfg)
				defer cl.close()
				var base func(i int) (func(context.Context) error, func())
				bc, metric, paired := pairedBaseline(c)
				if paired {
					bcl := bc.open(b, e, cfg)
					defer bcl.close()
					base = setup(b, bcl, c.name+"-base", conc)
				}
				runOpsPaired(b, e, c, conc, setup(b, cl, c.name, conc), base, metric)
			})
		})
	}
}

// BenchmarkAcquireRelease: acquire a free lock with the library's blocking
// acquire and release it, conc goroutines on one client, each on its own
// key. ns/op is per acquire+release of one goroutine divided by conc (the
// throughput), p50-ns/p99-ns the latency of one acquire+release. A Redis
// contender other than the baseline also reports vs-base, fencedlock-etcd
// vs-mutex (see pairedBaseline).
// acquireReleaseOps returns the operations of runOps for the contender
// cl named name at concurrency conc: worker i takes its own key (scenario
// prefix) and releases it at once.
func acquireReleaseOps(cl lockClient, prefix, name string, conc int) func(i int) (func(context.Context) error, func()) {
	return func(i int) (func(context.Context) error, func()) {
		k := key(prefix, name, conc*1000+i)
		return func(ctx context.Context) error {
			h, err := cl.acquire(ctx, k)
			if err != nil {
				return err
			}
			return h.Release(ctx)
		}, func() {}
	}
}

func BenchmarkAcquireRelease(b *testing.B) {
	setup := func(b *testing.B, cl lockClient, name string, conc int) func(i int) (func(context.Context) error, func()) {
		return acquireReleaseOps(cl, "ar", name, conc)
	}
	runHotPath(b, nil, "uncontended acquire+release, %d goroutines, one key each, one %s client", clientConfig{ttl: benchTTL}, setup)
}

// BenchmarkRenew: renew a held lock by hand (the library's extend call),
// conc goroutines on one client, each holding its own lock. A Redis
// contender other than the baseline also reports vs-base, fencedlock-etcd
// vs-mutex (see pairedBaseline).
func BenchmarkRenew(b *testing.B) {
	setup := func(b *testing.B, cl lockClient, name string, conc int) func(i int) (func(context.Context) error, func()) {
		return func(i int) (func(context.Context) error, func()) {
			h, err := cl.acquire(context.Background(), key("renew", name, conc*1000+i))
			if err != nil {
				b.Fatalf("acquire: %v", err)
			}
			return h.Renew, func() {
				if err := h.Release(context.Background()); err != nil {
					b.Errorf("release: %v", err)
				}
			}
		}
	}
	runHotPath(b, func(c contender) bool { return c.manualRenew }, "renew of a held lock, %d goroutines, one lock each, one %s client",
		clientConfig{ttl: benchTTL, manual: true}, setup)
}

// pairedBaseline returns the contender that c's operations are
// interleaved with in the b.N scenarios (see pairedRatio), and the metric
// that reports c's throughput relative to it: the raw baseline (vs-base)
// for Redis contenders other than the baseline itself, and
// concurrency.Mutex with a shared Session (vs-mutex) for fencedlock-etcd,
// the reference of issue 20.
func pairedBaseline(c contender) (contender, string, bool) {
	var ref, metric string
	switch {
	case c.server == "redis" && c.name != baselineName:
		ref, metric = baselineName, "vs-base"
	case c.name == "fencedlock-etcd":
		ref, metric = "etcd-mutex-shared", "vs-mutex"
	default:
		return contender{}, "", false
	}
	for _, bc := range allContenders() {
		if bc.name == ref {
			return bc, metric, true
		}
	}
	return contender{}, "", false
}

// runOps runs b.N operations spread over conc goroutines. setup(i) is
// called before the timer starts and returns goroutine i's operation and
// its cleanup.
func runOps(b *testing.B, e *env, c contender, conc int, setup func(i int) (op func(context.Context) error, cleanup func())) {
	runOpsPaired(b, e, c, conc, setup, nil, "")
}

// runOpsPaired is runOps; when base is not nil (set up like setup, on a
// client of the contender pairedBaseline names), it then reports metric
// (vs-base, vs-mutex): pairedRatio over a quarter of b.N pairs (after the
// timed run, which it does not change).
func runOpsPaired(b *testing.B, e *env, c contender, conc int, setup, base func(i int) (op func(context.Context) error, cleanup func()), metric string) {
	ops := make([]func(context.Context) error, conc)
	cleanups := make([]func(), conc)
	for i := range conc {
		ops[i], cleanups[i] = setup(i)
	}
	defer func() {
		for _, f := range cleanups {
			f()
		}
	}()
	// One untimed round warms up connections and script caches.
	for i := range conc {
		if err := ops[i](context.Background()); err != nil {
			b.Fatalf("warm-up: %v", err)
		}
	}
	hists := make([]hist, conc)
	var counter atomic.Int64
	var failed atomic.Value
	var rc *redisCounter
	var cpu0 time.Duration
	cpuOK := false
	if c.server == "redis" {
		rc = startRedisCounter(b, e)
		if e.ownRedis {
			// The server's CPU per operation: a gap the client does not
			// explain shows here. Only on the benchmark's own server,
			// which no other client uses.
			cpu0, cpuOK = serverCPU(e, "redis")
		}
	}
	b.ReportAllocs()
	b.ResetTimer()
	var wg sync.WaitGroup
	for i := range conc {
		wg.Add(1)
		go func() {
			defer wg.Done()
			ctx := context.Background()
			h := &hists[i]
			op := ops[i]
			for counter.Add(1) <= int64(b.N) {
				t0 := time.Now()
				if err := op(ctx); err != nil {
					failed.CompareAndSwap(nil, err)
					return
				}
				h.add(time.Since(t0))
			}
		}()
	}
	wg.Wait()
	b.StopTimer()
	if err, _ := failed.Load().(error); err != nil {
		b.Fatalf("%s: %v", c.name, err)
	}
	var all hist
	for i := range hists {
		all.merge(&hists[i])
	}
	b.ReportMetric(float64(all.quantile(0.50)), "p50-ns")
	b.ReportMetric(float64(all.quantile(0.99)), "p99-ns")
	if cpuOK {
		if cpu1, ok := serverCPU(e, "redis"); ok {
			b.ReportMetric(float64(cpu1-cpu0)/float64(b.N), "server-cpu-ns/op")
		}
	}
	if rc != nil {
		n, detail := rc.stop(b)
		b.ReportMetric(float64(n)/float64(b.N), "cmds/op")
		if b.N >= 100 {
			b.Logf("redis commands over %d ops: %s", b.N, detail)
		}
	}
	if base == nil {
		return
	}
	bops := make([]func(context.Context) error, conc)
	for i := range conc {
		var cleanup func()
		bops[i], cleanup = base(i)
		defer cleanup()
		if err := bops[i](context.Background()); err != nil {
			b.Fatalf("baseline warm-up: %v", err)
		}
	}
	ratio, err := pairedRatio(conc, max(b.N/4, conc), ops, bops)
	if err != nil {
		b.Fatalf("%s, paired with its reference (%s): %v", c.name, metric, err)
	}
	b.ReportMetric(ratio, metric)
}

// pairedRatio runs n rounds spread over conc goroutines; in each round
// goroutine i runs its contender operation ops[i] and its baseline
// operation base[i] back to back, the contender first in odd rounds and
// second in even ones (at conc > 1, blocks of operations: blockRatio). It returns the baseline's total time over the
// contender's (trimmedRatio): the contender's throughput relative to the
// baseline (at concurrency conc, each goroutine a closed loop), both
// measured within the same milliseconds, so that a change of the
// machine's load lands on both sides of the ratio instead of on one.
func pairedRatio(conc, n int, ops, base []func(context.Context) error) (float64, error) {
	if conc > 1 {
		return blockRatio(conc, n, ops, base)
	}
	var counter atomic.Int64
	var failed atomic.Value
	var wg sync.WaitGroup
	perG := make([][]pairTime, conc)
	for i := range conc {
		wg.Add(1)
		go func() {
			defer wg.Done()
			ctx := context.Background()
			pts := make([]pairTime, 0, n/conc+1)
			defer func() { perG[i] = pts }()
			for k := counter.Add(1); k <= int64(n); k = counter.Add(1) {
				first, second := ops[i], base[i]
				if k%2 == 0 {
					first, second = second, first
				}
				t0 := time.Now()
				if err := first(ctx); err != nil {
					failed.CompareAndSwap(nil, err)
					return
				}
				t1 := time.Now()
				if err := second(ctx); err != nil {
					failed.CompareAndSwap(nil, err)
					return
				}
				t2 := time.Now()
				if k%2 == 0 {
					pts = append(pts, pairTime{own: t2.Sub(t1), base: t1.Sub(t0)})
				} else {
					pts = append(pts, pairTime{own: t1.Sub(t0), base: t2.Sub(t1)})
				}
			}
		}()
	}
	wg.Wait()
	if err, _ := failed.Load().(error); err != nil {
		return 0, err
	}
	var all []pairTime
	for _, pts := range perG {
		all = append(all, pts...)
	}
	r, ok := trimmedRatio(all, pairTrim)
	if !ok {
		return 0, errors.New("no paired round ran")
	}
	return r, nil
}

// blockGoroutineOps is how many operations each goroutine runs in one block
// of blockRatio: at 64 goroutines a block is 256 operations, some
// milliseconds.
const blockGoroutineOps = 4

// blockRatio is pairedRatio at concurrency conc > 1. Alternating single
// operations would measure latency under a queue the two libraries share:
// when the server is the bottleneck, an operation of either waits about
// as long, whatever it costs the server, and the ratio tends to 1. So the
// goroutines run blocks: in a block every goroutine runs
// blockGoroutineOps operations of one library, all at once, and the
// block's wall time is that library's throughput alone; blocks alternate
// A B B A A B B A..., and each A block and the B block next to it form a
// round of trimmedRatio. n is the operations of each library in total.
func blockRatio(conc, n int, ops, base []func(context.Context) error) (float64, error) {
	// At least A B | B A, so a short run (go test's first calls with a
	// small b.N, -short) still has both orders.
	rounds := max(2, n/(conc*blockGoroutineOps))
	block := func(fns []func(context.Context) error) (time.Duration, error) {
		var failed atomic.Value
		var wg sync.WaitGroup
		t0 := time.Now()
		for i := range conc {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for range blockGoroutineOps {
					if err := fns[i](context.Background()); err != nil {
						failed.CompareAndSwap(nil, err)
						return
					}
				}
			}()
		}
		wg.Wait()
		d := time.Since(t0)
		if err, _ := failed.Load().(error); err != nil {
			return 0, err
		}
		return d, nil
	}
	pts := make([]pairTime, 0, rounds)
	for r := range rounds {
		var p pairTime
		// Round r runs A then B when r is even, B then A when odd:
		// A B | B A | A B | ...
		for _, own := range []bool{r%2 == 0, r%2 != 0} {
			fns := base
			if own {
				fns = ops
			}
			d, err := block(fns)
			if err != nil {
				return 0, err
			}
			if own {
				p.own = d
			} else {
				p.base = d
			}
		}
		pts = append(pts, p)
	}
	r, ok := trimmedRatio(pts, pairTrim)
	if !ok {
		return 0, errors.New("no paired block ran")
	}
	return r, nil
}

// pairTime is one round of pairedRatio: the contender's operation and
// the baseline's.
type pairTime struct{ own, base time.Duration }

// pairTrim is the share of rounds pairedRatio leaves out, the slowest by
// the two operations' total: on a loaded machine a round now and then
// stalls for milliseconds (the process or the server descheduled), which
// says nothing about either library but moves a mean by a tenth. Both
// sides of a left-out round go, so the trim takes nothing from one side
// only.
const pairTrim = 0.01

// trimmedRatio returns the sum of the base times over the sum of the own
// times, leaving out the share trim of the rounds with the largest total;
// false if no round remains.
func trimmedRatio(pts []pairTime, trim float64) (float64, bool) {
	pts = slices.Clone(pts)
	slices.SortFunc(pts, func(a, b pairTime) int { return cmp.Compare(a.own+a.base, b.own+b.base) })
	keep := len(pts) - int(float64(len(pts))*trim)
	var own, base time.Duration
	for _, p := range pts[:keep] {
		own += p.own
		base += p.base
	}
	if own <= 0 {
		return 0, false
	}
	return float64(base) / float64(own), true
}

// contendedResult is the outcome of one Contended run.
type contendedResult struct {
	elapsed      time.Duration
	acquisitions int64
	handoffs     int64 // acquisitions by a worker other than the previous holder
	perWorker    []int64
	wait         hist          // from calling acquire to holding
	handoff      hist          // from the previous holder's release call to a different worker holding
	idle         hist          // from a release call to the next acquisition by anyone
	idleMaxAt    time.Duration // when the release that began the longest idle was called, from the start
	violations   int64
	errors       int64
	firstErr     error
	mallocs      uint64
	bytes        uint64
	commands     int64
	detail       string
}

// contendedWarmup is how long every worker of Contended contends for the
// key before the timed window: each client has then dialled every
// connection its blocking acquire uses (a fair waiter's subscription, a
// watcher's) and loaded its scripts, under the same contention as in the
// window, whatever the library.
const contendedWarmup = 300 * time.Millisecond

// runContended has workers clients (one each) loop on acquire+release of
// one key for d, with the library's blocking acquire, after a warm-up of
// contendedWarmup with the same loop (not measured).
func runContended(tb testing.TB, e *env, c contender, workers int, d time.Duration) contendedResult {
	tb.Helper()
	k := key("contended", c.name, workers)
	clients := make([]lockClient, workers)
	for i := range clients {
		clients[i] = c.open(tb, e, clientConfig{ttl: benchTTL})
	}
	defer func() {
		for _, cl := range clients {
			cl.close()
		}
	}()
	// Warm up each client once (connections, scripts), one at a time.
	for _, cl := range clients {
		h, err := cl.acquire(context.Background(), k)
		if err != nil {
			tb.Fatalf("%s: warm-up acquire: %v", c.name, err)
		}
		if err := h.Release(context.Background()); err != nil {
			tb.Fatalf("%s: warm-up release: %v", c.name, err)
		}
	}
	// Then all at once, as in the window: the connections a library dials
	// only when a worker first waits (a subscription) are dialled here.
	if w := contendLoop(clients, k, contendedWarmup, true); w.violations > 0 || w.errors > 0 {
		tb.Logf("%s: warm-up: %d overlaps, %d errors; first: %v", c.name, w.violations, w.errors, w.firstErr)
	}

	var rc *redisCounter
	if c.server == "redis" {
		rc = startRedisCounter(tb, e)
	}
	m0 := readMem()
	res := contendLoop(clients, k, d, false)
	m1 := readMem()
	res.mallocs, res.bytes = m1.mallocs-m0.mallocs, m1.bytes-m0.bytes
	if rc != nil {
		res.commands, res.detail = rc.stop(tb)
	}
	return res
}

// contendLoop has one worker per client loop on acquire+release of key k
// for d, and measures it. The acquires still waiting at the end are
// cancelled, unless drain: then no new acquire starts after d, and those
// waiting are let finish (and release), so that none leaves the key held
// (an acquire cancelled in flight may have taken it on the server: the
// raw baseline then found it held for its whole TTL).
func contendLoop(clients []lockClient, k string, d time.Duration, drain bool) contendedResult {
	workers := len(clients)
	var (
		mu          sync.Mutex
		last        = -1
		lastRelease time.Time
		inside      atomic.Int32
		res         = contendedResult{perWorker: make([]int64, workers)}
		waits       = make([]hist, workers)
		errs        atomic.Int64
		violations  atomic.Int64
		firstErr    atomic.Value
	)
	start := time.Now()
	end := start.Add(d)
	ctx, cancel := context.WithDeadline(context.Background(), end)
	defer cancel()
	running := func() bool { return ctx.Err() == nil }
	if drain {
		ctx, cancel = context.WithTimeout(context.Background(), d+benchTTL)
		defer cancel()
		running = func() bool { return time.Now().Before(end) && ctx.Err() == nil }
	}
	var wg sync.WaitGroup
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			cl := clients[w]
			for running() {
				t0 := time.Now()
				h, err := cl.acquire(ctx, k)
				if err != nil {
					// rueidis may report the deadline a moment before
					// ctx.Err() does.
					if ctx.Err() != nil || errors.Is(err, context.DeadlineExceeded) && time.Until(end) < 10*time.Millisecond {
						return
					}
					errs.Add(1)
					firstErr.CompareAndSwap(nil, err)
					time.Sleep(time.Millisecond)
					continue
				}
				now := time.Now()
				if !inside.CompareAndSwap(0, 1) {
					violations.Add(1)
				}
				waits[w].add(now.Sub(t0))
				mu.Lock()
				if last >= 0 {
					idle := now.Sub(lastRelease)
					if idle > res.idle.max {
						res.idleMaxAt = lastRelease.Sub(start)
					}
					res.idle.add(idle)
					if last != w {
						res.handoffs++
						res.handoff.add(now.Sub(lastRelease))
					}
				}
				res.acquisitions++
				res.perWorker[w]++
				last = w
				lastRelease = time.Now()
				mu.Unlock()
				inside.Store(0)
				if err := h.Release(context.Background()); err != nil {
					errs.Add(1)
					firstErr.CompareAndSwap(nil, err)
				}
			}
		}()
	}
	wg.Wait()
	res.elapsed = min(time.Since(start), d)
	for i := range waits {
		res.wait.merge(&waits[i])
	}
	res.errors, res.violations = errs.Load(), violations.Load()
	res.firstErr, _ = firstErr.Load().(error)
	return res
}

// BenchmarkContended: 16 workers, one client each (as separate processes
// would be), loop on acquire+release of ONE key for a fixed time (-duration)
// with each library's blocking acquire. A hand-off is an acquisition by a
// worker other than the previous holder; acquisitions alone flatter
// libraries that let the releasing worker re-take the lock. ns/op, B/op and
// allocs/op are per acquisition. The window starts after a warm-up of
// contendedWarmup in which the workers already contend the same way, so
// that no library's figures include dialling the connections its blocking
// acquire opens on the first wait (a fair waiter's subscription: 15
// clients dialling at once made the longest free-lock gap of the run).
func BenchmarkContended(b *testing.B) {
	forEach(b, nil, func(b *testing.B, e *env, c contender) {
		d := scenarioDuration()
		b.Logf("%d workers, one %s client each, one key, %v", contendedWorkers, c.name, d)
		b.ResetTimer()
		r := runContended(b, e, c, contendedWorkers, d)
		b.StopTimer()
		if r.violations > 0 {
			// Reported in the violations metric; failing would drop the row.
			b.Logf("%s: %d times two workers held the lock at once", c.name, r.violations)
		}
		if r.errors > 0 {
			b.Logf("%s: %d acquire/release errors; first: %v", c.name, r.errors, r.firstErr)
		}
		reportContended(b, r)
	})
}

func reportContended(b *testing.B, r contendedResult) {
	secs := r.elapsed.Seconds()
	n := float64(max(r.acquisitions, 1))
	b.ReportMetric(float64(r.elapsed.Nanoseconds())/n, "ns/op")
	b.ReportMetric(float64(r.mallocs)/n, "allocs/op")
	b.ReportMetric(float64(r.bytes)/n, "B/op")
	b.ReportMetric(float64(r.acquisitions)/secs, "acq/s")
	b.ReportMetric(float64(r.handoffs)/secs, "handoffs/s")
	b.ReportMetric(float64(r.wait.quantile(0.5)), "wait-p50-ns")
	b.ReportMetric(float64(r.wait.quantile(0.99)), "wait-p99-ns")
	b.ReportMetric(float64(r.handoff.quantile(0.5)), "handoff-p50-ns")
	b.ReportMetric(float64(r.handoff.quantile(0.99)), "handoff-p99-ns")
	b.ReportMetric(float64(r.idle.max), "idle-max-ns")
	b.Logf("longest free-lock gap %v, after a release %v into the window", r.idle.max, r.idleMaxAt.Round(time.Millisecond))
	lo, hi := r.perWorker[0], r.perWorker[0]
	for _, v := range r.perWorker {
		lo, hi = min(lo, v), max(hi, v)
	}
	fair := 0.0
	if hi > 0 {
		fair = float64(lo) / float64(hi)
	}
	b.ReportMetric(fair, "fairness")
	b.ReportMetric(float64(lo), "min-acq")
	b.ReportMetric(float64(hi), "max-acq")
	b.ReportMetric(float64(r.violations), "violations")
	if r.commands > 0 {
		b.ReportMetric(float64(r.commands)/n, "cmds/op")
		b.Logf("redis commands over %d acquisitions: %s", r.acquisitions, r.detail)
	}
}

// handoffResult is the outcome of one Handoff run.
type handoffResult struct {
	elapsed  time.Duration
	lat      hist
	sum      time.Duration
	mallocs  uint64
	bytes    uint64
	stuck    int   // waiters that never got the released lock (then the run stops)
	stuckErr error // the stuck waiter's error
}

// runHandoff ping-pongs one key between two clients: the holder waits until
// the other is blocked in acquire (handoffHold), releases, and the time from
// its release call to the other holding is one sample. It stops after d or
// rounds hand-offs, or when a waiter does not get the released lock within
// d+5s (counted in stuck).
func runHandoff(tb testing.TB, e *env, c contender, d time.Duration, rounds int) handoffResult {
	tb.Helper()
	k := key("handoff", c.name, 0)
	cls := [2]lockClient{c.open(tb, e, clientConfig{ttl: benchTTL}), c.open(tb, e, clientConfig{ttl: benchTTL})}
	defer cls[0].close()
	defer cls[1].close()
	// Waiting can take long for sleeping-retry libraries: allow for it.
	ctx, cancel := context.WithTimeout(context.Background(), d+5*time.Second)
	defer cancel()
	h, err := cls[0].acquire(ctx, k)
	if err != nil {
		tb.Fatalf("%s: acquire: %v", c.name, err)
	}
	type got struct {
		h   heldLock
		at  time.Time
		err error
	}
	var res handoffResult
	m0 := readMem()
	start := time.Now()
	holder := 0
	for n := 0; n < rounds && time.Since(start) < d; n++ {
		ch := make(chan got, 1)
		waiter := cls[1-holder]
		go func() {
			h, err := waiter.acquire(ctx, k)
			ch <- got{h, time.Now(), err}
		}()
		time.Sleep(handoffHold)
		t0 := time.Now()
		if err := h.Release(context.Background()); err != nil {
			tb.Fatalf("%s: release: %v", c.name, err)
		}
		g := <-ch
		if g.err != nil {
			// The waiter never saw the free lock: a finding, reported.
			res.stuck++
			res.stuckErr = g.err
			h = nil
			break
		}
		lat := g.at.Sub(t0)
		res.lat.add(lat)
		res.sum += lat
		h, holder = g.h, 1-holder
	}
	res.elapsed = time.Since(start)
	m1 := readMem()
	res.mallocs, res.bytes = m1.mallocs-m0.mallocs, m1.bytes-m0.bytes
	if h != nil {
		if err := h.Release(context.Background()); err != nil {
			tb.Fatalf("%s: release: %v", c.name, err)
		}
	}
	return res
}

// BenchmarkHandoff: latency from the holder's release call to the next
// holder (one waiter, already waiting), for a fixed time (-duration). ns/op
// is the mean hand-off latency.
func BenchmarkHandoff(b *testing.B) {
	forEach(b, nil, func(b *testing.B, e *env, c contender) {
		d := scenarioDuration()
		b.Logf("hand-off between two %s clients, holder keeps the lock %v, %v", c.name, handoffHold, d)
		b.ResetTimer()
		r := runHandoff(b, e, c, d, 1<<30)
		b.StopTimer()
		n := float64(max(r.lat.n, 1))
		b.ReportMetric(float64(r.sum.Nanoseconds())/n, "ns/op")
		b.ReportMetric(float64(r.mallocs)/n, "allocs/op")
		b.ReportMetric(float64(r.bytes)/n, "B/op")
		b.ReportMetric(float64(r.lat.quantile(0.5)), "p50-ns")
		b.ReportMetric(float64(r.lat.quantile(0.99)), "p99-ns")
		b.ReportMetric(float64(r.lat.max), "max-ns")
		b.ReportMetric(float64(r.lat.n), "handoffs")
		b.ReportMetric(float64(r.stuck), "stuck")
		if r.stuck > 0 {
			b.Logf("%s: a waiter did not get the released lock: %v", c.name, r.stuckErr)
		}
	})
}

// manyResult is the outcome of one ManyLeases run.
type manyResult struct {
	n          int
	acquire    time.Duration // to acquire all leases
	mallocs    uint64        // allocations while acquiring
	bytes      uint64
	hold       time.Duration
	memPer     float64 // live heap and stack bytes per held lease
	goroutines float64 // goroutines per held lease
	cpu        time.Duration
	commands   int64
	roundTrips int64         // Redis: the server's read events while holding (a pipelined batch is one)
	keepAlives int64         // etcd: LeaseKeepAlive requests the server received while holding
	serverCPU  time.Duration // the server process's CPU while holding (0: unknown)
	detail     string
	lost       int
	releaseErr int
}

// runManyLeases acquires n leases on one client, holds them for hold while
// the library renews them, and releases them.
func runManyLeases(tb testing.TB, e *env, c contender, n int, ttl, renew, hold time.Duration) manyResult {
	tb.Helper()
	cl := c.open(tb, e, clientConfig{ttl: ttl, renew: renew, keepAlive: true})
	defer cl.close()
	res := manyResult{n: n, hold: hold}
	leases := make([]heldLock, n)
	mem0, g0 := memInUse(), runtime.NumGoroutine()
	m0 := readMem()
	t0 := time.Now()
	parallel(n, func(i int) {
		h, err := cl.acquire(context.Background(), key("many", c.name, i))
		if err != nil {
			tb.Errorf("%s: acquire %d: %v", c.name, i, err)
			return
		}
		leases[i] = h
	})
	res.acquire = time.Since(t0)
	m1 := readMem()
	res.mallocs, res.bytes = m1.mallocs-m0.mallocs, m1.bytes-m0.bytes
	if tb.Failed() {
		tb.FailNow()
	}
	res.memPer = (float64(memInUse()) - float64(mem0)) / float64(n)
	res.goroutines = float64(runtime.NumGoroutine()-g0) / float64(n)

	var rc *redisCounter
	var reads0 int64
	if c.server == "redis" {
		rc = startRedisCounter(tb, e)
		reads0 = redisReads(tb, e)
	}
	var ka0 etcdMetrics
	var kaErr error
	if c.server == "etcd" {
		ka0, kaErr = etcdServerMetrics(e)
	}
	srv0, srvOK := serverCPU(e, c.server)
	cpu0 := cpuTime()
	time.Sleep(hold)
	res.cpu = cpuTime() - cpu0
	if srv1, ok := serverCPU(e, c.server); ok && srvOK {
		res.serverCPU = srv1 - srv0
	}
	if c.server == "etcd" && kaErr == nil {
		if ka1, err := etcdServerMetrics(e); err == nil {
			res.keepAlives = int64(ka1.keepAlives - ka0.keepAlives)
		}
	}
	if rc != nil {
		res.roundTrips = redisReads(tb, e) - reads0
		res.commands, res.detail = rc.stop(tb)
	}
	for _, h := range leases {
		if done := h.Done(); done != nil {
			select {
			case <-done:
				res.lost++
			default:
			}
		}
	}
	var relErr atomic.Int64
	parallel(n, func(i int) {
		if err := leases[i].Release(context.Background()); err != nil {
			relErr.Add(1)
		}
	})
	res.releaseErr = int(relErr.Load())
	return res
}

// redisReads returns the Redis server's count of read events
// (total_reads_processed, Redis 7+; 0 if it does not report it): commands
// that arrive together (a pipeline, rueidis's auto-pipelining) take one
// read, so commands per read tells whether renewals share round trips.
func redisReads(tb testing.TB, e *env) int64 {
	tb.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	s, err := e.stats.Do(ctx, e.stats.B().Info().Section("stats").Build()).ToString()
	if err != nil {
		tb.Fatalf("bench: info stats: %v", err)
	}
	for _, line := range strings.Split(s, "\n") {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), "total_reads_processed:"); ok {
			n, _ := strconv.ParseInt(v, 10, 64)
			return n
		}
	}
	return 0
}

// serverCPU returns the CPU time the server process has used (Redis: INFO
// cpu, used_cpu_sys + used_cpu_user; etcd: process_cpu_seconds_total of the
// first endpoint), false if it cannot tell. On a server shared with other
// clients it counts their work too.
func serverCPU(e *env, server string) (time.Duration, bool) {
	switch server {
	case "etcd":
		m, err := etcdServerMetrics(e)
		if err != nil || m.cpu == 0 {
			return 0, false
		}
		return time.Duration(m.cpu * float64(time.Second)), true
	case "redis":
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		s, err := e.stats.Do(ctx, e.stats.B().Info().Section("cpu").Build()).ToString()
		if err != nil {
			return 0, false
		}
		var total float64
		found := 0
		for _, line := range strings.Split(s, "\n") {
			name, v, ok := strings.Cut(strings.TrimSpace(line), ":")
			if ok && (name == "used_cpu_sys" || name == "used_cpu_user") {
				f, err := strconv.ParseFloat(v, 64)
				if err != nil {
					return 0, false
				}
				total += f
				found++
			}
		}
		return time.Duration(total * float64(time.Second)), found == 2
	}
	return 0, false
}

// parallel runs fn(0..n-1) on 64 goroutines.
func parallel(n int, fn func(i int)) {
	var next atomic.Int64
	var wg sync.WaitGroup
	for range min(n, 64) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := int(next.Add(1) - 1); i < n; i = int(next.Add(1) - 1) {
				fn(i)
			}
		}()
	}
	wg.Wait()
}

// flagScale and flagScaleTTL: the ManyLeases sizes measured for the
// contenders at scale, and their lease (defined here, beside the
// scenario, rather than with the other flags).
var (
	flagScale = flag.String("leases-scale", "1000,10000,100000",
		"ManyLeases sizes (comma-separated) for the contenders measured at scale (fencedlock-redis, fencedlock-etcd), each at -scale-ttl; -short uses 20; empty: none")
	flagScaleTTL = flag.Duration("scale-ttl", fencedlock.DefaultTTL,
		"the lease of the -leases-scale sizes (default: the library's default TTL). One lease is renewed every TTL/3: 100000 leases at TTL 3s are 100000 renewals/s, more than a shared 2-core machine does")
)

// scaleContenders are measured at every ManyLeases size (-leases-scale),
// the others at -leases only.
var scaleContenders = map[string]bool{"fencedlock-redis": true, "fencedlock-etcd": true}

// manyParams returns the ManyLeases size every contender runs and its
// TTL, the sizes c also runs at scale (none unless c is a scale
// contender), smallest first, and their TTL, and the hold time.
func manyParams(c contender) (all int, scale []int, scaleTTL, hold time.Duration, err error) {
	all, list, scaleTTL, hold := *flagLeases, *flagScale, *flagScaleTTL, *flagHold
	if testing.Short() {
		all, list, hold = 100, "20", 1500*time.Millisecond
	}
	if scaleTTL < fencedlock.MinTTL || scaleTTL > fencedlock.MaxTTL {
		return 0, nil, 0, 0, fmt.Errorf("-scale-ttl %v: out of [%v, %v]", scaleTTL, fencedlock.MinTTL, fencedlock.MaxTTL)
	}
	if scaleContenders[c.name] && list != "" {
		for _, f := range strings.Split(list, ",") {
			n, err := strconv.Atoi(strings.TrimSpace(f))
			if err != nil || n <= 0 {
				return 0, nil, 0, 0, fmt.Errorf("-leases-scale %q: %q is not a positive number", list, f)
			}
			if !slices.Contains(scale, n) {
				scale = append(scale, n)
			}
		}
	}
	slices.Sort(scale)
	return all, scale, scaleTTL, hold, nil
}

// BenchmarkManyLeases: one process holds many leases for a fixed time
// (-hold) while the library keeps them alive. Every contender holds
// -leases (default 10000) at TTL 3s (sub-benchmark leases=N;
// fencedlock-etcd also with RenewInterval TTL/2, halfrenew=N, the
// Mutex's renewal rate);
// fencedlock-redis and fencedlock-etcd also each -leases-scale size
// (default 1000, 10000 and 100000) at -scale-ttl (default 10s, the
// library's default; sub-benchmark scale=N), whose per-lease figures
// must stay flat as the count grows. Reports CPU and live heap per lease,
// renew traffic, and losses (must be 0). CPU is the client process's;
// memory is live heap plus goroutine stacks. ns/op, B/op and allocs/op
// are per lease while acquiring them (64 at a time). Libraries without a
// watchdog run the renew loop a user would write (one goroutine per
// lock).
func BenchmarkManyLeases(b *testing.B) {
	forEach(b, func(c contender) bool { return c.autoRenew }, func(b *testing.B, e *env, c contender) {
		all, scale, scaleTTL, hold, err := manyParams(c)
		if err != nil {
			b.Fatal(err)
		}
		b.Run(fmt.Sprintf("leases=%d", all), func(b *testing.B) { benchManyLeases(b, e, c, all, manyTTL, 0, hold) })
		if c.name == "fencedlock-etcd" {
			// At the renewal rate of etcd's own client (which renews
			// TTL/3 after each answer but checks every 500 ms: about
			// every TTL/2 at TTL 3s), to compare the cost per renewal
			// with concurrency.Mutex's.
			b.Run(fmt.Sprintf("halfrenew=%d", all), func(b *testing.B) { benchManyLeases(b, e, c, all, manyTTL, manyTTL/2, hold) })
		}
		for _, n := range scale {
			b.Run(fmt.Sprintf("scale=%d", n), func(b *testing.B) { benchManyLeases(b, e, c, n, scaleTTL, 0, hold) })
		}
	})
}

func benchManyLeases(b *testing.B, e *env, c contender, n int, ttl, renew, hold time.Duration) {
	b.Logf("%d leases held by one %s client for %v, TTL %v, RenewInterval %v (0: TTL/3)", n, c.name, hold, ttl, renew)
	b.ResetTimer()
	r := runManyLeases(b, e, c, n, ttl, renew, hold)
	b.StopTimer()
	if r.lost > 0 || r.releaseErr > 0 {
		// A finding to report, not a reason to drop the row.
		b.Logf("%s: %d of %d leases lost, %d releases failed", c.name, r.lost, n, r.releaseErr)
	}
	b.ReportMetric(float64(r.acquire.Nanoseconds())/float64(n), "ns/op")
	b.ReportMetric(float64(r.mallocs)/float64(n), "allocs/op")
	b.ReportMetric(float64(r.bytes)/float64(n), "B/op")
	b.ReportMetric(float64(r.cpu.Nanoseconds())/float64(n)/r.hold.Seconds(), "cpu-ns/lease/s")
	b.ReportMetric(r.memPer, "mem-B/lease")
	b.ReportMetric(r.goroutines, "goroutines/lease")
	b.ReportMetric(float64(r.lost), "lost")
	b.ReportMetric(float64(r.releaseErr), "release-errors")
	if r.commands > 0 {
		b.ReportMetric(float64(r.commands)/float64(n)/r.hold.Seconds(), "cmds/lease/s")
		b.Logf("redis commands while holding: %s", r.detail)
	}
	if r.serverCPU > 0 {
		b.ReportMetric(float64(r.serverCPU.Nanoseconds())/float64(n)/r.hold.Seconds(), "server-cpu-ns/lease/s")
	}
	if r.roundTrips > 0 {
		b.ReportMetric(float64(r.commands)/float64(r.roundTrips), "cmds/roundtrip")
	}
	if r.keepAlives > 0 {
		b.ReportMetric(float64(r.keepAlives)/float64(n)/r.hold.Seconds(), "keepalives/lease/s")
	}
}
