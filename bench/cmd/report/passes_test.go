package main

import (
	"os"
	"strings"
	"testing"
)

// abbaSample is the output of three passes of the b.N scenarios without
// the interleaved ratio (vs-base), in which the baseline runs before every
// pair of contenders and at the end, odd passes reversed, with go test's
// #01 on the repeated baseline: ratios come from neighbouring samples.
const abbaSample = `goos: linux
# report pass 0
BenchmarkAcquireRelease/conc=1/lib=raw-rueidis-2         	 100	 100000 ns/op	 5 allocs/op
BenchmarkAcquireRelease/conc=1/lib=fencedlock-redis-2    	 100	 125000 ns/op	 6 allocs/op
BenchmarkAcquireRelease/conc=1/lib=redsync-2             	 100	 200000 ns/op	 39 allocs/op
BenchmarkAcquireRelease/conc=1/lib=raw-rueidis#01-2      	 100	 150000 ns/op	 5 allocs/op
BenchmarkOverhead/conc=64/layer=raw-2                    	 100	 100 ns/op
BenchmarkOverhead/conc=64/layer=backend-2                	 100	 150 ns/op
BenchmarkOverhead/conc=64/layer=raw#01-2                 	 100	 200 ns/op
# report pass 1
BenchmarkAcquireRelease/conc=1/lib=raw-rueidis-2         	 100	 100000 ns/op	 5 allocs/op
BenchmarkAcquireRelease/conc=1/lib=redsync-2             	 100	 100000 ns/op	 39 allocs/op
BenchmarkAcquireRelease/conc=1/lib=fencedlock-redis-2    	 100	 100000 ns/op	 6 allocs/op
BenchmarkAcquireRelease/conc=1/lib=raw-rueidis#01-2      	 100	 200000 ns/op	 5 allocs/op
# report pass 2
BenchmarkAcquireRelease/conc=1/lib=raw-rueidis-2         	 100	 100000 ns/op	 5 allocs/op
BenchmarkAcquireRelease/conc=1/lib=fencedlock-redis-2    	 100	  90000 ns/op	 6 allocs/op
BenchmarkAcquireRelease/conc=1/lib=redsync-2             	 100	 100000 ns/op	 39 allocs/op
BenchmarkAcquireRelease/conc=1/lib=raw-rueidis#01-2      	 100	 100000 ns/op	 5 allocs/op
`

// ratioIs fails t unless lib's ops/s ratio to base in scenario, over the
// passes of r, renders as want and counts passes passes.
func ratioIs(t *testing.T, r *runData, scenario, lib, base, want string, passes int) {
	t.Helper()
	s, ok := r.opsRatio(scenario, lib, base)
	if got := fmtSpread(s, ok); got != want || s.n != passes {
		t.Errorf("%s vs %s in %s: %s over %d passes, want %s over %d", lib, base, scenario, got, s.n, want, passes)
	}
}

// TestPassRatio: each contender's ratio is taken against the baseline
// sample next to it in the same pass (the mean of both when it sits
// between two), and the report shows the median over passes with the
// range.
func TestPassRatio(t *testing.T) {
	r, err := parse([]byte(abbaSample))
	if err != nil {
		t.Fatal(err)
	}
	// fencedlock-redis: pass 0 100000/125000, pass 1 200000/100000 (its
	// neighbour is the baseline after it), pass 2 100000/90000.
	// redsync: 150000/200000, 100000/100000, 100000/100000.
	ratioIs(t, r, "AcquireRelease/conc=1", "fencedlock-redis", baseline, "1.11x (0.80–2.00)", 3)
	ratioIs(t, r, "AcquireRelease/conc=1", "redsync", baseline, "1.00x (0.75–1.00)", 3)
	// Between two baseline samples: their mean, (100+200)/2 / 150.
	if s, ok := r.passRatio("Overhead/conc=64/layer=backend", "Overhead/conc=64/layer=raw", "ops/s"); !ok || fmtSpread(s, ok) != "1.00x" {
		t.Errorf("sandwiched layer: %v, %v; want 1.00x", s, ok)
	}
	// The repeated baseline is one benchmark measured in three passes.
	if n := r.runs["AcquireRelease/conc=1/lib=raw-rueidis"]; n != 3 {
		t.Errorf("baseline passes = %d, want 3", n)
	}
	if _, ok := r.results["AcquireRelease/conc=1/lib=raw-rueidis#01"]; ok {
		t.Errorf("the repeated baseline is reported as a benchmark of its own")
	}
	md := render(r, nil)
	reportHas(t, md, "| **fencedlock/redis** | 10,000 | 1.11x (0.80–2.00) |", "| backend/redis directly | 64 | 6,666,667 | 1.00x |")
}

// TestPassRatioSavedRun: a run saved before the report marked its passes
// (three go test runs in a row, fixed order, Overhead at concurrency 1
// only) still gives per-pass ratios, by the order of the samples: the
// committed run whose 0.71x median hid a 0.67x to 0.91x range.
func TestPassRatioSavedRun(t *testing.T) {
	raw, err := os.ReadFile("testdata/run-before-passes.txt")
	if err != nil {
		t.Fatal(err)
	}
	r, err := parse(raw)
	if err != nil {
		t.Fatal(err)
	}
	// 173773/244930, 174542/260491, 213700/234281.
	ratioIs(t, r, "AcquireRelease/conc=1", "fencedlock-redis", baseline, "0.71x (0.67–0.91)", 3)
	if got := overheadName(r, "1", "locker"); got != "Overhead/layer=locker" {
		t.Errorf("overheadName = %q", got)
	}
	md := render(r, nil)
	// The Overhead table of the same run: 270597/263453, 232815/293482,
	// 317068/199542; the baseline's own row has no range.
	reportHas(t, md, "| Locker.Acquire + Lease.Release | 1 | 3,796 | 1.03x (0.79–1.59) |", "| raw rueidis scripts | 1 | 3,696 | 1.00x |",
		"| raw rueidis (baseline) | 5,729 | 1.00x |")
}

// targetSample has a result for every target of issues 19 and 20.
const targetSample = `# report pass 0
BenchmarkAcquireRelease/conc=1/lib=raw-rueidis-2          1 100000 ns/op 5 allocs/op
BenchmarkAcquireRelease/conc=1/lib=fencedlock-redis-2     1 100000 ns/op 6 allocs/op
BenchmarkAcquireRelease/conc=1/lib=fencedlock-goredis-2   1  90000 ns/op 14 allocs/op
BenchmarkAcquireRelease/conc=1/lib=redsync-2              1 120000 ns/op 39 allocs/op
BenchmarkAcquireRelease/conc=1/lib=redislock-2            1  80000 ns/op 35 allocs/op
BenchmarkAcquireRelease/conc=1/lib=fencedlock-etcd-2      1 1000000 ns/op 300 allocs/op
BenchmarkAcquireRelease/conc=1/lib=etcd-mutex-shared-2    1 1100000 ns/op 280 allocs/op
BenchmarkAcquireRelease/conc=64/lib=raw-rueidis-2         1  20000 ns/op 5 allocs/op
BenchmarkAcquireRelease/conc=64/lib=fencedlock-redis-2    1  25000 ns/op 6 allocs/op
BenchmarkAcquireRelease/conc=64/lib=fencedlock-etcd-2     1 400000 ns/op 300 allocs/op
BenchmarkAcquireRelease/conc=64/lib=etcd-mutex-shared-2   1 200000 ns/op 280 allocs/op
BenchmarkRenew/conc=64/lib=raw-rueidis-2                  1  10000 ns/op 1 allocs/op
BenchmarkRenew/conc=64/lib=fencedlock-redis-2             1  10000 ns/op 1 allocs/op
# report fixed-duration scenarios
BenchmarkContended/lib=raw-rueidis-2            1 1 ns/op 1000 handoffs/s 20000000 wait-p99-ns 0 violations
BenchmarkContended/lib=fencedlock-redis-fair-2  1 1 ns/op 2500 handoffs/s 4000000 wait-p99-ns 0.95 fairness 7 cmds/op 3000000 idle-max-ns 0 violations
BenchmarkContended/lib=fencedlock-goredis-2     1 1 ns/op 100 handoffs/s 2000000 wait-p99-ns
BenchmarkContended/lib=redsync-2                1 1 ns/op 50 handoffs/s 4000000 wait-p99-ns
BenchmarkContended/lib=redislock-2              1 1 ns/op 200 handoffs/s 1000000 wait-p99-ns
BenchmarkContended/lib=fencedlock-etcd-2        1 1 ns/op 300 handoffs/s
BenchmarkContended/lib=etcd-mutex-2             1 1 ns/op 100 handoffs/s
BenchmarkManyLeases/lib=fencedlock-redis/leases=10000-2  1 1 ns/op 10000 cpu-ns/lease/s 1000 mem-B/lease 0 lost 0 release-errors
BenchmarkManyLeases/lib=fencedlock-redis/scale=1000-2    1 1 ns/op 20000 cpu-ns/lease/s 2000 mem-B/lease 0 lost 0 release-errors
BenchmarkManyLeases/lib=fencedlock-redis/scale=10000-2   1 1 ns/op 4000 cpu-ns/lease/s 1000 mem-B/lease 0 lost 0 release-errors
BenchmarkManyLeases/lib=fencedlock-redis/scale=100000-2  1 1 ns/op 4400 cpu-ns/lease/s 1300 mem-B/lease 0 lost 0 release-errors
BenchmarkManyLeases/lib=fencedlock-etcd/leases=10000-2    1 1 ns/op 12000 cpu-ns/lease/s 4000 mem-B/lease 2 lost 0 release-errors
BenchmarkManyLeases/lib=fencedlock-etcd/halfrenew=10000-2 1 1 ns/op 7200 cpu-ns/lease/s 4000 mem-B/lease 0 lost 0 release-errors
BenchmarkManyLeases/lib=etcd-mutex/leases=10000-2         1 1 ns/op 6000 cpu-ns/lease/s 6000 mem-B/lease 0 lost 0 release-errors
`

// TestTargets: the targets table checks each goal of issues 19 and 20
// with its measured value, met or not, and "not run" when the run lacks
// the result.
func TestTargets(t *testing.T) {
	r, err := parse([]byte(targetSample))
	if err != nil {
		t.Fatal(err)
	}
	got := targetTable(targets(r))
	for _, want := range []string{
		"| #19 | fencedlock/redis acquire+release, concurrency 1, >= 0.95x baseline | 1.00x | yes |",
		"| #19 | fencedlock/redis acquire+release, concurrency 64, >= 0.9x baseline | 0.80x | no |",
		"| #19 | fencedlock/redis allocs per acquire+release <= 8 | 6.00 | yes |",
		"| #19 | fencedlock/redis renew, concurrency 64, >= 0.95x baseline | 1.00x | yes |",
		"| #19 | fencedlock/redis allocs per renew (concurrency 64) <= 1 | 1.00 | yes |",
		"| #19 | FairBackend contended hand-offs/s >= 2x the raw 1 ms polling baseline | 2.50x | yes |",
		"| #19 | FairBackend contended wait p99 <= 0.25x the baseline's | 0.20x | yes |",
		"| #19 | FairBackend contended fairness (min/max acquisitions per worker) >= 0.9 | 0.95 | yes |",
		"| #19 | FairBackend contended Redis commands per acquisition <= 8 | 7.00 | yes |",
		"| #19 | FairBackend contended longest free-lock gap <= 2 ms | 3.0 ms | no |",
		"| #19 | FairBackend contended overlaps (two holders at once) = 0 | 0 | yes |",
		"| #20 | fencedlock/etcd acquire+release, concurrency 1, >= 1.0x concurrency.Mutex (shared session) | 1.10x | yes |",
		"| #20 | fencedlock/etcd acquire+release, concurrency 64, >= 1.0x concurrency.Mutex (shared session) | 0.50x | no |",
		"| #20 | fencedlock/etcd contended hand-offs >= 10x concurrency.Mutex | 3.00x | no |",
		"| #20 | fencedlock/redis ManyLeases growth per lease (CPU / memory) <= 1.2x, 10,000 to 100,000 leases | 1.10x / 1.30x | no |",
		"| #20 | fencedlock/redis ManyLeases leases lost = 0 (every size) | 0 | yes |",
		"| #20 | fencedlock/redis ManyLeases failed releases = 0 (every size) | 0 | yes |",
		"| #20 | fencedlock/etcd ManyLeases growth per lease (CPU / memory) <= 1.2x | – / – | not run |",
		"| #20 | fencedlock/etcd ManyLeases leases lost = 0 (every size) | 2.00 | no |",
		"| #20 | fencedlock/etcd ManyLeases CPU per lease per s <= 1.5x concurrency.Mutex's (10,000 leases) | 2.00x | no |",
		"| #20 | fencedlock/etcd ManyLeases memory per lease <= 1.5x concurrency.Mutex's (10,000 leases) | 0.67x | yes |",
		"| #20 | fencedlock/etcd ManyLeases CPU per lease per s at the Mutex's renewal rate (RenewInterval TTL/2) <= 1.5x concurrency.Mutex's (10,000 leases) | 1.20x | yes |",
	} {
		if !strings.Contains(got, want+"\n") {
			t.Errorf("targets lack %q:\n%s", want, got)
		}
	}
	if strings.Contains(got, "issue 7") || strings.Contains(got, ">= 20x") {
		t.Errorf("stale targets of issue 7:\n%s", got)
	}
}

// pairedSample carries the interleaved measurement (vs-base) the
// benchmarks report for every Redis contender and Overhead layer.
const pairedSample = `# report pass 0
BenchmarkAcquireRelease/conc=1/lib=raw-rueidis-2       100 100000 ns/op
BenchmarkAcquireRelease/conc=1/lib=fencedlock-redis-2  100 400000 ns/op 0.97 vs-base
BenchmarkAcquireRelease/conc=1/lib=redislock-2         100  50000 ns/op 0.97 vs-base
BenchmarkAcquireRelease/conc=1/lib=raw-rueidis#01-2    100 100000 ns/op
BenchmarkOverhead/conc=64/layer=raw-2                  100 100 ns/op
BenchmarkOverhead/conc=64/layer=locker-2               100 900 ns/op 0.80 vs-base
BenchmarkOverhead/conc=64/layer=raw#01-2               100 100 ns/op
# report pass 1
BenchmarkAcquireRelease/conc=1/lib=raw-rueidis-2       100 100000 ns/op
BenchmarkAcquireRelease/conc=1/lib=fencedlock-redis-2  100 100000 ns/op 0.91 vs-base
BenchmarkAcquireRelease/conc=1/lib=redislock-2         100  50000 ns/op 0.70 vs-base
BenchmarkAcquireRelease/conc=1/lib=raw-rueidis#01-2    100 100000 ns/op
# report pass 2
BenchmarkAcquireRelease/conc=1/lib=raw-rueidis-2       100 100000 ns/op
BenchmarkAcquireRelease/conc=1/lib=fencedlock-redis-2  100  50000 ns/op 0.95 vs-base
BenchmarkAcquireRelease/conc=1/lib=redislock-2         100  50000 ns/op 1.00 vs-base
BenchmarkAcquireRelease/conc=1/lib=raw-rueidis#01-2    100 100000 ns/op
`

// TestPairedRatio: when the run measured the ratio to the baseline with
// the operations interleaved (vs-base), the report shows its median over
// the passes and range, not the ratio of the separately timed samples
// (here 0.25x to 2x: load bursts).
func TestPairedRatio(t *testing.T) {
	r, err := parse([]byte(pairedSample))
	if err != nil {
		t.Fatal(err)
	}
	ratioIs(t, r, "AcquireRelease/conc=1", "fencedlock-redis", baseline, "0.95x (0.91–0.97)", 3)
	md := render(r, nil)
	reportHas(t, md, "| **fencedlock/redis** | 10,000 | 0.95x (0.91–0.97) |", "| Locker.Acquire + Lease.Release | 64 | 1,111,111 | 0.80x |",
		"| #19 | fencedlock/redis acquire+release, concurrency 1, >= 0.95x baseline | 0.95x (0.91–0.97) | yes |")
}

// TestPairedBetween: two libraries that were both measured interleaved
// with the baseline compare through those ratios, pass by pass (the
// baseline cancels out), not through their separately timed samples:
// here the samples say fencedlock-redis is 8x, 2x and 1x slower than
// redislock, the interleaved ratios 1.00x, 1.30x and 0.95x.
func TestPairedBetween(t *testing.T) {
	r, err := parse([]byte(pairedSample))
	if err != nil {
		t.Fatal(err)
	}
	ratioIs(t, r, "AcquireRelease/conc=1", "fencedlock-redis", "redislock", "1.00x (0.95–1.30)", 3)
	// Without vs-base on one side: the samples of the same pass.
	if _, ok := r.pairedBetween("AcquireRelease/conc=1/lib=fencedlock-redis", "AcquireRelease/conc=1/lib=raw-rueidis"); ok {
		t.Error("a ratio through vs-base against a benchmark that has none")
	}
}

// TestPairedMutex: fencedlock-etcd's ratio to the shared-session Mutex
// (issue 20's target) comes from its interleaved measurement against the
// Mutex (vs-mutex), not from the separately timed samples (here 4x, 1x
// and 0.5x the Mutex's time per op).
func TestPairedMutex(t *testing.T) {
	const sample = `# report pass 0
BenchmarkAcquireRelease/conc=64/lib=fencedlock-etcd-2    100 400000 ns/op 0.90 vs-mutex
BenchmarkAcquireRelease/conc=64/lib=etcd-mutex-shared-2  100 100000 ns/op
# report pass 1
BenchmarkAcquireRelease/conc=64/lib=etcd-mutex-shared-2  100 100000 ns/op
BenchmarkAcquireRelease/conc=64/lib=fencedlock-etcd-2    100 100000 ns/op 1.05 vs-mutex
# report pass 2
BenchmarkAcquireRelease/conc=64/lib=fencedlock-etcd-2    100  50000 ns/op 0.97 vs-mutex
BenchmarkAcquireRelease/conc=64/lib=etcd-mutex-shared-2  100 100000 ns/op
`
	r, err := parse([]byte(sample))
	if err != nil {
		t.Fatal(err)
	}
	ratioIs(t, r, "AcquireRelease/conc=64", "fencedlock-etcd", "etcd-mutex-shared", "0.97x (0.90–1.05)", 3)
	want := "| #20 | fencedlock/etcd acquire+release, concurrency 64, >= 1.0x concurrency.Mutex (shared session) | 0.97x (0.90–1.05) | no |"
	if got := targetTable(targets(r)); !strings.Contains(got, want+"\n") {
		t.Errorf("targets lack %q:\n%s", want, got)
	}
}
