//go:build unix && !linux

package main

import (
	"errors"
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

// listTree finds nothing without /proc.
func listTree(root int) []procInfo { return nil }

// procUID is unknown without /proc.
func procUID(pid int) int { return -1 }

// openProc returns a handle that signals by pid: there are no pidfds here.
// (listTree finds nothing, so it is not called.)
func openProc(p procInfo) (procHandle, error) { return procHandle{info: p, fd: -1}, nil }

func (h *procHandle) signal(sig syscall.Signal) error {
	err := syscall.Kill(h.info.pid, sig)
	if errors.Is(err, syscall.ESRCH) {
		return errProcGone
	}
	return err
}

func (h *procHandle) close() {}

// stopSelf stops the process (SIGSTOP); another thread may run on
// briefly.
func stopSelf() { _ = syscall.Kill(os.Getpid(), syscall.SIGSTOP) }
