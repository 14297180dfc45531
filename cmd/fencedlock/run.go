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
SIGQUIT are forwarded to COMMAND's process group. What still escapes (work
handed to a daemon, other systems than Linux) and the timings:
docs/cli-run.md. A resource that must never see a stale write should check
FENCEDLOCK_FENCE.
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
	var log *slog.Logger
	if f.logFmt == logJSON {
		// From here on every message run writes is a JSON record; the
		// command's own output (and so the supervisor's stderr) is not.
		j := newJSONLines(e.stderr, "run")
		log = j.logger()
		e = &env{stdin: e.stdin, stdout: e.stdout, stderr: j, commandStderr: e.commandErr(), getenv: e.getenv, open: e.open, self: e.self}
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
	lease, code := e.acquire(ctx, locker, b, key, &f, sigs, p)
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
	p.acquired(lease)
	return e.runCommand(lease, &f, rest, sigs, p)
}

// acquire takes the lock as the flags say. It returns the lease, or nil and
// the exit code.
func (e *env) acquire(ctx context.Context, locker *fencedlock.Locker, b driver.Backend, key string, f *runFlags, sigs <-chan os.Signal, p *progress) (*fencedlock.Lease, int) {
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
		wctx, stop = context.WithTimeoutCause(wctx, f.wait, fmt.Errorf("--wait %v expired", f.wait))
		defer stop()
	}
	waitStart := time.Now()
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
// while lease is held, and returns the exit code.
func (e *env) runCommand(lease *fencedlock.Lease, f *runFlags, argv []string, sigs <-chan os.Signal, p *progress) int {
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
		return exitNotFound
	}
	return exitCannotExec
}

// superviseCommand starts the supervisor, which starts the command; feeds
// it the lease's deadlines, forwards signals and reports the end.
func (e *env) superviseCommand(lease *fencedlock.Lease, f *runFlags, self, path string, argv []string, sigs <-chan os.Signal, p *progress) int {
	key := lease.Key()
	termLead, killLead := min(f.grace, f.ttl/4), max(f.ttl/10, time.Millisecond)
	ctlR, ctlW, err := os.Pipe()
	if err != nil {
		return e.startError(lease, p, argv, err)
	}
	defer ctlW.Close()
	stR, stW, err := os.Pipe()
	if err != nil {
		ctlR.Close()
		return e.startError(lease, p, argv, err)
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
		return e.startError(lease, p, argv, err)
	}
	err = sup.Start()
	ctlR.Close()
	stW.Close()
	if err != nil {
		return e.startError(lease, p, argv, err)
	}
	status := make(chan supervisorMsg, 16)
	go readMessages(stR, status)
	exited := make(chan error, 1)
	go func() { exited <- sup.Wait() }()

	poll := time.NewTicker(min(f.ttl/20, 50*time.Millisecond))
	defer poll.Stop()
	var (
		pgid     int
		ws       *syscall.WaitStatus
		startErr string
		selfTerm string // why the supervisor terminated the tree on its own
		pending  []os.Signal
		leaseEnd = lease.Done()
	)
	// note records what the supervisor reports: COMMAND's process group
	// once it started (P: signals that came before are forwarded now),
	// that COMMAND could not start (X), its exit status (E), why it
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
			for _, sig := range pending {
				p.printf("forwarding %v to %q (process group %d)", sig, argv[0], pgid)
				_ = syscall.Kill(-pgid, sig.(syscall.Signal))
			}
			pending = nil
		case m.kind == 'X':
			startErr = m.arg
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
			if pgid == 0 {
				pending = append(pending, sig) // forwarded once COMMAND runs
				continue
			}
			p.printf("forwarding %v to %q (process group %d)", sig, argv[0], pgid)
			_ = syscall.Kill(-pgid, sig.(syscall.Signal))
		case <-poll.C:
			if d := lease.Deadline(); d.After(sent) && lease.Err() == nil {
				sent = d
				_, _ = fmt.Fprintf(ctlW, "D %d\n", sharedDeadline(d))
			}
		case <-leaseEnd:
			leaseEnd = nil
			if errors.Is(lease.Err(), fencedlock.ErrLeaseLost) {
				fmt.Fprintf(e.stderr, "fencedlock run: %s\n", errText(lease.Err()))
				_, _ = fmt.Fprintf(ctlW, "T lease lost\n")
			}
		case m := <-status:
			note(m)
		case <-exited:
			// The supervisor exits when no process of the tree is left;
			// read what it said last.
			for status != nil {
				note(<-status)
			}
			if pgid != 0 && ws == nil && startErr == "" {
				// The supervisor was killed: what is left of the tree is
				// not under it any more; kill the group at least.
				_ = syscall.Kill(-pgid, syscall.SIGKILL)
				fmt.Fprintf(e.stderr, "fencedlock run: the supervisor of %q died (%v); sent SIGKILL to process group %d; descendants that left it may still run; exiting %d\n",
					argv[0], sup.ProcessState, pgid, exitLeaseLost)
				_ = lease.Release(context.Background())
				return exitLeaseLost
			}
			if st, ok := sup.ProcessState.Sys().(syscall.WaitStatus); ok && st.Signaled() && pgid == 0 && ws == nil && startErr == "" {
				// Killed before its report: COMMAND never ran (the gate
				// execs it only after the report; see supervisor.start).
				fmt.Fprintf(e.stderr, "fencedlock run: the supervisor of %q died (%v) before it started it; %q did not run; exiting %d\n",
					argv[0], sup.ProcessState, argv[0], exitLeaseLost)
				_ = lease.Release(context.Background())
				return exitLeaseLost
			}
			return e.commandEnded(lease, f, argv, ws, startErr, selfTerm, p)
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
