//go:build linux

package main

import (
	"errors"
	"os"
	"strconv"
	"strings"
	"sync/atomic"
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

// descendants returns the pids of the live (not zombie) processes
// descending from root, found through the parent links in /proc.
func descendants(root int) []int {
	var out []int
	for _, p := range listTree(root) {
		out = append(out, p.pid)
	}
	return out
}

// listTree returns the live (not zombie) processes descending from root,
// found through the parent links in /proc, each with its start time, which
// tells it from a later process given the same pid.
func listTree(root int) []procInfo {
	ents, err := os.ReadDir("/proc")
	if err != nil {
		return nil
	}
	children := map[int][]procInfo{}
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		st, ok := readStat(pid)
		if !ok {
			continue
		}
		children[st.ppid] = append(children[st.ppid], procInfo{pid: pid, start: st.start})
	}
	var out []procInfo
	queue := children[root]
	for len(queue) > 0 && len(out) < 1<<20 {
		p := queue[0]
		queue = queue[1:]
		out = append(out, p)
		queue = append(queue, children[p.pid]...)
	}
	return out
}

// procStat is what listTree needs of /proc/PID/stat.
type procStat struct {
	ppid  int
	start uint64 // starttime, clock ticks after boot
}

// readStat reads /proc/PID/stat; ok is false if the process is gone or a
// zombie.
func readStat(pid int) (procStat, bool) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return procStat{}, false
	}
	// pid (comm) S ppid ...: comm may contain spaces and parentheses.
	s := string(b)
	j := strings.LastIndexByte(s, ')')
	if j < 0 || j+2 >= len(s) {
		return procStat{}, false
	}
	f := strings.Fields(s[j+2:])
	// f[0] is field 3 (state), so field N is f[N-3]; starttime is 22.
	if len(f) < 20 || f[0] == "Z" || f[0] == "X" {
		return procStat{}, false
	}
	ppid, err1 := strconv.Atoi(f[1])
	start, err2 := strconv.ParseUint(f[19], 10, 64)
	if err1 != nil || err2 != nil {
		return procStat{}, false
	}
	return procStat{ppid: ppid, start: start}, true
}

// procUID returns the real user id of pid, or -1.
func procUID(pid int) int {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/status")
	if err != nil {
		return -1
	}
	for _, line := range strings.Split(string(b), "\n") {
		if rest, ok := strings.CutPrefix(line, "Uid:"); ok {
			if f := strings.Fields(rest); len(f) > 0 {
				if uid, err := strconv.Atoi(f[0]); err == nil {
					return uid
				}
			}
		}
	}
	return -1
}

// System call numbers of pidfd_open (Linux 5.3) and pidfd_send_signal
// (5.1): the same on every architecture Go supports.
const (
	sysPidfdOpen       = 434
	sysPidfdSendSignal = 424
)

// pidfdMissing is set once pidfd_open failed with ENOSYS (a kernel older
// than 5.3, or a seccomp filter that refuses it): signals go by pid.
var pidfdMissing atomic.Bool

// openProc returns a handle on the process p: a pidfd, which a later pid
// reuse cannot redirect. The pidfd is opened by pid and then checked: if
// the process at that pid has another start time, p is gone (and the pid
// reused) and errProcGone is returned. Without pidfds (ENOSYS, or too many
// open files) the handle signals by pid, after the same check.
func openProc(p procInfo) (procHandle, error) {
	h := procHandle{info: p, fd: -1}
	if !pidfdMissing.Load() {
		fd, _, errno := syscall.Syscall(sysPidfdOpen, uintptr(p.pid), 0, 0)
		switch errno {
		case 0:
			h.fd = int(fd)
			syscall.CloseOnExec(h.fd)
		case syscall.ESRCH:
			return h, errProcGone
		case syscall.ENOSYS:
			pidfdMissing.Store(true)
		}
	}
	if st, ok := readStat(p.pid); !ok || st.start != p.start {
		h.close()
		return h, errProcGone
	}
	return h, nil
}

// signal sends sig to the process; errProcGone if it has ended.
func (h *procHandle) signal(sig syscall.Signal) error {
	var err error
	if h.fd >= 0 {
		_, _, errno := syscall.Syscall6(sysPidfdSendSignal, uintptr(h.fd), uintptr(sig), 0, 0, 0, 0)
		if errno != 0 {
			err = errno
		}
	} else {
		// By pid: the start time is checked right before (a pid reused
		// in between is the race pidfds close).
		if st, ok := readStat(h.info.pid); !ok || st.start != h.info.start {
			return errProcGone
		}
		err = syscall.Kill(h.info.pid, sig)
	}
	if errors.Is(err, syscall.ESRCH) {
		return errProcGone
	}
	return err
}

func (h *procHandle) close() {
	if h.fd >= 0 {
		_ = syscall.Close(h.fd)
		h.fd = -1
	}
}

// stopSelf stops the process (SIGSTOP) before the calling thread goes on:
// the signal is sent to that thread, which stops the whole process before
// it returns (a kill of the process may be taken by another thread while
// this one runs on).
func stopSelf() { _ = syscall.Tgkill(os.Getpid(), syscall.Gettid(), syscall.SIGSTOP) }
