package conformance_test

import "time"

// bugLeaveDropsOthers: a waiter that leaves the queue (its AcquireWait's
// context ended) removes every waiter's entry, not only its own (found by
// mutation testing of backend/redis's release.lua: its clean-up without
// the owner comparison). The waiters it removed queue again at their next
// refresh (every third of their TTL, as backend/redis's waiters run
// wait.lua), behind a waiter that queued meanwhile.
// Its value lies outside the iota list of reference_test.go.
const bugLeaveDropsOthers bug = 1 << 25

func init() {
	brokenVariants = append(brokenVariants, variant{"LeaveDropsOthers", []string{"WaitAcquirer"}, queued(bugLeaveDropsOthers)})
	exclusive["LeaveDropsOthers"] = true // CancelledAcquire's waiters leave no one behind them
}

// dropQueue removes every waiter from l's queue (bugLeaveDropsOthers).
// s.mu must be held.
func (s *refStore) dropQueue(l *refLock) {
	for _, q := range l.queue {
		q.dropped = true
	}
	l.queue = nil
}

// requeue puts w back at the end of l's queue if another waiter's leaving
// dropped it and its refresh is due (bugLeaveDropsOthers), and returns how
// long until its next refresh. s.mu must be held.
func (s *refStore) requeue(key string, l *refLock, w *refWaiter) time.Duration {
	if w.dropped {
		w.dropped = false
		l.queue = append(l.queue, w)
		s.settle(key, time.Now())
	}
	return w.req.TTL / 3
}
