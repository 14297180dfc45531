package clitest

import (
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"
)

// CheckRunsDisjoint checks mutual exclusion end to end. procs goroutines
// each run the binary rounds times, all at once, with env and args followed
// by a /bin/sh command that appends "start FENCE NANOS" to a log, sleeps
// 0.1s and appends "end FENCE NANOS" (FENCE is $FENCEDLOCK_FENCE), so args
// must end with the lock's name and "--". It fails the test if a run exits
// non-zero, if the log does not hold one complete interval per run, each
// with its own fence, if two intervals overlap, or if the fences do not
// increase with the start times. It returns the gaps between consecutive
// intervals (end of one command to start of the next), in start order.
func (b *Bin) CheckRunsDisjoint(t *testing.T, env, args []string, procs, rounds int) []time.Duration {
	t.Helper()
	return b.RunsDisjoint(t, env, args, procs, rounds, nil).Gaps
}

// Runs is what RunsDisjoint saw.
type Runs struct {
	// Gaps are the gaps between consecutive complete intervals (end of
	// one command to start of the next), in start order.
	Gaps []time.Duration
	// Cut holds the stderr of each run that cut decided was cut short.
	Cut []string
}

// RunsDisjoint is CheckRunsDisjoint, except that a run that exits
// non-zero and for which cut(code, stderr) is true does not fail the
// test: it is recorded in Runs.Cut, and its command may have left a start
// without an end (or nothing) in the log. cut names the runs the binary
// itself stopped for a reason that is no violation (fencedlock's
// supervisor firing because this process was scheduled late), so that the
// caller can retry. Every other check stays as strict: an interval, or the
// start of a cut one, that overlaps a complete interval fails the test, as
// do decreasing fences and any other non-zero exit. A nil cut accepts no
// run.
func (b *Bin) RunsDisjoint(t *testing.T, env, args []string, procs, rounds int, cut func(code int, stderr string) bool) Runs {
	t.Helper()
	log := filepath.Join(t.TempDir(), "log")
	script := `echo "start $FENCEDLOCK_FENCE $(date +%s%N)" >> ` + log + `; sleep 0.1; echo "end $FENCEDLOCK_FENCE $(date +%s%N)" >> ` + log
	args = append(append(args[:len(args):len(args)], "/bin/sh", "-c"), script)
	var (
		wg   sync.WaitGroup
		mu   sync.Mutex
		runs Runs
	)
	errs := make(chan string, procs*rounds)
	for i := 0; i < procs; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for r := 0; r < rounds; r++ {
				code, p := b.Run(t, env, args...)
				switch {
				case code == 0:
				case cut != nil && cut(code, p.Stderr.String()):
					mu.Lock()
					runs.Cut = append(runs.Cut, p.Stderr.String())
					mu.Unlock()
				default:
					errs <- fmt.Sprintf("exit %d: %s", code, p.Stderr)
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for e := range errs {
		t.Error(e)
	}
	data, err := os.ReadFile(log)
	if err != nil && len(runs.Cut) < procs*rounds {
		t.Fatal(err)
	}
	gaps, problems := checkIntervals(string(data), procs*rounds, len(runs.Cut))
	for _, p := range problems {
		t.Error(p)
	}
	runs.Gaps = gaps
	return runs
}

// RunsNeverOverlap checks mutual exclusion of fencedlock run end to end:
// RunsDisjoint of procs x rounds runs of "run -q --ttl TTL --wait wait
// key --", starting with --ttl ttl. A run cut short by the supervisor
// (cut, see SwitchCut: a renewal reached it late, a loaded machine) makes
// the attempt inconclusive: it is retried with RetryTTL of the scheduling
// delay measured (grace: run's --grace), at most neverOverlapAttempts
// attempts in all, the last accepting no cut run (a retry sized by the
// delay measured so far was cut again when the load rose: two `make test`
// runs and two more suites, the delay 83ms then 182ms). It returns the
// last attempt's Runs, its TTL and the delay measured.
func (b *Bin) RunsNeverOverlap(t *testing.T, env []string, key string, wait, ttl, grace time.Duration, procs, rounds int, cut func(code int, stderr string) bool) (Runs, time.Duration, time.Duration) {
	t.Helper()
	args := func(ttl time.Duration) []string {
		return []string{"run", "-q", "--ttl", ttl.String(), "--wait", wait.String(), key, "--"}
	}
	lag := StartLag(t)
	runs := b.RunsDisjoint(t, env, args(ttl), procs, rounds, cut)
	for attempt := 2; len(runs.Cut) > 0 && attempt <= neverOverlapAttempts; attempt++ {
		retry := max(RetryTTL(ttl, grace, lag.Max()), ttl+ttl/2)
		t.Logf("inconclusive with --ttl %v: %d of %d runs cut short by the supervisor (a renewal at least %v late; scheduling delay max %v); not an overlap: attempt %d of %d with --ttl %v. First cut run's stderr:\n%s",
			ttl, len(runs.Cut), procs*rounds, SwitchLateness(ttl, grace).Round(time.Millisecond), lag.Max().Round(time.Millisecond), attempt, neverOverlapAttempts, retry, runs.Cut[0])
		ttl = retry
		last := cut
		if attempt == neverOverlapAttempts {
			last = nil
		}
		runs = b.RunsDisjoint(t, env, args(ttl), procs, rounds, last)
	}
	return runs, ttl, lag.Max().Round(time.Millisecond)
}

// neverOverlapAttempts bounds the attempts of RunsNeverOverlap.
const neverOverlapAttempts = 3

// checkIntervals checks the log RunsDisjoint's commands wrote, for runs
// runs of which cut were cut short: each of those may have left a start
// without an end, or nothing. It returns the gaps between consecutive
// complete intervals and what is wrong, if anything.
func checkIntervals(data string, runs, cut int) (gaps []time.Duration, problems []string) {
	type span struct{ fence, start, end int64 }
	spans := map[int64]*span{}
	for _, line := range strings.Split(strings.TrimSpace(data), "\n") {
		if line == "" {
			continue
		}
		var kind string
		var fence, ns int64
		if _, err := fmt.Sscan(line, &kind, &fence, &ns); err != nil || (kind != "start" && kind != "end") {
			return nil, []string{fmt.Sprintf("log line %q: %v", line, err)}
		}
		s := spans[fence]
		if s == nil {
			s = &span{fence: fence}
			spans[fence] = s
		}
		if kind == "start" {
			s.start = ns
		} else {
			s.end = ns
		}
	}
	if len(spans) > runs || len(spans) < runs-cut {
		return nil, []string{fmt.Sprintf("%d distinct fences in the log, want %d (one per run; %d cut short):\n%s", len(spans), runs, cut, data)}
	}
	list := make([]*span, 0, len(spans))
	incomplete := 0
	for _, s := range spans {
		if s.start == 0 {
			return nil, []string{fmt.Sprintf("fence %d: an end without a start", s.fence)}
		}
		if s.end == 0 {
			incomplete++
		}
		list = append(list, s)
	}
	if incomplete > cut {
		return nil, []string{fmt.Sprintf("%d incomplete intervals, %d runs cut short:\n%s", incomplete, cut, data)}
	}
	sort.Slice(list, func(i, j int) bool { return list[i].start < list[j].start })
	// Every start must come after the end of every complete interval that
	// started before it; a cut interval has no known end, so only its
	// start is checked (it is inconclusive, not proof of exclusion).
	var last *span // the complete interval ending last among those before
	for i, cur := range list {
		if last != nil && cur.start < last.end {
			problems = append(problems, fmt.Sprintf("overlap: fence %d ran [%d, %d], fence %d started at %d", last.fence, last.start, last.end, cur.fence, cur.start))
		}
		if i > 0 && cur.fence <= list[i-1].fence {
			problems = append(problems, fmt.Sprintf("fence %d ran after fence %d", cur.fence, list[i-1].fence))
		}
		if i > 0 && cur.end != 0 && list[i-1].end != 0 {
			gaps = append(gaps, time.Duration(cur.start-list[i-1].end))
		}
		if cur.end != 0 && (last == nil || cur.end > last.end) {
			last = cur
		}
	}
	return gaps, problems
}
