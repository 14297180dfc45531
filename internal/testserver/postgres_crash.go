package testserver

import (
	"fmt"
	"os"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// Kill crashes the server as a kill -9 of the service would: the
// postmaster is stopped (so it starts no process), every process it
// started (backends, WAL writer, checkpointer) and then the postmaster
// itself get SIGKILL. The data directory is left as the crash left it:
// what was committed is in the WAL (written at commit unless the session
// runs with synchronous_commit=off; the server's fsync=off only matters if
// the machine crashes). Restart starts it again, through crash recovery.
func (s *Postgres) Kill() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.proc == nil {
		return
	}
	pid := s.proc.cmd.Process.Pid
	_ = syscall.Kill(pid, syscall.SIGSTOP)
	kids := childrenOf(pid)
	for _, k := range kids {
		_ = syscall.Kill(k, syscall.SIGKILL)
	}
	s.proc.kill()
	s.proc = nil
	// The children are reparented; wait (bounded) until they are gone, or
	// the restarted postmaster finds their shared memory still attached.
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
		alive := false
		for _, k := range kids {
			alive = alive || running(k)
		}
		if !alive {
			return
		}
	}
}

// Restart starts a killed server again on the same port and data
// directory (crash recovery runs first), failing t if it cannot within
// 30 seconds. It does nothing if the server runs.
func (s *Postgres) Restart(t testing.TB) {
	t.Helper()
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.proc != nil {
		return
	}
	var err error
	for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline); time.Sleep(100 * time.Millisecond) {
		// start fails at once while the port or the old shared memory is
		// still held by a dying process.
		if err = s.start(s.bin, s.data, s.cred); err == nil {
			return
		}
	}
	t.Fatalf("testserver: restarting postgres: %v", err)
}

// childrenOf returns the pids whose parent is pid, from /proc.
func childrenOf(pid int) []int {
	ents, err := os.ReadDir("/proc")
	if err != nil {
		return nil
	}
	var out []int
	for _, e := range ents {
		n, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		if ppid, _ := procStat(n); ppid == pid {
			out = append(out, n)
		}
	}
	return out
}

// procStat returns the parent pid and state of pid ("" if it is gone).
func procStat(pid int) (ppid int, state string) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, ""
	}
	// pid (comm) state ppid ...: comm may hold spaces and parentheses.
	f := strings.Fields(string(b[strings.LastIndexByte(string(b), ')')+1:]))
	if len(f) < 2 {
		return 0, ""
	}
	ppid, _ = strconv.Atoi(f[1])
	return ppid, f[0]
}

// running reports whether pid exists and is not a zombie.
func running(pid int) bool {
	_, st := procStat(pid)
	return st != "" && st != "Z"
}
