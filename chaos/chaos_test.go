package chaos

import (
	"context"
	"database/sql"
	"flag"
	"fmt"
	"os"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/anishathalye/porcupine"
	"github.com/fencedlock/fencedlock/backend/redis"
	"github.com/fencedlock/fencedlock/internal/testserver"
)

var (
	flagSeed    = flag.Uint64("chaos.seed", 0, "first seed (0: derived from the clock, and printed)")
	flagSeeds   = flag.Int("chaos.seeds", 3, "seeds (schedules) per backend")
	flagLength  = flag.Duration("chaos.length", 5*time.Second, "length of each schedule")
	flagWorkers = flag.Int("chaos.workers", 5, "worker processes")
	flagTTL     = flag.Duration("chaos.ttl", 600*time.Millisecond, "the workers' lease TTL")
	flagKinds   = flag.String("chaos.kinds", "", "comma-separated fault kinds to keep (default: every kind of each backend)")
	flagOut     = flag.String("chaos.out", "", "directory for visualisations of failing histories (default: the system temporary directory)")
)

func TestMain(m *testing.M) {
	if os.Getenv(WorkerEnv) != "" {
		os.Exit(WorkerMain())
	}
	flag.Parse()
	os.Exit(m.Run())
}

func visualDir(t *testing.T) string {
	if *flagOut != "" {
		if err := os.MkdirAll(*flagOut, 0o755); err != nil {
			t.Fatal(err)
		}
		return *flagOut
	}
	return os.TempDir()
}

// seeds returns the seeds to run, the first one printed so a failure can
// be replayed with -chaos.seed (make chaos SEED=n).
func seeds(t *testing.T) []uint64 {
	first := *flagSeed
	if first == 0 {
		first = uint64(time.Now().UnixNano()%1_000_000_000) + 1
	}
	out := make([]uint64, *flagSeeds)
	for i := range out {
		out[i] = first + uint64(i)
	}
	fmt.Printf("%s: seeds %d..%d (replay one with: make chaos SEED=n)\n", t.Name(), out[0], out[len(out)-1])
	return out
}

// allRedisKinds are the faults of a Redis standalone setup.
var allRedisKinds = []FaultKind{FaultPauseWorker, FaultPauseHolder, FaultBlackhole, FaultLatency, FaultReset, FaultKillRestart, FaultDelLock}

// newRedisSetup starts a redis-server (with appendonly and appendfsync
// always, so a SIGKILL loses no acknowledged write, unless volatile).
func newRedisSetup(t *testing.T, name string, volatile bool) *setup {
	var srv *testserver.Redis
	if volatile {
		srv = testserver.StartRedis(t)
	} else {
		srv = testserver.StartRedis(t, testserver.WithConfig("appendonly yes", "appendfsync always"))
	}
	admin := srv.Client(t, nil)
	b, err := redis.New(admin, redis.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { b.Close() })
	return &setup{name: name, register: RegisterRedis, kinds: allRedisKinds, srv: srv, admin: admin, adminB: b,
		work: *flagTTL / 2}
}

// only keeps the kinds -chaos.kinds names (all if it is empty).
func only(kinds []FaultKind) []FaultKind {
	if *flagKinds == "" {
		return kinds
	}
	var out []FaultKind
	for _, k := range kinds {
		if slices.Contains(strings.Split(*flagKinds, ","), string(k)) {
			out = append(out, k)
		}
	}
	return out
}

func defaultRun(seed uint64) runConfig {
	return runConfig{seed: seed, workers: *flagWorkers, ttl: *flagTTL, length: *flagLength}
}

// stats aggregates runs of one backend for the figures.
type stats struct {
	name                  string
	runs, ops             int
	faults                map[FaultKind]int
	a, b, c, d, e         int
	breaks                map[FaultKind]int
	fenceErrs             map[FaultKind]int
	accepted, unknown     int
	checkTime             time.Duration
	lost, grants, staleWr int
	renewals              int // OpRenew events: a lease's deadline moved later
	explained             int // (b) breaks a del-lock explains (Overlap.Deletion)
	unexcusedB            int // (b) breaks nothing excuses
	// The semaphore workload: the most permits valid at once in any run
	// (the limit reached is what gives its check teeth) and the breaks of
	// the limit.
	maxValid, overLimit int
}

func newStats(name string) *stats {
	return &stats{name: name, faults: map[FaultKind]int{}, breaks: map[FaultKind]int{}, fenceErrs: map[FaultKind]int{}}
}

func (s *stats) add(r runResult) {
	s.runs++
	s.ops += r.report.Ops
	for _, f := range r.faults {
		s.faults[f.Kind]++
	}
	a, b, c, d, e := r.report.Violations()
	s.a, s.b, s.c, s.d, s.e = s.a+a, s.b+b, s.c+c, s.d+d, s.e+e
	for _, o := range r.report.Overlaps {
		for _, k := range o.Kinds {
			s.breaks[k]++
		}
		if o.Deletion != nil {
			s.explained++
		}
	}
	ub, _ := r.report.Unexcused(FaultDelLock, FaultFailover)
	s.unexcusedB += ub
	s.renewals += len(r.history.Renewals)
	s.overLimit += len(r.report.OverLimit)
	for _, o := range CheckLimit(r.history, 0, 0) {
		s.maxValid = max(s.maxValid, o.N)
	}
	for _, e := range r.report.FenceErrs {
		for _, k := range e.Kinds {
			s.fenceErrs[k]++
		}
	}
	s.accepted += r.report.Accepted
	s.unknown += r.report.Unknown
	s.checkTime += r.report.CheckTime
	s.lost += len(r.history.Lost)
	for _, o := range r.history.Ops {
		switch {
		case o.Op == OpAcquire && o.Phase == OK:
			s.grants++
		case o.Op == OpWrite && o.Phase == Stale:
			s.staleWr++
		}
	}
}

func fmtKinds(m map[FaultKind]int) string {
	var ks []string
	for k, n := range m {
		ks = append(ks, fmt.Sprintf("%s=%d", k, n))
	}
	sort.Strings(ks)
	if len(ks) == 0 {
		return "-"
	}
	return strings.Join(ks, " ")
}

// String is the figures line of the backend (docs/chaos.md's table).
func (s *stats) String() string {
	sema := ""
	if s.maxValid > 1 || s.overLimit > 0 {
		sema = fmt.Sprintf("; at most %d valid leases at once, limit broken %d times", s.maxValid, s.overLimit)
	}
	return fmt.Sprintf("FIGURES %s: schedules %d, ops checked %d, grants %d, renewals seen %d, writes acked %d / unknown %d / rejected stale %d, leases lost %d; "+
		"faults [%s]; violations (a) %d (b) %d (c) %d (d) %d (e) %d; (b) explained by a del-lock %d, excused by nothing %d; (b) breaks by fault [%s]; (c) by fault [%s]; checker time %v%s",
		s.name, s.runs, s.ops, s.grants, s.renewals, s.accepted, s.unknown, s.staleWr, s.lost, fmtKinds(s.faults),
		s.a, s.b, s.c, s.d, s.e, s.explained, s.unexcusedB, fmtKinds(s.breaks), fmtKinds(s.fenceErrs), s.checkTime.Round(time.Millisecond), sema)
}

// print prints the figures on standard output, which `go test` run in
// the chaos directory shows without -v (the etcd cluster's logs would
// bury them under -v).
func (s *stats) print(t *testing.T) {
	t.Log(s)
	fmt.Println(s)
}

// requireSafe fails t for every violation a correct fencedlock must not
// have: (a), (d), (e), and (b) and (c) outside the faults that break them
// by design (allowed: an operator's deletion, a Redis failover).
func requireSafe(t *testing.T, name string, seed uint64, r runResult, allowed ...FaultKind) {
	t.Helper()
	a, _, _, d, e := r.report.Violations()
	breaks, fenceErrs := r.report.Unexcused(allowed...)
	bad := a+d+e+breaks+fenceErrs+len(r.report.OverLimit) > 0
	if bad {
		t.Errorf("%s seed %d (replay: make chaos SEED=%d): violations\n%s\nfaults: %v", name, seed, seed, r.report.Summary(), r.faults)
	}
}

// TestChaosRedis: Redis standalone, the register a Redis hash behind
// FencedSet/FencedHSet, every fault kind of a standalone server.
func TestChaosRedis(t *testing.T) {
	runSeeds(t, newRedisSetup(t, "redis", false), "redis-standalone")
}

// runSeeds runs every seed on s and requires each run safe (an operator's
// deletion of the lock key excused), then prints the stats under name. A
// backend that never granted a lease fails: its runs checked nothing.
func runSeeds(t *testing.T, s *setup, name string) {
	t.Helper()
	st := newStats(name)
	var lastLogs []string
	for _, seed := range seeds(t) {
		r := run(t, s, defaultRun(seed))
		st.add(r)
		requireSafe(t, st.name, seed, r, FaultDelLock)
		lastLogs = r.logs
	}
	st.print(t)
	if st.grants == 0 {
		t.Fatalf("%s: no lease granted in %d schedules: the workload did not run (workers' stderr: %q)", name, st.runs, lastLogs)
	}
}

// TestChaosSQL: the lock on Redis standalone, the register a PostgreSQL
// row behind fencing.SQLTable; network faults hit both of a worker's links.
func TestChaosSQL(t *testing.T) {
	s := newRedisSetup(t, "sql", false)
	s.register = RegisterSQL
	s.pg, s.db = startSQLRegister(t)
	runSeeds(t, s, "postgres-guard")
}

// startSQLRegister starts a PostgreSQL server and returns it with a
// database handle on it (closed when t ends) whose sqlTable is created.
func startSQLRegister(t *testing.T) (*testserver.Postgres, *sql.DB) {
	t.Helper()
	pg := testserver.StartPostgres(t)
	db, err := sql.Open("pgx", pg.DSN())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if _, err := db.ExecContext(ctx, sqlSchema); err != nil {
		t.Fatal(err)
	}
	return pg, db
}

// control runs the one schedule of a negative control (seed 1, or
// -chaos.seed) and logs its report.
func control(t *testing.T, s *setup, what string) runResult {
	t.Helper()
	seed := *flagSeed
	if seed == 0 {
		seed = 1
	}
	rc := defaultRun(seed)
	if s.etcd != nil {
		rc = etcdRun(seed)
	}
	rc.length = max(rc.length, s.minLength)
	r := run(t, s, rc)
	t.Logf("negative control (%s), seed %d:\n%s", what, seed, r.report.Summary())
	return r
}

// TestChaosNegativeBypass is a negative control: the same workload with
// the guard bypassed (plain HSET) under paused holders must fail (a).
func TestChaosNegativeBypass(t *testing.T) {
	s := newRedisSetup(t, "bypass", false)
	s.work = *flagTTL / 2 // holders spend most of their time between read and write
	r := bypassControl(t, s, "guard bypassed")
	if _, err := os.Stat(r.report.Visual); err != nil {
		t.Fatalf("no visualisation written: %q: %v", r.report.Visual, err)
	}
}

// bypassControl runs the negative control of s with its register's
// guard bypassed, under holders paused past their lease: it must fail (a).
func bypassControl(t *testing.T, s *setup, what string) runResult {
	t.Helper()
	s.bypass = true
	s.kinds = []FaultKind{FaultPauseHolder}
	s.minFault = 2 * *flagTTL
	r := control(t, s, what)
	if r.report.Linearizable != porcupine.Illegal {
		t.Fatalf("negative control (%s): the register history was %s; the checker has no teeth", what, r.report.Linearizable)
	}
	return r
}

// requireBreaks fails t unless r has (b) breaks that not even an
// operator's deletion excuses: what a broken lock backend must show.
func requireBreaks(t *testing.T, r runResult, what string) {
	t.Helper()
	if breaks, _ := r.report.Unexcused(FaultDelLock); breaks == 0 {
		t.Fatalf("negative control: %s passed (b) (%d breaks, all excused); the checker has no teeth", what, len(r.report.Overlaps))
	}
}

// TestChaosNegativeBrokenRelease is a negative control: a backend whose
// Release deletes the key without checking the owner, under paused
// holders, must fail (b) (fencing still keeps (a)).
func TestChaosNegativeBrokenRelease(t *testing.T) {
	s := newRedisSetup(t, "broken-release", false)
	s.broken = BrokenReleaseNoOwner
	s.kinds = []FaultKind{FaultPauseHolder}
	s.minFault = 2 * *flagTTL
	requireBreaks(t, control(t, s, "release without owner check"), "a release without owner check")
}

// TestChaosNegativeRenewAnyOwner is a negative control: a backend whose
// Renew extends the lock key whoever holds it, under an operator's
// deletions (the only way another owner gets a key its holder still
// renews), must fail (b): the deleted lease's holder renews its
// successor's key and stays valid for longer than a deletion explains
// (a TTL past it). Each deletion wakes the waiters (a release
// notification), so a successor is granted before the deleted lease's
// next renewal (otherwise that renewal finds no key and the lease is
// lost). Holders work 3 to 4 TTLs, so leases outlast a TTL after a
// deletion; deletions are at least 4 TTLs apart, since the next one (or
// the successor's release) ends the broken holder's run of renewals on its
// successor's key. 12 s of schedule: 5 deletions.
// A checker that ends a lease at its first deadline, or excuses every break
// near a deletion, passes it.
func TestChaosNegativeRenewAnyOwner(t *testing.T) {
	s := newRedisSetup(t, "broken-renew", false)
	s.broken = BrokenRenewAnyOwner
	s.kinds = []FaultKind{FaultDelLock}
	s.minWork, s.work = 3**flagTTL, 4**flagTTL
	s.spacing = 4 * *flagTTL
	s.minLength = 12 * time.Second
	s.wake = true
	requireBreaks(t, control(t, s, "renew without owner check"), "a renewal without owner check")
}

// TestChaosNegativeAcquireExpired is a negative control: a backend whose
// Acquire returns a lease that has already expired on the server, with no
// fault at all, must fail (b).
func TestChaosNegativeAcquireExpired(t *testing.T) {
	s := newRedisSetup(t, "broken-acquire", false)
	s.broken = BrokenAcquireExpired
	s.kinds = nil
	requireBreaks(t, control(t, s, "acquire returns an expired lease"), "an acquire returning an expired lease")
}

// TestChaosRedisVolatile documents what a redis-server without
// persistence does to fencing: a SIGKILL and restart loses every key, the
// fence counter and the guard's fence record included, so fences start
// again from 1 and the register from 0. The checker must report it ((c)
// and (a) at least); it is a finding about deployment (run Redis with
// appendonly for fencing), not a fencedlock bug.
func TestChaosRedisVolatile(t *testing.T) {
	s := newRedisSetup(t, "volatile", true)
	s.kinds = []FaultKind{FaultKillRestartVolatile}
	seed := *flagSeed
	if seed == 0 {
		seed = 1
	}
	r := run(t, s, defaultRun(seed))
	st := newStats("redis-standalone-volatile")
	st.add(r)
	st.print(t)
	t.Logf("redis-server without persistence, killed and restarted, seed %d:\n%s", seed, r.report.Summary())
	a, _, c, _, _ := r.report.Violations()
	if a == 0 || c == 0 {
		t.Fatalf("a restart that lost every key passed (a) or (c); the checker has no teeth")
	}
}
