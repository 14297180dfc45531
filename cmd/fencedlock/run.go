//go:build unix

package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"os/signal"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/fencedlock/fencedlock"
	"github.com/fencedlock/fencedlock/driver"
)

const runHeader = `Usage: fencedlock run [flags] KEY -- COMMAND [ARGS...]

Acquire the lock KEY, run COMMAND while holding it (renewing the lease),
release it when COMMAND and every process it started have ended, and exit
with COMMAND's exit code. Flags come before KEY; the -- is required.
COMMAND runs in its own process group, with FENCEDLOCK_REDIS, _ETCD and
_ETCD_* removed from its environment (they may hold credentials) and:

  FENCEDLOCK_KEY     the lock name
  FENCEDLOCK_FENCE   the fencing token: pass it to the resource you write, which
                     must reject a token older than one it has already accepted
  FENCEDLOCK_HOLDER  the holder id (not secret; the owner token is never exposed)

The guarantee: no process of COMMAND's tree runs after the lease's local
deadline (--ttl/10 before the server can give KEY to another holder),
whatever happens to fencedlock (SIGKILL, OOM, SIGSTOP, Ctrl-Z, a hung
network). A supervisor (this binary, re-executed; a child subreaper on
Linux) holds a dead man's switch: without a renewal it sends the tree
SIGTERM min(--grace, --ttl/4) + --ttl/10 before the deadline and SIGKILL
--ttl/10 before it; a lost lease or a dead fencedlock start the same at
once (exit 76). Processes COMMAND leaves behind get SIGTERM, then SIGKILL
after --grace, before the lock is released. SIGINT, SIGTERM, SIGHUP and
SIGQUIT are forwarded to COMMAND's process group.

COMMAND starts only on a lease with --ttl/10 + min(--grace, --ttl/4) left
(a later grant is released: --try exits 75). A killed supervisor's tree is
killed by fencedlock before the release; a process that refuses signals
keeps the lock renewed while it runs. Messages never delay a signal; Linux
signals go through pidfds. What still escapes: docs/cli-run.md.
A resource that must never see a stale write should check FENCEDLOCK_FENCE.
`

const runFooter = backendPointer + `
Examples:
  # A nightly job that must run on at most one machine at a time (crontab):
  0 3 * * *  FENCEDLOCK_REDIS=redis://lock.internal:6379 fencedlock run -q --try nightly-report -- /usr/local/bin/report.sh

  # A migration: wait up to 10 minutes for the other deployer, then give up (exit 75):
  fencedlock run --redis rediss://deploy:secret@redis.internal:6380 --wait 10m --ttl 30s migrate -- ./migrate up

  # On etcd with TLS; the command sees its fencing token:
  fencedlock run --etcd https://10.0.0.1:2379 --tls-ca ca.pem --tls-cert me.pem --tls-key me-key.pem \
      orders -- sh -c 'echo "fence $FENCEDLOCK_FENCE"; ./process-orders --fence "$FENCEDLOCK_FENCE"'

` + runExitCodes

type runFlags struct {
	backend backendConfig
	ttl     time.Duration
	wait    time.Duration
	try     bool
	grace   time.Duration
	quiet   bool
	logFmt  string
}

func (e *env) run(ctx context.Context, args []string) int {
	var f runFlags
	fs := e.newFlagSet("run", runHeader, runFooter)
	addBackendFlags(fs, &f.backend)
	fs.DurationVar(&f.ttl, "ttl", fencedlock.DefaultTTL, "lease `duration` on the server; renewed every TTL/3 while COMMAND runs. A crashed fencedlock keeps the lock this long")
	fs.DurationVar(&f.wait, "wait", 0, "give up (exit 75) if the lock is not acquired within this `duration`; 0 waits as long as it takes")
	fs.BoolVar(&f.try, "try", false, "make one attempt; exit 75 at once if the lock is held")
	fs.DurationVar(&f.grace, "grace", 10*time.Second, "`time` between SIGTERM and SIGKILL to COMMAND's tree; bounded by the lease's local deadline (see above)")
	fs.BoolVar(&f.quiet, "q", false, "quiet: no progress messages on standard error (errors are still printed)")
	logFormatFlag(fs, &f.logFmt)
	if code, stop := e.parse(fs, args); stop {
		return code
	}
	rest := fs.Args()
	if len(rest) == 0 {
		return e.usageError("run", "missing KEY and COMMAND")
	}
	key, rest := rest[0], rest[1:]
	switch {
	case len(rest) == 0:
		return e.usageError("run", "missing COMMAND after KEY %q", key)
	case rest[0] == "--":
		rest = rest[1:]
	case len(rest[0]) > 1 && rest[0][0] == '-':
		return e.usageError("run", "%q after KEY: flags must come before KEY, and COMMAND after --", rest[0])
	default:
		return e.usageError("run", "%q after KEY %q: want -- between KEY and COMMAND (fencedlock run [flags] KEY -- COMMAND [ARGS])", rest[0], key)
	}
	if len(rest) == 0 {
		return e.usageError("run", "missing COMMAND after KEY %q", key)
	}
	if err := fencedlock.ValidateKey(key); err != nil {
		return e.usageError("run", "%s", errText(err))
	}
	if f.ttl < fencedlock.MinTTL || f.ttl > fencedlock.MaxTTL {
		return e.usageError("run", "--ttl %v out of range [%v, %v]", f.ttl, fencedlock.MinTTL, fencedlock.MaxTTL)
	}
	if f.wait < 0 || f.grace < 0 {
		return e.usageError("run", "--wait and --grace must not be negative")
	}
	if f.try && f.wait > 0 {
		return e.usageError("run", "--try and --wait exclude each other")
	}
	if err := checkLogFormat(f.logFmt); err != nil {
		return e.usageError("run", "%v", err)
	}
	if err := f.backend.resolve(e.getenv); err != nil {
		return e.usageError("run", "%v", err)
	}
	// From here on run's messages never block: standard error may be a
	// pipe nobody reads, and no message may delay a signal or a
	// deadline sent to the supervisor. COMMAND (through the supervisor)
	// gets the real standard error.
	q := newLogQueue(e.stderr)
	defer q.Flush(logFlushTimeout)
	e = &env{stdin: e.stdin, stdout: e.stdout, stderr: q, commandStderr: e.commandErr(), getenv: e.getenv, open: e.open, self: e.self}
	var log *slog.Logger
	if f.logFmt == logJSON {
		// Every message run writes is a JSON record; the command's own
		// output (and so the supervisor's stderr) is not.
		j := newJSONLines(e.stderr, "run")
		log = j.logger()
		e.stderr = j
	}

	// Signals: caught from now on, so that an interrupt while waiting
	// gives up the wait cleanly and one while COMMAND runs is forwarded.
	sigs := make(chan os.Signal, 4)
	signal.Notify(sigs, syscall.SIGINT, syscall.SIGTERM, syscall.SIGHUP, syscall.SIGQUIT)
	defer signal.Stop(sigs)

	b, closeBackend, err := e.open(ctx, f.backend)
	if err != nil {
		return e.openError("run", err)
	}
	defer closeBackend()
	locker, err := fencedlock.New(b, fencedlock.Options{TTL: f.ttl})
	if err != nil {
		return e.openError("run", err) // ErrInvalid: a usage error
	}
	defer locker.Close()

	p := &progress{e: e, quiet: f.quiet, key: key, log: log}
	waitStart := time.Now()
	for {
		lease, code := e.acquire(ctx, locker, b, key, &f, sigs, p, waitStart)
		if lease == nil {
			return code
		}
		select {
		case sig := <-sigs:
			// Interrupted while the lock was being taken: do not start.
			e.release(lease, p)
			fmt.Fprintf(e.stderr, "fencedlock run: interrupted by %v before %q started; released %q\n", sig, rest[0], key)
			return exitNotAcquired
		default:
		}
		late := lateGrant(lease, &f)
		if late == nil {
			p.acquired(lease)
			if code, late = e.runCommand(lease, &f, rest, sigs, p); late == nil {
				return code
			}
		}
		// Granted too late for COMMAND to start: not acquired.
		e.release(lease, p)
		if f.try {
			fmt.Fprintf(e.stderr, "fencedlock run: %q not acquired: %v; released it; %q did not start (--try)\n", key, late, rest[0])
			return exitNotAcquired
		}
		p.printf("%q not acquired: %v; released it; waiting again", key, late)
	}
}

// switchLeads returns how long before the lease's local deadline the kill
// switch sends SIGTERM (termLead, before killLead) and SIGKILL (killLead).
func switchLeads(f *runFlags) (termLead, killLead time.Duration) {
	return min(f.grace, f.ttl/4), max(f.ttl/10, time.Millisecond)
}

// lateGrant returns an error (wrapping errLateGrant) if the lease's local
// deadline is less than startMargin ahead: the grant's reply came so late
// that the kill switch would fire at once, or the server may have given
// the key to another holder already. COMMAND must not start on it. The
// supervisor checks again, on its own clock, as it opens the gate.
func lateGrant(lease *fencedlock.Lease, f *runFlags) error {
	termLead, killLead := switchLeads(f)
	if left, least := time.Until(lease.Deadline()), startMargin(termLead, killLead); left < least {
		return fmt.Errorf("%w: the lease's local deadline was %s when the grant arrived, less than the %v ahead the kill switch needs (--ttl/10 + min(--grace, --ttl/4))",
			errLateGrant, aheadOrPast(left), least)
	}
	return nil
}

// acquire takes the lock as the flags say, --wait counting from
// waitStart. It returns the lease, or nil and the exit code.
func (e *env) acquire(ctx context.Context, locker *fencedlock.Locker, b driver.Backend, key string, f *runFlags, sigs <-chan os.Signal, p *progress, waitStart time.Time) (*fencedlock.Lease, int) {
	if f.wait > 0 && time.Since(waitStart) >= f.wait {
		fmt.Fprintf(e.stderr, "fencedlock run: %q not acquired after %v: --wait %v expired\n", key, roundDuration(time.Since(waitStart)), f.wait)
		return nil, exitNotAcquired
	}
	lease, err := locker.TryAcquire(ctx, key)
	if err == nil {
		return lease, 0
	}
	if !errors.Is(err, fencedlock.ErrNotAcquired) {
		return nil, e.lockError(err, f)
	}
	if f.try {
		fmt.Fprintf(e.stderr, "fencedlock run: %q is held%s; not waiting (--try). Run without --try to wait for it, or with --wait DURATION to bound the wait.\n", key, describeHolder(ctx, b, key))
		return nil, exitNotAcquired
	}

	wctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	if f.wait > 0 {
		var stop context.CancelFunc
		wctx, stop = context.WithTimeoutCause(wctx, f.wait-time.Since(waitStart), fmt.Errorf("--wait %v expired", f.wait))
		defer stop()
	}
	type result struct {
		lease *fencedlock.Lease
		err   error
	}
	done := make(chan result, 1)
	go func() {
		l, err := locker.Acquire(wctx, key)
		done <- result{l, err}
	}()
	p.waiting(wctx, b, waitStart)
	reports := 0
	report := time.NewTimer(progressAfter(reports))
	defer report.Stop()
	for {
		select {
		case r := <-done:
			if r.err == nil {
				return r.lease, 0
			}
			if errors.Is(r.err, fencedlock.ErrNotAcquired) {
				fmt.Fprintf(e.stderr, "fencedlock run: %q not acquired after %v: %v\n", key, roundDuration(time.Since(waitStart)), context.Cause(wctx))
				return nil, exitNotAcquired
			}
			return nil, e.lockError(r.err, f)
		case sig := <-sigs:
			cancel(fmt.Errorf("interrupted by %v", sig))
		case <-report.C:
			p.waiting(wctx, b, waitStart)
			reports++
			report.Reset(progressAfter(reports))
		}
	}
}

// openError reports a failure to open the backend: a usage error if the
// configuration is invalid (a bad key prefix, say), a backend error
// otherwise.
func (e *env) openError(cmd string, err error) int {
	if errors.Is(err, fencedlock.ErrInvalid) {
		return e.usageError(cmd, "%s", errText(err))
	}
	fmt.Fprintf(e.stderr, "fencedlock %s: %s\n", cmd, errText(err))
	return exitBackend
}

func (e *env) lockError(err error, f *runFlags) int {
	if errors.Is(err, fencedlock.ErrInvalid) {
		fmt.Fprintf(e.stderr, "fencedlock run: %s\n", errText(err))
		return exitUsage
	}
	fmt.Fprintf(e.stderr, "fencedlock run: %s\n(check that the server at %s is reachable and the credentials are right)\n", errText(err), f.backend.describe())
	return exitBackend
}

// runCommand runs the command under a supervisor (see supervisorCommand)
// while lease is held, and returns the exit code; or, if the supervisor
// did not start COMMAND because the lease's deadline was too near (see
// startMargin), the reason, with the lease still to release.
func (e *env) runCommand(lease *fencedlock.Lease, f *runFlags, argv []string, sigs <-chan os.Signal, p *progress) (int, error) {
	path, err := exec.LookPath(argv[0])
	if err == nil {
		var self string
		if self, err = e.self(); err == nil {
			return e.superviseCommand(lease, f, self, path, argv, sigs, p)
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
func (e *env) superviseCommand(lease *fencedlock.Lease, f *runFlags, self, path string, argv []string, sigs <-chan os.Signal, p *progress) (int, error) {
	key := lease.Key()
	termLead, killLead := switchLeads(f)
	ctlR, ctlW, err := os.Pipe()
	if err != nil {
		return e.startError(lease, p, argv, err), nil
	}
	defer ctlW.Close()
	stR, stW, err := os.Pipe()
	if err != nil {
		ctlR.Close()
		return e.startError(lease, p, argv, err), nil
	}
	defer stR.Close()
	args := []string{supervisorCommand,
		"-grace", f.grace.String(), "-term-lead", termLead.String(), "-kill-lead", killLead.String(), "-name", argv[0],
		"-env", "FENCEDLOCK_KEY=" + key,
		"-env", "FENCEDLOCK_FENCE=" + lease.Fence().String(),
		"-env", "FENCEDLOCK_HOLDER=" + lease.Holder(),
		"--", path}
	if f.logFmt == logJSON {
		// The supervisor writes its messages as JSON records too.
		args = append([]string{supervisorCommand, "-log-format", logJSON}, args[1:]...)
	}
	sup := exec.Command(self, append(args, argv...)...)
	sup.Stdin, sup.Stdout, sup.Stderr = e.stdin, e.stdout, e.commandErr()
	sup.Env = childEnv(os.Environ())
	sup.ExtraFiles = []*os.File{ctlR, stW}
	// Its own process group: a Ctrl-Z or a signal to fencedlock's group
	// does not reach it.
	sup.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	sent := lease.Deadline()
	// The first deadline waits in the pipe: the command starts only once
	// the supervisor has it.
	if _, err := fmt.Fprintf(ctlW, "D %d\n", sharedDeadline(sent)); err != nil {
		ctlR.Close()
		stW.Close()
		return e.startError(lease, p, argv, err), nil
	}
	// A child subreaper (Linux): if the supervisor is killed, what is
	// left of COMMAND's tree comes under fencedlock, which kills it before
	// it releases the lock (see afterSupervisorDied).
	setSubreaper()
	err = sup.Start()
	ctlR.Close()
	stW.Close()
	if err != nil {
		return e.startError(lease, p, argv, err), nil
	}
	status := make(chan supervisorMsg, 16)
	go readMessages(stR, status)
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
	var (
		pgid     int
		ws       *syscall.WaitStatus
		startErr string
		late     string // the supervisor did not open the gate: granted too late
		selfTerm string // why the supervisor terminated the tree on its own
		leaseEnd = lease.Done()
	)
	// note records what the supervisor reports: COMMAND's process group
	// once it started (P), that COMMAND could not start (X) or was not
	// started on a lease granted too late (L), its exit status (E), why it
	// terminated the tree itself (T), and the end of its messages. P is
	// recorded also when it is read after the supervisor exited: a
	// supervisor killed right after it started COMMAND leaves the group
	// to be killed here, and the lock must not be released while it runs.
	note := func(m supervisorMsg) {
		switch {
		case m.eof:
			status = nil
		case m.kind == 'P':
			pgid, _ = strconv.Atoi(m.arg)
		case m.kind == 'X':
			startErr = m.arg
		case m.kind == 'L':
			late = m.arg
		case m.kind == 'E':
			n, _ := strconv.ParseUint(m.arg, 10, 32)
			w := syscall.WaitStatus(n)
			ws = &w
		case m.kind == 'T':
			selfTerm = m.arg
		}
	}
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
		case m := <-status:
			note(m)
		case <-exited:
			// The supervisor exits when no process of the tree is left;
			// read what it said last.
			for status != nil {
				note(<-status)
			}
			st, _ := sup.ProcessState.Sys().(syscall.WaitStatus)
			if late != "" && st.Exited() {
				return 0, errors.New(strings.TrimPrefix(late, errLateGrant.Error()+": "))
			}
			if st.Signaled() || (startErr == "" && ws == nil) || (st.Exited() && st.ExitStatus() != exitOK && st.ExitStatus() != exitCannotExec) {
				// Killed (or it failed): what is left of the tree is not
				// under it any more.
				return e.afterSupervisorDied(lease, f, sup.ProcessState, argv, pgid, ws, sigs, p), nil
			}
			return e.commandEnded(lease, f, argv, ws, startErr, selfTerm, p), nil
		}
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
			argv[0], key, roundDuration(time.Until(lease.Deadline())+lease.TTL()/10), exitLeaseLost)
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
				sig, n, argv[0], key, roundDuration(time.Until(lease.Deadline())+lease.TTL()/10), exitLeaseLost)
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
		if name == "FENCEDLOCK_REDIS" || name == "FENCEDLOCK_ETCD" || strings.HasPrefix(name, "FENCEDLOCK_ETCD_") {
			continue
		}
		out = append(out, kv)
	}
	return out
}

// errText is err's message without the "fencedlock: " prefixes of the
// library's errors, which would stack behind "fencedlock run: ".
func errText(err error) string {
	s := strings.TrimPrefix(err.Error(), "fencedlock: ")
	return strings.ReplaceAll(s, ": fencedlock: ", ": ")
}

func (e *env) release(lease *fencedlock.Lease, p *progress) {
	if err := lease.Release(context.Background()); err != nil {
		fmt.Fprintf(e.stderr, "fencedlock run: releasing %q: %s (the lock expires on its own within %v)\n", lease.Key(), errText(err), roundDuration(lease.TTL()))
	}
}

// exitCode maps the command's end to fencedlock's exit code: its own code,
// or 128+N when killed by signal N (as shells do).
func exitCode(ws syscall.WaitStatus) int {
	if ws.Signaled() {
		return 128 + int(ws.Signal())
	}
	return ws.ExitStatus()
}

func describeExit(ws syscall.WaitStatus) string {
	if ws.Signaled() {
		return fmt.Sprintf("killed by signal %d (%v)", int(ws.Signal()), ws.Signal())
	}
	return "exit code " + strconv.Itoa(ws.ExitStatus())
}
