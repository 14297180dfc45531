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
	log := filepath.Join(t.TempDir(), "log")
	script := `echo "start $FENCEDLOCK_FENCE $(date +%s%N)" >> ` + log + `; sleep 0.1; echo "end $FENCEDLOCK_FENCE $(date +%s%N)" >> ` + log
	args = append(append(args[:len(args):len(args)], "/bin/sh", "-c"), script)
	var wg sync.WaitGroup
	errs := make(chan string, procs*rounds)
	for i := 0; i < procs; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for r := 0; r < rounds; r++ {
				code, p := b.Run(t, env, args...)
				if code != 0 {
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
	if err != nil {
		t.Fatal(err)
	}
	type span struct{ fence, start, end int64 }
	spans := map[int64]*span{}
	for _, line := range strings.Split(strings.TrimSpace(string(data)), "\n") {
		var kind string
		var fence, ns int64
		if _, err := fmt.Sscan(line, &kind, &fence, &ns); err != nil {
			t.Fatalf("log line %q: %v", line, err)
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
	if len(spans) != procs*rounds {
		t.Fatalf("%d distinct fences in the log, want %d (one per run):\n%s", len(spans), procs*rounds, data)
	}
	list := make([]*span, 0, len(spans))
	for _, s := range spans {
		if s.start == 0 || s.end == 0 {
			t.Fatalf("fence %d: incomplete interval", s.fence)
		}
		list = append(list, s)
	}
	sort.Slice(list, func(i, j int) bool { return list[i].start < list[j].start })
	var gaps []time.Duration
	for i := 1; i < len(list); i++ {
		prev, cur := list[i-1], list[i]
		if cur.start < prev.end {
			t.Errorf("overlap: fence %d ran [%d, %d], fence %d started at %d", prev.fence, prev.start, prev.end, cur.fence, cur.start)
		}
		if cur.fence <= prev.fence {
			t.Errorf("fence %d ran after fence %d", cur.fence, prev.fence)
		}
		gaps = append(gaps, time.Duration(cur.start-prev.end))
	}
	return gaps
}
