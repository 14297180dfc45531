//go:build unix

package demo

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/fencedlock/fencedlock/cmd/fencedlock/internal/human"
)

// workerProc is one worker process of the demo.
type workerProc struct {
	d       *demo
	name    string
	cmd     *exec.Cmd
	stdin   io.WriteCloser
	events  chan stampedEvent // closed when the worker's output ends
	exited  chan struct{}
	waitErr error
	stopped bool
}

type stampedEvent struct {
	at time.Time
	ev workerEvent
}

func (d *demo) startWorker(name, role string) (*workerProc, error) {
	self, err := d.cfg.Self()
	if err != nil {
		return nil, fmt.Errorf("finding this executable to start worker %s: %w", name, err)
	}
	args := append(append([]string(nil), d.cfg.WorkerArgs...),
		"-role", role, "-name", name, "-lock", d.cfg.Lock, "-resource", d.cfg.Resource,
		"-no-fencing="+strconv.FormatBool(d.cfg.Unfenced),
		"-ttl", d.cfg.TTL.String(), "-limit", (20*d.cfg.TTL + 30*time.Second).String())
	cmd := exec.Command(self, args...)
	cmd.Env = workerEnv(os.Environ(), d.server.Env)
	cmd.Stderr = d.cfg.Stderr
	cmd.SysProcAttr = sysProcAttr()
	w := &workerProc{d: d, name: name, cmd: cmd, events: make(chan stampedEvent, 64), exited: make(chan struct{})}
	if w.stdin, err = cmd.StdinPipe(); err != nil {
		return nil, err
	}
	out, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("starting worker %s: %w", name, err)
	}
	d.workers = append(d.workers, w)
	d.tl.say("demo", "started worker %s (pid %d)", name, cmd.Process.Pid)
	go func() {
		defer close(w.exited)
		defer close(w.events)
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			var ev workerEvent
			if err := json.Unmarshal(sc.Bytes(), &ev); err != nil {
				ev = workerEvent{Ev: "error", Detail: "unreadable report: " + sc.Text()}
			}
			at := time.Now()
			if ev.At != 0 {
				at = time.Unix(0, ev.At) // when the worker reported it
			}
			if ev.Ev == "write" {
				d.tl.sayAt(at, "resource", "%s", describeWrite(ev, d.cfg.Unfenced))
			}
			d.tl.sayAt(at, name, "%s", describeEvent(ev))
			w.events <- stampedEvent{time.Now(), ev}
		}
		// Wait only after the output is drained (exec.Cmd's rule).
		w.waitErr = cmd.Wait()
	}()
	return w, nil
}

func (w *workerProc) pid() int { return w.cmd.Process.Pid }

// workerEnv is the environment of a worker: ours without any FENCEDLOCK_
// variable, plus the variables that name the demo's server.
func workerEnv(environ, server []string) []string {
	var out []string
	for _, kv := range environ {
		if !strings.HasPrefix(kv, "FENCEDLOCK_") {
			out = append(out, kv)
		}
	}
	return append(out, server...)
}

// expect waits up to timeout for the worker's next event, which must be
// of kind ev.
// A "waiting" event before it is skipped (it is on the timeline already).
func (w *workerProc) expect(ev string, timeout time.Duration) (workerEvent, error) {
	t := time.NewTimer(timeout)
	defer t.Stop()
	for {
		select {
		case se, ok := <-w.events:
			if !ok {
				<-w.exited
				return workerEvent{}, fmt.Errorf("worker %s ended (%v) while the demo waited for %q", w.name, w.waitErr, ev)
			}
			if se.ev.Ev == "waiting" && ev != "waiting" {
				continue
			}
			if se.ev.Ev != ev {
				return se.ev, fmt.Errorf("worker %s reported %q (%s) while the demo waited for %q", w.name, se.ev.Ev, se.ev.Detail, ev)
			}
			return se.ev, nil
		case <-t.C:
			return workerEvent{}, fmt.Errorf("worker %s did not report %q within %v", w.name, ev, timeout)
		}
	}
}

// send writes one command line to the worker.
func (w *workerProc) send(cmd string) error {
	if _, err := io.WriteString(w.stdin, cmd+"\n"); err != nil {
		return fmt.Errorf("telling worker %s %q: %w", w.name, cmd, err)
	}
	return nil
}

// wait waits for the worker to exit and checks that it succeeded.
func (w *workerProc) wait(timeout time.Duration) error {
	t := time.NewTimer(timeout)
	defer t.Stop()
	for {
		select {
		case se, ok := <-w.events:
			if ok {
				return fmt.Errorf("worker %s reported %q (%s) unexpectedly", w.name, se.ev.Ev, se.ev.Detail)
			}
			<-w.exited
			if w.waitErr != nil {
				return fmt.Errorf("worker %s failed: %w", w.name, w.waitErr)
			}
			return nil
		case <-t.C:
			return fmt.Errorf("worker %s did not exit within %v", w.name, timeout)
		}
	}
}

// kill ends a worker that is still running (after a failure), resuming it
// first if it is stopped, and waits for it.
func (w *workerProc) kill() {
	select {
	case <-w.exited:
		return
	default:
	}
	_ = w.stdin.Close()
	if w.stopped {
		_ = syscall.Kill(w.pid(), syscall.SIGCONT)
	}
	_ = w.cmd.Process.Kill()
	go func() {
		for range w.events {
		}
	}()
	select {
	case <-w.exited:
	case <-time.After(5 * time.Second):
	}
}

// describeEvent renders a worker's report for the timeline.
func describeEvent(ev workerEvent) string {
	switch ev.Ev {
	case "waiting":
		switch {
		case ev.Holder != "" && ev.TTLms > 0:
			return fmt.Sprintf("lock is held by holder %s (fence %d), lease ends in %v: waiting", ev.Holder, ev.Fence, human.Duration(time.Duration(ev.TTLms)*time.Millisecond))
		case ev.Holder != "":
			return fmt.Sprintf("lock is held by holder %s (fence %d): waiting", ev.Holder, ev.Fence)
		}
		return "lock is held: waiting"
	case "acquired":
		return fmt.Sprintf("acquired the lock: fence %d, holder %s, lease %v", ev.Fence, ev.Holder, time.Duration(ev.TTLms)*time.Millisecond)
	case "checked":
		return "checked its lease before writing: " + ev.Detail
	case "write":
		if ev.OK {
			return fmt.Sprintf("wrote %q with fence %d: accepted", ev.Value, ev.Fence)
		}
		if ev.Stale {
			return fmt.Sprintf("wrote %q with fence %d: REJECTED by the server as stale", ev.Value, ev.Fence)
		}
		return fmt.Sprintf("wrote %q with fence %d: FAILED (%s)", ev.Value, ev.Fence, ev.Detail)
	case "lease":
		if ev.OK {
			return "its lease is " + ev.Detail
		}
		return "its watchdog reports the lease lost: " + ev.Detail
	case "released":
		if ev.OK {
			return "released the lock"
		}
		return "release deleted nothing: " + ev.Detail
	case "error":
		return "ERROR: " + ev.Detail
	}
	return fmt.Sprintf("%s %s", ev.Ev, ev.Detail)
}

// describeWrite renders, for the resource's line of the timeline, what the
// server did with a worker's write.
func describeWrite(ev workerEvent, unfenced bool) string {
	switch {
	case ev.OK && unfenced:
		return fmt.Sprintf("applied %q, a plain write: its fence %d (holder %s) was never checked", ev.Value, ev.Fence, ev.Holder)
	case ev.OK:
		return fmt.Sprintf("accepted %q with fence %d (holder %s)", ev.Value, ev.Fence, ev.Holder)
	case ev.Stale:
		return fmt.Sprintf("REJECTED %q with fence %d (holder %s): %s", ev.Value, ev.Fence, ev.Holder, ev.Detail)
	}
	return fmt.Sprintf("did not take %q with fence %d (holder %s): %s", ev.Value, ev.Fence, ev.Holder, ev.Detail)
}
