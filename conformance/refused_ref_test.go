package conformance_test

import (
	"context"
	"fmt"

	"github.com/fencedlock/fencedlock/driver"
)

// bugRefusedReadAsHeld: an Acquire whose write the store refused is
// reported as "held by another" (acquire.lua reading the refused SET as a
// lock it then does not find, and answering 0): a Locker waits for a
// holder that does not exist. Its value lies outside the iota list of
// reference_test.go.
const bugRefusedReadAsHeld bug = 1 << 24

// Only WriteRefused makes the store refuse writes.
func init() { addExclusive("RefusedReadAsHeld", "WriteRefused", bugRefusedReadAsHeld) }

// RefuseWrites makes the harness a conformance.WriteRefuser: while on, an
// Acquire of a free key is refused (a held key is still reported held).
func (h *refHarness) RefuseWrites(_ context.Context, on bool) error {
	h.s.mu.Lock()
	defer h.s.mu.Unlock()
	h.s.refusing = on
	return nil
}

// refusedWrite is the error of an Acquire of the free key name while the
// store refuses writes.
func (s *refStore) refusedWrite(name string) error {
	if s.bug == bugRefusedReadAsHeld {
		return &driver.HeldError{Key: name}
	}
	return fmt.Errorf("ref: acquire %q: the store refuses writes", name)
}
