//go:build unix

// Command fencedlock holds distributed locks with fencing tokens from the
// shell, on Redis, etcd or PostgreSQL.
//
//	fencedlock demo                          the paused-holder story on an embedded Redis, with real processes
//	fencedlock run [flags] KEY -- CMD [ARGS] run CMD while holding KEY (--limit N: one of N permits); kill it if the lease is lost
//	fencedlock inspect [flags] KEY           show whether KEY is held, by whom, for how long, its last fence
//	fencedlock list [flags] [PREFIX]         list the locks under PREFIX (SCAN / range, bounded and paced)
//	fencedlock release --force [flags] KEY   break KEY whoever holds it, fenced (operators; see docs/operations.md)
//
// Run "fencedlock COMMAND -help" for the flags and examples of each command.
//
// # run
//
// run acquires KEY (waiting as long as --wait allows, or not at all with
// --try), starts COMMAND (given after a required --) under a supervisor,
// in its own process group with FENCEDLOCK_KEY, FENCEDLOCK_FENCE and
// FENCEDLOCK_HOLDER in its environment (and the backend's variables, which
// may hold credentials, removed; with --limit N, FENCEDLOCK_SLOT: run holds
// one of N permits of the semaphore KEY, the lease of its slot lock), renews the lease while COMMAND runs,
// releases it when COMMAND and every process it started have ended, and
// exits with COMMAND's code. SIGINT, SIGTERM, SIGHUP and SIGQUIT are
// forwarded to the process group.
//
// Its invariant: no process of COMMAND's tree runs after the lease's local
// deadline, whatever happens to the fencedlock process (SIGKILL, SIGSTOP,
// Ctrl-Z, OOM kill, a hung network). The supervisor, re-executed from this
// binary in a process group of its own and a child subreaper on Linux,
// holds a dead man's switch: fencedlock sends it the new deadline after
// each renewal, and if none comes it sends SIGTERM to every descendant
// min(--grace, TTL/4) + TTL/10 before the deadline and SIGKILL TTL/10
// before it; a lost lease or a dead fencedlock start the same at once.
// run then exits 76, as consul lock does (etcdctl lock leaves the command
// running). See "fencedlock run -help" and docs/cli-run.md for the details
// and what still escapes. Terminating the command is the best a lock can
// do; a resource that must never see a stale write should check
// FENCEDLOCK_FENCE.
//
// # Operator commands
//
// list shows the locks under a prefix (SCAN with COUNT and a pace between
// calls on Redis, never KEYS; paged ranges on etcd; bounded by --max and
// --timeout). inspect --watch follows one key's state changes until
// interrupted; inspect --limit N shows the permits of a semaphore, inspect
// --leader the leader of an election (on backends that hold elections). release --force breaks a lock whoever holds it, fenced: one
// atomic step deletes it and consumes a fence (driver.ForceReleaser),
// which it writes as a barrier to each --resource the lock guards, so that
// the old holder's next guarded write is rejected; it prints an audit line.
// run and inspect take --log-format json for log pipelines. See
// docs/operations.md.
//
// # demo
//
// demo re-executes this binary as two hidden worker processes and plays the
// paused-holder scenario against an embedded miniredis (whose key expiry it
// drives in real time) or a server given by flag. The fenced resource lives
// on the same server as the lock, as it would in an application: a Redis
// hash written with (*redis.Backend).FencedSet, or an etcd key written with
// (*etcd.Backend).FencedPut. The workers write it directly, the server
// decides from the fence in each write, and the demo reads the result back
// (FencedGet) for its verdict. demo --no-fencing makes the workers write
// with a plain HSET or Put, to show the corruption the fence prevents.
//
// # Backends
//
// Every command except demo needs a server, given by flag or environment
// ("fencedlock help backends" prints this part):
//
//	--redis URL        or FENCEDLOCK_REDIS    redis://[user:password@]host:port[/db]
//	                                          rediss://... (TLS; a private CA via SSL_CERT_FILE=ca.pem)
//	                                          unix://[user:password@]/path/to/redis.sock
//	                                          Sentinel: redis://sentinel1:26379?addr=sentinel2:26379&master_set=mymaster
//	                                          Cluster:  redis://node1:7000?addr=node2:7000&addr=node3:7000 (detected)
//	--etcd ENDPOINTS   or FENCEDLOCK_ETCD     comma-separated, e.g. https://10.0.0.1:2379,https://10.0.0.2:2379
//	                                          with --tls-ca, --tls-cert, --tls-key, --user, --password
//	                                          (or FENCEDLOCK_ETCD_CACERT, _CERT, _KEY, _USER, _PASSWORD)
//	--postgres URL     or FENCEDLOCK_POSTGRES postgres://[user:password@]host:port/dbname[?sslmode=...]
//	                                          (or libpq key=value pairs; tables created if missing)
//	--key-prefix P     or FENCEDLOCK_KEY_PREFIX   prefix of every key on the server (defaults:
//	                                          "fencedlock:" on Redis, "fencedlock/" on etcd)
//
// # Exit codes
//
//	0        success; for run: the command exited 0; for inspect: the key is held
//	N        for run: the command's own exit code
//	64       usage error (bad flag, key or TTL)
//	69       backend error (cannot reach or use the server)
//	75       lock not acquired (held by another: --try, --wait expired, or interrupted while waiting)
//	76       run: the lease was lost (or about to be) while the command ran; its whole tree
//	         was terminated (SIGTERM, then SIGKILL by the lease's local deadline)
//	126      run: the command could not be started; 127: not found
//	128+N    run: the command was killed by signal N
//	1        inspect: the key is free (0: held); list: the listing stopped at --max or --timeout;
//	         release --force: a barrier was rejected (a later holder wrote a newer fence)
//	1        demo: the outcome was unsafe (a stale write was accepted) or the scenario failed
//
// A command that itself exits with 64, 69, 75 or 76 makes those codes
// ambiguous; the message on standard error tells them apart.
//
// Owner tokens are never printed: holders are shown by their holder id, a
// hash of the token (see driver.HolderID).
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"runtime/debug"

	"github.com/fencedlock/fencedlock/driver"
)

// Exit codes; see the package documentation.
const (
	exitOK          = 0
	exitFailure     = 1
	exitUsage       = 64
	exitBackend     = 69
	exitNotAcquired = 75
	exitLeaseLost   = 76
	exitCannotExec  = 126
	exitNotFound    = 127
)

const exitCodeHelp = `Exit codes:
  0        success (run: COMMAND exited 0; inspect: the key is held)
  1        inspect: the key is free; demo: the outcome was unsafe or the scenario failed;
           list: incomplete (--max or --timeout); release --force: a barrier was rejected
  N        run: COMMAND's own exit code
  64       usage error (bad flag, key, TTL or URL; run: missing --)
  69       backend error (cannot reach or use the server)
  75       run: lock not acquired (held by another: --try, --wait expired, or interrupted while waiting)
  76       run: the lease was lost (or about to be) while COMMAND ran; its whole tree was terminated
  126/127  run: COMMAND could not be started / was not found
  128+N    run: COMMAND was killed by signal N
`

const runExitCodes = `Exit codes:
  0        COMMAND exited 0
  N        COMMAND's own exit code
  64       usage error (bad flag, key, TTL or URL; missing --)
  69       backend error (cannot reach or use the server)
  75       lock not acquired (held by another: --try, --wait expired, or interrupted while waiting)
  76       the lease was lost (or about to be) while COMMAND ran; its whole tree was terminated
  126/127  COMMAND could not be started / was not found
  128+N    COMMAND was killed by signal N
`

const inspectExitCodes = `Exit codes (as test(1): usable in "if fencedlock inspect KEY; then ..."):
  0        the key is held (the lock KEY, or the read-write lock KEY in either mode)
  1        the key is free (both)
  0        --watch: interrupted (SIGINT, SIGTERM)
  64       usage error (bad flag, key or URL)
  69       backend error (cannot reach or use the server)
`

const demoExitCodes = `Exit codes:
  0        the outcome was safe: the server rejected the stale write
  1        the outcome was unsafe (a stale write was accepted), or the scenario failed
  64       usage error (bad flag or URL)
  69       backend error (cannot reach or use the server)
`

const mainUsage = `fencedlock: distributed locks with fencing tokens, on Redis, etcd or PostgreSQL.

Usage:
  fencedlock demo [flags]                       the paused-holder story, with real processes (embedded Redis by default)
  fencedlock run [flags] KEY -- COMMAND [ARGS]  run COMMAND while holding KEY; terminate it if the lease is lost
  fencedlock inspect [flags] KEY                is KEY held (exit 0) or free (1), by which holder, for how long, its last fence
  fencedlock list [flags] [PREFIX]              the locks under PREFIX: held, holder, remaining lease, last fence (SCAN, paced)
  fencedlock release --force [flags] KEY        break KEY whoever holds it, fenced, with an audit line (operators)
  fencedlock --version                          the module version and VCS revision of this binary
  fencedlock help backends                      how to name the server: URL forms, TLS, credentials

Run "fencedlock COMMAND -help" for the flags and examples of a command.

Backends (every command but demo needs one): --redis URL, --etcd ENDPOINTS or --postgres URL
(or $FENCEDLOCK_REDIS, $FENCEDLOCK_ETCD, $FENCEDLOCK_POSTGRES); the forms, TLS, credentials:
fencedlock help backends.

`

// env is the part of the process environment the commands read.
type env struct {
	stdin  io.Reader
	stdout io.Writer
	stderr io.Writer
	// commandStderr, if set, is where run's COMMAND (through its
	// supervisor) writes its standard error when stderr is fencedlock's own
	// log stream (--log-format json); otherwise COMMAND writes to stderr.
	commandStderr io.Writer
	getenv        func(string) string
	// open makes the backend of a command; tests may replace it.
	open func(ctx context.Context, cfg backendConfig) (driver.Backend, func(), error)
	// self is the path of this executable, for demo workers.
	self func() (string, error)
}

// commandErr is the standard error of run's COMMAND.
func (e *env) commandErr() io.Writer {
	if e.commandStderr != nil {
		return e.commandStderr
	}
	return e.stderr
}

func main() {
	e := &env{
		stdin:  os.Stdin,
		stdout: os.Stdout,
		stderr: os.Stderr,
		getenv: os.Getenv,
		open:   openBackend,
		self:   os.Executable,
	}
	os.Exit(e.main(context.Background(), os.Args[1:]))
}

func (e *env) main(ctx context.Context, args []string) int {
	if len(args) == 0 {
		fmt.Fprint(e.stderr, mainUsage+exitCodeHelp)
		return exitUsage
	}
	switch args[0] {
	case "run":
		return e.run(ctx, args[1:])
	case "inspect":
		return e.inspect(ctx, args[1:])
	case "release":
		return e.releaseCmd(ctx, args[1:])
	case "list":
		return e.list(ctx, args[1:])
	case "demo":
		return e.demo(ctx, args[1:])
	case workerCommand:
		return e.worker(ctx, args[1:])
	case supervisorCommand:
		return e.supervise(args[1:])
	case gateCommand:
		return gate(args[1:])
	case "--version", "-version", "version":
		fmt.Fprintln(e.stdout, version())
		return exitOK
	case "help", "-h", "-help", "--help":
		if len(args) > 1 && args[1] == "backends" {
			fmt.Fprint(e.stdout, backendsHelp)
			return exitOK
		}
		if len(args) > 1 {
			return e.main(ctx, []string{args[1], "-help"})
		}
		fmt.Fprint(e.stdout, mainUsage+exitCodeHelp)
		return exitOK
	}
	fmt.Fprintf(e.stderr, "fencedlock: unknown command %q; the commands are demo, run, inspect, list and release (see fencedlock -help)\n", args[0])
	return exitUsage
}

// version is what --version prints: see versionString.
func version() string {
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		return "fencedlock (no build information)"
	}
	return versionString(bi)
}

// versionString formats the build information of this binary: the module
// version (a release tag, or a pseudo-version, when installed with go
// install github.com/fencedlock/fencedlock/cmd/fencedlock@version;
// "(devel)" when built in a checkout), then for a checkout the VCS
// revision, its time and "+modified" if the tree had uncommitted changes
// (recorded by go build unless -buildvcs=false), then the Go version.
func versionString(bi *debug.BuildInfo) string {
	v := bi.Main.Version
	if v == "" {
		v = "(devel)"
	}
	var rev, at, modified string
	for _, s := range bi.Settings {
		switch s.Key {
		case "vcs.revision":
			rev = s.Value
		case "vcs.time":
			at = s.Value
		case "vcs.modified":
			if s.Value == "true" {
				modified = "+modified"
			}
		}
	}
	out := "fencedlock " + v
	switch {
	case rev != "":
		out += " revision " + rev[:min(12, len(rev))] + modified
		if at != "" {
			out += ", " + at
		}
	case v == "(devel)":
		out += ", no VCS revision recorded"
	}
	return out + " (" + bi.GoVersion + ")"
}

// newFlagSet returns a flag set that prints usage (header, flags, then
// footer) to e.stderr, or to e.stdout when -help is asked for.
func (e *env) newFlagSet(name, header, footer string) *flag.FlagSet {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.SetOutput(e.stderr)
	fs.Usage = func() {
		w := fs.Output()
		fmt.Fprint(w, header)
		fmt.Fprintln(w, "\nFlags:")
		fs.PrintDefaults()
		fmt.Fprint(w, footer)
	}
	return fs
}

// parse parses args; it returns (exit code, true) when the command must
// stop: after -help (0) or a usage error (64).
func (e *env) parse(fs *flag.FlagSet, args []string) (int, bool) {
	for _, a := range args {
		if a == "--" {
			break
		}
		if a == "-h" || a == "-help" || a == "--help" {
			fs.SetOutput(e.stdout)
			fs.Usage()
			return exitOK, true
		}
	}
	if hint := renamedFlag(fs, args); hint != "" {
		return e.usageError(fs.Name(), "%s", hint), true
	}
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return exitOK, true
		}
		return exitUsage, true // the flag package printed the error and usage
	}
	return 0, false
}

// usageError prints a usage error with a hint and returns exitUsage.
func (e *env) usageError(cmd, format string, args ...any) int {
	fmt.Fprintf(e.stderr, "fencedlock %s: %s (see fencedlock %s -help)\n", cmd, fmt.Sprintf(format, args...), cmd)
	return exitUsage
}

// oneKey returns the one KEY argument of cmd's flag set fs; stop, with
// the code of the usage error printed, if there is not exactly one or it
// is not a valid key.
func (e *env) oneKey(cmd string, fs *flag.FlagSet) (key string, code int, stop bool) {
	if fs.NArg() != 1 {
		return "", e.usageError(cmd, "want exactly one KEY, got %d arguments", fs.NArg()), true
	}
	key = fs.Arg(0)
	if err := driver.ValidateKey(key); err != nil {
		return "", e.usageError(cmd, "%s", errText(err)), true
	}
	return key, 0, false
}
