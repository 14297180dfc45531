package bench

import (
	"errors"
	"flag"
	"fmt"
	"testing"
	"time"
)

// GapFloor: issue 36's target that fencedlock's longest free-lock gap
// (Contended, 16 workers, one key, the fair one-waiter hand-off path) be
// within 1.2x of the longest round trip of a bare pub/sub ping-pong between
// 2 processes, measured in interleaved repetitions. Both figures are the
// LONGEST gap of a window of -duration on a shared machine: the
// scheduler's worst stall, very noisy. Taken from separate runs minutes
// apart (Contended and PingPong, the median of a few runs each), the
// machine's load between them decides the ratio more than the library
// does; here the two sides run in turn within each repetition, and the
// report takes the ratio within each repetition.

var flagGapReps = flag.Int("gap-reps", 7,
	"GapFloor repetitions: each runs the fair path's Contended and the 2-process ping-pong once, odd ones in reverse order (ABBA); -short uses 2")

// gapLib is the contender whose hand-off GapFloor sets beside the floor:
// the fair (one-waiter hand-off) path.
const gapLib = "fencedlock-redis-fair"

// The sides of GapFloor, in the order of even repetitions.
const (
	gapSideLock = "lock"
	gapSidePing = "pingpong"
)

// gapReps returns GapFloor's repetitions.
func gapReps() int {
	if testing.Short() {
		return 2
	}
	return max(*flagGapReps, 1)
}

// gapSample is one side of GapFloor in one repetition.
type gapSample struct {
	gap  time.Duration // the longest free-lock gap / the longest round trip
	p50  time.Duration // the median hand-off / round trip
	mean time.Duration // the window over the acquisitions / the mean round trip
	n    int64         // acquisitions / round trips
	// handoffs are the lock side's acquisitions by a worker other than
	// the previous holder (0 on the ping-pong side).
	handoffs int64
}

// gapContender returns the contender gapLib.
func gapContender() (contender, error) {
	for _, c := range allContenders() {
		if c.name == gapLib {
			return c, nil
		}
	}
	return contender{}, fmt.Errorf("bench: no contender %s", gapLib)
}

// runGapSide runs one side of GapFloor for d: on side "lock", Contended
// with workers clients of gapLib (after Contended's warm-up); on side
// "pingpong", the ping-pong with the responder in a child process and no
// pause. A mutual-exclusion violation or an acquire/release error of the
// lock side is an error, as is a lost ping (errPongLost).
func runGapSide(tb testing.TB, e *env, side string, workers int, d time.Duration) (gapSample, error) {
	tb.Helper()
	switch side {
	case gapSideLock:
		c, err := gapContender()
		if err != nil {
			return gapSample{}, err
		}
		r := runContended(tb, e, c, workers, d)
		if r.violations > 0 || r.errors > 0 {
			return gapSample{}, fmt.Errorf("%s: %d times two workers held the lock at once, %d acquire/release errors; first: %v",
				c.name, r.violations, r.errors, r.firstErr)
		}
		return gapSample{gap: r.idle.max, p50: r.handoff.quantile(0.5), mean: r.elapsed / time.Duration(max(r.acquisitions, 1)),
			n: r.acquisitions, handoffs: r.handoffs}, nil
	case gapSidePing:
		r := runPingPong(tb, e, 2, 0, d, 1<<30)
		if r.lost > 0 {
			return gapSample{}, fmt.Errorf("after %d round trips: %w", r.rtt.n, errPongLost)
		}
		return gapSample{gap: r.rtt.max, p50: r.rtt.quantile(0.5), mean: r.sum / time.Duration(max(r.rtt.n, 1)), n: int64(r.rtt.n)}, nil
	}
	return gapSample{}, fmt.Errorf("bench: no GapFloor side %q", side)
}

// BenchmarkGapFloor: fencedlock's longest free-lock gap (Contended, 16
// workers, one key, the fair one-waiter hand-off path: contender
// fencedlock-redis-fair) beside the longest round trip of a bare pub/sub
// ping-pong between 2 processes (PingPong procs=2, pause 0), issue 36's
// "within 1.2x". Both are the LONGEST gap of a window of -duration on a
// shared machine: the scheduler's worst stall, very noisy, so measured
// minutes apart (Contended and PingPong in separate runs) the load of the
// machine between them decides their ratio. Here the two run in turn in
// each of -gap-reps repetitions, every other repetition in reverse order
// (passOrder: ABBA), each side for -duration (the lock side after
// Contended's warm-up), so that the report takes the ratio within each
// repetition, then its median and range. Each sub-benchmark is one side
// in one repetition (go test numbers the repeats #01, #02...): gap-ns is
// the longest gap (lock: free-lock gap; ping-pong: round trip), p50-ns
// the median hand-off (lock) or round trip (ping-pong), rep the
// repetition. Run it with -benchtime 1x: the window, not b.N, sets the
// length.
func BenchmarkGapFloor(b *testing.B) {
	e := serversDescribed(b)
	d, reps := scenarioDuration(), gapReps()
	for rep := range reps {
		for _, side := range passOrder([]string{gapSideLock, gapSidePing}, rep) {
			b.Run("side="+side, func(b *testing.B) {
				b.Logf("gap floor: side %s, %v, repetition %d of %d", side, d, rep, reps)
				s, err := runGapSide(b, e, side, contendedWorkers, d)
				switch {
				case errors.Is(err, errPongLost):
					// The longest round trip of a run cut short is
					// not the window's: no sample in this repetition.
					b.Skipf("ping-pong: %v; no sample in repetition %d", err, rep)
				case err != nil:
					b.Fatalf("%v", err) // the lock side is ours
				}
				reportGapSample(b, side, s, rep)
			})
		}
	}
}

// reportGapSample reports s, side's sample of repetition rep, as
// BenchmarkGapFloor's metrics.
func reportGapSample(b *testing.B, side string, s gapSample, rep int) {
	b.ReportMetric(float64(s.mean.Nanoseconds()), "ns/op")
	b.ReportMetric(float64(s.gap.Nanoseconds()), "gap-ns")
	b.ReportMetric(float64(s.p50.Nanoseconds()), "p50-ns")
	b.ReportMetric(float64(rep), "rep")
	b.ReportMetric(float64(s.n), "n")
	if side == gapSideLock {
		b.Logf("longest free-lock gap %v, hand-off p50 %v, %d acquisitions, %d hand-offs", s.gap, s.p50, s.n, s.handoffs)
	} else {
		b.Logf("longest round trip %v, p50 %v, %d round trips", s.gap, s.p50, s.n)
	}
}

// TestGapFloor runs both sides of GapFloor, scaled down, against the real
// server: the lock side acquires and hands off without violations or
// errors, the ping-pong completes round trips without losing a ping, and
// each side's longest gap is at least its median. No speed is asserted.
func TestGapFloor(t *testing.T) {
	e := servers(t)
	for _, side := range []string{gapSideLock, gapSidePing} {
		t.Run(side, func(t *testing.T) {
			s, err := runGapSide(t, e, side, 4, 200*time.Millisecond)
			if err != nil {
				t.Fatal(err)
			}
			if s.n == 0 || side == gapSideLock && s.handoffs == 0 {
				t.Fatalf("%d acquisitions or round trips, %d hand-offs; want some", s.n, s.handoffs)
			}
			if s.p50 <= 0 || s.gap < s.p50 {
				t.Errorf("longest gap %v, p50 %v; want 0 < p50 <= longest", s.gap, s.p50)
			}
			t.Logf("%d acquisitions or round trips, longest gap %v, p50 %v", s.n, s.gap, s.p50)
		})
	}
	if _, err := runGapSide(t, e, "nope", 1, time.Millisecond); err == nil {
		t.Errorf("an unknown side ran")
	}
}
