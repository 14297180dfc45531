//go:build linux

package demo

import "syscall"

// sysProcAttr puts the command in its own process group, so that a lost
// lease can stop all of it, and kills it if fencedlock dies (a crashed
// fencedlock stops renewing, so the lock would soon protect nothing).
func sysProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
}
