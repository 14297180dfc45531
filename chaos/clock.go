package chaos

import "golang.org/x/sys/unix"

// Now reads CLOCK_MONOTONIC in nanoseconds. On Linux that clock is one
// system-wide clock: every process on the machine (in the same time
// namespace) reads the same counter, so timestamps taken in different
// worker processes and in the parent are directly comparable. Go's own
// monotonic readings are relative to each process's start and are not.
func Now() int64 {
	var ts unix.Timespec
	if err := unix.ClockGettime(unix.CLOCK_MONOTONIC, &ts); err != nil {
		panic("chaos: clock_gettime(CLOCK_MONOTONIC): " + err.Error())
	}
	return ts.Nano()
}
