package conformance_test

import (
	"context"
	"time"
)

// bugNoExpiryHeld: a lock record without an expiry (a record the backend
// never writes) is read as held by another owner instead of refused with
// ErrPermanent (acquire.lua without its test of the lock key's PTTL): a
// Locker waiting for it waits forever. Its value lies outside the iota
// list of reference_test.go.
const bugNoExpiryHeld bug = 1 << 30

func init() {
	addExclusive("NoExpiryHeld", "ForeignValue", bugNoExpiryHeld) // only ForeignValue writes a record without an expiry
}

// CorruptNoExpiry makes the harness a conformance.ExpiryCorrupter: key's
// lock is held by an owner no client is and never expires. The correct
// reference backend treats it as it does any value it never writes.
func (h *refHarness) CorruptNoExpiry(_ context.Context, key string) error {
	s, key := h.s, h.s.mangle(key)
	s.mu.Lock()
	defer s.mu.Unlock()
	l := s.settle(key, time.Now())
	l.owner, l.corrupt, l.noExpiry = "", true, true
	return nil
}
