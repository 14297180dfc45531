package conformance

import (
	"math"
	"time"
)

// This file holds the waits that widen their bound by the scheduling
// delay measured while a property runs (env.lag, a schedlag.Monitor): a
// loaded machine must not make a correct backend fail.

// waitDone waits until done is closed or bound passes, and reports whether it
// was done.
func waitDone(done <-chan struct{}, bound time.Duration) bool {
	timer := time.NewTimer(bound)
	defer timer.Stop()
	select {
	case <-done:
		return true
	case <-timer.C:
		return false
	}
}

// schedAllowance absorbs scheduling delays (the race detector, a loaded CI
// machine) in the few checks bounded in time from above: a fixed part, and
// twice the largest scheduling lateness measured so far in the property.
func (e *env) schedAllowance() time.Duration {
	return max(500*time.Millisecond, e.ttl) + 2*e.lag.Max()
}

// timeLeft is the time left before the property's deadline (its context,
// of Config.Timeout), or the longest duration if its context has none.
// The loops and retries that could outlast it ask it first (budgetLeft,
// fits): a call cut by the deadline reads as the backend's failure.
func (e *env) timeLeft() time.Duration {
	dl, ok := e.ctx.Deadline()
	if !ok {
		return math.MaxInt64
	}
	return time.Until(dl)
}

// settledAllowance is schedAllowance once the lag monitor has measured a
// delay that may just have held up the caller (see schedlag.Monitor.Settled):
// what a check that found a call too slow compares it with before it
// fails.
func (e *env) settledAllowance() time.Duration {
	return max(500*time.Millisecond, e.ttl) + 2*e.lag.Settled(time.Second)
}

// waitDone waits until done is closed or bound passes, and reports whether
// it was closed. When the scheduling lateness measured grows during the
// wait, the bound grows by twice the increase (the goroutines that should
// have closed done were delayed as much), once for each increase.
func (e *env) waitDone(done <-chan struct{}, bound time.Duration) bool {
	deadline := time.Now().Add(bound)
	seen := e.lag.Max()
	for {
		if waitDone(done, time.Until(deadline)) {
			return true
		}
		now := e.lag.Max()
		if now <= seen {
			return false
		}
		deadline = deadline.Add(2 * (now - seen))
		seen = now
	}
}
