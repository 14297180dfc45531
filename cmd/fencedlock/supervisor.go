//go:build unix

package main

import (
	"bufio"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/fencedlock/fencedlock/cmd/fencedlock/internal/human"
)

// The supervisor is a hidden command of this binary that run re-executes
// between itself and COMMAND:
//
//	fencedlock ─ supervisor (own process group, child subreaper on Linux) ─ COMMAND (own process group) ─ ...
//
// It needs no network, so nothing that happens to the fencedlock process
// (SIGKILL, SIGSTOP, Ctrl-Z, OOM kill, a hung connection) stops it. It
// holds a dead man's switch on the lease's local deadline: run sends it
// the new deadline after every renewal, and the supervisor itself makes
// sure that no process of COMMAND's tree runs after the last deadline it
// was sent. With D that deadline, T the --ttl and G the --grace:
//
//	killAt = D - killLead            killLead = T/20 (room for SIGKILL to land)
//	termAt = killAt - termLead       termLead = min(G, T/4)
//
// At termAt every process of the tree gets SIGTERM, at killAt SIGKILL; a
// renewal moves D (and both instants) later unless termination has begun.
// In a healthy run D is never nearer than about T/2 (a renewal every T/3,
// D = T - T/10 after it), so termAt is not reached. The same happens at
// once, with SIGKILL at min(now+G, killAt), when run says the lease is
// lost, when the control pipe closes (fencedlock died), when the supervisor
// gets SIGTERM, and when COMMAND exits while processes it started still
// run. The supervisor exits when no process of the tree is left.
//
// "The tree" is COMMAND's process group plus every process descending
// from the supervisor: on Linux it is a child subreaper, so orphans
// (including setsid'd and double-forked daemons) are reparented to it
// rather than to init, and /proc shows them.
//
// Protocol, one line per message. On fd 3, run to supervisor:
//
//	D <ns>      the lease's local deadline, in nanoseconds of sharedNow's clock
//	T <reason>  the lease is lost: terminate now
//	K <signal>  a signal run got (SIGINT, SIGTERM, SIGHUP, SIGQUIT): send
//	            it to COMMAND's process group while COMMAND has not been
//	            reaped (its zombie keeps the group's number from reuse)
//
// On fd 4, supervisor to run:
//
//	P <pid>     COMMAND's process started with this pid (and process group);
//	            COMMAND itself is exec'd in it only after this report
//	            (see supervisor.start), so run can always kill what runs
//	X <msg>     COMMAND could not be started
//	L <reason>  COMMAND was not started: the lease's local deadline was
//	            not far enough ahead when the gate was to open (a grant
//	            whose reply came late); the gate exits without running it
//	E <status>  COMMAND exited with this wait status
//	T <reason>  the supervisor began terminating the tree on its own
const supervisorCommand = "__fencedlock_supervisor"

// stopBeforeReportEnv, set in the supervisor's environment, makes it stop
// itself (SIGSTOP) right after it started COMMAND, before it reports P:
// for tests only (TestRunSupervisorKilledBeforeReport), to kill it there.
const stopBeforeReportEnv = "FENCEDLOCK_TEST_SUPERVISOR_STOP_BEFORE_REPORT"

// supervisorMsg is a message on the control pipe; eof means the pipe
// closed or failed.
type supervisorMsg struct {
	kind byte
	arg  string
	eof  bool
}

// readMessages sends the lines of r on c, then an eof message.
func readMessages(r io.Reader, c chan<- supervisorMsg) {
	sc := bufio.NewScanner(r)
	for sc.Scan() {
		line := sc.Text()
		if line == "" {
			continue
		}
		c <- supervisorMsg{kind: line[0], arg: strings.TrimSpace(line[1:])}
	}
	c <- supervisorMsg{eof: true}
}

type supervisor struct {
	stderr             io.Writer
	status             io.Writer
	name               string // COMMAND for messages
	grace              time.Duration
	termLead, killLead time.Duration

	pid       int   // COMMAND's pid and process group, once started
	deadline  int64 // last deadline received, sharedNow's clock
	exited    bool  // COMMAND was reaped
	terming   bool  // SIGTERM sent to the tree
	termStart int64
	killSent  bool
	// stuck: only processes that refuse signals (EPERM) are left; the
	// kill is retried every stuckRetry instead of at once.
	stuck  bool
	killer *treeKiller
}

// stuckRetry is how often the supervisor and run retry a SIGKILL that
// was refused (EPERM).
const stuckRetry = 250 * time.Millisecond

// startMargin is the least time between opening the gate (starting
// COMMAND) and the lease's local deadline: the kill switch's own leads,
// so that the switch has not fired already when COMMAND starts. A grant
// whose reply came later than that (a slow network, a stopped process)
// is refused: COMMAND does not start on it.
func startMargin(termLead, killLead time.Duration) time.Duration { return termLead + killLead }

// supervise is the supervisor's main; see the comment on supervisorCommand.
func (e *env) supervise(args []string) int {
	s := &supervisor{stderr: e.stderr}
	var envs stringList
	fs := flag.NewFlagSet(supervisorCommand, flag.ContinueOnError)
	fs.SetOutput(e.stderr)
	fs.DurationVar(&s.grace, "grace", 10*time.Second, "")
	fs.DurationVar(&s.termLead, "term-lead", time.Second, "")
	fs.DurationVar(&s.killLead, "kill-lead", 100*time.Millisecond, "")
	fs.StringVar(&s.name, "name", "", "")
	fs.Var(&envs, "env", "")
	logFmt := fs.String("log-format", logText, "")
	if err := fs.Parse(args); err != nil || fs.NArg() < 2 {
		fmt.Fprintf(e.stderr, "fencedlock: %s is run by fencedlock run, not by hand\n", supervisorCommand)
		return exitUsage
	}
	// Its own messages never block (COMMAND inherits the real stderr).
	q := newLogQueue(e.stderr)
	defer q.Flush(logFlushTimeout)
	s.stderr = q
	if *logFmt == logJSON {
		s.stderr = newJSONLines(q, "run")
	}
	s.killer = newTreeKiller(os.Getpid(), s.name, s.stderr)
	defer s.killer.close()
	path, argv := fs.Arg(0), fs.Args()[1:]

	// Caught, not ignored: an ignored signal stays ignored in COMMAND.
	// SIGINT, SIGHUP and SIGQUIT reach COMMAND through run; Ctrl-Z must
	// not stop the supervisor.
	sigs := make(chan os.Signal, 16)
	signal.Notify(sigs, syscall.SIGCHLD, syscall.SIGTERM, syscall.SIGINT, syscall.SIGHUP, syscall.SIGQUIT,
		syscall.SIGTSTP, syscall.SIGTTIN, syscall.SIGTTOU, syscall.SIGPIPE)
	setSubreaper()

	ctl, status := os.NewFile(3, "control"), os.NewFile(4, "status")
	if ctl == nil || status == nil {
		fmt.Fprintf(e.stderr, "fencedlock: %s is run by fencedlock run, not by hand\n", supervisorCommand)
		return exitUsage
	}
	syscall.CloseOnExec(3)
	syscall.CloseOnExec(4)
	s.status = status
	msgs := make(chan supervisorMsg, 16)
	go readMessages(ctl, msgs)

	// The first deadline comes before COMMAND starts; no deadline (run
	// died) means COMMAND never starts.
	first := <-msgs
	if first.eof || first.kind != 'D' || !s.setDeadline(first.arg) {
		return exitFailure
	}
	if _, err := s.start(path, argv, append(os.Environ(), envs...)); err != nil {
		if errors.Is(err, errLateGrant) {
			s.report("L %v", err)
		} else {
			s.report("X %v", err)
		}
		s.reapAll()
		return exitCannotExec
	}

	return s.watch(msgs, sigs)
}

// watch runs the supervisor once COMMAND started: it acts on the
// deadlines, run's messages (msgs) and its own signals until no process
// of COMMAND's tree is left, and returns its exit code.
func (s *supervisor) watch(msgs chan supervisorMsg, sigs <-chan os.Signal) int {
	for {
		// Deadlines first: the look at /proc and the reaping can wait.
		s.act(sharedNow())
		if noChildren := s.reap(); s.exited && !s.hasTree(noChildren) {
			s.reapAll()
			if s.terming {
				left := time.Duration(s.deadline - sharedNow())
				fmt.Fprintf(s.stderr, "fencedlock run: no process of %q is left, %s the local deadline\n", s.name, beforeAfter(left))
			}
			return exitOK
		}
		s.act(sharedNow())
		timer := time.NewTimer(s.nextWait(sharedNow()))
		select {
		case m := <-msgs:
			if m.eof {
				msgs = nil
			}
			s.control(m)
		case sig := <-sigs:
			if sig == syscall.SIGTERM {
				s.terminate("the supervisor got SIGTERM", true)
			}
		case <-timer.C:
		}
		timer.Stop()
	}
}

// nextWait is how long the supervisor may sleep at now before its next
// step: the SIGTERM lead, the end of the grace, or a SIGKILL retry.
func (s *supervisor) nextWait(now int64) time.Duration {
	killAt := s.deadline - int64(s.killLead)
	wait := time.Duration(killAt - int64(s.termLead) - now)
	if s.terming {
		wait = time.Duration(min(s.termStart+int64(s.grace), killAt) - now)
	}
	if s.killSent {
		wait = 5 * time.Millisecond
		if s.stuck {
			wait = stuckRetry
		}
	}
	// Bounded, so that the clock is read again: on Linux it counts
	// time suspended, which timers do not.
	return min(max(wait, 0), 100*time.Millisecond)
}

// control acts on one message from run: its end (run exited), a new
// deadline (D), a termination (T) or a signal for COMMAND's group (K).
func (s *supervisor) control(m supervisorMsg) {
	switch {
	case m.eof:
		s.terminate("fencedlock exited while "+strconv.Quote(s.name)+" ran", true)
	case m.kind == 'D':
		s.setDeadline(m.arg)
	case m.kind == 'T':
		s.terminate(m.arg, false)
	case m.kind == 'K':
		if n, err := strconv.Atoi(m.arg); err == nil && !s.exited {
			// Not reaped yet: the group's number is still
			// COMMAND's (see the K message).
			_ = syscall.Kill(-s.pid, syscall.Signal(n))
		}
	}
}

// start starts COMMAND (path, argv, env) in a process group of its own and
// reports its pid and group (P) before COMMAND runs: a supervisor killed
// before its report must leave no process of COMMAND behind, since run,
// without the report, cannot kill the group. The child first runs this
// binary's gate (gateCommand), which waits for the supervisor's word
// (after the report) before it execs COMMAND, keeping its pid and group:
// if the supervisor dies first, the gate dies with it (Pdeathsig), or
// sees the word pipe close, and COMMAND never runs. An error of COMMAND's
// exec comes back from the gate on a pipe that the exec closes.
func (s *supervisor) start(path string, argv, env []string) (int, error) {
	self, err := os.Executable()
	if err != nil {
		return 0, fmt.Errorf("finding this binary for the gate: %w", err)
	}
	goR, goW, err := os.Pipe()
	if err != nil {
		return 0, err
	}
	defer goW.Close()
	errR, errW, err := os.Pipe()
	if err != nil {
		goR.Close()
		return 0, err
	}
	defer errR.Close()
	pid, err := syscall.ForkExec(self, append([]string{self, gateCommand, path}, argv...), &syscall.ProcAttr{
		Env:   env,
		Files: []uintptr{0, 1, 2, goR.Fd(), errW.Fd()},
		Sys:   childSysProcAttr(),
	})
	goR.Close()
	errW.Close()
	if err != nil {
		return 0, err
	}
	s.pid = pid
	if os.Getenv(stopBeforeReportEnv) != "" {
		stopSelf()
	}
	s.report("P %d", pid)
	// The gate opens only if the lease has time left: the deadline came
	// with the grant, which may have arrived late.
	if left, least := time.Duration(s.deadline-sharedNow()), startMargin(s.termLead, s.killLead); left < least {
		goW.Close() // the gate exits without running COMMAND
		return pid, fmt.Errorf("%w: the lease's local deadline was %s when %s was to start, less than the %v ahead the kill switch needs (--ttl/10 + min(--grace, --ttl/4))",
			errLateGrant, aheadOrPast(left), path, least)
	}
	if _, err := goW.Write([]byte{1}); err != nil {
		return pid, fmt.Errorf("starting %s: the gate: %w", path, err)
	}
	goW.Close()
	msg, _ := io.ReadAll(io.LimitReader(errR, 4096)) // EOF: COMMAND was exec'd (or the gate died)
	if len(msg) > 0 {
		return pid, errors.New(string(msg))
	}
	return pid, nil
}

// errLateGrant says COMMAND was not started: the lease's local deadline
// was too near (see startMargin).
var errLateGrant = errors.New("granted too late")

// gateCommand is the hidden command of this binary that the supervisor
// starts as COMMAND's process (see supervisor.start): it waits for one
// byte on fd 3, then execs COMMAND (its arguments: path, argv...) in its
// own place; an exec error goes to fd 4. Without the byte (the supervisor
// died) it exits without running anything.
const gateCommand = "__fencedlock_gate"

// gate is gateCommand's main.
func gate(args []string) int {
	word, errs := os.NewFile(3, "word"), os.NewFile(4, "exec-error")
	if len(args) < 2 || word == nil || errs == nil {
		fmt.Fprintf(os.Stderr, "fencedlock: %s is run by fencedlock run, not by hand\n", gateCommand)
		return exitUsage
	}
	var b [1]byte
	if n, _ := word.Read(b[:]); n != 1 {
		return exitFailure // the supervisor died before its report reached run
	}
	word.Close()
	syscall.CloseOnExec(4)
	err := syscall.Exec(args[0], args[1:], os.Environ())
	_, _ = fmt.Fprint(errs, err)
	return exitCannotExec
}

// act sends SIGTERM or SIGKILL to the tree if their time has come.
func (s *supervisor) act(now int64) {
	killAt := s.deadline - int64(s.killLead)
	switch {
	case !s.terming && now >= killAt-int64(s.termLead):
		s.terminate(fmt.Sprintf("no lease extension from fencedlock (stopped, killed, or its renewals failing); local deadline %s in %v",
			wallClock(s.deadline), human.Duration(time.Duration(s.deadline-now))), true)
	case s.terming && now >= min(s.termStart+int64(s.grace), killAt):
		s.kill()
	}
}

// setDeadline records a deadline message; a deadline only moves later.
func (s *supervisor) setDeadline(arg string) bool {
	d, err := strconv.ParseInt(arg, 10, 64)
	if err != nil {
		return false
	}
	s.deadline = max(s.deadline, d)
	return true
}

// report sends a message to run; run may be gone.
func (s *supervisor) report(format string, args ...any) {
	_, _ = fmt.Fprintf(s.status, format+"\n", args...)
}

// terminate sends SIGTERM to the tree once, saying why; own tells whether
// the supervisor decided it (run is told) or run asked for it.
func (s *supervisor) terminate(why string, own bool) {
	if s.terming {
		return
	}
	s.terming, s.termStart = true, sharedNow()
	killAt := min(s.termStart+int64(s.grace), s.deadline-int64(s.killLead))
	// Signals first, the messages after.
	n := s.signal(syscall.SIGTERM)
	if own {
		s.report("T %s", why)
	}
	what := strconv.Quote(s.name)
	if s.exited {
		what = "what " + what + " left running"
	}
	fmt.Fprintf(s.stderr, "fencedlock run: %s: sending SIGTERM to %d processes of %s (process group %d and its descendants), SIGKILL in %v\n",
		why, n, what, s.pid, human.Duration(time.Duration(killAt-s.termStart)))
}

// kill sends SIGKILL to the tree until none of it is left, a bounded
// number of rounds (a process forking while the tree is killed adds one),
// or until only processes that refuse it (EPERM) are left: those are
// retried every stuckRetry, not at once.
func (s *supervisor) kill() {
	first := !s.killSent
	s.killSent = true
	n := s.signal(syscall.SIGKILL)
	if first {
		left := time.Duration(s.deadline - sharedNow())
		fmt.Fprintf(s.stderr, "fencedlock run: sending SIGKILL to %q and its descendants, %s the local deadline %s; %d processes left to kill\n",
			s.name, beforeAfter(left), wallClock(s.deadline), n)
	}
	for i := 0; i < 100 && n > 0; i++ {
		var denied int
		n, denied = s.killer.signal(syscall.SIGKILL)
		if s.stuck = n > 0 && n == denied; s.stuck {
			return
		}
	}
}

// signal sends sig to COMMAND's process group, while COMMAND is not
// reaped (its zombie keeps the group's number from reuse; on Linux every
// member of the group is also a descendant, found below), and to every
// process of the tree through its handle. It returns how many processes
// of the tree it found.
func (s *supervisor) signal(sig syscall.Signal) int {
	n, _ := s.killer.signal(sig)
	if !s.exited || !subreaper {
		_ = syscall.Kill(-s.pid, sig)
	}
	return n
}

// hasTree reports whether a process of the tree may be alive, given
// whether the supervisor has no child left. As a subreaper (Linux), no
// child means no descendant; elsewhere COMMAND's group must be empty too.
func (s *supervisor) hasTree(noChildren bool) bool {
	if !noChildren {
		return true
	}
	return !subreaper && syscall.Kill(-s.pid, 0) == nil
}

// reap collects exited children without blocking and reports whether
// none is left. COMMAND's status goes to run, and its exit ends the
// tree's protection: what it left running is terminated.
func (s *supervisor) reap() (noChildren bool) {
	for i := 0; i < 10000; i++ {
		var ws syscall.WaitStatus
		pid, err := syscall.Wait4(-1, &ws, syscall.WNOHANG, nil)
		if errors.Is(err, syscall.ECHILD) {
			noChildren = true
		}
		if pid <= 0 || err != nil {
			break
		}
		if pid == s.pid && !s.exited {
			s.exited = true
			s.report("E %d", uint32(ws))
		}
	}
	if s.exited && s.hasTree(noChildren) {
		s.terminate(strconv.Quote(s.name)+" exited", false)
	}
	return noChildren
}

// reapAll waits for the zombies left, so that the supervisor exits last.
func (s *supervisor) reapAll() {
	for i := 0; i < 10000; i++ {
		var ws syscall.WaitStatus
		if pid, err := syscall.Wait4(-1, &ws, syscall.WNOHANG, nil); pid <= 0 || err != nil {
			return
		}
	}
}

// wallClock formats an instant of sharedNow's clock as wall-clock time.
func wallClock(t int64) string {
	return time.Now().Add(time.Duration(t - sharedNow())).UTC().Format(time.RFC3339Nano)
}

// stringList is a repeatable string flag.
type stringList []string

func (l *stringList) String() string     { return strings.Join(*l, ",") }
func (l *stringList) Set(v string) error { *l = append(*l, v); return nil }
