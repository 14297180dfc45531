package conformance_test

import "time"

// bugOvertake: a plain Acquire of a key whose holder's lease expired takes
// it although waiters are queued (acquire.lua without its test of the
// queue: the queued waiters are handed the key only when it is released).
// Its value lies outside the iota list of reference_test.go.
const bugOvertake bug = 1 << 31

func init() {
	addExclusiveVariants(variant{"Overtake", []string{"NoOvertake"}, queued(bugOvertake)}) // only NoOvertake lets a lease expire under queued waiters and Acquires
}

// settleAcquire is settle for a plain Acquire: with bugOvertake, an
// expired holder's key is freed without handing it to its queued waiters.
// s.mu must be held.
func (s *refStore) settleAcquire(key string, now time.Time) *refLock {
	l := s.locks[key]
	if s.bug != bugOvertake || l == nil || len(l.queue) == 0 {
		return s.settle(key, now)
	}
	q := l.queue
	l.queue = nil
	l = s.settle(key, now)
	l.queue = q
	return l
}

// untilWake is how long a queued waiter sleeps before it looks at l
// again: until the holder's lease ends, and with bugOvertake 300 ms
// more, as a polling waiter (wait.lua run again) may, so that the plain
// Acquire finds the expired key before the waiter does. s.mu must be held.
func (s *refStore) untilWake(l *refLock) time.Duration {
	if s.bug == bugOvertake {
		return time.Until(l.expires) + 300*time.Millisecond
	}
	return time.Until(l.expires)
}
