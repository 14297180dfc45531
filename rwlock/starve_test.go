package rwlock_test

import (
	"context"
	"testing"

	"github.com/fencedlock/fencedlock"
	"github.com/fencedlock/fencedlock/backend/memory"
	"github.com/fencedlock/fencedlock/driver"
	"github.com/fencedlock/fencedlock/internal/locktest"
	"github.com/fencedlock/fencedlock/internal/rwlocktest"
	"github.com/fencedlock/fencedlock/rwlock"
)

// noIntent is a memory backend that ignores writers' intents: readers
// can starve a writer.
type noIntent struct{ *memory.Backend }

func (n noIntent) AcquireRW(ctx context.Context, req driver.RWRequest) (driver.Grant, error) {
	req.Intent = 0
	return n.Backend.AcquireRW(ctx, req)
}

// TestWriterNotStarvedCatchesStarvation: the negative control of
// rwlocktest.WriterNotStarved. On a backend without writer preference its
// writer is starved by the overlapping readers, and the scenario must say
// so. It passed before: the readers' loop was bounded, and the starved
// writer was granted once every reader had taken its 2000 leases (60s
// here), which the scenario took for a success.
func TestWriterNotStarvedCatchesStarvation(t *testing.T) {
	st := memory.NewStore()
	s := rwlocktest.Setup{New: func(t *testing.T, opts fencedlock.Options) *rwlock.RWLock {
		return locktest.Open(t, noIntent{st.Backend()}, opts, rwlock.New)
	}}
	took, reads, err := rwlocktest.StarveWriter(t, s)
	if err == nil {
		t.Fatalf("a writer on a backend that ignores intents was granted %v after it asked, after %d reads, and the scenario passed it", took, reads)
	}
	t.Logf("caught: %v", err)
}
