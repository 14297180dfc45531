//go:build unix

package demo

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"time"

	"github.com/fencedlock/fencedlock"
	"github.com/fencedlock/fencedlock/driver"
	"github.com/fencedlock/fencedlock/fencing"
)

// Worker roles.
const (
	rolePaused = "paused" // acquires, checks its lease, then (paused by the demo) writes late
	roleWriter = "writer" // waits for the lock, writes, holds it until told to release
)

// workerEvent is one line a worker reports to the demo on standard output.
// It never carries the owner token.
type workerEvent struct {
	Ev     string `json:"ev"` // waiting, acquired, checked, write, lease, released, error
	Fence  uint64 `json:"fence,omitempty"`
	Holder string `json:"holder,omitempty"`
	TTLms  int64  `json:"ttl_ms,omitempty"`
	Value  string `json:"value,omitempty"`
	OK     bool   `json:"ok,omitempty"`
	Stale  bool   `json:"stale,omitempty"` // write: rejected as stale (fencing.ErrStale)
	Detail string `json:"detail,omitempty"`
	At     int64  `json:"at,omitempty"` // when it happened, Unix nanoseconds
}

// Worker runs one worker process of the demo, started by [Run] with
// [Config.WorkerArgs] and then its own arguments args. Its server comes
// from server, which the command makes from the environment
// (FENCEDLOCK_REDIS or FENCEDLOCK_ETCD and friends, set by the demo); it
// takes the lock there and writes the resource there, on one connection.
// It reads commands ("go", "release") from stdin, one per line, and
// reports events as JSON lines on stdout. It returns the exit code.
func Worker(ctx context.Context, server func() (Server, error), args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("demo worker", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var (
		role, key, name, resource string
		unfenced                  bool
		ttl, limit                time.Duration
	)
	fs.StringVar(&role, "role", "", "paused or writer")
	fs.StringVar(&name, "name", "", "worker name")
	fs.StringVar(&key, "lock", "", "lock key")
	fs.StringVar(&resource, "resource", "", "key of the resource on the server")
	fs.BoolVar(&unfenced, "no-fencing", false, "write the resource without the fence check")
	fs.DurationVar(&ttl, "ttl", time.Second, "lease")
	fs.DurationVar(&limit, "limit", time.Minute, "give up after this long")
	if err := fs.Parse(args); err != nil {
		return exitUsage
	}
	ctx, cancel := context.WithTimeout(ctx, limit)
	defer cancel()

	enc := json.NewEncoder(stdout)
	emit := func(ev workerEvent) {
		ev.At = time.Now().UnixNano()
		_ = enc.Encode(ev)
	}
	fail := func(code int, format string, a ...any) int {
		emit(workerEvent{Ev: "error", Detail: fmt.Sprintf(format, a...)})
		return code
	}
	s, err := server()
	if err != nil {
		return fail(exitUsage, "%v", err)
	}
	b, res, closeBackend, err := open(ctx, s, resource, unfenced)
	if err != nil {
		return fail(exitBackend, "%v", err)
	}
	defer closeBackend()
	locker, err := fencedlock.New(b, fencedlock.Options{TTL: ttl})
	if err != nil {
		return fail(exitUsage, "%v", err)
	}
	defer locker.Close()
	cmds := bufio.NewScanner(stdin)
	await := func(want string) error {
		if !cmds.Scan() {
			if err := cmds.Err(); err != nil {
				return err
			}
			return io.ErrUnexpectedEOF
		}
		if got := cmds.Text(); got != want {
			return fmt.Errorf("got command %q, want %q", got, want)
		}
		return nil
	}

	lease, err := locker.TryAcquire(ctx, key)
	if errors.Is(err, fencedlock.ErrNotAcquired) {
		ev := workerEvent{Ev: "waiting"}
		if in, ok := b.(driver.Inspector); ok {
			if info, ierr := in.Inspect(ctx, key); ierr == nil && info.Held {
				ev.Holder, ev.Fence, ev.TTLms = info.Holder, uint64(info.Fence), info.TTL.Milliseconds()
			}
		}
		emit(ev)
		lease, err = locker.Acquire(ctx, key)
	}
	if err != nil {
		return fail(exitNotAcquired, "%v", err)
	}
	emit(workerEvent{Ev: "acquired", Fence: uint64(lease.Fence()), Holder: lease.Holder(), TTLms: lease.TTL().Milliseconds()})
	value := "written by " + name

	switch role {
	case rolePaused:
		// The classic mistake-free holder: it checks that it still holds
		// the lease, then writes. The demo stops it between the two.
		if err := lease.Err(); err != nil {
			return fail(exitFailure, "lease lost before the write: %v", err)
		}
		emit(workerEvent{Ev: "checked", Detail: fmt.Sprintf("lease valid for %v more", roundDuration(time.Until(lease.Deadline())))})
		if err := await("go"); err != nil {
			return fail(exitFailure, "%v", err)
		}
		// Just resumed from SIGSTOP: the client's timers all fired at once
		// and may have dropped its connection, so a network error is
		// retried (with the same fence: the guard makes that idempotent).
		// A stale rejection is final.
		var werr error
		for try := 1; try <= 5; try++ {
			werr = res.write(ctx, value, lease.Fence(), lease.Holder())
			if werr == nil || errors.Is(werr, fencing.ErrStale) || ctx.Err() != nil {
				break
			}
			time.Sleep(50 * time.Millisecond)
		}
		emit(writeEvent(lease, value, werr))
		// Now that it runs again, its watchdog finds the lease gone.
		select {
		case <-lease.Done():
			emit(workerEvent{Ev: "lease", Detail: context.Cause(lease.Context()).Error()})
		case <-time.After(3*ttl + time.Second):
			emit(workerEvent{Ev: "lease", OK: true, Detail: "still held after the pause"})
		}
	case roleWriter:
		werr := res.write(ctx, value, lease.Fence(), lease.Holder())
		emit(writeEvent(lease, value, werr))
		if err := await("release"); err != nil {
			return fail(exitFailure, "%v", err)
		}
	default:
		return fail(exitUsage, "unknown role %q", role)
	}
	rerr := lease.Release(ctx)
	ev := workerEvent{Ev: "released", OK: rerr == nil}
	switch {
	case errors.Is(rerr, fencedlock.ErrNotHeld):
		ev.Detail = "its token no longer holds the key (ErrNotHeld)"
	case rerr != nil:
		ev.Detail = rerr.Error()
	}
	emit(ev)
	return exitOK
}

func writeEvent(lease *fencedlock.Lease, value string, err error) workerEvent {
	ev := workerEvent{Ev: "write", Fence: uint64(lease.Fence()), Holder: lease.Holder(), Value: value, OK: err == nil}
	if err != nil {
		ev.Detail = err.Error()
		ev.Stale = errors.Is(err, fencing.ErrStale)
		if !ev.Stale {
			ev.Detail = "write failed: " + ev.Detail
		}
	}
	return ev
}
