package conformance_test

import (
	"context"
	"time"

	"github.com/fencedlock/fencedlock/conformance"
	"github.com/fencedlock/fencedlock/fencing"
)

// bugCleanupLeaks: the clean-up Release of Grant{Key, Owner} (an Acquire
// whose outcome is unknown) records the owner, to refuse its Acquire if it
// arrives later, in a record that never expires (release.lua without the
// PEXPIRE of its set of abandoned owners, the Lua mutants 91 and 93): one
// more record for good with every clean-up. Its value lies outside the
// iota list of reference_test.go.
const bugCleanupLeaks bug = 1 << 28

func init() {
	addExclusive("CleanupLeaks", "Residue", bugCleanupLeaks) // only Residue lists the store's records
}

// noteCleanup records, with bugCleanupLeaks, the clean-up Release of an
// owner of key (a Grant of Fence 0) for good. s.mu must be held.
func (s *refStore) noteCleanup(key string, fence fencing.Token) {
	if s.bug != bugCleanupLeaks || fence != 0 {
		return
	}
	if s.leaked == nil {
		s.leaked = make(map[string]bool)
	}
	s.leaked[key] = true
}

// Records makes the harness a conformance.RecordLister: key's lock while
// it is held (it expires), and with bugCleanupLeaks the record of its
// abandoned owners (it never does).
func (h *refHarness) Records(_ context.Context, key string) ([]conformance.Record, error) {
	s, key := h.s, h.s.mangle(key)
	s.mu.Lock()
	defer s.mu.Unlock()
	var recs []conformance.Record
	if l := s.settle(key, time.Now()); l.owner != "" {
		recs = append(recs, conformance.Record{Name: "lock", Expires: true})
	}
	if s.leaked[key] {
		recs = append(recs, conformance.Record{Name: "abandoned", Expires: false})
	}
	return recs, nil
}
