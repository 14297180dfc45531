package conformance_test

import "time"

// bugWaiterSleepsOwnRefresh: a queued waiter behind a holder looks at the
// key again only every refresh interval of its own lease (its
// RenewInterval, TTL/3 if zero), not when the holder's lease ends
// (wait.lua before 389af5c told a new waiter nothing of the holder's
// PTTL): a release is handed over at once, but an expiry, which is not
// announced, leaves the key to nobody for up to a third of the waiter's
// lease. Its value lies outside the iota list of reference_test.go.
const bugWaiterSleepsOwnRefresh bug = 1 << 19

func init() {
	addExclusiveVariants(variant{"WaiterSleepsOwnRefresh", []string{"WaiterAfterCrash"}, queued(bugWaiterSleepsOwnRefresh)}) // only WaiterAfterCrash bounds a wait behind an expiring holder by the holder's TTL
}

// waiterWake is how long the queued waiter w sleeps before it looks at l
// again: untilWake, or with bugWaiterSleepsOwnRefresh, while another owner
// holds the key, the refresh interval of w's own lease. s.mu must be held.
func (s *refStore) waiterWake(l *refLock, w *refWaiter) time.Duration {
	if s.bug != bugWaiterSleepsOwnRefresh || l.owner == "" {
		return s.untilWake(l)
	}
	if w.req.RenewInterval > 0 {
		return w.req.RenewInterval
	}
	return w.req.TTL / 3
}
