//go:build unix

package main

import (
	"context"
	"crypto/rand"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/user"
	"time"

	"github.com/fencedlock/fencedlock/driver"
	"github.com/fencedlock/fencedlock/fencing"
)

const releaseHeader = `Usage: fencedlock release --force [flags] KEY

Break the lock KEY whoever holds it, fenced: one atomic step on the server
deletes the lock and advances its fence counter (Redis: one script; etcd:
one transaction that also dequeues the waiters, who start over). The holder's
next renewal finds the lock gone and reports the lease lost (fencedlock run
then terminates its command and exits 76).

Breaking the lock does not stop a holder that is writing right now: the
fenced resources still hold its fence, and a guarded write with an equal
fence from the same holder is accepted. So release --force writes the fence
it consumed (granted to no one, smaller than any later holder's) to each
--resource as a fence barrier: the old holder's next guarded write to it is
rejected, every later holder's accepted. Name every resource the lock guards
(see docs/operations.md).

It prints one audit line: who (user@host, pid), when, the key, the holder
broken, the fence before and after, and the barriers written. --force is
required: a normal release belongs to the holder (fencedlock run releases
on its own when its command ends).
`

const releaseFooter = backendPointer + `
Examples:
  fencedlock release --force --redis redis://localhost:6379 --resource orders:table nightly-report
  FENCEDLOCK_ETCD=http://127.0.0.1:2379 fencedlock release --force --json orders

` + releaseExitCodes

const releaseExitCodes = `Exit codes:
  0        the lock was broken (or was free: the fence advanced all the same) and every barrier written
  1        a barrier was rejected: the resource already holds a newer fence (a later holder wrote it)
  64       usage error (bad flag or key, no --force)
  69       backend error (cannot reach or use the server; the backend cannot force a release)
`

// releaseOutput is the audit record of a forced release (--json).
type releaseOutput struct {
	Key       string    `json:"key"`
	By        string    `json:"by"`       // user@host
	PID       int       `json:"pid"`      // of this process
	Operator  string    `json:"operator"` // the holder id recorded in the barriers
	At        time.Time `json:"at"`
	Held      bool      `json:"held"`
	Holder    string    `json:"holder,omitempty"`
	Before    uint64    `json:"fence_before"`
	After     uint64    `json:"fence_after"`
	Resources []string  `json:"barriers,omitempty"` // resources whose fence record now holds After
	Failed    []string  `json:"barrier_errors,omitempty"`
}

// fenceBarrier is implemented by the Redis and etcd backends, and by the
// CLI's PostgreSQL backend on its KV table (postgres.go).
type fenceBarrier interface {
	FenceBarrier(ctx context.Context, key string, token fencing.Token, holder string) error
}

// releaseCmd is the release command: it breaks a lock (--force), consuming
// a fence, and writes that fence to the barriers of the --resource keys.
func (e *env) releaseCmd(ctx context.Context, args []string) int {
	var (
		cfg       backendConfig
		force     bool
		jsonOut   bool
		resources stringList
	)
	fs := e.newFlagSet("release", releaseHeader, releaseFooter)
	addBackendFlags(fs, &cfg)
	fs.BoolVar(&force, "force", false, "break the lock whoever holds it (required)")
	fs.BoolVar(&jsonOut, "json", false, "print the audit record as one JSON object")
	fs.Var(&resources, "resource", "a `key` the lock guards (Redis: a hash written with FencedSet; etcd: a key written\nwith FencedPut; PostgreSQL: a key of the fencedlock_kv table): write the consumed fence to its fence record; repeat for each")
	if code, stop := e.parse(fs, args); stop {
		return code
	}
	if !force {
		return e.usageError("release", "only --force is supported: a normal release belongs to the holder")
	}
	key, code, stop := e.oneKey("release", fs)
	if stop {
		return code
	}
	for _, r := range resources {
		if r == "" {
			return e.usageError("release", "empty --resource")
		}
	}
	if err := cfg.resolve(e.getenv); err != nil {
		return e.usageError("release", "%v", err)
	}
	b, closeBackend, err := e.open(ctx, cfg)
	if err != nil {
		return e.openError("release", err)
	}
	defer closeBackend()
	fr, ok := b.(driver.ForceReleaser)
	if !ok {
		fmt.Fprintf(e.stderr, "fencedlock release: the %s backend cannot force a release\n", cfg.describe())
		return exitBackend
	}
	var barrier fenceBarrier
	if len(resources) > 0 {
		if barrier, ok = b.(fenceBarrier); !ok {
			fmt.Fprintf(e.stderr, "fencedlock release: the %s backend cannot write fence barriers\n", cfg.describe())
			return exitBackend
		}
	}
	out := releaseOutput{Key: key, By: operatorName(), PID: os.Getpid(), Operator: driver.HolderID(rand.Text())}
	fctx, cancel := context.WithTimeout(ctx, openTimeout)
	defer cancel()
	out.At = time.Now().UTC()
	r, err := fr.ForceRelease(fctx, key)
	if err != nil {
		fmt.Fprintf(e.stderr, "fencedlock release: %s\n(nothing was broken; check that the server at %s is reachable and the credentials are right)\n", errText(err), cfg.describe())
		return exitBackend
	}
	out.Held, out.Holder, out.Before, out.After = r.Held, r.Holder, uint64(r.Before), uint64(r.After)
	code = e.writeBarriers(ctx, barrier, resources, r.After, &out)
	if jsonOut {
		if err := json.NewEncoder(e.stdout).Encode(out); err != nil {
			fmt.Fprintf(e.stderr, "fencedlock release: %v\n", err)
			return exitFailure
		}
	} else {
		fmt.Fprintln(e.stdout, auditLine(out))
	}
	for _, f := range out.Failed {
		fmt.Fprintf(e.stderr, "fencedlock release: barrier not written: %s\n", f)
	}
	return code
}

// writeBarriers writes fence after, consumed by the forced release, to the
// fence record of each resource, noting in out where it did and did not;
// it returns release's exit code so far.
func (e *env) writeBarriers(ctx context.Context, barrier fenceBarrier, resources []string, after fencing.Token, out *releaseOutput) int {
	code := exitOK
	for _, res := range resources {
		bctx, cancel := context.WithTimeout(ctx, openTimeout)
		err := barrier.FenceBarrier(bctx, res, after, out.Operator)
		cancel()
		switch {
		case err == nil:
			out.Resources = append(out.Resources, res)
		case errors.Is(err, fencing.ErrStale):
			// A later holder already wrote a greater fence: the old
			// holder is rejected there already.
			out.Failed = append(out.Failed, fmt.Sprintf("%s: %s", res, errText(err)))
			code = max(code, exitFailure)
		default:
			out.Failed = append(out.Failed, fmt.Sprintf("%s: %s", res, errText(err)))
			code = exitBackend
		}
	}
	return code
}

// auditLine is the one-line record of a forced release.
func auditLine(o releaseOutput) string {
	held := "was free"
	if o.Held {
		held = "was held by holder " + o.Holder
		if o.Holder == "" {
			held = "was held by another owner"
		}
	}
	s := fmt.Sprintf("fencedlock: forced release of %q by %s (pid %d, operator %s) at %s: %s; fence before %d, after %d",
		o.Key, o.By, o.PID, o.Operator, o.At.Format(time.RFC3339Nano), held, o.Before, o.After)
	if len(o.Resources) > 0 {
		s += fmt.Sprintf("; barrier fence %d written to %q", o.After, o.Resources)
	} else if len(o.Failed) == 0 {
		s += "; no barrier written (no --resource)"
	}
	return s
}

// operatorName is user@host of this process, for the audit line.
func operatorName() string {
	name := "unknown"
	if u, err := user.Current(); err == nil && u.Username != "" {
		name = u.Username
	}
	host, err := os.Hostname()
	if err != nil || host == "" {
		host = "unknown"
	}
	return name + "@" + host
}
