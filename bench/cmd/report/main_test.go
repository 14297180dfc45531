package main

import (
	"encoding/xml"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

const sample = `goos: linux
goarch: amd64
pkg: github.com/fencedlock/fencedlock/bench
cpu: Test CPU
redis: 7.0.15, started by the benchmark on loopback, no persistence
etcd: 3.7.3, single member
BenchmarkAcquireRelease/conc=1/lib=raw-rueidis-2   	   10000	    100000 ns/op	         6.000 cmds/op	     90000 p50-ns	    200000 p99-ns	    1000 B/op	      20 allocs/op
BenchmarkAcquireRelease/conc=1/lib=fencedlock-redis-2   	   10000	    125000 ns/op	         8.000 cmds/op	     90000 p50-ns	    200000 p99-ns	    2000 B/op	      30 allocs/op
BenchmarkAcquireRelease/conc=1/lib=fencedlock-redis-2   	   10000	    75000 ns/op	         8.000 cmds/op	     90000 p50-ns	    200000 p99-ns	    2000 B/op	      30 allocs/op
BenchmarkContended/lib=raw-rueidis-2 	       1	    141844 ns/op	      7050 acq/s	      1710 handoffs/s	0.25 fairness	10 min-acq	40 max-acq	0 violations
BenchmarkContended/lib=fencedlock-redis-2 	       1	    141844 ns/op	      7050 acq/s	      3420 handoffs/s	0.75 fairness	30 min-acq	40 max-acq	0 violations
--- BENCH: BenchmarkContended/lib=raw-rueidis-2
PASS
`

func TestParseAndRatios(t *testing.T) {
	r, err := parse([]byte(sample))
	if err != nil {
		t.Fatal(err)
	}
	if r.procs != 2 || r.config["cpu"] != "Test CPU" || !strings.HasPrefix(r.config["redis"], "7.0.15") {
		t.Errorf("config %v procs %d", r.config, r.procs)
	}
	// Two runs of fencedlock-redis average to 100000 ns/op: ratio 1.
	if v, ok := r.ratio("AcquireRelease/conc=1", "fencedlock-redis", "ops/s", baseline); !ok || v < 0.999 || v > 1.001 {
		t.Errorf("ops/s ratio = %v, %v; want 1", v, ok)
	}
	if v, ok := r.ratio("Contended", "fencedlock-redis", "handoffs/s", baseline); !ok || v != 2 {
		t.Errorf("hand-off ratio = %v, %v; want 2", v, ok)
	}
	if _, ok := r.get("Renew/conc=1", "redsync", "ns/op"); ok {
		t.Errorf("a scenario that did not run has a value")
	}
	if _, err := parse([]byte("PASS\n")); err == nil {
		t.Errorf("parse of output without results succeeded")
	}
}

// reportHas fails t for each of wants that the report md lacks.
func reportHas(t *testing.T, md string, wants ...string) {
	t.Helper()
	for _, want := range wants {
		if !strings.Contains(md, want) {
			t.Errorf("report lacks %q:\n%s", want, md)
		}
	}
}

func TestRenderAndReplace(t *testing.T) {
	r, err := parse([]byte(sample))
	if err != nil {
		t.Fatal(err)
	}
	md := render(r, map[string]string{"github.com/redis/rueidis": "v1.0.79"})
	// The ratio column is the median of per-pass ratios: only the first
	// fencedlock-redis sample has a baseline in its pass (100000/125000).
	reportHas(t, md, beginMarker, endMarker, "| **fencedlock/redis** | 10,000 | 0.80x |", "`github.com/redis/rueidis` v1.0.79", "Test CPU",
		"| #19 | fencedlock/redis acquire+release, concurrency 1, >= 0.95x baseline | 0.80x | no |")
	path := filepath.Join(t.TempDir(), "README.md")
	if err := os.WriteFile(path, []byte("# title\n\n"+beginMarker+"\nSTALE-REPORT\n"+endMarker+"\ntail\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	for range 2 { // idempotent
		if err := replaceSection(path, md); err != nil {
			t.Fatal(err)
		}
	}
	got, _ := os.ReadFile(path)
	if s := string(got); !strings.HasPrefix(s, "# title\n\n") || !strings.HasSuffix(s, endMarker+"\ntail\n") ||
		strings.Contains(s, "STALE-REPORT") || strings.Count(s, endMarker) != 1 {
		t.Errorf("replaced README:\n%s", s)
	}

	d := xml.NewDecoder(strings.NewReader(chart(r)))
	for {
		_, err := d.Token()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatalf("chart is not well-formed XML: %v", err)
		}
	}
}
