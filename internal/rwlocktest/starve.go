package rwlocktest

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// WriterNotStarved: readers that overlap so that the name is never free
// of readers (each takes its next read lease while the others hold) do
// not keep a writer out: the writer's intent stops new readers, the held
// ones release, and the writer gets the name while the readers still
// want it. A starved writer fails the test: the readers' loops are
// bounded (starveRounds leases each), and a writer granted only once a
// reader ran out of rounds was kept out by them. (Before, such a writer
// passed: a backend that ignored intents let the writer in after 60s, when
// every reader had taken its 2000 leases.)
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
// after a reader ran out of rounds (starved).
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
			time.Sleep(time.Duration(i) * 5 * time.Millisecond) // staggered: the readers overlap
			for range starveRounds {
				select {
				case <-done:
					return
				default:
				}
				rctx, rcancel := context.WithTimeout(ctx, 5*time.Second)
				l, err := rl.RLock(rctx, n)
				rcancel()
				if err != nil {
					continue // a writer holds or waits: try again
				}
				taken.Add(1)
				time.Sleep(20 * time.Millisecond)
				l.Release(ctx)
			}
			ranOut.Add(1)
		})
	}
	for taken.Load() < 8 { // the readers are in
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
