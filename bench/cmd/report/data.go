// Parsing a benchmark run and the medians and ratios the report computes from it.

package main

import (
	"bufio"
	"bytes"
	"errors"
	"math"
	"regexp"
	"slices"
	"strconv"
	"strings"
)

// result is the metrics of one benchmark (the median over -count runs).
type result map[string]float64

// benchSample is one result line of a benchmark: its values, its place in the
// output (seq) and the pass it belongs to.
type benchSample struct {
	seq  int
	pass int
	vals map[string]float64
}

// runData is a parsed benchmark run: results by benchmark name (without
// the Benchmark prefix and GOMAXPROCS suffix), e.g.
// "AcquireRelease/conc=1/lib=redsync".
type runData struct {
	config  map[string]string // goos, cpu, redis, etcd...
	results map[string]result
	samples map[string][]benchSample // every result line, in output order
	runs    map[string]int           // how many passes each result summarises
	procs   int
}

var (
	benchLine  = regexp.MustCompile(`^Benchmark(\S+?)(?:-(\d+))?\s+(\d+)\s+(.*)$`)
	configLine = regexp.MustCompile(`^([a-z][a-zA-Z0-9_-]*):\s+(.*)$`)
	// passLine starts a pass of the b.N scenarios (the report writes it
	// before each go test run of them); not a "key: value" line, so
	// benchstat ignores it rather than splitting the results by pass.
	passLine = regexp.MustCompile(`^# report pass (\d+)`)
	// repeatSuffix is what go test appends to the name of a repeated
	// sub-benchmark (the baseline runs several times in a pass).
	repeatSuffix = regexp.MustCompile(`#\d+$`)
)

// passWidth separates the passes that a "# report pass" line starts from
// those that repeated names count within one go test run (-count).
const passWidth = 1000

func parse(raw []byte) (*runData, error) {
	r := &runData{config: map[string]string{}, results: map[string]result{}, samples: map[string][]benchSample{}, runs: map[string]int{}}
	// A sample's pass: the last "# report pass" line, plus how many times
	// its full name (a repeated baseline keeps its #NN) was seen since,
	// so that go test -count N in one run also gives N passes.
	marker, seen := 0, map[string]int{}
	seq := 0
	sc := bufio.NewScanner(bytes.NewReader(raw))
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if m := passLine.FindStringSubmatch(line); m != nil {
			n, _ := strconv.Atoi(m[1])
			marker, seen = n+1, map[string]int{}
			continue
		}
		if m := configLine.FindStringSubmatch(line); m != nil {
			if _, seen := r.config[m[1]]; !seen {
				r.config[m[1]] = m[2]
			}
			continue
		}
		m := benchLine.FindStringSubmatch(line)
		if m == nil {
			continue
		}
		full := m[1]
		name := repeatSuffix.ReplaceAllString(full, "")
		if m[2] != "" {
			r.procs, _ = strconv.Atoi(m[2])
		}
		f := strings.Fields(m[4])
		if len(f)%2 != 0 {
			continue
		}
		vals := map[string]float64{}
		for i := 0; i < len(f); i += 2 {
			v, err := strconv.ParseFloat(f[i], 64)
			if err != nil {
				continue
			}
			vals[f[i+1]] = v
		}
		seen[full]++
		seq++
		r.samples[name] = append(r.samples[name], benchSample{seq: seq, pass: marker*passWidth + seen[full], vals: vals})
	}
	if len(r.samples) == 0 {
		return nil, errors.New("no benchmark results in the input")
	}
	// Several runs of one benchmark (-count, passes, a baseline repeated
	// within a pass) are summarised by their median, which a burst of
	// noise on a shared machine does not move.
	for name, ss := range r.samples {
		units := map[string][]float64{}
		passes := map[int]bool{}
		for _, s := range ss {
			passes[s.pass] = true
			for unit, v := range s.vals {
				units[unit] = append(units[unit], v)
			}
		}
		res := result{}
		for unit, vs := range units {
			res[unit] = median(vs)
		}
		r.results[name] = res
		r.runs[name] = len(passes)
	}
	return r, nil
}

// spread is a ratio measured in several passes: the median of the
// per-pass ratios, their range, and how many passes gave one.
type spread struct {
	med, lo, hi float64
	n           int
}

// passRatios returns, for every sample of benchmark name, its ratio to
// the sample(s) of benchmark ref nearest to it in the output within the
// same pass (the mean of the two when one runs just before and one just
// after): ref/name for "ops/s" (from ns/op: higher is better for name),
// name/ref for any other unit. A sample with no ref in its pass gives
// none. Ratios of samples measured seconds apart, under the same load,
// rather than of medians gathered minutes apart.
func (r *runData) passRatios(name, ref, unit string) []float64 {
	u := unit
	if unit == "ops/s" {
		u = "ns/op"
	}
	var out []float64
	for _, s := range r.samples[name] {
		v, ok := s.vals[u]
		if !ok || v <= 0 {
			continue
		}
		best, sum, n := math.MaxInt, 0.0, 0
		for _, b := range r.samples[ref] {
			bv, ok := b.vals[u]
			if !ok || b.pass != s.pass || bv <= 0 {
				continue
			}
			d := b.seq - s.seq
			if d < 0 {
				d = -d
			}
			switch {
			case d < best:
				best, sum, n = d, bv, 1
			case d == best:
				sum += bv
				n++
			}
		}
		if n == 0 {
			continue
		}
		if unit == "ops/s" {
			out = append(out, sum/float64(n)/v)
		} else {
			out = append(out, v/(sum/float64(n)))
		}
	}
	return out
}

// passRatio summarises passRatios: the median per-pass ratio and its
// range. Without any pass that measured both, it falls back to the ratio
// of the medians (n 0: no spread known).
func (r *runData) passRatio(name, ref, unit string) (spread, bool) {
	if name == ref {
		_, ok := r.results[name]
		return spread{med: 1, lo: 1, hi: 1}, ok
	}
	if rs := r.passRatios(name, ref, unit); len(rs) > 0 {
		return spread{med: median(rs), lo: slices.Min(rs), hi: slices.Max(rs), n: len(rs)}, true
	}
	v, ok := r.nameRatio(name, ref, unit)
	return spread{med: v, lo: v, hi: v}, ok
}

// pairedSpread summarises the vs-base metric of benchmark name: its
// throughput relative to the baseline, measured with the baseline's
// operations interleaved with its own (the benchmarks' pairedRatio), one
// value per pass. False if the run did not measure it.
func (r *runData) pairedSpread(name string) (spread, bool) { return r.pairedMetric(name, "vs-base") }

// pairedMetric summarises an interleaved ratio of benchmark name (vs-base
// against the raw baseline, vs-mutex against concurrency.Mutex with a
// shared Session), one value per pass.
func (r *runData) pairedMetric(name, metric string) (spread, bool) {
	var vs []float64
	for _, s := range r.samples[name] {
		if v, ok := s.vals[metric]; ok && v > 0 {
			vs = append(vs, v)
		}
	}
	if len(vs) == 0 {
		return spread{}, false
	}
	return spread{med: median(vs), lo: slices.Min(vs), hi: slices.Max(vs), n: len(vs)}, true
}

// opsRatio is lib's throughput relative to base in a b.N scenario: against
// the baseline (and fencedlock-etcd against the shared-session Mutex),
// from the interleaved measurement when the run has it, between two
// Redis libraries from their interleaved ratios to the baseline, else
// from the samples next to each other in each pass.
func (r *runData) opsRatio(scenario, lib, base string) (spread, bool) {
	name := scenario + "/lib=" + lib
	switch {
	case base == baseline:
		if s, ok := r.pairedSpread(name); ok {
			return s, true
		}
	case lib == "fencedlock-etcd" && base == "etcd-mutex-shared":
		if s, ok := r.pairedMetric(name, "vs-mutex"); ok {
			return s, true
		}
	default:
		if s, ok := r.pairedBetween(name, scenario+"/lib="+base); ok {
			return s, true
		}
	}
	return r.passRatio(name, scenario+"/lib="+base, "ops/s")
}

// pairedBetween is name's throughput relative to ref's when both were
// measured interleaved with the baseline (vs-base) in the same passes: per
// pass, name's vs-base over ref's (each is the library's throughput over
// the baseline's under the same load, so the baseline cancels out), then
// the median over the passes. False if no pass has both.
func (r *runData) pairedBetween(name, ref string) (spread, bool) {
	refBy := map[int]float64{}
	for _, s := range r.samples[ref] {
		if v, ok := s.vals["vs-base"]; ok && v > 0 {
			refBy[s.pass] = v
		}
	}
	var rs []float64
	for _, s := range r.samples[name] {
		v, ok := s.vals["vs-base"]
		if rv, rok := refBy[s.pass]; ok && rok && v > 0 {
			rs = append(rs, v/rv)
		}
	}
	if len(rs) == 0 {
		return spread{}, false
	}
	return spread{med: median(rs), lo: slices.Min(rs), hi: slices.Max(rs), n: len(rs)}, true
}

func median(vs []float64) float64 {
	s := slices.Clone(vs)
	slices.Sort(s)
	if n := len(s); n%2 == 1 {
		return s[n/2]
	} else {
		return (s[n/2-1] + s[n/2]) / 2
	}
}

// libs lists the libraries in report order, as the benchmarks name them.
var libs = []string{baseline, "fencedlock-redis", "fencedlock-redis-fair", "fencedlock-goredis", "redsync", "redislock", "rueidislock", "rueidislock-km1",
	"fencedlock-etcd", "etcd-mutex", "etcd-mutex-shared"}

// display names a library for readers.
var display = map[string]string{
	baseline:                "raw rueidis (baseline)",
	"fencedlock-redis":      "**fencedlock/redis**",
	"fencedlock-redis-fair": "**fencedlock/redis, FairBackend**",
	"fencedlock-goredis":    "**fencedlock/goredis**",
	"redsync":               "go-redsync/redsync/v4",
	"redislock":             "bsm/redislock",
	"rueidislock":           "rueidislock",
	"rueidislock-km1":       "rueidislock KeyMajority 1",
	"fencedlock-etcd":       "**fencedlock/etcd**",
	"etcd-mutex":            "etcd concurrency.Mutex",
	"etcd-mutex-shared":     "etcd concurrency.Mutex, shared session",
}

func (r *runData) get(scenario, lib, unit string) (float64, bool) {
	res, ok := r.results[scenario+"/lib="+lib]
	if !ok {
		return 0, false
	}
	v, ok := res[unit]
	return v, ok
}

// opsPerSec is the throughput of a b.N scenario: ns/op is elapsed/N.
func (r *runData) opsPerSec(scenario, lib string) (float64, bool) {
	ns, ok := r.get(scenario, lib, "ns/op")
	if !ok || ns <= 0 {
		return 0, false
	}
	return 1e9 / ns, true
}

func (r *runData) ratio(scenario, lib, unit string, base string) (float64, bool) {
	return r.nameRatio(scenario+"/lib="+lib, scenario+"/lib="+base, unit)
}

// nameRatio is the ratio of two benchmarks' medians: for "ops/s" from
// ns/op (higher is better), for other units value/base.
func (r *runData) nameRatio(name, base, unit string) (float64, bool) {
	u := unit
	if unit == "ops/s" {
		u = "ns/op"
	}
	v, ok1 := r.results[name][u]
	b, ok2 := r.results[base][u]
	if !ok1 || !ok2 || b == 0 || v == 0 {
		return 0, false
	}
	if unit == "ops/s" {
		return b / v, true
	}
	return v / b, true
}

func (r *runData) maxRuns(prefix string) int {
	n := 0
	for name, c := range r.runs {
		if strings.HasPrefix(name, prefix) {
			n = max(n, c)
		}
	}
	return n
}
