package conformance_test

import (
	"fmt"

	"github.com/fencedlock/fencedlock/internal/procfault"
)

// bugSilentWaiterGranted: a queued waiter whose requests no longer reach
// the store keeps its place for good, and a release hands it the key
// (release.lua's hand-off without its test of the entry's expiry, the
// Lua mutants 105 and 107): the waiters behind it wait for the silent
// waiter's whole lease. Its value lies outside the iota list of
// reference_test.go.
const bugSilentWaiterGranted bug = 1 << 29

func init() {
	addExclusiveVariants(variant{"SilentWaiterGranted", []string{"SilentWaiter"}, queued(bugSilentWaiterGranted)}) // only SilentWaiter cuts a queued waiter off the store
}

// dropSilent removes from l's queue every waiter whose way to the store
// has been refused for as long as its lease (the correct reference keeps a
// silent waiter's place for its TTL, as etcd keeps a queue key on the
// waiter's lease), and tells it; with bugSilentWaiterGranted they keep
// their places. s.mu must be held.
func (s *refStore) dropSilent(l *refLock) {
	if s.bug == bugSilentWaiterGranted {
		return
	}
	kept := make([]*refWaiter, 0, len(l.queue))
	for _, w := range l.queue {
		if w.faults.Silent() < w.req.TTL {
			kept = append(kept, w)
			continue
		}
		select {
		case w.refused <- fmt.Errorf("ref: acquire wait %q: its place expired: %w", w.req.Key, procfault.ErrRefused):
		default:
		}
	}
	l.queue = kept
}
