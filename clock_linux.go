//go:build linux

package fencedlock

import (
	"syscall"
	"unsafe"
)

const (
	clockMonotonic = 1 // CLOCK_MONOTONIC
	clockBoottime  = 7 // CLOCK_BOOTTIME
)

// bootClock reads CLOCK_BOOTTIME in ns: monotonic, and counting the time
// the system spent suspended, which CLOCK_MONOTONIC (Go's monotonic clock,
// and its timers') does not.
func bootClock() int64 { return kernelClock(clockBoottime) }

// monoClock reads CLOCK_MONOTONIC in ns.
func monoClock() int64 { return kernelClock(clockMonotonic) }

// kernelClock reads clock id with clock_gettime, which cannot block, hence
// RawSyscall (Go's runtime reads only CLOCK_MONOTONIC and CLOCK_REALTIME
// through the vDSO).
func kernelClock(id uintptr) int64 {
	var ts syscall.Timespec
	if _, _, errno := syscall.RawSyscall(syscall.SYS_CLOCK_GETTIME, id, uintptr(unsafe.Pointer(&ts)), 0); errno != 0 {
		panic("fencedlock: clock_gettime: " + errno.Error())
	}
	return ts.Nano()
}
