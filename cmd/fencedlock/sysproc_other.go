//go:build unix && !linux

package main

import "syscall"

// childSysProcAttr puts the command in its own process group, so that a lost
// lease can stop all of it.
func childSysProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true}
}
