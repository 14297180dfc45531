//go:build unix && !linux

package demo

import "syscall"

// sysProcAttr puts the command in its own process group, so that a lost
// lease can stop all of it.
func sysProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true}
}
