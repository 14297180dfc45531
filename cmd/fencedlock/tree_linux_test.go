//go:build linux

package main

import (
	"bytes"
	"context"
	"errors"
	"flag"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/fencedlock/fencedlock"
	redisb "github.com/fencedlock/fencedlock/backend/redis"
	"github.com/fencedlock/fencedlock/internal/clitest"
)

// treeRuns is the number of runs of each case of TestRunTreeNeverOutlivesLease.
// CI runs 3; the figures in the report come from -tree-runs=20.
var treeRuns = flag.Int("tree-runs", 3, "runs of each case of TestRunTreeNeverOutlivesLease")

// treeTTL is the --ttl of those runs. The supervisor's SIGKILL is due
// TTL/10 before the local deadline. On the 2-core test machine its latest
// wake-up was ~160ms after its timer with one test suite running, and
// 294ms with two `make test` runs side by side (load average ~8): CI runs
// with 4s (a 400ms lead). -tree-ttl=1s and 2s were measured too.
var treeTTL = flag.Duration("tree-ttl", 4*time.Second, "--ttl of the runs of TestRunTreeNeverOutlivesLease")

// treeWatch follows, by scanning /proc, every process whose environment
// holds marker (FENCEDLOCK_KEY=key: the variable run gives COMMAND, which
// every process of COMMAND's tree inherits), and records when one was last
// seen alive. A zombie counts as dead, and so does a dying process (see
// procAlive).
type treeWatch struct {
	marker []byte
	stop   chan struct{}
	done   chan struct{}

	mu        sync.Mutex
	examined  map[int]bool
	tracked   map[int]bool      // pid -> alive at the last look
	died      map[int]time.Time // pid -> first look that found it dead
	lastAlive time.Time         // when a tracked process was last seen alive
	deadAt    time.Time         // first look at which none was alive, after lastAlive
}

// treeKey is fmt.Sprintf(format, args...) made unique to this test
// process. watchTree finds a tree by its key in the environment, and kills
// what it finds when the test ends: two test binaries running at once (two
// make test on one machine) with the same key watched, and killed, each
// other's trees (TestRunTreeNeverOutlivesLease then saw "5 processes of
// the first tree still alive" long after the supervisor had killed its own).
func treeKey(format string, args ...any) string {
	return fmt.Sprintf(format, args...) + "-" + strconv.Itoa(os.Getpid())
}

func watchTree(t *testing.T, key string) *treeWatch {
	w := &treeWatch{
		marker:   []byte("FENCEDLOCK_KEY=" + key + "\x00"),
		stop:     make(chan struct{}),
		done:     make(chan struct{}),
		examined: map[int]bool{},
		tracked:  map[int]bool{},
		died:     map[int]time.Time{},
	}
	go w.loop()
	return w
}

// killAll stops the watch and kills the processes it tracked: one that
// outlived its lease (the defect the test looks for) must not outlive the
// test, nor hold the output pipes of the run that started it.
func (w *treeWatch) killAll() {
	w.close()
	w.mu.Lock()
	defer w.mu.Unlock()
	for pid, alive := range w.tracked {
		if alive {
			_ = syscall.Kill(pid, syscall.SIGKILL)
		}
	}
}

func (w *treeWatch) close() {
	select {
	case <-w.stop:
	default:
		close(w.stop)
	}
	<-w.done
}

func (w *treeWatch) loop() {
	defer close(w.done)
	for i := 0; i < 1_000_000; i++ { // bounded: ~2ms a scan, the tests end long before
		select {
		case <-w.stop:
			return
		default:
		}
		w.scan()
		time.Sleep(time.Millisecond)
	}
}

func (w *treeWatch) scan() {
	ents, err := os.ReadDir("/proc")
	if err != nil {
		return
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || w.examined[pid] {
			continue
		}
		w.examined[pid] = true
		env, err := os.ReadFile("/proc/" + e.Name() + "/environ")
		if err == nil && bytes.Contains(append([]byte{0}, env...), append([]byte{0}, w.marker...)) {
			w.tracked[pid] = true
		}
	}
	alive := 0
	for pid, was := range w.tracked {
		if !was {
			continue
		}
		// The time is taken before the look: a look that finds the
		// process alive proves it alive then, not when it returns. Taken
		// after, a look preempted for 11ms on a loaded CI machine dated a
		// process killed before the release after the second holder's
		// attempt began (TestKillSwitchSupervisorKilled, CI of 3ecfba6).
		// The looks are made one after another by one goroutine, so each
		// one's time is later than the last.
		if before := time.Now(); procAlive(pid) {
			alive++
			w.lastAlive = before
		} else {
			w.tracked[pid] = false
			w.died[pid] = time.Now()
		}
	}
	if alive == 0 && len(w.tracked) > 0 && !w.lastAlive.IsZero() && !w.deadAt.After(w.lastAlive) {
		w.deadAt = time.Now()
	}
}

// procAlive reports whether pid may still run code of its own: it exists,
// is not a zombie, and is not dying. A process is dying once SIGKILL is
// pending for it (SigPnd or ShdPnd in /proc/PID/status) or it has entered
// exit (PF_EXITING in the flags of /proc/PID/stat): the kernel checks for
// pending signals before every return to user space, so from then on it
// never executes another instruction of its program, even if a loaded
// machine takes a while to schedule its exit.
func procAlive(pid int) bool {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return false
	}
	s := string(b)
	j := strings.LastIndexByte(s, ')')
	if j < 0 || j+3 > len(s) {
		return false
	}
	st := s[j+2]
	if st == 'Z' || st == 'X' {
		return false
	}
	// Fields after the command: state ppid pgrp session tty_nr tpgid flags.
	if f := strings.Fields(s[j+2:]); len(f) > 6 {
		if flags, err := strconv.ParseUint(f[6], 10, 64); err == nil && flags&pfExiting != 0 {
			return false
		}
	}
	status, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/status")
	if err != nil {
		return false
	}
	for _, line := range strings.Split(string(status), "\n") {
		name, val, ok := strings.Cut(line, ":")
		if !ok || (name != "SigPnd" && name != "ShdPnd") {
			continue
		}
		if mask, err := strconv.ParseUint(strings.TrimSpace(val), 16, 64); err == nil && mask&sigkillBit != 0 {
			return false
		}
	}
	return true
}

const (
	pfExiting  = 0x4                              // PF_EXITING, include/linux/sched.h
	sigkillBit = 1 << (uint(syscall.SIGKILL) - 1) // signal n is bit n-1 of SigPnd/ShdPnd
)

// goneWithin2s polls the watch for up to 2s and reports whether no
// process of the tree is alive any more.
func (w *treeWatch) goneWithin2s() bool {
	for range 200 {
		if _, alive, _, _ := w.state(); alive == 0 {
			return true
		}
		time.Sleep(10 * time.Millisecond)
	}
	return false
}

// state returns the number of processes seen, the number alive now, when
// one was last seen alive and when none was first seen alive after that.
func (w *treeWatch) state() (seen, alive int, lastAlive, deadAt time.Time) {
	w.mu.Lock()
	defer w.mu.Unlock()
	for _, a := range w.tracked {
		if a {
			alive++
		}
	}
	return len(w.tracked), alive, w.lastAlive, w.deadAt
}

// treeScripts writes the three levels of the command's tree into dir: l1
// starts l2 in the background; l2 starts l3 through setsid (a new session
// and process group) and, like l3, ignores SIGTERM. Each writes its pid to
// dir/pN. With exit, l1 exits 0 once l3 runs instead of waiting.
func treeScripts(t *testing.T, dir string, exit bool) string {
	t.Helper()
	l1end := `wait`
	if exit {
		l1end = `while [ ! -s ` + dir + `/p3 ]; do sleep 0.01; done; exit 0`
	}
	files := map[string]string{
		"l3.sh": `echo $$ > ` + dir + `/p3; trap '' TERM; while :; do sleep 0.05; done`,
		"l2.sh": `echo $$ > ` + dir + `/p2; setsid /bin/sh ` + dir + `/l3.sh & trap '' TERM; while :; do sleep 0.05; done`,
		"l1.sh": `echo $$ > ` + dir + `/p1; /bin/sh ` + dir + `/l2.sh & ` + l1end,
	}
	for name, body := range files {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(body+"\n"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return filepath.Join(dir, "l1.sh")
}

var deadlineRE = regexp.MustCompile(`local deadline ([0-9T:.Z-]+)`)

// killRE matches the supervisor's report of its SIGKILL and how long
// before (or after) the local deadline it was sent.
var killRE = regexp.MustCompile(`sending SIGKILL to .*, ([0-9.]+[µnm]?s) (before|after) the local deadline`)

// killLead returns how long before the local deadline the supervisor
// reported sending SIGKILL (negative: after it), if it did.
func killLead(stderr string) (time.Duration, bool) {
	m := killRE.FindStringSubmatch(stderr)
	if m == nil {
		return 0, false
	}
	d, err := time.ParseDuration(m[1])
	if err != nil {
		return 0, false
	}
	if m[2] == "after" {
		d = -d
	}
	return d, true
}

// TestRunTreeNeverOutlivesLease is the invariant of run: no process of
// COMMAND's tree runs after the lease's local deadline, whatever happens
// to the fencedlock process. For each way fencedlock can stop renewing
// (SIGKILL, SIGSTOP, SIGTSTP to its process group as a terminal's Ctrl-Z
// sends it) and for a COMMAND that exits leaving a background process,
// COMMAND is a tree of three levels with a setsid grandchild that ignores
// SIGTERM; another process polls the key with TryAcquire, and /proc is
// scanned for the first tree's processes. When the poller acquires, no
// process of the first tree may be alive; when fencedlock stopped
// renewing, the tree must have died before the local deadline that run
// reported.
func TestRunTreeNeverOutlivesLease(t *testing.T) {
	srv, url := redisServer(t)
	client := srv.Client(t, nil)
	b, err := redisb.New(client, redisb.Options{})
	if err != nil {
		t.Fatal(err)
	}
	ttl, grace := *treeTTL, 300*time.Millisecond
	poller := mustLocker(t, b, fencedlock.Options{TTL: 5 * time.Second})
	t.Cleanup(func() { _ = poller.Close() })

	for _, mode := range []string{"SIGKILL", "SIGSTOP", "SIGTSTP", "normal exit"} {
		t.Run(mode, func(t *testing.T) {
			var worstAfter, worstDeath, bestDeath time.Duration
			bestDeath = time.Hour
			worstDeath = -time.Hour
			lag := clitest.StartLag(t)
			for i, rerun := 0, 0; i < *treeRuns; i++ {
				lag.StartWindow()
				after, death, judged := runTreeOnce(t, url, poller, mode, i, ttl, grace, lag)
				if !judged {
					if rerun++; rerun > maxTreeReruns {
						t.Fatalf("%d runs in which the test process was scheduled later than SIGKILL's lead of %v: the machine is too loaded to judge", rerun, ttl/10)
					}
					i--
					continue
				}
				worstAfter = max(worstAfter, after)
				worstDeath = max(worstDeath, death)
				bestDeath = min(bestDeath, death)
				if t.Failed() {
					return
				}
			}
			if mode == "normal exit" {
				t.Logf("%s, %d runs: the last process of the tree died between %v and %v after COMMAND exited; largest overlap with the next holder %v",
					mode, *treeRuns, bestDeath.Round(time.Millisecond), worstDeath.Round(time.Millisecond), worstAfter)
				return
			}
			t.Logf("%s, %d runs: largest time a process of the first tree was alive after the lease's local deadline: %v; the last process died between %v and %v relative to the deadline (negative: before it)",
				mode, *treeRuns, worstAfter, bestDeath.Round(time.Millisecond), worstDeath.Round(time.Millisecond))
		})
	}
}

// maxTreeReruns bounds the runs of a case of TestRunTreeNeverOutlivesLease
// that a loaded machine left unjudged (see runTreeOnce).
const maxTreeReruns = 3

// runTreeOnce runs one case of TestRunTreeNeverOutlivesLease. It returns
// how long the tree was seen alive after the local deadline (normal exit:
// after the poller acquired), and when its last process was first seen
// dead relative to the deadline (normal exit: relative to COMMAND's exit).
// judged is false, and nothing failed, when a process outlived the
// deadline while lag (its window started by the caller) measured the test
// process scheduled at least SIGKILL's lead of TTL/10 late: docs/cli-run.md
// ("Scheduling") states that limit, which such a run tests, not run (two
// `make test` runs and two more suites at load average 15: the supervisor
// woke 652ms late, 252ms past a 4s lease's deadline).
func runTreeOnce(t *testing.T, url string, poller *fencedlock.Locker, mode string, i int, ttl, grace time.Duration, lag *clitest.Lag) (after, death time.Duration, judged bool) {
	t.Helper()
	key := treeKey("tree-%s-%d", strings.ReplaceAll(mode, " ", "-"), i)
	dir := t.TempDir()
	script := treeScripts(t, dir, mode == "normal exit")
	w := watchTree(t, key)
	a := bin.StartWith(t, []string{"FENCEDLOCK_REDIS=" + url}, &syscall.SysProcAttr{Setpgid: true},
		"run", "--ttl", ttl.String(), "--grace", grace.String(), key, "--", "/bin/sh", script)
	t.Cleanup(w.killAll) // before the cleanup of StartWith, which waits for the output pipes
	clitest.WaitFile(t, dir+"/p3", 10*time.Second)
	treeUp := time.Now() // normal exit: l1 exits within 10ms of this
	for j := 0; mode != "normal exit"; j++ {
		seen, alive, _, _ := w.state()
		if alive >= 3 {
			break
		}
		if j == 1000 {
			t.Fatalf("run %d: %d processes of the tree alive (%d seen) 1s after it started, want 3 levels at least", i, alive, seen)
		}
		time.Sleep(time.Millisecond)
	}

	var stopAt time.Time
	if mode != "normal exit" {
		// Let some renewals happen, then stop fencedlock at a random point
		// of the renewal cycle.
		time.Sleep(ttl + rand.N(ttl/3))
		stopAt = time.Now()
		var err error
		switch mode {
		case "SIGKILL":
			err = syscall.Kill(a.Cmd.Process.Pid, syscall.SIGKILL)
		case "SIGSTOP":
			err = syscall.Kill(a.Cmd.Process.Pid, syscall.SIGSTOP)
		case "SIGTSTP":
			err = syscall.Kill(-a.Cmd.Process.Pid, syscall.SIGTSTP)
		}
		if err != nil {
			t.Fatal(err)
		}
	}

	// The poller, in this process: TryAcquire every 5ms, 10s at most.
	var acqStart time.Time
	var lease *fencedlock.Lease
	for j := 0; j < 2000; j++ {
		start := time.Now()
		l, err := poller.TryAcquire(context.Background(), key)
		if err == nil {
			acqStart, lease = start, l
			break
		}
		if !errors.Is(err, fencedlock.ErrNotAcquired) {
			t.Fatalf("poller: %v", err)
		}
		time.Sleep(5 * time.Millisecond)
	}
	if lease == nil {
		t.Fatalf("run %d: the poller did not acquire %q within 10s; stderr of the first run:\n%s", i, key, a.Stderr)
	}
	defer func() { _ = lease.Release(context.Background()) }()
	// Let the watcher see whatever of the first tree still runs.
	time.Sleep(200 * time.Millisecond)
	w.close()
	seen, alive, lastAlive, deadAt := w.state()
	late := lag.Window() // this process's scheduling delay during the run
	// The time the machine had to act: SIGKILL's lead of TTL/10, or less
	// if the supervisor, woken late, sent it with less left before the
	// deadline (at load average 15 it sent SIGKILL 105ms before it and
	// the tree's last process was seen 122ms after: the kill took 227ms to
	// land while this process was 204ms late).
	lead := ttl / 10
	if left, ok := killLead(a.Stderr.String()); ok && left > 0 {
		lead = min(lead, left)
	}
	starved := func(what string) bool {
		if late < lead {
			return false
		}
		t.Logf("run %d (%s): %s while this process was scheduled up to %v late, not less than the %v the machine had to kill the tree: the limit of docs/cli-run.md (Scheduling), not judged; running again; stderr:\n%s",
			i, mode, what, late.Round(time.Millisecond), lead, a.Stderr)
		return true
	}

	if alive > 0 || lastAlive.After(acqStart) {
		if starved(fmt.Sprintf("%d processes of the first tree alive when the poller acquired", alive)) {
			return 0, 0, false
		}
		t.Errorf("run %d (%s): %d processes of the first tree still alive when the poller acquired %q (seen alive %v after its attempt began; this process scheduled at most %v late); stderr of the first run:\n%s",
			i, mode, alive, key, lastAlive.Sub(acqStart), late.Round(time.Millisecond), a.Stderr)
		return 0, 0, true
	}
	if mode == "normal exit" {
		code := a.Wait(10 * time.Second)
		if code == exitLeaseLost && starved("its renewals starved (exit 76)") {
			return 0, 0, false
		}
		if code != 0 {
			t.Errorf("run %d: exit %d, want COMMAND's 0; stderr:\n%s", i, code, a.Stderr)
		}
		p1, err := strconv.Atoi(strings.TrimSpace(clitest.WaitFile(t, dir+"/p1", time.Second)))
		if err != nil {
			t.Fatal(err)
		}
		w.mu.Lock()
		p1died := w.died[p1]
		w.mu.Unlock()
		if p1died.IsZero() {
			p1died = treeUp
		}
		return max(0, lastAlive.Sub(acqStart)), deadAt.Sub(p1died), true
	}

	m := deadlineRE.FindStringSubmatch(a.Stderr.String())
	if m == nil {
		t.Errorf("run %d (%s): the first run did not report its local deadline; stderr:\n%s", i, mode, a.Stderr)
		return 0, 0, true
	}
	deadline, err := time.Parse(time.RFC3339Nano, m[1])
	if err != nil {
		t.Fatalf("deadline %q: %v", m[1], err)
	}
	// An independent bound: the last renewal was sent before fencedlock
	// stopped, so its local deadline is before stopAt+TTL.
	if deadline.After(stopAt.Add(ttl)) {
		t.Errorf("run %d: reported local deadline %v is %v after fencedlock stopped, more than the TTL %v", i, deadline, deadline.Sub(stopAt), ttl)
	}
	after, judged = lastAlive.Sub(deadline), true
	if after > 0 && starved(fmt.Sprintf("a process of the first tree was seen alive %v after the lease's local deadline", after)) {
		judged = false
	} else if after > 0 {
		t.Errorf("run %d (%s): a process of the first tree was seen alive %v after the lease's local deadline (this process scheduled at most %v late); stderr:\n%s", i, mode, after, late.Round(time.Millisecond), a.Stderr)
	}
	if seen < 3 {
		t.Errorf("run %d: only %d processes of the tree seen", i, seen)
	}
	if mode != "SIGKILL" {
		// Resumed, fencedlock reports the loss and exits 76 without
		// touching the poller's lease.
		_ = syscall.Kill(a.Cmd.Process.Pid, syscall.SIGCONT)
		if code := a.Wait(10 * time.Second); code != exitLeaseLost {
			t.Errorf("run %d: resumed fencedlock exited %d, want %d; stderr:\n%s", i, code, exitLeaseLost, a.Stderr)
		}
		if err := lease.Err(); err != nil {
			t.Errorf("run %d: the poller's lease ended when the first run resumed: %v", i, err)
		}
	}
	return max(0, after), deadAt.Sub(deadline), judged
}

// TestRunSupervisorKilled: if the supervisor itself is killed, fencedlock
// kills COMMAND's process group, says so, and exits 76.
func TestRunSupervisorKilled(t *testing.T) {
	_, url := redisServer(t)
	dir := t.TempDir()
	key := treeKey("supkill")
	w := watchTree(t, key)
	p := bin.Start(t, []string{"FENCEDLOCK_REDIS=" + url}, "run", "--ttl", "5s", key, "--", "/bin/sh", "-c",
		`echo $$ > `+dir+`/pid; sleep 30 & wait`)
	t.Cleanup(w.killAll)
	pid, err := strconv.Atoi(strings.TrimSpace(clitest.WaitFile(t, dir+"/pid", 10*time.Second)))
	if err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		t.Fatal(err)
	}
	f := strings.Fields(string(b[strings.LastIndexByte(string(b), ')')+2:]))
	sup, _ := strconv.Atoi(f[1])
	if sup == p.Cmd.Process.Pid || sup <= 1 {
		t.Fatalf("COMMAND's parent is %d, not a supervisor between it and fencedlock %d", sup, p.Cmd.Process.Pid)
	}
	if err := syscall.Kill(sup, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	code := p.Wait(10 * time.Second)
	if code != exitLeaseLost || !strings.Contains(p.Stderr.String(), "supervisor of \"/bin/sh\" died") {
		t.Errorf("exit %d, want %d; stderr:\n%s", code, exitLeaseLost, p.Stderr)
	}
	for i := 0; i < 200; i++ {
		if _, alive, _, _ := w.state(); alive == 0 {
			return
		}
		time.Sleep(10 * time.Millisecond)
	}
	_, alive, _, _ := w.state()
	t.Errorf("%d processes of COMMAND's process group alive 2s after the supervisor was killed", alive)
}

// TestRunSupervisorKilledUnread: the supervisor reports COMMAND's process
// group (P) right after starting it; if it is killed before run has read
// that report, run finds the supervisor gone and the report in the pipe
// at once. It must still kill the group and exit 76, never say COMMAND did
// not start and release the lock while COMMAND's tree runs. run is
// stopped (SIGSTOP) from the moment its supervisor exists until the
// supervisor was killed after COMMAND started, so both arrive together;
// which one run's loop takes first is random, hence several rounds.
// Before: `cannot start "/bin/sh": the supervisor ended without starting
// it`, the lock released with COMMAND's tree still running (6 of 6 test
// runs; CI's loaded run of TestRunSupervisorKilled hit the same race once).
func TestRunSupervisorKilledUnread(t *testing.T) {
	_, url := redisServer(t)
	for round := range 6 {
		dir := t.TempDir()
		key := treeKey("supkill-unread-%d", round)
		w := watchTree(t, key)
		p := bin.Start(t, []string{"FENCEDLOCK_REDIS=" + url}, "run", "--ttl", "5s", key, "--", "/bin/sh", "-c",
			`echo $$ > `+dir+`/pid; sleep 30 & wait`)
		t.Cleanup(w.killAll)
		run := p.Cmd.Process.Pid
		// Stop run as soon as its supervisor (its child) runs.
		sup := 0
		for deadline := time.Now().Add(10 * time.Second); sup == 0; {
			if time.Now().After(deadline) {
				t.Fatal("no supervisor appeared within 10s")
			}
			// The supervisor once it runs its own code (a child caught
			// before its exec, stopped with run's vfork, never started
			// COMMAND).
			sup = findSupervisor(run)
			if sup == 0 {
				time.Sleep(200 * time.Microsecond)
			}
		}
		if err := syscall.Kill(run, syscall.SIGSTOP); err != nil {
			t.Fatal(err)
		}
		clitest.WaitFile(t, dir+"/pid", 10*time.Second)
		if err := syscall.Kill(sup, syscall.SIGKILL); err != nil {
			t.Fatal(err)
		}
		for procAlive(sup) {
			time.Sleep(time.Millisecond)
		}
		if err := syscall.Kill(run, syscall.SIGCONT); err != nil {
			t.Fatal(err)
		}
		code := p.Wait(10 * time.Second)
		if code != exitLeaseLost || !strings.Contains(p.Stderr.String(), "supervisor of \"/bin/sh\" died") {
			t.Fatalf("round %d: exit %d, want %d; stderr:\n%s", round, code, exitLeaseLost, p.Stderr)
		}
		if !w.goneWithin2s() {
			t.Fatalf("round %d: COMMAND's process group still alive 2s after run exited", round)
		}
	}
}

// TestProcAlive: a sleeping process may still run; a killed one that is
// not reaped yet (a zombie) may not, nor one that is gone.
func TestProcAlive(t *testing.T) {
	cmd := exec.Command("sleep", "30")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	pid := cmd.Process.Pid
	if !procAlive(pid) {
		t.Fatalf("sleeping process %d reported dead", pid)
	}
	if err := cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	for i := 0; procAlive(pid); i++ {
		if i > 1000 {
			t.Fatalf("process %d still alive 5s after SIGKILL", pid)
		}
		time.Sleep(5 * time.Millisecond)
	}
	if _, err := os.Stat("/proc/" + strconv.Itoa(pid)); err != nil {
		t.Fatalf("the killed process was reaped already: %v (want a zombie)", err)
	}
	_ = cmd.Wait()
	if procAlive(pid) {
		t.Fatalf("reaped process %d reported alive", pid)
	}
}

// findSupervisor returns the pid of run's supervisor once it runs its own
// code (its command line names supervisorCommand), or 0. Only run's
// children count: a child the supervisor forked shows the supervisor's
// command line until its exec (the gate, soon COMMAND), and must not be
// taken for it.
func findSupervisor(run int) int {
	for _, c := range descendants(run) {
		b, _ := os.ReadFile("/proc/" + strconv.Itoa(c) + "/stat")
		s := string(b)
		j := strings.LastIndexByte(s, ')')
		if j < 0 || j+2 >= len(s) {
			continue
		}
		if f := strings.Fields(s[j+2:]); len(f) < 2 || f[1] != strconv.Itoa(run) {
			continue
		}
		if b, _ := os.ReadFile("/proc/" + strconv.Itoa(c) + "/cmdline"); strings.Contains(string(b), supervisorCommand) {
			return c
		}
	}
	return 0
}

// TestKillLead: killLead reads the supervisor's SIGKILL line as run
// prints it, before and after the deadline.
func TestKillLead(t *testing.T) {
	for line, want := range map[string]time.Duration{
		`fencedlock run: sending SIGKILL to "/bin/sh" and its descendants, 105ms before the local deadline 2026-12-07T13:31:25.215046576Z; 2 processes left to kill`: 105 * time.Millisecond,
		`fencedlock run: sending SIGKILL to "/bin/sh" and its descendants, 252ms after the local deadline 2026-12-07T12:48:24.011542363Z; 2 processes left to kill`:  -252 * time.Millisecond,
		`fencedlock run: sending SIGKILL to "/bin/sh" and its descendants, 1.5s before the local deadline 2026-12-07T12:48:24Z`:                                      1500 * time.Millisecond,
	} {
		if got, ok := killLead("fencedlock: acquired \"k\"\n" + line + "\n"); !ok || got != want {
			t.Errorf("killLead(%q) = %v, %v; want %v", line, got, ok, want)
		}
	}
	if _, ok := killLead("fencedlock run: no process of \"/bin/sh\" is left"); ok {
		t.Error("killLead found a SIGKILL in a line without one")
	}
}
