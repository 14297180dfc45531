package pgbench

import (
	"context"
	"slices"
	"testing"
	"time"
)

// Paired runs b.N operations of a and b.N of base on one goroutine, one of
// each in turn (which goes first alternates), timing each, and reports
// vs-base: base's total time over a's, each side leaving out its slowest
// 1% (stalls of the shared machine). A change of the machine's load lands
// on both sides, which separately timed rows cannot promise.
func Paired(b *testing.B, e *Env, a, base Setup) {
	ctx := context.Background()
	opA, doneA := a(b, e)
	defer doneA()
	opBase, doneBase := base(b, e)
	defer doneBase()
	ta, tb := make([]time.Duration, 0, b.N), make([]time.Duration, 0, b.N)
	timed := func(op Op, into *[]time.Duration) bool {
		start := time.Now()
		if err := op(ctx); err != nil {
			b.Error(err)
			return false
		}
		*into = append(*into, time.Since(start))
		return true
	}
	b.ResetTimer()
	for i := range b.N {
		ok := false
		if i%2 == 0 {
			ok = timed(opA, &ta) && timed(opBase, &tb)
		} else {
			ok = timed(opBase, &tb) && timed(opA, &ta)
		}
		if !ok {
			return
		}
	}
	b.StopTimer()
	b.ReportMetric(trimmedSum(tb)/trimmedSum(ta), "vs-base")
}

// trimmedSum is the sum of ds without its slowest 1%.
func trimmedSum(ds []time.Duration) float64 {
	ds = slices.Clone(ds)
	slices.Sort(ds)
	var sum time.Duration
	for _, d := range ds[:len(ds)-len(ds)/100] {
		sum += d
	}
	return float64(sum)
}
