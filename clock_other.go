//go:build !linux

package fencedlock

import "time"

// bootStart anchors bootClock.
var bootStart = time.Now()

// bootClock is Go's monotonic clock where no clock counting suspended time
// is read, so no suspend is ever seen: whether Go's monotonic clock
// advances while the system sleeps depends on the platform (on macOS it
// does not; see the package documentation).
func bootClock() int64 { return int64(time.Since(bootStart)) }

// monoClock is bootClock: the suspended time is always zero.
func monoClock() int64 { return bootClock() }
