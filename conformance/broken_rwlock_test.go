package conformance_test

import (
	"context"
	"time"

	"github.com/fencedlock/fencedlock/backend/memory"
	"github.com/fencedlock/fencedlock/conformance"
	"github.com/fencedlock/fencedlock/driver"
)

// The broken RWLockers: backend/memory (which passes the suite) with one
// bug in its read-write locks. TestBrokenBackendsAreReported runs them
// with the reference backend's variants.

type rwBug int

const (
	rwSharedWriter  rwBug = iota // a writer is granted as a reader: alongside readers (every RW property sees it)
	rwReadersAhead               // readers' fences run ahead of the shared counter
	rwIgnoresIntent              // writers register no intent: readers starve them
)

func init() {
	addExclusiveVariants(
		variant{"RWSharedWriter", []string{"RWExclusion", "RWFences", "RWWriterPreference"}, brokenRW(rwSharedWriter)},
		variant{"RWReadersAhead", []string{"RWFences"}, brokenRW(rwReadersAhead)},
		variant{"RWIgnoresIntent", []string{"RWWriterPreference"}, brokenRW(rwIgnoresIntent)},
	)
}

func brokenRW(bug rwBug) func() conformance.Harness {
	return brokenOnMemory(func(b *memory.Backend) driver.Backend { return brokenRWLocker{b, bug} })
}

// brokenRWLocker is a memory Backend with one bug in its RWLocker.
type brokenRWLocker struct {
	*memory.Backend
	bug rwBug
}

// AcquireRW has the bug of b: a writer taken as a reader (its renewals
// and release too), readers' fences a thousand ahead, or no intent.
func (b brokenRWLocker) AcquireRW(ctx context.Context, req driver.RWRequest) (driver.Grant, error) {
	switch b.bug {
	case rwSharedWriter:
		req.Mode = driver.Read
	case rwIgnoresIntent:
		req.Intent = 0
	}
	g, err := b.Backend.AcquireRW(ctx, req)
	if err == nil && b.bug == rwReadersAhead && req.Mode == driver.Read {
		g.Fence += 1000
	}
	return g, err
}

// RenewRW renews a writer as a reader with rwSharedWriter.
func (b brokenRWLocker) RenewRW(ctx context.Context, g driver.Grant, m driver.RWMode, ttl time.Duration) (time.Duration, error) {
	if b.bug == rwSharedWriter {
		m = driver.Read
	}
	return b.Backend.RenewRW(ctx, g, m, ttl)
}

// ReleaseRW releases a writer as a reader with rwSharedWriter.
func (b brokenRWLocker) ReleaseRW(ctx context.Context, g driver.Grant, m driver.RWMode) error {
	if b.bug == rwSharedWriter {
		m = driver.Read
	}
	return b.Backend.ReleaseRW(ctx, g, m)
}
