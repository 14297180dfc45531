//go:build unix

package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/fencedlock/fencedlock"
	"github.com/fencedlock/fencedlock/cmd/fencedlock/internal/human"
	"github.com/fencedlock/fencedlock/driver"
)

const runHeader = `Usage: fencedlock run [flags] KEY [KEY...] -- COMMAND [ARGS...]

Acquire the lock KEY (with --limit N: one of N permits of the semaphore
KEY), run COMMAND while holding it (renewing the lease), release it when
COMMAND and every process it started have ended, and exit with COMMAND's
exit code. Flags come before KEY; the -- is required. COMMAND runs in its
own process group, without FENCEDLOCK_REDIS, _ETCD, _ETCD_*, _POSTGRES, with:

  FENCEDLOCK_KEY     KEY
  FENCEDLOCK_FENCE   the fencing token: the resource you write rejects older ones
  FENCEDLOCK_HOLDER  the holder id (not secret; the owner token is never exposed)
  FENCEDLOCK_SLOT    --limit N: the permit's slot 0..N-1; the fence is the slot's
  FENCEDLOCK_FENCES  several KEYs (held at once; no _KEY/_FENCE): KEY=FENCE lines

The guarantee: no process of COMMAND's tree runs after the lease's local
deadline (--ttl/10 before the server can give KEY to another holder),
whatever happens to fencedlock (SIGKILL, OOM, SIGSTOP, Ctrl-Z, a hung
network). A supervisor (this binary, re-executed; a child subreaper on
Linux) holds a dead man's switch: without a renewal it sends the tree
SIGTERM min(--grace, --ttl/4) + --ttl/10 before the deadline and SIGKILL
--ttl/10 before it; a lost lease or a dead fencedlock start the same at
once (exit 76). Processes COMMAND leaves behind get SIGTERM, then SIGKILL
after --grace, before the release. SIGINT, SIGTERM, SIGHUP, SIGQUIT are
forwarded to COMMAND's group. COMMAND starts only on a lease with --ttl/10
+ min(--grace, --ttl/4) left. A process that refuses signals keeps the
lock renewed while it runs; a killed supervisor's tree is killed first.
What still escapes, --limit's slot locks, --read/--write: docs/cli-run.md, docs/cli.md.
`

const runFooter = backendPointer + `
Examples:
  # A nightly job that must run on at most one machine at a time (crontab):
  0 3 * * *  FENCEDLOCK_REDIS=redis://lock.internal:6379 fencedlock run -q --try nightly-report -- /usr/local/bin/report.sh
  # A migration: wait up to 10 minutes for the other deployer, then give up (exit 75):
  fencedlock run --redis rediss://deploy:secret@redis.internal:6380 --wait 10m --ttl 30s migrate -- ./migrate up
  # At most 4 renders at once, on etcd with TLS; each writes its slot's partition:
  fencedlock run --etcd https://10.0.0.1:2379 --tls-ca ca.pem --tls-cert me.pem --tls-key me-key.pem --limit 4 render -- sh -c './render --out "part-$FENCEDLOCK_SLOT" --fence "$FENCEDLOCK_FENCE"'

` + runExitCodes

type runFlags struct {
	backend backendConfig
	ttl     time.Duration
	wait    time.Duration
	try     bool
	grace   time.Duration
	quiet   bool
	logFmt  string
	limit   int      // --limit: 1 holds the lock KEY, more a permit of semaphore KEY
	rw      rwFlags  // --read, --write: a lease of the read-write lock KEY (run_rw.go)
	keys    []string // several KEYs: the set, held at once (run_multi.go)
}

// run is the run command: it takes the lock, runs COMMAND under a
// supervisor while the lease is held and releases the lock once COMMAND's
// tree is gone.
func (e *env) run(ctx context.Context, args []string) int {
	f, key, rest, code, stop := e.parseRun(args)
	if stop {
		return code
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
	t, closeTaker, err := newTaker(b, &f)
	if err != nil {
		return e.openError("run", err) // ErrInvalid: a usage error
	}
	defer closeTaker()
	b = f.rw.messagesBackend(b)

	p := &progress{e: e, quiet: f.quiet, key: key, log: log, limit: f.limit}
	waitStart := time.Now()
	for {
		lease, code := e.acquire(ctx, t, b, key, &f, sigs, p, waitStart)
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
			if code, late = e.runCommand(lease, &f, commandVars(key, lease, t), rest, sigs, p); late == nil {
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

// parseRun reads run's flags, KEY and COMMAND from args and checks them;
// stop with the exit code if run must not go on (help, a usage error).
func (e *env) parseRun(args []string) (f runFlags, key string, rest []string, code int, stop bool) {
	fs := e.newFlagSet("run", runHeader, runFooter)
	addBackendFlags(fs, &f.backend)
	fs.DurationVar(&f.ttl, "ttl", fencedlock.DefaultTTL, "lease `duration` on the server; renewed every TTL/3 while COMMAND runs. A crashed fencedlock keeps the lock this long")
	fs.DurationVar(&f.wait, "wait", 0, "give up (exit 75) if the lock is not acquired within this `duration`; 0 waits as long as it takes")
	fs.IntVar(&f.limit, "limit", 1, "hold one of `N` permits of the semaphore KEY (slot locks KEY/permit/0..N-1) instead of the lock KEY")
	addRWFlags(fs, &f.rw)
	fs.BoolVar(&f.try, "try", false, "make one attempt; exit 75 at once if the lock is held")
	fs.DurationVar(&f.grace, "grace", 10*time.Second, "`time` between SIGTERM and SIGKILL to COMMAND's tree; bounded by the lease's local deadline (see above)")
	fs.BoolVar(&f.quiet, "q", false, "quiet: no progress messages on standard error (errors are still printed)")
	logFormatFlag(fs, &f.logFmt)
	if code, stop := e.parse(fs, args); stop {
		return f, "", nil, code, true
	}
	rest = fs.Args()
	if len(rest) == 0 {
		return f, "", nil, e.usageError("run", "missing KEY and COMMAND"), true
	}
	var keys []string
	keys, rest = splitKeys(rest) // run_multi.go: several KEYs take a set
	key = keys[0]
	if len(keys) > 1 {
		f.keys, key = keys, strings.Join(keys, " ")
	}
	switch {
	case len(rest) == 0:
		return f, "", nil, e.usageError("run", "missing COMMAND after KEY %q", key), true
	case rest[0] == "--":
		rest = rest[1:]
	case len(rest[0]) > 1 && rest[0][0] == '-':
		return f, "", nil, e.usageError("run", "%q after KEY: flags must come before KEY, and COMMAND after --", rest[0]), true
	default:
		return f, "", nil, e.usageError("run", "%q after KEY %q: want -- between KEY and COMMAND (fencedlock run [flags] KEY -- COMMAND [ARGS])", rest[0], key), true
	}
	if len(rest) == 0 {
		return f, "", nil, e.usageError("run", "missing COMMAND after KEY %q", key), true
	}
	if err := f.rw.check(f.limit); err != nil {
		return f, "", nil, e.usageError("run", "%v", err), true
	}
	if f.rw.mode() != 0 && len(f.keys) > 0 {
		return f, "", nil, e.usageError("run", "--read and --write take one KEY, not a set of %d", len(f.keys)), true
	}
	err := validateTarget(key, f.limit)
	if len(f.keys) > 0 {
		err = validateSet(f.keys, f.limit)
	}
	if err != nil {
		return f, "", nil, e.usageError("run", "%s", errText(err)), true
	}
	if f.ttl < fencedlock.MinTTL || f.ttl > fencedlock.MaxTTL {
		return f, "", nil, e.usageError("run", "--ttl %v out of range [%v, %v]", f.ttl, fencedlock.MinTTL, fencedlock.MaxTTL), true
	}
	if f.wait < 0 || f.grace < 0 {
		return f, "", nil, e.usageError("run", "--wait and --grace must not be negative"), true
	}
	if f.try && f.wait > 0 {
		return f, "", nil, e.usageError("run", "--try and --wait exclude each other"), true
	}
	if err := checkLogFormat(f.logFmt); err != nil {
		return f, "", nil, e.usageError("run", "%v", err), true
	}
	if err := f.backend.resolve(e.getenv); err != nil {
		return f, "", nil, e.usageError("run", "%v", err), true
	}
	return f, key, rest, 0, false
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
func (e *env) acquire(ctx context.Context, locker taker, b driver.Backend, key string, f *runFlags, sigs <-chan os.Signal, p *progress, waitStart time.Time) (*fencedlock.Lease, int) {
	if f.wait > 0 && time.Since(waitStart) >= f.wait {
		fmt.Fprintf(e.stderr, "fencedlock run: %q not acquired after %v: --wait %v expired\n", key, human.Duration(time.Since(waitStart)), f.wait)
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
		fmt.Fprintf(e.stderr, "fencedlock run: %s; not waiting (--try). Run without --try to wait for it, or with --wait DURATION to bound the wait.\n", p.busy(ctx, b))
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
				fmt.Fprintf(e.stderr, "fencedlock run: %q not acquired after %v: %v\n", key, human.Duration(time.Since(waitStart)), context.Cause(wctx))
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

// errText is err's message without the "fencedlock: " prefixes of the
// library's errors, which would stack behind "fencedlock run: ".
func errText(err error) string {
	s := strings.TrimPrefix(err.Error(), "fencedlock: ")
	return strings.ReplaceAll(s, ": fencedlock: ", ": ")
}

func (e *env) release(lease *fencedlock.Lease, p *progress) {
	err := lease.Release(context.Background())
	if err != nil && errors.Is(err, fencedlock.ErrNotHeld) && errors.Is(lease.Err(), fencedlock.ErrLeaseLost) {
		// The loss was reported when run learnt of it; its cause, which the
		// release's error repeats, is not said twice.
		fmt.Fprintf(e.stderr, "fencedlock run: releasing %q: not held (the lease was lost before)\n", lease.Key())
		return
	}
	if err != nil {
		fmt.Fprintf(e.stderr, "fencedlock run: releasing %q: %s (the lock expires on its own within %v)\n", lease.Key(), errText(err), human.Duration(lease.TTL()))
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
