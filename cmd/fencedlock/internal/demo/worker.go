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
	"github.com/fencedlock/fencedlock/cmd/fencedlock/internal/human"
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

	w := &worker{enc: json.NewEncoder(stdout), cmds: bufio.NewScanner(stdin)}
	s, err := server()
	if err != nil {
		return w.fail(exitUsage, "%v", err)
	}
	b, res, closeBackend, err := open(ctx, s, resource, unfenced)
	if err != nil {
		return w.fail(exitBackend, "%v", err)
	}
	defer closeBackend()
	locker, err := fencedlock.New(b, fencedlock.Options{TTL: ttl})
	if err != nil {
		return w.fail(exitUsage, "%v", err)
	}
	defer locker.Close()

	lease, err := w.acquire(ctx, locker, b, key)
	if err != nil {
		return w.fail(exitNotAcquired, "%v", err)
	}
	w.emit(workerEvent{Ev: "acquired", Fence: uint64(lease.Fence()), Holder: lease.Holder(), TTLms: lease.TTL().Milliseconds()})
	value := "written by " + name

	switch role {
	case rolePaused:
		if code, ok := w.pausedWrite(ctx, lease, res, value, ttl); !ok {
			return code
		}
	case roleWriter:
		werr := res.write(ctx, value, lease.Fence(), lease.Holder())
		w.emit(writeEvent(lease, value, werr))
		if err := w.await("release"); err != nil {
			return w.fail(exitFailure, "%v", err)
		}
	default:
		return w.fail(exitUsage, "unknown role %q", role)
	}
	w.release(ctx, lease)
	return exitOK
}

// worker is a running worker's link to the demo: the events it reports
// and the commands it reads.
type worker struct {
	enc  *json.Encoder
	cmds *bufio.Scanner
}

// emit reports ev, stamped with the time.
func (w *worker) emit(ev workerEvent) {
	ev.At = time.Now().UnixNano()
	_ = w.enc.Encode(ev)
}

// fail reports an error event and returns code.
func (w *worker) fail(code int, format string, a ...any) int {
	w.emit(workerEvent{Ev: "error", Detail: fmt.Sprintf(format, a...)})
	return code
}

// await reads the demo's next command, which must be want.
func (w *worker) await(want string) error {
	if !w.cmds.Scan() {
		if err := w.cmds.Err(); err != nil {
			return err
		}
		return io.ErrUnexpectedEOF
	}
	if got := w.cmds.Text(); got != want {
		return fmt.Errorf("got command %q, want %q", got, want)
	}
	return nil
}

// acquire takes the lock on key, reporting first who holds it if it is
// taken.
func (w *worker) acquire(ctx context.Context, locker *fencedlock.Locker, b driver.Backend, key string) (*fencedlock.Lease, error) {
	lease, err := locker.TryAcquire(ctx, key)
	if errors.Is(err, fencedlock.ErrNotAcquired) {
		ev := workerEvent{Ev: "waiting"}
		if in, ok := b.(driver.Inspector); ok {
			if info, ierr := in.Inspect(ctx, key); ierr == nil && info.Held {
				ev.Holder, ev.Fence, ev.TTLms = info.Holder, uint64(info.Fence), info.TTL.Milliseconds()
			}
		}
		w.emit(ev)
		lease, err = locker.Acquire(ctx, key)
	}
	return lease, err
}

// pausedWrite is the paused role's part: the classic mistake-free
// holder, which checks that it still holds the lease, then writes. The
// demo stops it between the two. It returns false, with the exit code,
// if the worker must stop.
func (w *worker) pausedWrite(ctx context.Context, lease *fencedlock.Lease, res *resource, value string, ttl time.Duration) (int, bool) {
	if err := lease.Err(); err != nil {
		return w.fail(exitFailure, "lease lost before the write: %v", err), false
	}
	w.emit(workerEvent{Ev: "checked", Detail: fmt.Sprintf("lease valid for %v more", human.Duration(time.Until(lease.Deadline())))})
	if err := w.await("go"); err != nil {
		return w.fail(exitFailure, "%v", err), false
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
	w.emit(writeEvent(lease, value, werr))
	// Now that it runs again, its watchdog finds the lease gone.
	select {
	case <-lease.Done():
		w.emit(workerEvent{Ev: "lease", Detail: context.Cause(lease.Context()).Error()})
	case <-time.After(3*ttl + time.Second):
		w.emit(workerEvent{Ev: "lease", OK: true, Detail: "still held after the pause"})
	}
	return 0, true
}

// release releases the lease and reports how that went.
func (w *worker) release(ctx context.Context, lease *fencedlock.Lease) {
	rerr := lease.Release(ctx)
	ev := workerEvent{Ev: "released", OK: rerr == nil}
	switch {
	case errors.Is(rerr, fencedlock.ErrNotHeld):
		ev.Detail = "its token no longer holds the key (ErrNotHeld)"
	case rerr != nil:
		ev.Detail = rerr.Error()
	}
	w.emit(ev)
}

// writeEvent is the event of a write of value with lease's fence.
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
