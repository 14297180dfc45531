// The Markdown report: one table per scenario, the headline and the footnote.

package main

import (
	"cmp"
	"fmt"
	"slices"
	"strconv"
	"strings"
)

// hotPath renders a b.N scenario (AcquireRelease or Renew) at one
// concurrency.
func hotPath(r *runData, scenario string) string {
	t := &table{head: []string{"library", "ops/s", "vs baseline (per-pass range)", "p50", "p99", "allocs/op", "B/op", "Redis cmds/op", "Redis server CPU/op"}}
	for _, lib := range libs {
		ops, ok := r.opsPerSec(scenario, lib)
		if !ok {
			continue
		}
		ratio, rok := r.opsRatio(scenario, lib, baseline)
		t.rows = append(t.rows, []string{display[lib], fmtRate(ops), fmtSpread(ratio, rok),
			cell(r, scenario, lib, "p50-ns", fmtDur), cell(r, scenario, lib, "p99-ns", fmtDur),
			cell(r, scenario, lib, "allocs/op", fmtNum), cell(r, scenario, lib, "B/op", fmtNum),
			cell(r, scenario, lib, "cmds/op", fmtNum), cell(r, scenario, lib, "server-cpu-ns/op", fmtCPU)})
	}
	return t.markdown()
}

func contended(r *runData) string {
	const s = "Contended"
	t := &table{head: []string{"library", "acquisitions/s", "hand-offs/s", "hand-offs vs baseline", "wait p50", "wait p99",
		"hand-off p50", "hand-off p99", "longest free-lock gap", "fairness (min/max)", "allocs/acq", "Redis cmds/acq"}}
	for _, lib := range libs {
		acq, ok := r.get(s, lib, "acq/s")
		if !ok {
			continue
		}
		ratio, rok := r.ratio(s, lib, "handoffs/s", baseline)
		lo, _ := r.get(s, lib, "min-acq")
		hi, _ := r.get(s, lib, "max-acq")
		fair, _ := r.get(s, lib, "fairness")
		t.rows = append(t.rows, []string{display[lib], fmtRate(acq), cell(r, s, lib, "handoffs/s", fmtRate), fmtRatio(ratio, rok),
			cell(r, s, lib, "wait-p50-ns", fmtDur), cell(r, s, lib, "wait-p99-ns", fmtDur),
			cell(r, s, lib, "handoff-p50-ns", fmtDur), cell(r, s, lib, "handoff-p99-ns", fmtDur),
			cell(r, s, lib, "idle-max-ns", fmtDur),
			fmt.Sprintf("%.2f (%s/%s)", fair, fmtNum(lo), fmtNum(hi)),
			cell(r, s, lib, "allocs/op", fmtNum), cell(r, s, lib, "cmds/op", fmtNum)})
	}
	return t.markdown()
}

func handoff(r *runData) string {
	const s = "Handoff"
	t := &table{head: []string{"library", "mean", "p50", "p99", "max", "samples", "waiter stuck on a free lock"}}
	for _, lib := range libs {
		if _, ok := r.get(s, lib, "p50-ns"); !ok {
			continue
		}
		t.rows = append(t.rows, []string{display[lib], cell(r, s, lib, "ns/op", fmtDur), cell(r, s, lib, "p50-ns", fmtDur),
			cell(r, s, lib, "p99-ns", fmtDur), cell(r, s, lib, "max-ns", fmtDur), cell(r, s, lib, "handoffs", fmtNum),
			cell(r, s, lib, "stuck", func(v float64) string {
				if v > 0 {
					return "yes (run stopped)"
				}
				return "no"
			})})
	}
	return t.markdown()
}

// manySizes returns the ManyLeases sizes measured for lib at the TTL
// every contender runs (sub-benchmarks ManyLeases/lib=<lib>/leases=<n>),
// smallest first.
func manySizes(r *runData, lib string) []int { return sizesOf(r, "ManyLeases/lib="+lib+"/leases=") }

// scaleSizes returns the ManyLeases sizes measured for lib at scale, at
// -scale-ttl (sub-benchmarks ManyLeases/lib=<lib>/scale=<n>), smallest
// first.
func scaleSizes(r *runData, lib string) []int { return sizesOf(r, "ManyLeases/lib="+lib+"/scale=") }

func sizesOf(r *runData, prefix string) []int {
	var ns []int
	for name := range r.results {
		if v, ok := strings.CutPrefix(name, prefix); ok {
			if n, err := strconv.Atoi(v); err == nil {
				ns = append(ns, n)
			}
		}
	}
	slices.Sort(ns)
	return ns
}

// manyCommon is the ManyLeases size every contender ran (-leases): the
// size measured for the most libraries, the larger on a tie.
func manyCommon(r *runData) int {
	count := map[int]int{}
	best := 0
	for _, lib := range libs {
		for _, n := range manySizes(r, lib) {
			count[n]++
			if count[n] > count[best] || count[n] == count[best] && n > best {
				best = n
			}
		}
	}
	return best
}

// manyLib names lib's result at n leases for runData.get.
func manyLib(lib string, n int) string { return fmt.Sprintf("%s/leases=%d", lib, n) }

// halfRenewLib names fencedlock-etcd's result at n leases renewed every
// TTL/2 (the Mutex's renewal rate) for runData.get.
func halfRenewLib(n int) string { return fmt.Sprintf("fencedlock-etcd/halfrenew=%d", n) }

// scaleLib names lib's result at n leases at scale for runData.get.
func scaleLib(lib string, n int) string { return fmt.Sprintf("%s/scale=%d", lib, n) }

func many(r *runData) string {
	const s = "ManyLeases"
	n := manyCommon(r)
	t := &table{head: []string{"library", "acquire, per lease", "allocs/acquire", "CPU per lease per s", "memory per lease",
		"goroutines per lease", "Redis cmds per lease per s", "etcd keepalives per lease per s", "lost", "failed releases"}}
	row := func(name, l string) {
		if _, ok := r.get(s, l, "lost"); !ok {
			return
		}
		t.rows = append(t.rows, []string{name, cell(r, s, l, "ns/op", fmtDur), cell(r, s, l, "allocs/op", fmtNum),
			cell(r, s, l, "cpu-ns/lease/s", fmtDur),
			cell(r, s, l, "mem-B/lease", func(v float64) string { return fmtNum(v) + " B" }),
			cell(r, s, l, "goroutines/lease", fmtNum), cell(r, s, l, "cmds/lease/s", fmtNum), cell(r, s, l, "keepalives/lease/s", fmtNum),
			cell(r, s, l, "lost", fmtNum), cell(r, s, l, "release-errors", fmtNum)})
	}
	for _, lib := range libs {
		row(display[lib], manyLib(lib, n))
		if lib == "fencedlock-etcd" {
			row(display[lib]+", RenewInterval TTL/2", halfRenewLib(n))
		}
	}
	if len(t.rows) == 0 {
		return "_not run_\n"
	}
	return fmt.Sprintf("%s leases each.\n\n", fmtNum(float64(n))) + t.String()
}

// manyScale is the table of the libraries measured at several ManyLeases
// sizes: per-lease CPU and memory at each size, and their growth from the
// previous size (target: at most 1.2x from 10k to 100k).
func manyScale(r *runData) string {
	const s = "ManyLeases"
	t := &table{head: []string{"library", "leases", "acquire, per lease", "CPU per lease per s", "memory per lease",
		"growth from the previous size (CPU / memory)", "server CPU per lease per s", "Redis cmds per lease per s", "Redis cmds per round trip", "etcd keepalives per lease per s", "lost", "failed releases"}}
	for _, lib := range libs {
		sizes := scaleSizes(r, lib)
		if len(sizes) < 2 {
			continue
		}
		for i, n := range sizes {
			l := scaleLib(lib, n)
			growth := "–"
			if i > 0 {
				p := scaleLib(lib, sizes[i-1])
				cpu, okc := r.ratio(s, l, "cpu-ns/lease/s", p)
				mem, okm := r.ratio(s, l, "mem-B/lease", p)
				growth = fmtRatio(cpu, okc) + " / " + fmtRatio(mem, okm)
			}
			t.rows = append(t.rows, []string{display[lib], fmtNum(float64(n)), cell(r, s, l, "ns/op", fmtDur),
				cell(r, s, l, "cpu-ns/lease/s", fmtDur),
				cell(r, s, l, "mem-B/lease", func(v float64) string { return fmtNum(v) + " B" }),
				growth, cell(r, s, l, "server-cpu-ns/lease/s", fmtDur), cell(r, s, l, "cmds/lease/s", fmtNum), cell(r, s, l, "cmds/roundtrip", fmtNum),
				cell(r, s, l, "keepalives/lease/s", fmtNum), cell(r, s, l, "lost", fmtNum), cell(r, s, l, "release-errors", fmtNum)})
		}
	}
	return t.markdown()
}

// overheadName names a layer's result at a concurrency; a run saved
// before the concurrency-64 layer has only "Overhead/layer=<layer>" (1).
func overheadName(r *runData, conc, layer string) string {
	name := "Overhead/conc=" + conc + "/layer=" + layer
	if _, ok := r.results[name]; !ok && conc == "1" {
		if _, ok := r.results["Overhead/layer="+layer]; ok {
			return "Overhead/layer=" + layer
		}
	}
	return name
}

func overhead(r *runData) string {
	t := &table{head: []string{"layer", "goroutines", "ops/s", "vs raw (per-pass range)", "p50", "p99", "allocs/op", "B/op", "Redis cmds/op", "Redis server CPU/op"}}
	names := map[string]string{"raw": "raw rueidis scripts", "backend": "backend/redis directly", "locker-try": "Locker.TryAcquire + Lease.Release", "locker": "Locker.Acquire + Lease.Release"}
	for _, conc := range []string{"1", "64"} {
		for _, layer := range []string{"raw", "backend", "locker-try", "locker"} {
			name := overheadName(r, conc, layer)
			res, ok := r.results[name]
			if !ok || res["ns/op"] <= 0 {
				continue
			}
			ratio, rok := r.pairedSpread(name)
			if !rok {
				ratio, rok = r.passRatio(name, overheadName(r, conc, "raw"), "ops/s")
			}
			c := func(unit string, f func(float64) string) string {
				if v, ok := res[unit]; ok {
					return f(v)
				}
				return "–"
			}
			t.rows = append(t.rows, []string{names[layer], conc, fmtRate(1e9 / res["ns/op"]), fmtSpread(ratio, rok),
				c("p50-ns", fmtDur), c("p99-ns", fmtDur), c("allocs/op", fmtNum), c("B/op", fmtNum),
				c("cmds/op", fmtNum), c("server-cpu-ns/op", fmtCPU)})
		}
	}
	return t.markdown()
}

func render(r *runData, versions map[string]string) string {
	var b strings.Builder
	fmt.Fprintf(&b, "%s\n\n", beginMarker)
	b.WriteString("### Headline\n\n")
	b.WriteString(headline(r))
	b.WriteString("\n![throughput relative to the raw rueidis baseline, and contended hand-offs per second](chart.svg)\n\n")

	b.WriteString("### Targets of the open issues, checked on this run\n\n")
	b.WriteString("Ratios of the hot path (acquire+release, renew) are the median over the passes of a ratio measured within each pass, with the range in parentheses: against the raw baseline, the interleaved measurement (vs-base, see the note at the end); between two Redis libraries, the ratio of their two interleaved ratios to the baseline in the same pass (the baseline cancels out); fencedlock/etcd against the shared-session concurrency.Mutex, their own interleaved measurement (vs-mutex); the contended, hand-off and many-leases figures are from one run.\n\n")
	b.WriteString(targetTable(targets(r)))

	for _, s := range []struct{ title, scenario, text string }{
		{"Uncontended acquire+release, concurrency 1", "AcquireRelease/conc=1", "One goroutine, one client, its own key; the library's blocking acquire on a free key, then release."},
		{"Uncontended acquire+release, concurrency 64", "AcquireRelease/conc=64", "64 goroutines on one client, each on its own key. ops/s is the total throughput; p50/p99 are per operation."},
		{"Renew of a held lock, concurrency 1", "Renew/conc=1", "The library's manual extend (fencedlock: `Lease.Renew` with `ManualRenew`). rueidislock has no manual renew."},
		{"Renew of a held lock, concurrency 64", "Renew/conc=64", ""},
	} {
		fmt.Fprintf(&b, "\n### %s\n\n", s.title)
		if s.text != "" {
			b.WriteString(s.text + "\n\n")
		}
		b.WriteString(hotPath(r, s.scenario))
	}
	b.WriteString(capacitySection(r))
	b.WriteString("\n### Contended: 16 workers, one client each, one key\n\n")
	b.WriteString("Each worker loops on the library's blocking acquire and an immediate release, measured after a warm-up of 300 ms in which all workers already contend the same way (so every client has dialled what its blocking acquire uses, a subscription included, before the window; the same for every library). A hand-off is an acquisition by a worker other than the previous holder; acquisitions alone flatter libraries whose releasing worker re-takes the lock while the others sleep. Wait is from calling acquire to holding; hand-off latency from the previous holder's release call to a different worker holding; the free-lock gap from a release call to the next acquisition by anyone.\n\n")
	b.WriteString(contended(r))
	b.WriteString("\n### Hand-off latency: one holder, one waiter\n\n")
	b.WriteString("The holder keeps the lock 5 ms (so the waiter is really waiting), then releases; the time from its release call to the waiter holding. A waiter that does not get the free lock within the run time plus 5 s ends the run (stuck).\n\n")
	b.WriteString(handoff(r))
	b.WriteString(floorSection(r))
	b.WriteString("\n### Many leases held by one process\n\n")
	b.WriteString("One client acquires the leases (64 at a time), holds them while the library keeps them alive (TTL 3 s), then releases them. redsync and bsm/redislock have no watchdog and are left out; the raw baseline runs the renew loop a user would write (one goroutine and ticker per lock). CPU is the client process's; memory is live heap after GC plus goroutine stacks. etcd keepalives are the LeaseKeepAlive requests the server received (fencedlock renews every TTL/3 by default; etcd's client renews TTL/3 after the previous answer, checked every 500 ms, so about every 1.5 s at TTL 3 s; the row with RenewInterval TTL/2 renews at that rate). Lost leases are a finding, not an error of the run: the library reported them lost (or its renewals failed) while the process held them.\n\n")
	b.WriteString(many(r))
	ttl := r.config["scale-ttl"]
	if ttl == "" {
		ttl = "10s"
	}
	fmt.Fprintf(&b, "\nAt scale (`-leases-scale`), for fencedlock/redis and fencedlock/etcd, each size at TTL %s (`-scale-ttl`, the library's default unless changed; a lease is renewed every TTL/3, so 100,000 leases at TTL 3 s would be 100,000 renewals per second). Growth is the ratio to the previous size's figure (1.00x: flat per lease). Redis commands per round trip are commands per read event of the server (`total_reads_processed`): above 1, renewals share round trips (auto-pipelining).\n\n", ttl)
	b.WriteString(manyScale(r))

	b.WriteString("\n### Where fencedlock/redis spends its time (uncontended acquire+release, 1 and 64 goroutines)\n\n")
	b.WriteString("The same operation through each layer on one client: the raw baseline, the Redis backend called directly, then `Locker.TryAcquire` and `Locker.Acquire` (lease, watchdog, contexts, logging of the root package on top); at 64 goroutines each has its own key. A layer's gap to raw that its Redis server CPU per operation matches is on the server (more or heavier commands); the rest is in the client.\n\n")
	b.WriteString(overhead(r))

	b.WriteString("\n---\n\n")
	b.WriteString(footnote(r, versions))
	fmt.Fprintf(&b, "\n%s\n", endMarker)
	return b.String()
}

func headline(r *runData) string {
	t := &table{head: []string{"library", "acquire+release/s (1)", "acquire+release/s (64)", "renew/s (1)", "contended hand-offs/s", "contended wait p99", "fencing token", "watchdog, loss notice"}}
	feat := map[string][2]string{
		baseline:                {"yes", "no"},
		"fencedlock-redis":      {"yes", "yes"},
		"fencedlock-redis-fair": {"yes", "yes"},
		"fencedlock-goredis":    {"yes", "yes"},
		"redsync":               {"no", "no"},
		"redislock":             {"no", "no"},
		"rueidislock":           {"no", "yes"},
		"rueidislock-km1":       {"no", "yes"},
		"fencedlock-etcd":       {"yes", "yes"},
		"etcd-mutex":            {"revision", "session"},
		"etcd-mutex-shared":     {"revision", "session"},
	}
	rate := func(scenario, lib string) string {
		v, ok := r.opsPerSec(scenario, lib)
		if !ok {
			return "–"
		}
		ratio, _ := r.opsRatio(scenario, lib, baseline)
		return fmt.Sprintf("%s (%.2fx)", fmtRate(v), ratio.med)
	}
	for _, lib := range libs {
		if _, ok := r.opsPerSec("AcquireRelease/conc=1", lib); !ok {
			if _, ok := r.get("Contended", lib, "handoffs/s"); !ok {
				continue
			}
		}
		t.rows = append(t.rows, []string{display[lib], rate("AcquireRelease/conc=1", lib), rate("AcquireRelease/conc=64", lib),
			rate("Renew/conc=1", lib), cell(r, "Contended", lib, "handoffs/s", fmtRate), cell(r, "Contended", lib, "wait-p99-ns", fmtDur),
			feat[lib][0], feat[lib][1]})
	}
	return t.String() + "\nRatios are against the raw rueidis baseline (the least a correct fenced Redis lock needs: one script to SET NX PX and INCR a fence, one compare-and-delete script), measured next to each library in every pass of the same run: the median of the per-pass ratios.\n"
}

func footnote(r *runData, versions map[string]string) string {
	var b strings.Builder
	b.WriteString("Measured on: ")
	var parts []string
	for _, k := range []string{"goos", "goarch", "cpu"} {
		if v := r.config[k]; v != "" {
			parts = append(parts, v)
		}
	}
	if r.procs > 0 {
		parts = append(parts, fmt.Sprintf("GOMAXPROCS %d", r.procs))
	}
	b.WriteString(strings.Join(parts, ", "))
	b.WriteString(". Servers on the same machine, over loopback: ")
	fmt.Fprintf(&b, "Redis %s; etcd %s. ", orUnknown(r.config["redis"]), orUnknown(r.config["etcd"]))
	b.WriteString("Clients and servers share the CPUs, so absolute figures are low and noisy; compare rows of the same run, not runs. ")
	if r.config["loadavg-start"] != "" {
		fmt.Fprintf(&b, "Load average (1, 5, 15 min) at the start of the run %s, at the end %s: other work on the machine competed for the same CPUs. ", r.config["loadavg-start"], r.config["loadavg-end"])
	}
	b.WriteString("Versions: ")
	var vs []string
	for _, m := range []string{"github.com/redis/rueidis", "github.com/go-redsync/redsync/v4", "github.com/redis/go-redis/v9",
		"github.com/bsm/redislock", "go.etcd.io/etcd/client/v3", "go.etcd.io/etcd/server/v3"} {
		if v := versions[m]; v != "" {
			vs = append(vs, "`"+m+"` "+v)
		}
	}
	b.WriteString(strings.Join(vs, ", "))
	fmt.Fprintf(&b, "; fencedlock at %s. ", cmp.Or(r.config["fencedlock"], "a commit the run did not record"))
	fmt.Fprintf(&b, "AcquireRelease, Renew and Overhead: %d passes over all contenders, each a go test run of its own, every other one in reverse order; the figures are medians over the passes. A ratio to the raw baseline (\"vs baseline\", \"vs raw\") is measured in every pass, after the timed run, over a quarter of b.N operations of each: at concurrency 1 the library's operation and a baseline operation back to back, alternating which goes first; at 64, blocks of 4 operations per goroutine of one library, then of the other, in the order A B B A (single operations would share one server queue and wait alike); the ratio is the baseline's total time over the library's (leaving out the 1%% of rounds that took longest: stalls of the machine), under the same load within milliseconds; the report gives the median over the passes with the range in parentheses. Ratios between two Redis libraries are the median over the passes of the ratio of their vs-base ratios (each measured against the same baseline under its own load); fencedlock/etcd against concurrency.Mutex with a shared Session (the targets of issue 20) is measured the same interleaved way against the Mutex (vs-mutex); other etcd ratios come from samples run next to each other. Redis server CPU per operation is `INFO cpu` (used_cpu_sys + used_cpu_user) of the benchmark's own server over the timed operations. The fixed-duration scenarios (Contended, Handoff, PingPong, ManyLeases): %s each, every figure the median over the runs. ", r.maxRuns("AcquireRelease/"), plural(r.maxRuns("Contended"), "run"))
	b.WriteString("Not a statistical study: for decisions, run `go test -run '^$' -bench . -benchmem -count 10` against your own servers and compare with benchstat.\n")
	return b.String()
}
