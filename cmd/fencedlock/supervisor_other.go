//go:build unix && !linux

package main

import (
	"os"
	"syscall"
	"time"
)

// subreaper tells whether setSubreaper works here.
const subreaper = false

// setSubreaper does nothing: child subreapers are Linux only, so an
// orphan of COMMAND's tree that left its process group escapes.
func setSubreaper() {}

// sharedNow reads a clock every process of the machine shares: the wall
// clock (a step of the system clock moves the deadline with it).
func sharedNow() int64 { return time.Now().UnixNano() }

// descendants finds nothing without /proc: the supervisor signals
// COMMAND's process group only.
func descendants(root int) []int { return nil }

// stopSelf stops the process (SIGSTOP); another thread may run on
// briefly.
func stopSelf() { _ = syscall.Kill(os.Getpid(), syscall.SIGSTOP) }
