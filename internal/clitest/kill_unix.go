//go:build unix

package clitest

import "syscall"

// killGroup kills the process group led by pid, if there is one.
func killGroup(pid int) { _ = syscall.Kill(-pid, syscall.SIGKILL) }
