package rwlocktest

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/fencedlock/fencedlock/rwlock"
)

// WriterNotStarved: readers that overlap so that the name is never free
// of readers (each takes its next read lease before it releases the one it
// holds, with TryRLock) do not keep a writer out: the writer's intent
// refuses their next leases, the held ones are released, and the writer
// gets the name while the readers still want it. A starved writer fails
// the test: the readers' loops are bounded (starveRounds leases each), and
// a writer granted only once a reader ran out of rounds was kept out by
// them. (Before, such a writer passed: a backend that ignored intents let
// the writer in after 60s, when every reader had taken its 2000 leases.)
func WriterNotStarved(t *testing.T, s Setup) {
	took, reads, err := StarveWriter(t, s)
	if err != nil {
		t.Fatalf("writer starved by overlapping readers: %v", err)
	}
	t.Logf("the writer got the name %v after it asked, after %d reads", took, reads)
}

// starveRounds bounds each reader's loop in StarveWriter: with writer
// preference, readers take no lease while the writer waits, so they run
// out of rounds only if the writer is kept out for at least starveRounds
// holds of 20ms.
const starveRounds = 250

// StarveWriter runs WriterNotStarved's readers and writer on s and returns
// how long the writer waited, how many read leases were taken before it
// was granted, and an error if it was not granted or was granted only
// after a reader ran out of rounds (starved). Without writer preference the
// writer is starved for sure: each reader holds a lease from its first
// grant until a TryRLock is refused.
func StarveWriter(t *testing.T, s Setup) (took time.Duration, reads int64, err error) {
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	n := name("starve")
	rl, wl := s.New(t, retrying), s.New(t, retrying)
	done := make(chan struct{})
	var wg sync.WaitGroup
	var taken, ranOut atomic.Int64
	for i := range 4 {
		wg.Go(func() {
			time.Sleep(time.Duration(i) * 5 * time.Millisecond) // staggered
			if overlapReads(ctx, rl, n, done, &taken) {
				ranOut.Add(1)
			}
		})
	}
	for taken.Load() < 8 { // the readers are in (bounded by ctx: they stop when it ends)
		if ctx.Err() != nil {
			return 0, taken.Load(), fmt.Errorf("the readers took %d leases: %w", taken.Load(), ctx.Err())
		}
		time.Sleep(5 * time.Millisecond)
	}
	start := time.Now()
	w, err := wl.Lock(ctx, n)
	took, reads, starved := time.Since(start), taken.Load(), ranOut.Load()
	close(done)
	if err == nil {
		w.Release(ctx) // the readers waiting behind it get in, see done and stop
	}
	wg.Wait()
	if err == nil && starved > 0 {
		err = fmt.Errorf("granted %v after it asked, only once %d of the 4 readers had taken their %d leases (%d reads)", took, starved, starveRounds, reads)
	}
	return took, reads, err
}

// overlapReads takes up to starveRounds read leases of n, each held 20ms,
// the next one (TryRLock) taken before the held one is released; when it
// is refused, the held one is released and the next taken by RLock. It
// stops when done is closed, and reports whether it ran out of rounds.
func overlapReads(ctx context.Context, rl *rwlock.RWLock, n string, done <-chan struct{}, taken *atomic.Int64) bool {
	var held *rwlock.Lease
	defer func() {
		if held != nil {
			held.Release(ctx)
		}
	}()
	for range starveRounds {
		select {
		case <-done:
			return false
		default:
		}
		var next *rwlock.Lease
		var err error
		if held == nil {
			rctx, rcancel := context.WithTimeout(ctx, 5*time.Second)
			next, err = rl.RLock(rctx, n)
			rcancel()
		} else {
			next, err = rl.TryRLock(ctx, n)
			held.Release(ctx)
		}
		held = next
		if err != nil {
			continue // a writer holds or waits: try again
		}
		taken.Add(1)
		time.Sleep(20 * time.Millisecond)
	}
	return true
}
