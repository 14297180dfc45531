//go:build linux

package main

import (
	"os"
	"strconv"
	"strings"
	"syscall"
	"unsafe"
)

const (
	prSetChildSubreaper = 36 // PR_SET_CHILD_SUBREAPER
	clockBoottime       = 7  // CLOCK_BOOTTIME
)

// subreaper tells whether setSubreaper works here.
const subreaper = true

// setSubreaper makes the calling process a child subreaper: orphaned
// descendants are reparented to it instead of to init.
func setSubreaper() {
	_, _, _ = syscall.RawSyscall(syscall.SYS_PRCTL, prSetChildSubreaper, 1, 0)
}

// sharedNow reads a clock every process of the machine shares, in
// nanoseconds: CLOCK_BOOTTIME, which is monotonic and also counts time the
// machine spent suspended (as the server's expiry does).
func sharedNow() int64 {
	var ts syscall.Timespec
	if _, _, errno := syscall.RawSyscall(syscall.SYS_CLOCK_GETTIME, clockBoottime, uintptr(unsafe.Pointer(&ts)), 0); errno != 0 {
		panic("clock_gettime(CLOCK_BOOTTIME): " + errno.Error())
	}
	return ts.Nano()
}

// descendants returns the live (not zombie) processes descending from
// root, found through the parent links in /proc.
func descendants(root int) []int {
	ents, err := os.ReadDir("/proc")
	if err != nil {
		return nil
	}
	children := map[int][]int{}
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		b, err := os.ReadFile("/proc/" + e.Name() + "/stat")
		if err != nil {
			continue
		}
		// pid (comm) S ppid ...: comm may contain spaces and parentheses.
		s := string(b)
		j := strings.LastIndexByte(s, ')')
		if j < 0 || j+2 >= len(s) {
			continue
		}
		f := strings.Fields(s[j+2:])
		if len(f) < 2 || f[0] == "Z" || f[0] == "X" {
			continue
		}
		ppid, err := strconv.Atoi(f[1])
		if err != nil {
			continue
		}
		children[ppid] = append(children[ppid], pid)
	}
	var out []int
	queue := children[root]
	for len(queue) > 0 && len(out) < 1<<20 {
		p := queue[0]
		queue = queue[1:]
		out = append(out, p)
		queue = append(queue, children[p]...)
	}
	return out
}

// stopSelf stops the process (SIGSTOP) before the calling thread goes on:
// the signal is sent to that thread, which stops the whole process before
// it returns (a kill of the process may be taken by another thread while
// this one runs on).
func stopSelf() { _ = syscall.Tgkill(os.Getpid(), syscall.Gettid(), syscall.SIGSTOP) }
