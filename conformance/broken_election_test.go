package conformance_test

import (
	"context"

	"github.com/fencedlock/fencedlock/backend/memory"
	"github.com/fencedlock/fencedlock/conformance"
	"github.com/fencedlock/fencedlock/driver"
	"github.com/fencedlock/fencedlock/fencing"
)

// The broken Electors: backend/memory (which passes the suite, see its
// TestConformance) with one Elector method broken. TestBrokenBackendsAreReported
// runs them with the reference backend's variants.

type electionBug int

const (
	proclaimAnyTerm  electionBug = iota // Proclaim stores for whoever holds the key
	fenceWraps                          // Leader reports term numbers in two bits
	observeReordered                    // WatchLeader swaps each pair of terms
)

func init() {
	addExclusiveVariants(
		variant{"ElectionProclaimAnyTerm", []string{"ElectionProclaim"}, brokenElection(proclaimAnyTerm)},
		variant{"ElectionFenceWraps", []string{"ElectionFences"}, brokenElection(fenceWraps)},
		variant{"ElectionObserveReordered", []string{"ElectionObserve"}, brokenElection(observeReordered)},
	)
}

func brokenElection(bug electionBug) func() conformance.Harness {
	return brokenOnMemory(func(b *memory.Backend) driver.Backend { return brokenElector{b, bug} })
}

// brokenElector is a memory Backend with one bug in its Elector.
type brokenElector struct {
	*memory.Backend
	bug electionBug
}

// Proclaim, with proclaimAnyTerm, checks nothing of the caller's term: a
// late Proclaim of an ended term relabels the current one.
func (b brokenElector) Proclaim(ctx context.Context, key string, fence fencing.Token, holder string, value []byte) error {
	if b.bug == proclaimAnyTerm {
		if info, err := b.Inspect(ctx, key); err == nil && info.Held {
			fence, holder = info.Fence, info.Holder
		}
	}
	return b.Backend.Proclaim(ctx, key, fence, holder, value)
}

// Leader, with fenceWraps, keeps the term number in two bits.
func (b brokenElector) Leader(ctx context.Context, key string) (driver.LeaderInfo, error) {
	info, err := b.Backend.Leader(ctx, key)
	if b.bug == fenceWraps && info.Held {
		info.Fence = (info.Fence-1)%4 + 1
	}
	return info, err
}

// WatchLeader, with observeReordered, holds each term back until the next
// one and delivers the newer first.
func (b brokenElector) WatchLeader(ctx context.Context, key string) (<-chan driver.LeaderEvent, func(), error) {
	in, stop, err := b.Backend.WatchLeader(ctx, key)
	if err != nil || b.bug != observeReordered {
		return in, stop, err
	}
	out := make(chan driver.LeaderEvent, 64)
	go func() {
		defer close(out)
		var held *driver.LeaderEvent
		for ev := range in {
			switch {
			case !ev.Held:
				out <- ev
			case held == nil:
				held = &ev
			default:
				out <- ev
				out <- *held
				held = nil
			}
		}
		if held != nil {
			out <- *held
		}
	}()
	return out, stop, nil
}
