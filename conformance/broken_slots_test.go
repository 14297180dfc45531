package conformance_test

import (
	"context"

	"github.com/fencedlock/fencedlock/backend/memory"
	"github.com/fencedlock/fencedlock/conformance"
	"github.com/fencedlock/fencedlock/driver"
)

// The broken SlotAcquirers: backend/memory (which passes the suite, see
// its TestConformance) with one bug in AcquireSlot, which takes its slot
// with memory's own Acquire. TestBrokenBackendsAreReported runs them with
// the reference backend's variants.

type slotBug int

const (
	slotNotFirst  slotBug = iota // takes the last free key, not the first
	slotTakesMore                // an owner's request again takes another free key
)

func init() {
	addExclusiveVariants(
		variant{"SemaphoreSlotNotFirst", []string{"SemaphoreSlotAcquire"}, brokenSlotHarness(slotNotFirst)},
		variant{"SemaphoreSlotTakesMore", []string{"SemaphoreSlotAcquire"}, brokenSlotHarness(slotTakesMore)},
	)
}

func brokenSlotHarness(bug slotBug) func() conformance.Harness {
	return brokenOnMemory(func(b *memory.Backend) driver.Backend { return brokenSlotAcquirer{b, bug} })
}

// brokenSlotAcquirer is a memory Backend whose AcquireSlot tries the keys
// one Acquire at a time, with one bug.
type brokenSlotAcquirer struct {
	*memory.Backend
	bug slotBug
}

func (b brokenSlotAcquirer) AcquireSlot(ctx context.Context, req driver.AcquireRequest, keys []string) (int, driver.Grant, error) {
	var last error
	for n := range keys {
		i := n
		if b.bug == slotNotFirst {
			i = len(keys) - 1 - n
		}
		req.Key = keys[i]
		g, err := b.Acquire(ctx, req) // slotTakesMore: no look for the owner's own key first
		if err == nil {
			return i, g, nil
		}
		last = err
	}
	return 0, driver.Grant{}, last
}
