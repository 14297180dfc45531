package bench

import (
	"context"
	"math/bits"
	"runtime"
	"sort"
	"strings"
	"syscall"
	"testing"
	"time"
)

// hist is a log-linear latency histogram: 32 buckets per power of two of
// nanoseconds (about 3% resolution). Recording does not allocate; each
// goroutine keeps its own and they are merged at the end.
type hist struct {
	counts [64 * histSub]uint64
	n      uint64
	max    time.Duration
}

const histSubBits = 5
const histSub = 1 << histSubBits

func histIndex(d time.Duration) int {
	v := uint64(max(d, 0))
	if v < histSub {
		return int(v)
	}
	e := bits.Len64(v) - 1 - histSubBits // v >> e has histSubBits+1 bits
	return (e+1)*histSub + int(v>>e) - histSub
}

// histValue returns the upper bound of bucket i.
func histValue(i int) time.Duration {
	if i < histSub {
		return time.Duration(i)
	}
	e := i/histSub - 1
	m := uint64(i%histSub + histSub)
	return time.Duration((m+1)<<e - 1)
}

func (h *hist) add(d time.Duration) {
	h.counts[histIndex(d)]++
	h.n++
	if d > h.max {
		h.max = d
	}
}

func (h *hist) merge(o *hist) {
	for i, c := range o.counts {
		h.counts[i] += c
	}
	h.n += o.n
	h.max = max(h.max, o.max)
}

// quantile returns the q-quantile (0 < q <= 1), 0 if empty.
func (h *hist) quantile(q float64) time.Duration {
	if h.n == 0 {
		return 0
	}
	rank := uint64(q*float64(h.n) + 0.5)
	rank = min(max(rank, 1), h.n)
	var seen uint64
	for i, c := range h.counts {
		seen += c
		if seen >= rank {
			return min(histValue(i), h.max)
		}
	}
	return h.max
}

// redisCounter measures Redis commands executed between start and stop,
// from INFO commandstats (commands run inside scripts are counted too).
type redisCounter struct {
	e      *env
	before map[string]int64
}

func startRedisCounter(tb testing.TB, e *env) *redisCounter {
	tb.Helper()
	m, err := e.commandStats(context.Background())
	if err != nil {
		tb.Fatalf("bench: %v", err)
	}
	return &redisCounter{e: e, before: m}
}

// stop returns the number of commands since start and a breakdown such as
// "evalsha=2 set=1".
func (r *redisCounter) stop(tb testing.TB) (int64, string) {
	tb.Helper()
	after, err := r.e.commandStats(context.Background())
	if err != nil {
		tb.Fatalf("bench: %v", err)
	}
	var total int64
	type kv struct {
		k string
		v int64
	}
	var parts []kv
	for k, v := range after {
		if d := v - r.before[k]; d > 0 {
			total += d
			parts = append(parts, kv{k, d})
		}
	}
	sort.Slice(parts, func(i, j int) bool {
		return parts[i].v > parts[j].v || parts[i].v == parts[j].v && parts[i].k < parts[j].k
	})
	var b strings.Builder
	for i, p := range parts {
		if i > 0 {
			b.WriteByte(' ')
		}
		b.WriteString(p.k)
		b.WriteByte('=')
		b.WriteString(itoa(p.v))
	}
	return total, b.String()
}

func itoa(v int64) string {
	if v == 0 {
		return "0"
	}
	var buf [20]byte
	i := len(buf)
	neg := v < 0
	if neg {
		v = -v
	}
	for v > 0 {
		i--
		buf[i] = byte('0' + v%10)
		v /= 10
	}
	if neg {
		i--
		buf[i] = '-'
	}
	return string(buf[i:])
}

// cpuTime returns the CPU time (user + system) this process has used.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// memSnapshot is the process's allocation counters.
type memSnapshot struct{ mallocs, bytes uint64 }

func readMem() memSnapshot {
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return memSnapshot{ms.Mallocs, ms.TotalAlloc}
}

// memInUse returns live heap bytes after a full collection plus the
// goroutine stacks in use: what a held lease costs in memory, including
// the goroutines a library keeps per lease.
func memInUse() uint64 {
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return ms.HeapAlloc + ms.StackInuse
}
