package conformance_test

import (
	"context"
	"errors"
	"time"

	"github.com/fencedlock/fencedlock/backend/memory"
	"github.com/fencedlock/fencedlock/conformance"
	"github.com/fencedlock/fencedlock/driver"
	"github.com/fencedlock/fencedlock/fencing"
)

// The broken MultiLockers: backend/memory (which passes the suite) with
// one MultiLocker method broken. TestBrokenBackendsAreReported runs them.

type multiBug int

const (
	multiPartial    multiBug = iota // AcquireMulti takes the keys one by one and keeps those taken before a held one
	multiKeyLenient                 // RenewMulti renews the keys still held and reports success
)

func init() {
	addExclusiveVariants(
		variant{"MultiPartialGrant", []string{"MultiAllOrNothing"}, brokenMulti(multiPartial)},
		variant{"MultiLeaseOutlivesKey", []string{"MultiOneLease"}, brokenMulti(multiKeyLenient)},
	)
}

func brokenMulti(bug multiBug) func() conformance.Harness {
	return brokenOnMemory(func(b *memory.Backend) driver.Backend { return brokenMultiLocker{b, bug} })
}

// brokenMultiLocker is a memory Backend with one bug in its MultiLocker.
type brokenMultiLocker struct {
	*memory.Backend
	bug multiBug
}

// AcquireMulti, with multiPartial, takes each key with a single-key
// Acquire and stops at the first held one, keeping the others: the
// composite lock of the peers that acquire one by one.
func (b brokenMultiLocker) AcquireMulti(ctx context.Context, req driver.MultiRequest) (driver.MultiGrant, error) {
	if b.bug != multiPartial {
		return b.Backend.AcquireMulti(ctx, req)
	}
	g := driver.MultiGrant{Keys: req.Keys, Owner: req.Owner, TTL: req.TTL}
	for _, k := range req.Keys {
		one, err := b.Acquire(ctx, driver.AcquireRequest{Key: k, Owner: req.Owner, TTL: req.TTL})
		if err != nil {
			return driver.MultiGrant{}, err
		}
		g.Fences = append(g.Fences, one.Fence)
	}
	return g, nil
}

// RenewMulti, with multiKeyLenient, renews each key still held on its own
// and ignores the lost ones: the set's lease outlives a key.
func (b brokenMultiLocker) RenewMulti(ctx context.Context, g driver.MultiGrant, ttl time.Duration) (time.Duration, error) {
	if b.bug != multiKeyLenient {
		return b.Backend.RenewMulti(ctx, g, ttl)
	}
	for _, k := range g.Keys {
		if _, err := b.Renew(ctx, driver.Grant{Key: k, Owner: g.Owner, Fence: fencing.Token(1)}, ttl); err != nil && !errors.Is(err, driver.ErrNotHeld) {
			return 0, err
		}
	}
	return ttl, nil
}
