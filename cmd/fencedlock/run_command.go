//go:build unix

// Running COMMAND under its supervisor while the lease is held, and the end of its tree.

package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/fencedlock/fencedlock"
	"github.com/fencedlock/fencedlock/cmd/fencedlock/internal/human"
)

// runCommand runs the command under a supervisor (see supervisorCommand)
// while lease is held, with vars (see commandVars) in its environment, and
// returns the exit code; or, if the supervisor
// did not start COMMAND because the lease's deadline was too near (see
// startMargin), the reason, with the lease still to release.
func (e *env) runCommand(lease *fencedlock.Lease, f *runFlags, vars, argv []string, sigs <-chan os.Signal, p *progress) (int, error) {
	path, err := exec.LookPath(argv[0])
	if err == nil {
		var self string
		if self, err = e.self(); err == nil {
			return e.superviseCommand(lease, f, vars, self, path, argv, sigs, p)
		}
	}
	e.release(lease, p)
	fmt.Fprintf(e.stderr, "fencedlock run: cannot start %q: %v\n", argv[0], err)
	if errors.Is(err, exec.ErrNotFound) || errors.Is(err, os.ErrNotExist) {
		return exitNotFound, nil
	}
	return exitCannotExec, nil
}

// superviseCommand starts the supervisor, which starts the command; feeds
// it the lease's deadlines, forwards signals and reports the end. The
// error is the supervisor's refusal to start COMMAND on a lease granted
// too late (the lease is then not released yet).
func (e *env) superviseCommand(lease *fencedlock.Lease, f *runFlags, vars []string, self, path string, argv []string, sigs <-chan os.Signal, p *progress) (int, error) {
	sup, ctlW, stR, sent, err := e.startSupervisor(lease, f, vars, self, path, argv)
	if err != nil {
		return e.startError(lease, p, argv, err), nil
	}
	defer ctlW.Close()
	defer stR.Close()
	rep := supervisorReport{status: make(chan supervisorMsg, 16)}
	go readMessages(stR, rep.status)
	exited := make(chan error, 1)
	go func() { exited <- sup.Wait() }()
	// send writes a message to the supervisor; a stopped supervisor whose
	// pipe is full does not block run (a lost D is an extension missed,
	// which errs on the safe side).
	send := func(format string, args ...any) {
		_ = ctlW.SetWriteDeadline(time.Now().Add(100 * time.Millisecond))
		_, _ = fmt.Fprintf(ctlW, format+"\n", args...)
	}

	poll := time.NewTicker(min(f.ttl/20, 50*time.Millisecond))
	defer poll.Stop()
	leaseEnd := lease.Done()
	for {
		select {
		case sig := <-sigs:
			// The supervisor sends it to COMMAND's group once COMMAND
			// runs, and not after COMMAND was reaped (the group's number
			// may be reused then).
			p.printf("forwarding %v to %q", sig, argv[0])
			send("K %d", int(sig.(syscall.Signal)))
		case <-poll.C:
			if d := lease.Deadline(); d.After(sent) && lease.Err() == nil {
				sent = d
				send("D %d", sharedDeadline(d))
			}
		case <-leaseEnd:
			leaseEnd = nil
			if errors.Is(lease.Err(), fencedlock.ErrLeaseLost) {
				send("T lease lost") // the signal first, the message after
				fmt.Fprintf(e.stderr, "fencedlock run: %s\n", errText(lease.Err()))
			}
		case m := <-rep.status:
			rep.note(m)
		case <-exited:
			// The supervisor exits when no process of the tree is left;
			// read what it said last.
			for rep.status != nil {
				rep.note(<-rep.status)
			}
			st, _ := sup.ProcessState.Sys().(syscall.WaitStatus)
			if rep.late != "" && st.Exited() {
				return 0, errors.New(strings.TrimPrefix(rep.late, errLateGrant.Error()+": "))
			}
			if st.Signaled() || (rep.startErr == "" && rep.ws == nil) || (st.Exited() && st.ExitStatus() != exitOK && st.ExitStatus() != exitCannotExec) {
				// Killed (or it failed): what is left of the tree is not
				// under it any more.
				return e.afterSupervisorDied(lease, f, sup.ProcessState, argv, rep.pgid, rep.ws, sigs, p), nil
			}
			return e.commandEnded(lease, f, argv, rep.ws, rep.startErr, rep.selfTerm, p), nil
		}
	}
}

// startSupervisor starts the supervisor of argv (at path) with the
// lease's first deadline waiting in its control pipe, so that COMMAND
// starts only once the supervisor has it. It returns the supervisor, the
// write end of its control pipe and the read end of its status pipe (for
// the caller to close), and the deadline sent.
func (e *env) startSupervisor(lease *fencedlock.Lease, f *runFlags, vars []string, self, path string, argv []string) (sup *exec.Cmd, ctlW, stR *os.File, sent time.Time, err error) {
	termLead, killLead := switchLeads(f)
	ctlR, ctlW, err := os.Pipe()
	if err != nil {
		return nil, nil, nil, sent, err
	}
	stR, stW, err := os.Pipe()
	if err != nil {
		ctlR.Close()
		ctlW.Close()
		return nil, nil, nil, sent, err
	}
	// The child's ends are closed once it started (or failed to); the
	// parent's ends on any failure.
	defer ctlR.Close()
	defer stW.Close()
	fail := func(err error) (*exec.Cmd, *os.File, *os.File, time.Time, error) {
		ctlW.Close()
		stR.Close()
		return nil, nil, nil, sent, err
	}
	args := []string{supervisorCommand,
		"-grace", f.grace.String(), "-term-lead", termLead.String(), "-kill-lead", killLead.String(), "-name", argv[0]}
	for _, v := range vars {
		args = append(args, "-env", v)
	}
	args = append(args, "--", path)
	if f.logFmt == logJSON {
		// The supervisor writes its messages as JSON records too.
		args = append([]string{supervisorCommand, "-log-format", logJSON}, args[1:]...)
	}
	sup = exec.Command(self, append(args, argv...)...)
	sup.Stdin, sup.Stdout, sup.Stderr = e.stdin, e.stdout, e.commandErr()
	sup.Env = childEnv(os.Environ())
	sup.ExtraFiles = []*os.File{ctlR, stW}
	// Its own process group: a Ctrl-Z or a signal to fencedlock's group
	// does not reach it.
	sup.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	sent = lease.Deadline()
	if _, err := fmt.Fprintf(ctlW, "D %d\n", sharedDeadline(sent)); err != nil {
		return fail(err)
	}
	// A child subreaper (Linux): if the supervisor is killed, what is
	// left of COMMAND's tree comes under fencedlock, which kills it before
	// it releases the lock (see afterSupervisorDied).
	setSubreaper()
	if err := sup.Start(); err != nil {
		return fail(err)
	}
	return sup, ctlW, stR, sent, nil
}

// supervisorReport is what the supervisor reported on its status pipe.
type supervisorReport struct {
	status   chan supervisorMsg // nil once its messages ended
	pgid     int
	ws       *syscall.WaitStatus
	startErr string
	late     string // the supervisor did not open the gate: granted too late
	selfTerm string // why the supervisor terminated the tree on its own
}

// note records what the supervisor reports: COMMAND's process group
// once it started (P), that COMMAND could not start (X) or was not
// started on a lease granted too late (L), its exit status (E), why it
// terminated the tree itself (T), and the end of its messages. P is
// recorded also when it is read after the supervisor exited: a
// supervisor killed right after it started COMMAND leaves the group
// to be killed here, and the lock must not be released while it runs.
func (r *supervisorReport) note(m supervisorMsg) {
	switch {
	case m.eof:
		r.status = nil
	case m.kind == 'P':
		r.pgid, _ = strconv.Atoi(m.arg)
	case m.kind == 'X':
		r.startErr = m.arg
	case m.kind == 'L':
		r.late = m.arg
	case m.kind == 'E':
		n, _ := strconv.ParseUint(m.arg, 10, 32)
		w := syscall.WaitStatus(n)
		r.ws = &w
	case m.kind == 'T':
		r.selfTerm = m.arg
	}
}

// afterSupervisorDied kills what is left of COMMAND's tree after its
// supervisor died (killed by pid, the OOM killer, or by COMMAND itself),
// and releases the lock only once no process of the tree is left. On
// Linux fencedlock is a child subreaper, so the orphans of the tree (a
// setsid grandchild, a double-forked daemon) come under it and /proc shows
// them; COMMAND's process group is killed too while COMMAND is not reaped.
// Where it cannot prove the tree gone (a process refuses SIGKILL: EPERM,
// another user's; or survives the kills), the lock is kept, and renewed
// by the lease's watchdog, while SIGKILL is retried every stuckRetry: it
// is released once the tree is gone. Where the tree cannot be seen
// (systems without /proc) the lock is not released: it expires on its
// own. It returns run's exit code, 76 in every case.
func (e *env) afterSupervisorDied(lease *fencedlock.Lease, f *runFlags, ps *os.ProcessState, argv []string, pgid int, ws *syscall.WaitStatus, sigs <-chan os.Signal, p *progress) int {
	key := lease.Key()
	if pgid != 0 && ws == nil {
		// The supervisor did not reap COMMAND: its zombie (ours now)
		// keeps the group's number from reuse.
		_ = syscall.Kill(-pgid, syscall.SIGKILL)
	}
	k := newTreeKiller(os.Getpid(), argv[0], e.stderr)
	defer k.close()
	n, denied := k.signal(syscall.SIGKILL)
	what := fmt.Sprintf("its tree: SIGKILL sent to process group %d and %d processes", pgid, n)
	if pgid == 0 {
		// The gate execs COMMAND only after the P report (see
		// supervisor.start): COMMAND never ran.
		what = fmt.Sprintf("it before it started it (%q did not run); SIGKILL sent to %d processes left", argv[0], n)
	}
	fmt.Fprintf(e.stderr, "fencedlock run: the supervisor of %q died (%v); killing what is left of %s\n", argv[0], ps, what)
	if !subreaper && pgid != 0 {
		fmt.Fprintf(e.stderr, "fencedlock run: descendants of %q that left its process group cannot be found here; %q is not released: it expires on its own within %v; exiting %d\n",
			argv[0], key, human.Duration(time.Until(lease.Deadline())+lease.TTL()/10), exitLeaseLost)
		return exitLeaseLost
	}
	told := false
	for round := 0; ; round++ {
		reapChildren()
		if n == 0 {
			e.release(lease, p)
			fmt.Fprintf(e.stderr, "fencedlock run: no process of %q's tree is left; released %q; exiting %d\n", argv[0], key, exitLeaseLost)
			return exitLeaseLost
		}
		wait := 5 * time.Millisecond
		if n == denied || round >= 200 {
			wait = stuckRetry
			if !told {
				told = true
				fmt.Fprintf(e.stderr, "fencedlock run: %d processes of %q's tree still run (%d refuse SIGKILL); %q is kept, and renewed, until none is left; SIGKILL retried every %v\n",
					n, argv[0], denied, key, stuckRetry)
			}
		}
		select {
		case <-lease.Done():
			fmt.Fprintf(e.stderr, "fencedlock run: %s, while %d processes of %q's tree may still run; exiting %d\n", errText(lease.Err()), n, argv[0], exitLeaseLost)
			return exitLeaseLost
		case sig := <-sigs:
			fmt.Fprintf(e.stderr, "fencedlock run: interrupted by %v while %d processes of %q's tree may still run: %q is not released, it expires on its own within %v; exiting %d\n",
				sig, n, argv[0], key, human.Duration(time.Until(lease.Deadline())+lease.TTL()/10), exitLeaseLost)
			return exitLeaseLost
		case <-time.After(wait):
		}
		n, denied = k.signal(syscall.SIGKILL)
	}
}

// reapChildren collects the exited children of fencedlock (the orphans of
// a dead supervisor's tree) without blocking. Only called once the
// supervisor itself was reaped: fencedlock has no other child.
func reapChildren() {
	for i := 0; i < 10000; i++ {
		var ws syscall.WaitStatus
		if pid, err := syscall.Wait4(-1, &ws, syscall.WNOHANG, nil); pid <= 0 || err != nil {
			return
		}
	}
}

// commandEnded releases the lock once the whole tree is gone and returns
// run's exit code.
func (e *env) commandEnded(lease *fencedlock.Lease, f *runFlags, argv []string, ws *syscall.WaitStatus, startErr, selfTerm string, p *progress) int {
	key := lease.Key()
	if ws == nil {
		e.release(lease, p)
		if startErr == "" {
			startErr = "the supervisor ended without starting it"
		}
		fmt.Fprintf(e.stderr, "fencedlock run: cannot start %q: %s\n", argv[0], startErr)
		return exitCannotExec
	}
	if selfTerm != "" && lease.Err() == nil {
		// The supervisor acted before the local deadline; see whether the
		// lease is lost there (a late renewal may still save it).
		select {
		case <-lease.Done():
			if errors.Is(lease.Err(), fencedlock.ErrLeaseLost) {
				fmt.Fprintf(e.stderr, "fencedlock run: %s\n", errText(lease.Err()))
			}
		case <-time.After(time.Until(lease.Deadline()) + f.ttl/10):
		}
	}
	if selfTerm != "" || errors.Is(lease.Err(), fencedlock.ErrLeaseLost) {
		fmt.Fprintf(e.stderr, "fencedlock run: %q ended (%s) as the lease on %q was lost or about to be; no process of it is left; exiting %d\n",
			argv[0], describeExit(*ws), key, exitLeaseLost)
		_ = lease.Release(context.Background()) // deletes nothing unless the loss was only local
		return exitLeaseLost
	}
	e.release(lease, p)
	p.printf("%q exited (%s); released %q", argv[0], describeExit(*ws), key)
	return exitCode(*ws)
}

func (e *env) startError(lease *fencedlock.Lease, p *progress, argv []string, err error) int {
	e.release(lease, p)
	fmt.Fprintf(e.stderr, "fencedlock run: cannot start %q: %v\n", argv[0], err)
	return exitCannotExec
}

// sharedDeadline converts d to sharedNow's clock. The clock is read first,
// so the result errs early.
func sharedDeadline(d time.Time) int64 {
	now := sharedNow()
	return now + int64(time.Until(d))
}

// childEnv is env without the backend's configuration, which holds
// credentials COMMAND must not see.
func childEnv(env []string) []string {
	var out []string
	for _, kv := range env {
		name, _, _ := strings.Cut(kv, "=")
		if name == "FENCEDLOCK_REDIS" || name == "FENCEDLOCK_ETCD" || name == "FENCEDLOCK_POSTGRES" || strings.HasPrefix(name, "FENCEDLOCK_ETCD_") {
			continue
		}
		out = append(out, kv)
	}
	return out
}
