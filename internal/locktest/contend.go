package locktest

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/fencedlock/fencedlock"
	"github.com/fencedlock/fencedlock/fencing"
)

// Contend runs each of lockers in a goroutine of its own, rounds times:
// Acquire key (each Acquire bounded by timeout, under ctx), fn inside the
// critical section, Release. An overlap detector counts the times two of
// them were inside together. It fails t on an error of Acquire, fn or
// Release, on an overlap, on a missing grant, and unless the fences seen
// inside strictly increase in the order the section was entered; it
// returns those fences.
func Contend(ctx context.Context, t testing.TB, lockers []*fencedlock.Locker, key string, rounds int, timeout time.Duration, fn func(*fencedlock.Lease) error) []fencing.Token {
	t.Helper()
	var (
		inside   atomic.Int32
		overlaps atomic.Int32
		mu       sync.Mutex
		fences   []fencing.Token
		wg       sync.WaitGroup
		errs     = make(chan error, len(lockers))
	)
	round := func(l *fencedlock.Locker) error {
		actx, cancel := context.WithTimeout(ctx, timeout)
		ls, err := l.Acquire(actx, key)
		cancel()
		if err != nil {
			return err
		}
		if inside.Add(1) != 1 {
			overlaps.Add(1)
		}
		mu.Lock()
		fences = append(fences, ls.Fence())
		mu.Unlock()
		ferr := fn(ls)
		inside.Add(-1)
		if err := ls.Release(ctx); err != nil {
			return err
		}
		return ferr
	}
	for _, l := range lockers {
		wg.Go(func() {
			for range rounds {
				if err := round(l); err != nil {
					errs <- err
					return
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	if n := overlaps.Load(); n != 0 {
		t.Fatalf("%d overlapping critical sections", n)
	}
	if len(fences) != len(lockers)*rounds {
		t.Fatalf("%d grants, want %d", len(fences), len(lockers)*rounds)
	}
	for i := 1; i < len(fences); i++ {
		if fences[i] <= fences[i-1] {
			t.Fatalf("fence %d (%d) not above the previous (%d): %v", i, fences[i], fences[i-1], fences)
		}
	}
	return fences
}
