//go:build unix

package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os/signal"
	"syscall"
	"time"

	"github.com/fencedlock/fencedlock/cmd/fencedlock/internal/human"
	"github.com/fencedlock/fencedlock/driver"
)

const inspectHeader = `Usage: fencedlock inspect [flags] KEY
       fencedlock inspect --limit N [flags] KEY
       fencedlock inspect --leader [flags] NAME

Show whether the lock KEY is held, the holder id (a non-secret hash of the
owner token; the token itself is never shown), the remaining lease, and the
last fencing token granted on KEY. Nothing is changed on the server.

It also shows the read-write lock KEY (run --read/--write KEY), which is
a distinct lock of the same name, where the backend can describe it
(Redis, etcd, memory): its mode, each reader's or the writer's holder id, fence
and remaining lease, and how many writers wait. "kind" says which of the
two exist: lock, rwlock, lock+rwlock or none.

With --watch it follows the lock KEY (not the read-write lock) until
interrupted (SIGINT, SIGTERM; exit 0), printing one line (or JSON object)
with the time each time the state changes: taken, released or expired,
taken over by another holder (a new fence). It reads the state every --interval; a renewal is not a change.

With --limit N it shows the N permits of the semaphore KEY (as run --limit
N takes them): for each slot 0..N-1, its lock KEY/permit/SLOT's holder id,
fence and remaining lease; exit 0 if all N are held, 1 if one is free.
With --leader, KEY names an election (package election): its leader's
value, term fence, holder id and remaining term; exit 0 if there is a
leader, 1 if none. Only backends that hold elections (etcd) can answer.
`

const inspectFooter = backendPointer + `
Examples:
  fencedlock inspect --redis redis://localhost:6379 nightly-report
  FENCEDLOCK_ETCD=http://127.0.0.1:2379 fencedlock inspect --json orders | jq .held

JSON output (--json): {"key":"orders","held":true,"holder":"3f2a9c0e1b7d4a65","ttl_ms":8123,"fence":42}
("holder" and "ttl_ms" are omitted when the lock is free; "fence" is 0 if no lease was ever granted).
Without --watch, --limit and --leader, plus "kind" and, if the read-write lock KEY exists, "rwlock":
  {...,"kind":"lock+rwlock","rwlock":{"key":"orders","kind":"rwlock","held":true,"mode":"read",
   "readers":[{"holder":"6d68b0bd3ab9a836","fence":1,"ttl_ms":27841},...],"writers_waiting":1,"fence":2}}
  ("mode" is "read" or "write", "writer" replaces "readers" in write mode).
With --watch, one such object (without "kind") per change and line, with "at" (RFC 3339) added.
With --limit, one such object per slot and line, with "semaphore" and "slot" added.
With --leader: {"election":"jobs","held":true,"value":"node-1:8080","fence":7,"holder":"...","ttl_ms":8123}.

` + inspectExitCodes

// inspectOutput is the --json form of inspect.
type inspectOutput struct {
	At     *time.Time `json:"at,omitempty"` // --watch: when the change was seen
	Key    string     `json:"key"`
	Held   bool       `json:"held"`
	Holder string     `json:"holder,omitempty"`
	TTLms  int64      `json:"ttl_ms,omitempty"`
	Fence  uint64     `json:"fence"`
	// Kind and RW: inspect KEY only. Kind says which of the lock KEY and
	// the read-write lock KEY exist (lockKind); RW is the latter, if so.
	Kind string    `json:"kind,omitempty"`
	RW   *rwOutput `json:"rwlock,omitempty"`
}

// inspect is the inspect command: KEY's holder, lease and last fence,
// once or, with --watch, at every change.
func (e *env) inspect(ctx context.Context, args []string) int {
	var (
		cfg      backendConfig
		jsonOut  bool
		watch    bool
		interval time.Duration
		logFmt   string
		limit    int
		leader   bool
	)
	fs := e.newFlagSet("inspect", inspectHeader, inspectFooter)
	addBackendFlags(fs, &cfg)
	fs.BoolVar(&jsonOut, "json", false, "print one JSON object instead of text")
	fs.BoolVar(&watch, "watch", false, "follow KEY's state changes until interrupted")
	fs.DurationVar(&interval, "interval", 250*time.Millisecond, "with --watch: how often to read the state")
	fs.IntVar(&limit, "limit", 0, "show the `N` permits of the semaphore KEY (its slot locks KEY/permit/0..N-1)")
	fs.BoolVar(&leader, "leader", false, "KEY names an election: show its leader (value, term fence, holder, TTL)")
	logFormatFlag(fs, &logFmt)
	if code, stop := e.parse(fs, args); stop {
		return code
	}
	if err := checkLogFormat(logFmt); err != nil {
		return e.usageError("inspect", "%v", err)
	}
	if n := btoi(watch) + btoi(limit != 0) + btoi(leader); n > 1 {
		return e.usageError("inspect", "--watch, --limit and --leader exclude each other (watch one slot: inspect --watch KEY/permit/SLOT)")
	}
	if logFmt == logJSON {
		e = &env{stdin: e.stdin, stdout: e.stdout, stderr: newJSONLines(e.stderr, "inspect"), getenv: e.getenv, open: e.open, self: e.self}
	}
	if interval < 10*time.Millisecond {
		return e.usageError("inspect", "--interval %v is below 10ms", interval)
	}
	key, code, stop := e.oneKey("inspect", fs)
	if stop {
		return code
	}
	if limit != 0 {
		if err := validateTarget(key, limit); err != nil {
			return e.usageError("inspect", "%s", errText(err))
		}
	}
	if err := cfg.resolve(e.getenv); err != nil {
		return e.usageError("inspect", "%v", err)
	}
	b, closeBackend, err := e.open(ctx, cfg)
	if err != nil {
		return e.openError("inspect", err)
	}
	defer closeBackend()
	if leader {
		return e.inspectLeader(ctx, b, cfg, key, jsonOut)
	}
	in, ok := b.(driver.Inspector)
	if !ok {
		fmt.Fprintf(e.stderr, "fencedlock inspect: the %s backend cannot describe locks\n", cfg.describe())
		return exitBackend
	}
	if watch {
		return e.watch(ctx, in, key, interval, jsonOut)
	}
	if limit != 0 {
		return e.inspectPermits(ctx, in, cfg, key, limit, jsonOut)
	}
	return e.inspectKey(ctx, b, in, cfg, key, jsonOut)
}

// inspectKey prints the lock key and, on a backend that can describe
// them, the read-write lock of the same name.
func (e *env) inspectKey(ctx context.Context, b driver.Backend, in driver.Inspector, cfg backendConfig, key string, jsonOut bool) int {
	ictx, cancel := context.WithTimeout(ctx, openTimeout)
	defer cancel()
	info, err := in.Inspect(ictx, key)
	if err != nil {
		return e.readFailed(cfg, err)
	}
	var rw *rwOutput
	if ri, ok := b.(driver.RWInspector); ok {
		rinfo, err := ri.InspectRW(ictx, key)
		if err != nil {
			return e.readFailed(cfg, err)
		}
		if o := newRWOutput(key, rinfo); o.exists() {
			rw = &o
		}
	}
	return e.printInfo(key, info, rw, jsonOut)
}

// readFailed reports that inspect could not read the server and returns
// its exit code, 69.
func (e *env) readFailed(cfg backendConfig, err error) int {
	fmt.Fprintf(e.stderr, "fencedlock inspect: %s\n(check that the server at %s is reachable and the credentials are right)\n", errText(err), cfg.describe())
	return exitBackend
}

// printInfo prints what inspect found of key, the lock and, if rw is not
// nil, the read-write lock of that name, as text or JSON, and returns
// inspect's exit code: 0 if either is held.
func (e *env) printInfo(key string, info driver.Info, rw *rwOutput, jsonOut bool) int {
	out := lockOutput(key, info)
	lock := info.Held || info.Fence != 0
	out.Kind, out.RW = lockKind(lock, rw != nil), rw
	held := heldCode(info.Held || (rw != nil && rw.Held))
	if jsonOut {
		return e.printJSON("inspect", out, held)
	}
	fmt.Fprintf(e.stdout, "key:     %q\nkind:    %s\n", key, kindText(key, lock, rw != nil))
	if rw != nil && lock {
		fmt.Fprintf(e.stdout, "lock %q:\n", key)
	}
	if rw == nil || lock {
		if info.Held {
			fmt.Fprintf(e.stdout, "held:    yes\nholder:  %s\nttl:     %v\n", info.Holder, human.Duration(info.TTL))
		} else {
			fmt.Fprintf(e.stdout, "held:    no\n")
		}
		if info.Fence == 0 {
			fmt.Fprintf(e.stdout, "fence:   none granted yet\n")
		} else {
			fmt.Fprintf(e.stdout, "fence:   %v (last granted)\n", info.Fence)
		}
	}
	if rw != nil {
		printRWText(e.stdout, *rw)
	}
	return held
}

// printJSON prints v as one JSON line for cmd and returns code, or
// exitFailure if it could not be written.
func (e *env) printJSON(cmd string, v any, code int) int {
	if err := json.NewEncoder(e.stdout).Encode(v); err != nil {
		fmt.Fprintf(e.stderr, "fencedlock %s: %v\n", cmd, err)
		return exitFailure
	}
	return code
}

// heldCode is inspect's exit code: 0 held, 1 free, as test(1) answers.
func heldCode(held bool) int {
	if held {
		return exitOK
	}
	return exitFailure
}

// watch prints key's state each time it changes, until SIGINT or SIGTERM
// (exit 0) or ctx ends. A failed read is reported on standard error and
// retried at the next interval: a watch for debugging outlives a blip.
func (e *env) watch(ctx context.Context, in driver.Inspector, key string, interval time.Duration, jsonOut bool) int {
	ctx, stop := signal.NotifyContext(ctx, syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	var (
		last    *inspectOutput
		failing bool
	)
	t := time.NewTimer(0)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return exitOK
		case <-t.C:
		}
		ictx, cancel := context.WithTimeout(ctx, inspectTimeout)
		info, err := in.Inspect(ictx, key)
		cancel()
		t.Reset(interval)
		if err != nil {
			if ctx.Err() != nil {
				return exitOK
			}
			if !failing {
				fmt.Fprintf(e.stderr, "fencedlock inspect: %s (retrying every %v)\n", errText(err), interval)
			}
			failing = true
			continue
		}
		if failing {
			fmt.Fprintf(e.stderr, "fencedlock inspect: reading %q again\n", key)
			failing = false
		}
		now := time.Now().UTC()
		out := lockOutput(key, info)
		out.At = &now
		if last != nil && last.Held == out.Held && last.Holder == out.Holder && last.Fence == out.Fence {
			continue // unchanged (a renewal only moves the TTL)
		}
		last = &out
		if jsonOut {
			if err := json.NewEncoder(e.stdout).Encode(out); err != nil {
				fmt.Fprintf(e.stderr, "fencedlock inspect: %v\n", err)
				return exitFailure
			}
			continue
		}
		fmt.Fprintf(e.stdout, "%s  %q %s\n", now.Format("2006-01-02T15:04:05.000Z07:00"), key, describeState(out))
	}
}

// describeState renders a watched state for a text line.
func describeState(o inspectOutput) string {
	if !o.Held {
		if o.Fence == 0 {
			return "free"
		}
		return fmt.Sprintf("free (last fence %d)", o.Fence)
	}
	holder := "holder " + o.Holder
	if o.Holder == "" {
		holder = "another owner"
	}
	return fmt.Sprintf("held by %s, fence %d, lease ends in %v unless renewed", holder, o.Fence, human.Duration(time.Duration(o.TTLms)*time.Millisecond))
}
