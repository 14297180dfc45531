// Capacity (each library timed alone) and the pub/sub ping-pong floor of a hand-off (issue 36).

package main

import (
	"fmt"
	"slices"
	"strconv"
	"strings"
)

// capacityScenario is the prefix of BenchmarkCapacity's results.
const capacityScenario = "Capacity/conc=64"

// capacity summarises lib's Capacity runs: its throughput over the
// repetitions, and its throughput over the baseline's in the same
// repetition (the rep metric), median and range. False if the run has
// no Capacity result of lib.
func (r *runData) capacity(lib string) (ops, ratio spread, ok bool) {
	perRep := func(name string) map[float64]float64 {
		m := map[float64]float64{}
		for _, s := range r.samples[name] {
			ns, ok1 := s.vals["ns/op"]
			rep, ok2 := s.vals["rep"]
			if ok1 && ok2 && ns > 0 {
				m[rep] = 1e9 / ns
			}
		}
		return m
	}
	mine := perRep(capacityScenario + "/lib=" + lib)
	if len(mine) == 0 {
		return spread{}, spread{}, false
	}
	floor := perRep(capacityScenario + "/lib=" + baseline)
	var vs, rs []float64
	for rep, v := range mine {
		vs = append(vs, v)
		if f, ok := floor[rep]; ok {
			rs = append(rs, v/f)
		}
	}
	return spreadOf(vs), spreadOf(rs), true
}

// spreadOf is the median and range of vs (n 0 if empty).
func spreadOf(vs []float64) spread {
	if len(vs) == 0 {
		return spread{}
	}
	return spread{med: median(vs), lo: slices.Min(vs), hi: slices.Max(vs), n: len(vs)}
}

// capacityTable renders Capacity beside the interleaved ratio of
// AcquireRelease at concurrency 64.
func capacityTable(r *runData) string {
	t := &table{head: []string{"library", "repetitions", "ops/s, alone (range)", "vs baseline, separate runs (range)", "vs baseline, interleaved (vs-base, range)", "allocs/op", "Redis cmds/op", "Redis server CPU/op"}}
	for _, lib := range libs {
		ops, ratio, ok := r.capacity(lib)
		if !ok {
			continue
		}
		inter, iok := r.pairedSpread("AcquireRelease/conc=64/lib=" + lib)
		if lib == baseline {
			inter, iok = spread{med: 1}, true
		}
		t.rows = append(t.rows, []string{display[lib], strconv.Itoa(ops.n),
			fmt.Sprintf("%s (%s–%s)", fmtRate(ops.med), fmtRate(ops.lo), fmtRate(ops.hi)),
			fmtSpread(ratio, ratio.n > 0), fmtSpread(inter, iok), cell(r, capacityScenario, lib, "allocs/op", fmtNum),
			cell(r, capacityScenario, lib, "cmds/op", fmtNum), cell(r, capacityScenario, lib, "server-cpu-ns/op", fmtCPU)})
	}
	return t.markdown()
}

// The PingPong variants, as BenchmarkPingPong names them.
const (
	pingTwo      = "PingPong/procs=2/pause=0s"
	pingTwoPause = "PingPong/procs=2/pause=5ms"
	pingOne      = "PingPong/procs=1/pause=0s"
)

// pingPongTable renders the ping-pong round trips and one-way times.
func pingPongTable(r *runData) string {
	t := &table{head: []string{"responder", "pause between rounds", "round trips", "round trip p50", "p99", "p99.9", "longest",
		"one-way p50", "one-way p99", "one-way longest", "lost"}}
	for _, v := range []struct{ name, who, pause string }{
		{pingTwo, "another process", "none (as Contended)"},
		{pingTwoPause, "another process", "5 ms (as Handoff)"},
		{pingOne, "the same process, own client", "none"},
	} {
		res, ok := r.results[v.name]
		if !ok {
			continue
		}
		f := func(unit string, fn func(float64) string) string {
			if x, ok := res[unit]; ok {
				return fn(x)
			}
			return "–"
		}
		t.rows = append(t.rows, []string{v.who, v.pause, f("rounds", fmtNum), f("p50-ns", fmtDur), f("p99-ns", fmtDur), f("p999-ns", fmtDur),
			f("max-ns", fmtDur), f("oneway-p50-ns", fmtDur), f("oneway-p99-ns", fmtDur), f("oneway-max-ns", fmtDur), f("lost", fmtNum)})
	}
	return t.markdown()
}

// fairLib is the fencedlock/redis configuration whose hand-off is the
// one-waiter (fair) path: the FairBackend row while the run has one, else
// the default.
func fairLib(r *runData) string {
	if _, ok := r.get("Contended", "fencedlock-redis-fair", "idle-max-ns"); ok {
		return "fencedlock-redis-fair"
	}
	return "fencedlock-redis"
}

// floorComparison is one figure of fencedlock's fair path set beside the
// same figure of the ping-pong.
type floorComparison struct {
	what, scenario, unit string // fencedlock's figure
	floor, floorUnit     string // the ping-pong variant (2 processes) and its figure
	same                 string // the 1-process variant, if comparable
}

var floorComparisons = []floorComparison{
	{"Contended hand-off p50 / round trip p50", "Contended", "handoff-p50-ns", pingTwo, "p50-ns", pingOne},
	{"Contended hand-off p99 / round trip p99", "Contended", "handoff-p99-ns", pingTwo, "p99-ns", pingOne},
	{"Contended longest free-lock gap / longest round trip", "Contended", "idle-max-ns", pingTwo, "max-ns", pingOne},
	{"Handoff p50 / round trip p50 (5 ms pause)", "Handoff", "p50-ns", pingTwoPause, "p50-ns", ""},
	{"Handoff p99 / round trip p99 (5 ms pause)", "Handoff", "p99-ns", pingTwoPause, "p99-ns", ""},
	{"Handoff longest / longest round trip (5 ms pause)", "Handoff", "max-ns", pingTwoPause, "max-ns", ""},
}

// vsFloor is fencedlock's figure, the floor's and their ratio.
func vsFloor(r *runData, lib string, c floorComparison, floor string) (mine, base, ratio float64, ok bool) {
	mine, ok1 := r.get(c.scenario, lib, c.unit)
	base, ok2 := r.results[floor][c.floorUnit]
	if !ok1 || !ok2 || base <= 0 {
		return 0, 0, 0, false
	}
	return mine, base, mine / base, true
}

// floorTable sets fencedlock's fair-path hand-off beside the ping-pong.
func floorTable(r *runData) string {
	lib := fairLib(r)
	t := &table{head: []string{"figure (" + display[lib] + ")", "fencedlock", "ping-pong, 2 processes", "ratio", "ping-pong, 1 process", "ratio"}}
	for _, c := range floorComparisons {
		mine, base, ratio, ok := vsFloor(r, lib, c, c.floor)
		if !ok {
			continue
		}
		same, sameRatio := "–", "–"
		if c.same != "" {
			if _, b1, r1, ok := vsFloor(r, lib, c, c.same); ok {
				same, sameRatio = fmtDur(b1), fmtRatio(r1, true)
			}
		}
		t.rows = append(t.rows, []string{c.what, fmtDur(mine), fmtDur(base), fmtRatio(ratio, true), same, sameRatio})
	}
	return t.markdown()
}

// floorTargets are issue 36's targets that this file's measures check:
// capacity against the baseline when each runs alone, and the fair-path
// gap against the ping-pong floor.
func floorTargets(r *runData) []target {
	var ts []target
	_, ratio, ok := r.capacity("fencedlock-redis")
	ok = ok && ratio.n > 0
	ts = append(ts, target{issue: 36, what: "fencedlock/redis acquire+release capacity, concurrency 64, each library timed alone, >= 0.8x baseline",
		value: fmtSpread(ratio, ok), met: ok && ratio.med >= 0.8, known: ok})
	g, interleaved := r.gapFloor()
	lib := fairLib(r)
	if interleaved {
		lib = gapLib
	}
	who := strings.Trim(display[lib], "*")
	for _, c := range []struct {
		what string
		cmp  floorComparison
		fig  func(gapFloor) gapFigure
	}{
		{"Contended longest free-lock gap <= 1.2x the longest round trip of a bare pub/sub ping-pong between 2 processes", floorComparisons[2],
			func(g gapFloor) gapFigure { return g.gap }},
		{"Contended hand-off p50 <= 1.2x the ping-pong's round-trip p50", floorComparisons[0],
			func(g gapFloor) gapFigure { return g.p50 }},
	} {
		if interleaved {
			// The ratio within each repetition of GapFloor, not of
			// medians from runs minutes apart.
			f := c.fig(g)
			value := fmtDur(f.lock.med) + " / " + fmtDur(f.ping.med) + ", per repetition " + fmtSpread(f.ratio, true) + ", " + plural(f.ratio.n, "repetition")
			ts = append(ts, target{issue: 36, what: who + " " + c.what, value: value, met: f.ratio.med <= 1.2, known: true})
			continue
		}
		mine, base, v, ok := vsFloor(r, lib, c.cmp, c.cmp.floor)
		value := "–"
		if ok {
			value = fmtDur(mine) + " / " + fmtDur(base) + " = " + strconv.FormatFloat(v, 'f', 2, 64) + "x"
		}
		ts = append(ts, target{issue: 36, what: who + " " + c.what, value: value, met: ok && v <= 1.2, known: ok})
	}
	return ts
}

// gapFloorScenario is the prefix of BenchmarkGapFloor's results, followed
// by the side (gapSideLock, gapSidePing).
const gapFloorScenario = "GapFloor/side="

// GapFloor's sides, as BenchmarkGapFloor names them, and its lock side's
// contender (the fair, one-waiter hand-off path).
const (
	gapSideLock = "lock"
	gapSidePing = "pingpong"
	gapLib      = "fencedlock-redis-fair"
)

// gapFigure is one figure of GapFloor over the repetitions that measured
// both sides: the lock side's, the ping-pong's, and the lock's over the
// ping-pong's within each repetition; each the median and range.
type gapFigure struct{ lock, ping, ratio spread }

// gapFloor is BenchmarkGapFloor summarised: the longest gap (free lock /
// round trip) and the median (hand-off / round trip).
type gapFloor struct{ gap, p50 gapFigure }

// gapFloor summarises the run's GapFloor results, pairing the two sides by
// their rep metric (a repetition whose ping-pong lost a ping, and so has
// no sample of it, is left out). False if no repetition has both sides.
func (r *runData) gapFloor() (gapFloor, bool) {
	perRep := func(side, unit string) map[float64]float64 {
		m := map[float64]float64{}
		for _, s := range r.samples[gapFloorScenario+side] {
			v, ok1 := s.vals[unit]
			rep, ok2 := s.vals["rep"]
			if ok1 && ok2 && v > 0 {
				m[rep] = v
			}
		}
		return m
	}
	figure := func(unit string) gapFigure {
		floor := perRep(gapSidePing, unit)
		var ls, ps, rs []float64
		for rep, l := range perRep(gapSideLock, unit) {
			if p, ok := floor[rep]; ok {
				ls, ps, rs = append(ls, l), append(ps, p), append(rs, l/p)
			}
		}
		return gapFigure{lock: spreadOf(ls), ping: spreadOf(ps), ratio: spreadOf(rs)}
	}
	g := gapFloor{gap: figure("gap-ns"), p50: figure("p50-ns")}
	return g, g.gap.ratio.n > 0 && g.p50.ratio.n > 0
}

// fmtDurSpread is a duration's median with its range.
func fmtDurSpread(s spread) string {
	if s.n < 2 {
		return fmtDur(s.med)
	}
	return fmtDur(s.med) + " (" + fmtDur(s.lo) + "–" + fmtDur(s.hi) + ")"
}

// gapFloorTable renders GapFloor: each side's figure and their ratio
// within a repetition.
func gapFloorTable(r *runData) string {
	t := &table{head: []string{"figure (" + display[gapLib] + ")", "repetitions", "fencedlock (range)", "ping-pong, 2 processes (range)",
		"ratio within a repetition (range)"}}
	if g, ok := r.gapFloor(); ok {
		for _, row := range []struct {
			what string
			f    gapFigure
		}{
			{"Contended longest free-lock gap / longest round trip", g.gap},
			{"Contended hand-off p50 / round trip p50", g.p50},
		} {
			t.rows = append(t.rows, []string{row.what, strconv.Itoa(row.f.ratio.n), fmtDurSpread(row.f.lock), fmtDurSpread(row.f.ping),
				fmtSpread(row.f.ratio, true)})
		}
	}
	return t.markdown()
}

// capacitySection is the report's section on Capacity.
func capacitySection(r *runData) string {
	return "\n### Capacity at concurrency 64: each library timed alone\n\n" +
		"What a user buys: 64 goroutines on one client, a key each, acquire+release in a closed loop (AcquireRelease's operation) with no other client on the server, for a fixed time per library (`-capacity-duration`) after a 200 ms warm-up; " +
		"every library once per repetition (`-capacity-reps`), in turn, every other repetition in reverse order (ABBA), so drift of the machine's load lands on either side of a comparison in turn. " +
		"ops/s is the median over the repetitions with the range (a library that failed in a repetition, as rueidislock does when it misses a client-side-caching invalidation, has no sample in it: the repetitions column counts those with one); \"separate runs\" is the library's ops/s over the baseline's in the same repetition, median and range over the repetitions; allocations (the whole client process's), Redis commands and server CPU per operation are medians over the windows. " +
		"Beside it, the interleaved ratio of the concurrency-64 table above (vs-base: blocks of 4 operations per goroutine of the library, then of the baseline, A B B A, on one server): it measures the library's cost relative to the baseline under the same load within milliseconds, " +
		"but when the single-threaded server is the bottleneck each block waits behind the tail of the other library's commands in the server's queue, which pulls that ratio towards 1. The separate runs have no such neighbour; they are more exposed to changes of the machine's load between windows, hence the repetitions.\n\n" +
		capacityTable(r)
}

// floorSection is the report's section on the ping-pong floor.
func floorSection(r *runData) string {
	return "\n### The floor of a pub/sub hand-off: a bare ping-pong\n\n" +
		"No lock library: process A publishes a ping on one channel; B, subscribed, wakes and publishes a pong on another; A, subscribed to it, wakes (rueidis on both sides, the benchmark's Redis server, loopback). " +
		"A round trip has the hops and wake-ups of a pub/sub hand-off of a lock (the release reaches the server, the server's message wakes the waiter, the waiter's acquire reaches the server, its reply wakes the waiter), with no script and no lock logic, so the scheduler's delay in waking a process on a shared machine is in both. " +
		"One-way is from A's publish call to B's wake-up (wall clocks of one machine). Each variant runs for `-duration`, every figure the median over the runs; the longest round trip is the longest gap of the ping-pong, to be set beside Contended's longest free-lock gap over the same time. " +
		"Contended's and Handoff's workers share one process (a client each), so the 1-process variant is the like-for-like floor of those figures; the 2-process one is what the hand-off between two processes of an application costs at least.\n\n" +
		pingPongTable(r) + "\n" +
		"fencedlock's fair-path hand-off (the one-waiter hand-off) beside it: Contended against the ping-pong without pause, Handoff (the holder keeps the lock 5 ms) against the ping-pong with a 5 ms pause, so both sides go idle between rounds alike.\n\n" +
		floorTable(r) + "\n" +
		"The longest free-lock gap and the longest round trip are each the longest gap of a `-duration` window on a shared machine: the scheduler's worst stall, very noisy. " +
		"In the tables above they come from separate runs (Contended and PingPong, minutes apart, each the median of its runs), so the machine's load between those runs can decide their ratio more than the library does. " +
		"`BenchmarkGapFloor` measures both in interleaved repetitions: in each of `-gap-reps` repetitions, Contended's fair path (16 workers, one key, after the same warm-up) and the 2-process ping-pong without pause run in turn for `-duration` each, every other repetition in reverse order (ABBA); " +
		"the ratio is taken within each repetition, and the table gives its median and range beside each side's median and range over the same repetitions. Issue 36's two targets on the floor use it when the run has it.\n\n" +
		gapFloorTable(r)
}
