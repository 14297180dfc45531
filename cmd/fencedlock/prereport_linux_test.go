//go:build linux

package main

import (
	"os"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// procState returns the state letter of pid in /proc (0 if gone).
func procState(pid int) byte {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return 0
	}
	s := string(b)
	j := strings.LastIndexByte(s, ')')
	if j < 0 || j+3 > len(s) {
		return 0
	}
	return s[j+2]
}

// TestRunSupervisorKilledBeforeReport: a supervisor killed after it started
// COMMAND but before its P report (COMMAND's process group) reached run
// leaves run nothing to kill; COMMAND itself dies with the supervisor
// (Pdeathsig), but a background child it forked at once would run on,
// with the lock released. COMMAND must not run a single instruction before
// its process group is reported: no process of COMMAND's tree survives
// run's exit, and run exits 76, as for any supervisor killed by pid.
//
// The supervisor stops itself (SIGSTOP) right after starting COMMAND, before
// its report, when FENCEDLOCK_TEST_SUPERVISOR_STOP_BEFORE_REPORT is set;
// the test kills it there, once COMMAND either ran (its pid file) or its
// process waits to exec it (the gate, asleep).
func TestRunSupervisorKilledBeforeReport(t *testing.T) {
	_, url := redisServer(t)
	for round := range 3 {
		dir := t.TempDir()
		key := "supkill-before-report-" + strconv.Itoa(round)
		w := watchTree(t, key)
		p := bin.Start(t, []string{"FENCEDLOCK_REDIS=" + url, stopBeforeReportEnv + "=1"}, "run", "--ttl", "5s", key, "--", "/bin/sh", "-c",
			`sleep 30 & echo $$ > `+dir+`/pid; wait`)
		t.Cleanup(w.killAll)
		run := p.Cmd.Process.Pid
		sup, command, ran := 0, 0, false
		for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(time.Millisecond) {
			if time.Now().After(deadline) {
				t.Fatalf("round %d: supervisor %d (state %q), COMMAND %d (state %q) after 10s", round, sup, procState(sup), command, procState(command))
			}
			if sup == 0 {
				sup = findSupervisor(run)
				continue
			}
			if procState(sup) != 'T' {
				continue // not stopped yet
			}
			if _, err := os.Stat(dir + "/pid"); err == nil {
				ran = true
				break
			}
			if cs := descendants(sup); len(cs) == 1 {
				command = cs[0]
				if b, _ := os.ReadFile("/proc/" + strconv.Itoa(command) + "/cmdline"); strings.Contains(string(b), gateCommand) && procState(command) == 'S' {
					break // waiting to exec COMMAND
				}
			}
		}
		if err := syscall.Kill(sup, syscall.SIGKILL); err != nil {
			t.Fatal(err)
		}
		code := p.Wait(10 * time.Second)
		t.Logf("round %d: COMMAND ran before the report: %v; run exited %d; stderr: %s", round, ran, code, strings.TrimSpace(p.Stderr.String()))
		if !w.goneWithin2s() {
			t.Errorf("round %d: a process of COMMAND's tree still runs 2s after run exited %d", round, code)
		}
		if code != exitLeaseLost {
			t.Errorf("round %d: exit %d, want %d; stderr:\n%s", round, code, exitLeaseLost, p.Stderr)
		}
		if t.Failed() {
			return
		}
	}
}
