package main

import (
	"strings"
	"testing"
)

// capacitySample is a Capacity run of three repetitions (the second in
// reverse order, go test's #NN on the repeats), the interleaved ratio of
// AcquireRelease at concurrency 64, and the figures the ping-pong floor
// is compared with.
const capacitySample = `# report pass 0
BenchmarkAcquireRelease/conc=64/lib=raw-rueidis-2       100 20000 ns/op
BenchmarkAcquireRelease/conc=64/lib=fencedlock-redis-2  100 25000 ns/op 0.90 vs-base
# report capacity
BenchmarkCapacity/conc=64/lib=raw-rueidis-2                1 20000 ns/op 0 rep 6.0 cmds/op 13000 server-cpu-ns/op 5 allocs/op
BenchmarkCapacity/conc=64/lib=fencedlock-redis-2           1 40000 ns/op 0 rep 10.0 cmds/op 23000 server-cpu-ns/op 6 allocs/op
BenchmarkCapacity/conc=64/lib=fencedlock-redis#01-2        1 25000 ns/op 1 rep 10.0 cmds/op 23000 server-cpu-ns/op 6 allocs/op
BenchmarkCapacity/conc=64/lib=raw-rueidis#01-2             1 10000 ns/op 1 rep 6.0 cmds/op 13000 server-cpu-ns/op 5 allocs/op
BenchmarkCapacity/conc=64/lib=raw-rueidis#02-2             1 20000 ns/op 2 rep 6.0 cmds/op 13000 server-cpu-ns/op 5 allocs/op
BenchmarkCapacity/conc=64/lib=fencedlock-redis#02-2        1 25000 ns/op 2 rep 10.0 cmds/op 23000 server-cpu-ns/op 6 allocs/op
# report fixed-duration scenarios
BenchmarkContended/lib=fencedlock-redis-fair-2   1 100000 ns/op 300000 handoff-p50-ns 2000000 handoff-p99-ns 6000000 idle-max-ns
BenchmarkHandoff/lib=fencedlock-redis-fair-2     1 500000 ns/op 500000 p50-ns 1000000 p99-ns 4000000 max-ns
BenchmarkPingPong/procs=2/pause=0s-2   1 200000 ns/op 200000 p50-ns 1000000 p99-ns 5000000 max-ns 10000 rounds 0 lost
BenchmarkPingPong/procs=2/pause=5ms-2  1 400000 ns/op 400000 p50-ns 1000000 p99-ns 2000000 max-ns 300 rounds 0 lost
BenchmarkPingPong/procs=1/pause=0s-2   1 100000 ns/op 100000 p50-ns 500000 p99-ns 3000000 max-ns 20000 rounds 0 lost
`

// TestCapacity: a library's capacity ratio is taken against the baseline
// of the same repetition (the rep metric), not of the nearest line, and
// reported beside the interleaved ratio; the fair path's hand-off is set
// beside the ping-pong, and issue 36's targets are checked.
func TestCapacity(t *testing.T) {
	r, err := parse([]byte(capacitySample))
	if err != nil {
		t.Fatal(err)
	}
	// fencedlock-redis: rep 0 25,000/50,000 ops/s, rep 1 40,000/100,000,
	// rep 2 40,000/50,000.
	ops, ratio, ok := r.capacity("fencedlock-redis")
	if !ok || fmtSpread(ratio, true) != "0.50x (0.40–0.80)" || ops.med != 40000 || ops.lo != 25000 {
		t.Errorf("capacity: ops %+v ratio %+v %v; want ops 40,000 (25,000-40,000), ratio 0.50x (0.40–0.80)", ops, ratio, ok)
	}
	md := render(r, nil)
	for _, want := range []string{
		"| **fencedlock/redis** | 3 | 40,000 (25,000–40,000) | 0.50x (0.40–0.80) | 0.90x | 6.00 | 10.0 | 23.0 µs |",
		"| raw rueidis (baseline) | 3 | 50,000 (50,000–100,000) | 1.00x (1.00–1.00) | 1.00x | 5.00 | 6.00 | 13.0 µs |",
		"| another process | none (as Contended) | 10,000 | 200 µs | 1.0 ms | – | 5.0 ms | – | – | – | 0 |",
		"| Contended longest free-lock gap / longest round trip | 6.0 ms | 5.0 ms | 1.20x | 3.0 ms | 2.00x |",
		"| Handoff p50 / round trip p50 (5 ms pause) | 500 µs | 400 µs | 1.25x | – | – |",
		"| #36 | fencedlock/redis acquire+release capacity, concurrency 64, each library timed alone, >= 0.8x baseline | 0.50x (0.40–0.80) | no |",
		"| #36 | fencedlock/redis, FairBackend Contended longest free-lock gap <= 1.2x the longest round trip of a bare pub/sub ping-pong between 2 processes | 6.0 ms / 5.0 ms = 1.20x | yes |",
		"| #36 | fencedlock/redis, FairBackend Contended hand-off p50 <= 1.2x the ping-pong's round-trip p50 | 300 µs / 200 µs = 1.50x | no |",
	} {
		if !strings.Contains(md, want+"\n") {
			t.Errorf("report lacks %q", want)
		}
	}
	if t.Failed() {
		t.Logf("report:\n%s", md)
	}
}

// gapFloorSample is capacitySample with a GapFloor run of four
// repetitions (the second in reverse order); the ping-pong of the fourth
// lost a ping and has no sample, so its lock side pairs with nothing.
const gapFloorSample = capacitySample + `# report gap floor
BenchmarkGapFloor/side=lock-2             1 100000 ns/op 4000000 gap-ns 300000 p50-ns 0 rep
BenchmarkGapFloor/side=pingpong-2         1 200000 ns/op 5000000 gap-ns 260000 p50-ns 0 rep
BenchmarkGapFloor/side=pingpong#01-2      1 200000 ns/op 2000000 gap-ns 200000 p50-ns 1 rep
BenchmarkGapFloor/side=lock#01-2          1 100000 ns/op 2000000 gap-ns 300000 p50-ns 1 rep
BenchmarkGapFloor/side=lock#02-2          1 100000 ns/op 6000000 gap-ns 240000 p50-ns 2 rep
BenchmarkGapFloor/side=pingpong#02-2      1 200000 ns/op 4000000 gap-ns 240000 p50-ns 2 rep
BenchmarkGapFloor/side=lock#03-2          1 100000 ns/op 20000000 gap-ns 900000 p50-ns 3 rep
`

// TestGapFloor: with a GapFloor run, issue 36's two floor targets take
// the lock's figure over the ping-pong's within each repetition (median
// and range over the repetitions with both sides), not the ratio of
// Contended's and PingPong's medians, and the ping-pong section shows
// the interleaved table; without one (TestCapacity's run), the targets
// keep the separate runs' ratio and the table is not run.
func TestGapFloor(t *testing.T) {
	r, err := parse([]byte(gapFloorSample))
	if err != nil {
		t.Fatal(err)
	}
	// Gap ratios per repetition 0.8, 1.0, 1.5; p50 ratios 1.15, 1.5, 1.0.
	g, ok := r.gapFloor()
	if !ok || g.gap.ratio.n != 3 || g.gap.ratio.med != 1 || g.p50.lock.med != 300000 || g.p50.ping.med != 240000 {
		t.Errorf("gapFloor = %+v, %v; want 3 repetitions, gap ratio 1.00, p50 300 µs / 240 µs", g, ok)
	}
	md := render(r, nil)
	reportHas(t, md,
		"| #36 | fencedlock/redis, FairBackend Contended longest free-lock gap <= 1.2x the longest round trip of a bare pub/sub ping-pong between 2 processes | 4.0 ms / 4.0 ms, per repetition 1.00x (0.80–1.50), 3 repetitions | yes |\n",
		"| #36 | fencedlock/redis, FairBackend Contended hand-off p50 <= 1.2x the ping-pong's round-trip p50 | 300 µs / 240 µs, per repetition 1.15x (1.00–1.50), 3 repetitions | yes |\n",
		"| Contended longest free-lock gap / longest round trip | 3 | 4.0 ms (2.0 ms–6.0 ms) | 4.0 ms (2.0 ms–5.0 ms) | 1.00x (0.80–1.50) |\n",
		"| Contended hand-off p50 / round trip p50 | 3 | 300 µs (240 µs–300 µs) | 240 µs (200 µs–260 µs) | 1.15x (1.00–1.50) |\n",
		// The separate runs' table stays as it is.
		"| Contended longest free-lock gap / longest round trip | 6.0 ms | 5.0 ms | 1.20x | 3.0 ms | 2.00x |\n",
		"`BenchmarkGapFloor` measures both in interleaved repetitions")

	// Without GapFloor: the separate runs' ratio, and no table.
	r, err = parse([]byte(capacitySample))
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := r.gapFloor(); ok {
		t.Errorf("gapFloor of a run without GapFloor")
	}
	md = render(r, nil)
	reportHas(t, md, "= 1.20x | yes |\n", "gives its median and range beside each side's median and range over the same repetitions. Issue 36's two targets on the floor use it when the run has it.\n\n_not run_\n")
	if strings.Contains(md, ", per repetition ") {
		t.Errorf("report of a run without GapFloor has a per-repetition ratio:\n%s", md)
	}
}
