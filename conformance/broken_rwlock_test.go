package conformance_test

import (
	"cmp"
	"context"
	"slices"
	"sync"
	"time"

	"github.com/fencedlock/fencedlock/backend/memory"
	"github.com/fencedlock/fencedlock/conformance"
	"github.com/fencedlock/fencedlock/driver"
	"github.com/fencedlock/fencedlock/fencing"
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
		variant{"RWSharedWriter", []string{"RWExclusion", "RWFences", "RWWriterPreference", "RWInspect"}, brokenRW(rwSharedWriter)},
		variant{"RWReadersAhead", []string{"RWFences", "RWInspect"}, brokenRW(rwReadersAhead)},
		variant{"RWIgnoresIntent", []string{"RWWriterPreference", "RWInspect"}, brokenRW(rwIgnoresIntent)},
		variant{"RWInspectExpired", []string{"RWInspect"}, brokenRWInspect},
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

// brokenRWInspect is a memory backend whose InspectRW reads the readers
// without their expiry, as an implementer might who forgets that a
// reader's lease ends by itself: a reader not released is reported after
// its lease ended, with a negative TTL. The backends of one harness share
// the readers seen.
func brokenRWInspect() conformance.Harness {
	seen := &rwReadersSeen{m: map[string][]rwSeen{}}
	return brokenOnMemory(func(b *memory.Backend) driver.Backend { return staleRWInspector{b, seen} })()
}

// rwReadersSeen is the readers granted and not released, by name.
type rwReadersSeen struct {
	mu sync.Mutex
	m  map[string][]rwSeen
}

// rwSeen is one reader granted: its holder id, fence and deadline.
type rwSeen struct {
	holder  string
	fence   fencing.Token
	expires time.Time
}

// staleRWInspector is a memory Backend that reports expired readers.
type staleRWInspector struct {
	*memory.Backend
	seen *rwReadersSeen
}

// AcquireRW records a granted reader.
func (b staleRWInspector) AcquireRW(ctx context.Context, req driver.RWRequest) (driver.Grant, error) {
	g, err := b.Backend.AcquireRW(ctx, req)
	if err == nil && req.Mode == driver.Read {
		b.seen.mu.Lock()
		b.seen.m[g.Key] = append(b.seen.m[g.Key], rwSeen{driver.HolderID(g.Owner), g.Fence, time.Now().Add(g.TTL)})
		b.seen.mu.Unlock()
	}
	return g, err
}

// ReleaseRW forgets a released reader.
func (b staleRWInspector) ReleaseRW(ctx context.Context, g driver.Grant, m driver.RWMode) error {
	b.seen.mu.Lock()
	b.seen.m[g.Key] = slices.DeleteFunc(b.seen.m[g.Key], func(r rwSeen) bool { return r.holder == driver.HolderID(g.Owner) })
	b.seen.mu.Unlock()
	return b.Backend.ReleaseRW(ctx, g, m)
}

// InspectRW has the bug: the readers not released are reported, live or
// not.
func (b staleRWInspector) InspectRW(ctx context.Context, name string) (driver.RWInfo, error) {
	info, err := b.Backend.InspectRW(ctx, name)
	if err != nil {
		return info, err
	}
	b.seen.mu.Lock()
	defer b.seen.mu.Unlock()
	for _, r := range b.seen.m[name] {
		if !slices.ContainsFunc(info.Readers, func(l driver.RWLease) bool { return l.Holder == r.holder }) {
			info.Readers = append(info.Readers, driver.RWLease{Holder: r.holder, Fence: r.fence, TTL: time.Until(r.expires)})
		}
	}
	slices.SortFunc(info.Readers, func(x, y driver.RWLease) int { return cmp.Compare(x.Fence, y.Fence) })
	return info, nil
}
