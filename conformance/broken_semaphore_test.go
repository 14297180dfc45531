package conformance_test

import (
	"context"
	"strings"
	"time"

	"github.com/fencedlock/fencedlock/backend/memory"
	"github.com/fencedlock/fencedlock/conformance"
	"github.com/fencedlock/fencedlock/driver"
)

// The broken slot locks: backend/memory (which passes the suite, see its
// TestConformance) with one bug on the keys of semaphore slots only (see
// semaphore.SlotKey), so that the lock properties, which use other keys,
// pass and only the semaphore properties can catch it.
// TestBrokenBackendsAreReported runs them with the reference backend's
// variants.

type semaphoreBug int

const (
	permitsUnlimited   semaphoreBug = iota // every owner takes a slot of its own: limit+1 valid permits
	slotFenceWraps                         // a slot's fences kept in two bits: the fence goes back
	permitNeverExpires                     // a slot's lock kept for MaxTTL, reported as asked: a crashed permit never returns
)

func init() {
	addExclusiveVariants(
		// Every semaphore property sees unlimited permits: a second
		// permit at once, fences restarting on each fresh lock, a permit
		// granted within a crashed holder's TTL.
		variant{"SemaphorePermitsUnlimited", []string{"SemaphoreLimit", "SemaphoreSlotFences", "SemaphoreCrashedPermit"}, brokenSemaphore(permitsUnlimited)},
		// SemaphoreLimit checks each slot's fences too.
		variant{"SemaphoreSlotFenceWraps", []string{"SemaphoreSlotFences", "SemaphoreLimit"}, brokenSemaphore(slotFenceWraps)},
		variant{"SemaphorePermitNeverExpires", []string{"SemaphoreCrashedPermit"}, brokenSemaphore(permitNeverExpires)},
	)
}

func brokenSemaphore(bug semaphoreBug) func() conformance.Harness {
	return brokenOnMemory(func(b *memory.Backend) driver.Backend { return brokenSlots{b, bug} })
}

// brokenSlots is a memory Backend with one bug on the locks of semaphore
// slots.
type brokenSlots struct {
	*memory.Backend
	bug semaphoreBug
}

func slotKey(key string) bool { return strings.Contains(key, "/permit/") }

// store returns the key the store keeps g's lock under: with
// permitsUnlimited, a slot's lock of its own for each owner.
func (b brokenSlots) store(key, owner string) string {
	if b.bug == permitsUnlimited && slotKey(key) {
		return key + "\x00" + owner
	}
	return key
}

func (b brokenSlots) Acquire(ctx context.Context, req driver.AcquireRequest) (driver.Grant, error) {
	key, asked := req.Key, req.TTL
	req.Key = b.store(key, req.Owner)
	if b.bug == permitNeverExpires && slotKey(key) {
		req.TTL = driver.MaxTTL
	}
	g, err := b.Backend.Acquire(ctx, req)
	if err != nil {
		return g, err
	}
	g.Key = key
	if slotKey(key) {
		g.TTL = asked
		if b.bug == slotFenceWraps {
			g.Fence = (g.Fence-1)%4 + 1
		}
	}
	return g, nil
}

func (b brokenSlots) Renew(ctx context.Context, g driver.Grant, ttl time.Duration) (time.Duration, error) {
	g.Key = b.store(g.Key, g.Owner)
	if b.bug == permitNeverExpires && slotKey(g.Key) {
		_, err := b.Backend.Renew(ctx, g, driver.MaxTTL)
		return ttl, err
	}
	return b.Backend.Renew(ctx, g, ttl)
}

// SlotsInOneStep reports false: the Semaphore tries the slots one Acquire
// at a time, through the broken Acquire (memory's AcquireSlot would take
// them correctly).
func (b brokenSlots) SlotsInOneStep([]string) bool { return false }

func (b brokenSlots) Release(ctx context.Context, g driver.Grant) error {
	g.Key = b.store(g.Key, g.Owner)
	return b.Backend.Release(ctx, g)
}
